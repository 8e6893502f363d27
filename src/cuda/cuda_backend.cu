/* The CUDA backend: zg_cuda_run, called by the API for validated problems on CUDA devices.
 *
 * One kernel template does both operators. The grid covers every work item (a grid-stride
 * loop takes over past 2^31-1 blocks); each thread takes kUnroll items of its block's tile,
 * issuing all their loads before any math. A work item is V consecutive elements of one row
 * of the collapsed problem (cuda_plan.h), read once from each input and written once to each
 * output.
 *   V = 8, 4, 2: rows contiguous in every tensor, vector accesses of up to 16 bytes; the row
 *                starts may be anywhere the strides say (Z as a view into the input
 *                projection, permuted heads, padded rows).
 *   V = 1:       any strides (a tensor not contiguous in its last dimension).
 * Index math by layout (cuda_plan.h, plan_layout): FLAT (one row: item i is element i*V of
 * every tensor, no division), ROWS (rows along one dimension, fewer than 2^32 items: one
 * 32-bit division), ANY (three divisions, 64-bit where the item count needs it).
 * Instances: 2 operators x 4 dtype kinds (all f32, all f16, all bf16, mixed: dtype read per
 * tensor at run time, a uniform branch) x widths x layouts (mixed dtypes and V = 1 take ANY
 * only) = 62 kernels, compiled ahead of time: no autotuning, no run-time compilation.
 *
 * Device: the tensors' device_id, made current for the call (cudaGetDevice / cudaSetDevice)
 * and restored after, whatever was current. Stream: zgate_options.cuda_stream, else the
 * legacy default stream (0) of that device. Every launch is checked (cudaGetLastError); CUDA
 * errors become ZGATE_ERR_CUDA with the CUDA name and message. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "cuda_gate_math.cuh"
#include "cuda_plan.h"

#ifndef ZGATE_WITH_CUDA
#define ZGATE_WITH_CUDA 1
#endif
extern "C" {
#include "zgate_internal.h"
}

namespace zgcu {
namespace {

/* Build-time variants, for the benchmark's comparisons only (scripts/gpu-run.sh,
 * docs/perf-notes.md); the defaults are the shipped kernel. ZG_CUDA_THREADS: block size.
 * ZG_CUDA_UNROLL: items per thread, loads of all issued before the math. ZG_CUDA_MINB: blocks
 * per SM the register budget must allow. ZG_CUDA_LAYOUTS = 0: the general index math for
 * every problem (the v3 kernel's). ZG_CUDA_LDG = 1 (cuda_gate_math.cuh): read-only loads.
 * Shipped: 128-thread blocks, 8 a SM at least (a 64-register cap; the 16-bit kernels use 56,
 * so 9 blocks = 1152 threads fit a SM against 1024 with 256-thread blocks), one item a
 * thread, index math by layout: the best of the variants measured side by side on the H200
 * (perf-notes v4). Variants measured before (one wave of resident blocks looping, software
 * prefetch of the next item, evict-first accesses) were slower and are gone (perf-notes v2). */
#ifndef ZG_CUDA_THREADS
#define ZG_CUDA_THREADS 128
#endif
#ifndef ZG_CUDA_UNROLL
#define ZG_CUDA_UNROLL 1
#endif
#ifndef ZG_CUDA_MINB
#define ZG_CUDA_MINB 8
#endif
#ifndef ZG_CUDA_LAYOUTS
#define ZG_CUDA_LAYOUTS 1
#endif
constexpr int kThreads = ZG_CUDA_THREADS;
constexpr int kUnroll = ZG_CUDA_UNROLL;

template <int OP>
struct Arity;
template <>
struct Arity<ZG_OP_BWD> { static constexpr int in = 3, out = 2; };
template <>
struct Arity<ZG_OP_FWD> { static constexpr int in = 2, out = 1; };

template <int KIND>
__device__ __forceinline__ int dtype_of(const Args &a, int t) {
  return KIND == DT_MIXED ? a.dtype[t] : KIND;
}

__device__ __forceinline__ int64_t elem_size(int dt) { return dt == DT_F32 ? 4 : 2; }

/* One work item in registers: where its vectors are, and the input values. */
template <int OP, int V>
struct Item {
  int64_t off[Arity<OP>::in + Arity<OP>::out]; /* element offsets */
  float in[Arity<OP>::in][V];
};

/* Item index -> element offsets in every tensor. FLAT and ROWS need V > 1 (then every
 * tensor's innermost stride is 1); ROWS also n[0] = n[1] = 1 and fewer than 2^32 items. */
template <int OP, int V, int LAYOUT>
__device__ __forceinline__ void locate(const Args &a, int64_t i, Item<OP, V> &it) {
  constexpr int NT = Arity<OP>::in + Arity<OP>::out;
  if constexpr (LAYOUT == L_FLAT) {
    const int64_t col = i * V;
#pragma unroll
    for (int t = 0; t < NT; t++) it.off[t] = col;
  } else if constexpr (LAYOUT == L_ROWS) {
    const uint32_t x = (uint32_t)i;
    uint32_t r = __umulhi(x, a.div_nv.m);
    r = (uint32_t)(((uint64_t)r + x) >> a.div_nv.s);
    const int64_t col = (int64_t)(x - r * a.div_nv.d) * V;
#pragma unroll
    for (int t = 0; t < NT; t++) it.off[t] = (int64_t)r * a.st[t][2] + col;
  } else {
    int64_t i0 = 0, i1 = 0, i2 = 0, c = i;
    if (!a.one_row) {
      int64_t row;
      if (a.wide) {
        row = i / a.nv;
        c = i - row * a.nv;
        i2 = row % a.n[2];
        row /= a.n[2];
        i1 = row % a.n[1];
        i0 = row / a.n[1];
      } else {
        uint32_t x = (uint32_t)i;
        uint32_t r = __umulhi(x, a.div_nv.m);
        r = (uint32_t)(((uint64_t)r + x) >> a.div_nv.s);
        c = x - r * a.div_nv.d;
        uint32_t r2 = __umulhi(r, a.div_n2.m);
        r2 = (uint32_t)(((uint64_t)r2 + r) >> a.div_n2.s);
        i2 = r - r2 * a.div_n2.d;
        uint32_t r1 = __umulhi(r2, a.div_n1.m);
        r1 = (uint32_t)(((uint64_t)r1 + r2) >> a.div_n1.s);
        i1 = r2 - r1 * a.div_n1.d;
        i0 = r1;
      }
    }
    int64_t col = c * V;
#pragma unroll
    for (int t = 0; t < NT; t++)
      it.off[t] = i0 * a.st[t][0] + i1 * a.st[t][1] + i2 * a.st[t][2] + col * a.st[t][3];
  }
}

template <int OP, int KIND, int V>
__device__ __forceinline__ void load_item(const Args &a, Item<OP, V> &it) {
#pragma unroll
  for (int t = 0; t < Arity<OP>::in; t++) {
    int dt = dtype_of<KIND>(a, t);
    load_vec<V>(a.ptr[t] + it.off[t] * elem_size(dt), dt, it.in[t]);
  }
}

/* Float32 outputs take the accurate math, 16-bit outputs the fast one (cuda_gate_math.cuh);
 * for mixed dtypes the choice is a uniform run-time branch (Args.accurate). */
template <int OP, int KIND>
__device__ __forceinline__ bool accurate(const Args &a) {
  if constexpr (KIND == DT_F32) return true;
  if constexpr (KIND == DT_F16 || KIND == DT_BF16) return false;
  return a.accurate != 0;
}

template <int OP, int KIND, int V>
__device__ __forceinline__ void finish_item(const Args &a, const Item<OP, V> &it) {
  constexpr int NI = Arity<OP>::in;
  const bool acc = accurate<OP, KIND>(a);
  if constexpr (OP == ZG_OP_BWD) {
    float dz[V], dos[V];
    if (acc) {
#pragma unroll
      for (int k = 0; k < V; k++) gate_bwd(it.in[0][k], it.in[1][k], it.in[2][k], dz[k], dos[k]);
    } else {
#pragma unroll
      for (int k = 0; k < V; k++) gate_bwd_fast(it.in[0][k], it.in[1][k], it.in[2][k], dz[k], dos[k]);
    }
    int dt_dz = dtype_of<KIND>(a, NI), dt_dos = dtype_of<KIND>(a, NI + 1);
    store_vec<V>(a.ptr[NI] + it.off[NI] * elem_size(dt_dz), dt_dz, dz);
    store_vec<V>(a.ptr[NI + 1] + it.off[NI + 1] * elem_size(dt_dos), dt_dos, dos);
  } else {
    float out[V];
    if (acc) {
#pragma unroll
      for (int k = 0; k < V; k++) out[k] = gate_fwd(it.in[0][k], it.in[1][k]);
    } else {
#pragma unroll
      for (int k = 0; k < V; k++) out[k] = gate_fwd_fast(it.in[0][k], it.in[1][k]);
    }
    int dt_out = dtype_of<KIND>(a, NI);
    store_vec<V>(a.ptr[NI] + it.off[NI] * elem_size(dt_out), dt_out, out);
  }
}

/* In place (dout_scaled is dout): each element is read by the thread that later writes it,
 * and the read comes first in that thread's program order, so no other ordering is needed.
 * A block's tile is kUnroll * kThreads consecutive items; thread t takes items t, t +
 * kThreads, ... of it, so each load instruction of a warp still reads one contiguous span. */
template <int OP, int KIND, int V, int LAYOUT>
__global__ void __launch_bounds__(kThreads, ZG_CUDA_MINB) gate_kernel(const Args a) {
  constexpr int64_t tile = (int64_t)kUnroll * kThreads;
  for (int64_t base = (int64_t)blockIdx.x * tile; base < a.items; base += (int64_t)gridDim.x * tile) {
    Item<OP, V> x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      const int64_t i = base + u * kThreads + threadIdx.x;
      if (i < a.items) {
        locate<OP, V, LAYOUT>(a, i, x[u]);
        load_item<OP, KIND, V>(a, x[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      if (base + u * kThreads + threadIdx.x < a.items) finish_item<OP, KIND, V>(a, x[u]);
    }
  }
  if constexpr (V > 1) {
    /* One row whose length is not a multiple of V: its last few elements, one per thread. */
    if (a.tail > 0 && blockIdx.x == 0 && threadIdx.x < (unsigned)a.tail) {
      constexpr int NT = Arity<OP>::in + Arity<OP>::out;
      Item<OP, 1> e;
      int64_t col = a.nv * V + threadIdx.x;
#pragma unroll
      for (int t = 0; t < NT; t++) e.off[t] = col * a.st[t][3];
      load_item<OP, KIND, 1>(a, e);
      finish_item<OP, KIND, 1>(a, e);
    }
  }
}

/* ---- host side ------------------------------------------------------------------------ */

int fail_cuda(const char *what, cudaError_t e) {
  return zg_fail(ZGATE_ERR_CUDA, "CUDA error in %s: %s (%s)", what, cudaGetErrorName(e),
                 cudaGetErrorString(e));
}

template <int OP, int KIND, int V, int LAYOUT>
int launch(const Args &a, cudaStream_t stream) {
  /* Covering grid: one block per tile (capped at the grid limit; the grid-stride loop does
   * any rest). */
  const int64_t tile = (int64_t)kUnroll * kThreads;
  int64_t blocks = (a.items + tile - 1) / tile;
  if (blocks > 0x7fffffff) blocks = 0x7fffffff;
  if (blocks < 1) blocks = 1; /* the tail alone still needs block 0 */
  gate_kernel<OP, KIND, V, LAYOUT><<<(unsigned)blocks, kThreads, 0, stream>>>(a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail_cuda("launching the gate kernel", e);
  return ZGATE_OK;
}

template <int OP, int KIND, int V>
int launch_layout(const Args &a, int layout, cudaStream_t stream) {
  if constexpr (ZG_CUDA_LAYOUTS && KIND != DT_MIXED && V > 1) {
    if (layout == L_FLAT) return launch<OP, KIND, V, L_FLAT>(a, stream);
    if (layout == L_ROWS) return launch<OP, KIND, V, L_ROWS>(a, stream);
  }
  return launch<OP, KIND, V, L_ANY>(a, stream);
}

template <int OP, int KIND>
int launch_width(const Args &a, int v, int layout, cudaStream_t stream) {
  switch (v) {
    case 8:
      if constexpr (KIND != DT_F32) return launch_layout<OP, KIND, 8>(a, layout, stream);
      return zg_fail(ZGATE_ERR_INTERNAL, "CUDA backend: float32 with 8-wide vectors");
    case 4: return launch_layout<OP, KIND, 4>(a, layout, stream);
    case 2: return launch_layout<OP, KIND, 2>(a, layout, stream);
    default: return launch_layout<OP, KIND, 1>(a, L_ANY, stream);
  }
}

template <int OP>
int launch_kind(const Args &a, int nt, int v, int layout, cudaStream_t stream) {
  int kind = a.dtype[0];
  for (int t = 1; t < nt; t++)
    if (a.dtype[t] != kind) kind = DT_MIXED;
  switch (kind) {
    case DT_F32: return launch_width<OP, DT_F32>(a, v, layout, stream);
    case DT_F16: return launch_width<OP, DT_F16>(a, v, layout, stream);
    case DT_BF16: return launch_width<OP, DT_BF16>(a, v, layout, stream);
    default: return launch_width<OP, DT_MIXED>(a, v, L_ANY, stream);
  }
}

int run_on_current_device(const zg_problem *p, cudaStream_t stream) {
  const int nt = p->n_in + p->n_out;
  if (nt > MAX_T || (p->op == ZG_OP_BWD && nt != 5) || (p->op == ZG_OP_FWD && nt != 3))
    return zg_fail(ZGATE_ERR_INTERNAL, "CUDA backend: unexpected operand count %d", nt);
  Args a = {};
  int esize[MAX_T] = {0};
  int64_t strides[MAX_T][4];
  for (int t = 0; t < nt; t++) {
    const zg_operand &op = p->t[t];
    if (op.dtype != ZG_F32 && op.dtype != ZG_F16 && op.dtype != ZG_BF16)
      return zg_fail(ZGATE_ERR_INTERNAL, "CUDA backend: operand %d has dtype %d", t, (int)op.dtype);
    a.ptr[t] = op.data;
    a.dtype[t] = (int)op.dtype;
    esize[t] = (int)zg_dtype_size(op.dtype);
    for (int d = 0; d < 4; d++) strides[t][d] = op.strides[d];
  }
  plan_collapse(nt, p->shape, strides, a.n, a.st);
  /* 16 bytes per access is enough: all-float32 problems stop at 4 elements a vector (8 would
   * only add registers); with any 2-byte tensor 8 elements give it 16-byte accesses. */
  bool all_f32 = true;
  for (int t = 0; t < nt; t++) all_f32 = all_f32 && a.dtype[t] == DT_F32;
  int v = plan_vector_width(nt, a, esize, all_f32 ? 4 : 8);
  plan_items(a, v);
  const int layout = plan_layout(a, v);
  for (int t = p->n_in; t < nt; t++) a.accurate |= a.dtype[t] == DT_F32;
  if (p->op == ZG_OP_BWD) return launch_kind<ZG_OP_BWD>(a, nt, v, layout, stream);
  return launch_kind<ZG_OP_FWD>(a, nt, v, layout, stream);
}

}  // namespace
}  // namespace zgcu

extern "C" int zg_cuda_run(const zg_problem *p, const zg_options *opts) {
  if (p->numel <= 0) return ZGATE_OK;
  const int dev = p->device.device_id;
  cudaStream_t stream = opts && opts->cuda_stream ? (cudaStream_t)opts->cuda_stream : (cudaStream_t)0;
  int prev = -1;
  cudaError_t e = cudaGetDevice(&prev);
  if (e != cudaSuccess) return zgcu::fail_cuda("cudaGetDevice", e);
  if (prev != dev) {
    e = cudaSetDevice(dev);
    if (e != cudaSuccess) return zgcu::fail_cuda("cudaSetDevice (the tensors' device)", e);
  }
  int st = zgcu::run_on_current_device(p, stream);
  if (prev != dev) {
    e = cudaSetDevice(prev);
    if (e != cudaSuccess && st == ZGATE_OK) st = zgcu::fail_cuda("cudaSetDevice (restoring the caller's device)", e);
  }
  return st;
}
