/* The gate kernel template and the lookup that instantiates it for one (operator, dtype
 * kind): included by the kernels_<op>_<kind>.cu translation units, one module each
 * (cuda_kernels.h says why).
 *
 * The grid covers every work item (a grid-stride loop takes over past 2^31-1 blocks); each
 * thread takes kUnroll items of its block's tile, issuing all their loads before any math.
 * A work item is V consecutive elements of one row of the collapsed problem (cuda_plan.h),
 * read once from each input and written once to each output.
 *   V = 8, 4, 2: rows contiguous in every tensor, vector accesses of up to 16 bytes; the row
 *                starts may be anywhere the strides say (Z as a view into the input
 *                projection, permuted heads, padded rows).
 *   V = 1:       any strides (a tensor not contiguous in its last dimension).
 * Index math by layout (cuda_plan.h, plan_layout): FLAT (one row: item i is element i*V of
 * every tensor, no division), ROWS (rows along one dimension, fewer than 2^32 items: one
 * 32-bit division), ANY (three divisions, 64-bit where the item count needs it).
 * Instances per operator: all-f32 (V 4, 2 in three layouts, V 1), all-f16 and all-bf16 (V 8,
 * 4, 2 in three layouts, V 1), mixed dtypes (dtype read per tensor at run time, a uniform
 * branch; V 8, 4, 2, 1 in ANY): 31 kernels, 62 for both operators, compiled ahead of time. */
#ifndef ZGATE_CUDA_KERNEL_CUH
#define ZGATE_CUDA_KERNEL_CUH

#include <stdint.h>

#include "cuda_gate_math.cuh"
#include "cuda_kernels.h"
#include "cuda_plan.h"

#ifndef ZGATE_WITH_CUDA
#define ZGATE_WITH_CUDA 1
#endif
extern "C" {
#include "zgate_internal.h"
}

namespace zgcu {
namespace {

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

/* Register budget per kind: float32 at 12 blocks of 128 threads (40 registers: 44 -> 40 on
 * the Z view with no spills, commit 1d5ae91), 16-bit and mixed dtypes at 8 (their packed and
 * widest kernels need up to 46 and 59 registers; capping the mixed ones at 40 spills). */
constexpr int min_blocks(int kind) {
  return kind == DT_F16 || kind == DT_BF16 ? ZG_CUDA_MINB16 : kind == DT_F32 ? ZG_CUDA_MINB32 : ZG_CUDA_MINB;
}

/* All-float16 and all-bfloat16 items of 2 or more elements stay packed (two values a
 * 32-bit word) from the load to the math, which widens one word of each input at a time and
 * packs its results at once: 12 registers of inputs instead of 24 floats for 8 elements,
 * which lets more warps share an SM (ZG_CUDA_PACKED16 = 0: widen everything at the load). */
#ifndef ZG_CUDA_PACKED16
#define ZG_CUDA_PACKED16 1
#endif
template <int KIND, int V>
__host__ __device__ constexpr bool packed() {
  return ZG_CUDA_PACKED16 && (KIND == DT_F16 || KIND == DT_BF16) && V >= 2;
}

/* One work item in registers: where its vectors are, and the input values (as floats, or
 * packed 16-bit words). */
template <int OP, int KIND, int V>
struct Item {
  int64_t off[Arity<OP>::in + Arity<OP>::out]; /* element offsets */
  float in[packed<KIND, V>() ? 1 : Arity<OP>::in][packed<KIND, V>() ? 1 : V];
  uint32_t w[packed<KIND, V>() ? Arity<OP>::in : 1][packed<KIND, V>() ? V / 2 : 1];
};

/* Item index -> element offsets in every tensor. FLAT and ROWS need V > 1 (then every
 * tensor's innermost stride is 1); ROWS also n[0] = n[1] = 1 and fewer than 2^32 items. */
template <int OP, int KIND, int V, int LAYOUT>
__device__ __forceinline__ void locate(const Args &a, int64_t i, Item<OP, KIND, V> &it) {
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
__device__ __forceinline__ void load_item(const Args &a, Item<OP, KIND, V> &it) {
#pragma unroll
  for (int t = 0; t < Arity<OP>::in; t++) {
    int dt = dtype_of<KIND>(a, t);
    if constexpr (packed<KIND, V>())
      load_words<V>(a.ptr[t] + it.off[t] * 2, it.w[t]);
    else
      load_vec<V>(a.ptr[t] + it.off[t] * elem_size(dt), dt, it.in[t]);
  }
}

/* Float32 outputs take the accurate math, 16-bit outputs the fast one (cuda_gate_math.cuh);
 * for mixed dtypes the choice is a uniform run-time branch (Args.accurate). */
/* ZG_CUDA_F32_FAST = 1 (a benchmark-only variant, never shipped: it breaks the float32
 * bound) gives float32 the fast math too, to measure what the accuracy costs in time. */
#ifndef ZG_CUDA_F32_FAST
#define ZG_CUDA_F32_FAST 0
#endif
template <int OP, int KIND>
__device__ __forceinline__ bool accurate(const Args &a) {
  if constexpr (KIND == DT_F32) return !ZG_CUDA_F32_FAST;
  if constexpr (KIND == DT_F16 || KIND == DT_BF16) return false;
  return a.accurate != 0;
}

/* The packed form: one word (two elements) of each input at a time, the fast math of the
 * 16-bit outputs, the results packed at once. */
template <int OP, int KIND, int V>
__device__ __forceinline__ void finish_packed(const Args &a, const Item<OP, KIND, V> &it) {
  constexpr int NI = Arity<OP>::in, NO = Arity<OP>::out;
  uint32_t out[NO][V / 2];
#pragma unroll
  for (int k = 0; k < V / 2; k++) {
    float2 x[NI];
#pragma unroll
    for (int t = 0; t < NI; t++) x[t] = unpack2(it.w[t][k], KIND);
    if constexpr (OP == ZG_OP_BWD) {
      float dz0, dos0, dz1, dos1;
      gate_bwd_fast(x[0].x, x[1].x, x[2].x, dz0, dos0);
      gate_bwd_fast(x[0].y, x[1].y, x[2].y, dz1, dos1);
      out[0][k] = pack2(dz0, dz1, KIND);
      out[1][k] = pack2(dos0, dos1, KIND);
    } else {
      out[0][k] = pack2(gate_fwd_fast(x[0].x, x[1].x), gate_fwd_fast(x[0].y, x[1].y), KIND);
    }
  }
#pragma unroll
  for (int t = 0; t < NO; t++) store_words<V>(a.ptr[NI + t] + it.off[NI + t] * 2, out[t]);
}

template <int OP, int KIND, int V>
__device__ __forceinline__ void finish_floats(const Args &a, const Item<OP, KIND, V> &it) {
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

template <int OP, int KIND, int V>
__device__ __forceinline__ void finish_item(const Args &a, const Item<OP, KIND, V> &it) {
  if constexpr (packed<KIND, V>()) finish_packed<OP, KIND, V>(a, it);
  else finish_floats<OP, KIND, V>(a, it);
}

/* In place (dout_scaled is dout): each element is read by the thread that later writes it,
 * and the read comes first in that thread's program order, so no other ordering is needed.
 * A block's tile is kUnroll * kThreads consecutive items; thread t takes items t, t +
 * kThreads, ... of it, so each load instruction of a warp still reads one contiguous span. */
template <int OP, int KIND, int V, int LAYOUT>
__global__ void __launch_bounds__(kThreads, min_blocks(KIND)) gate_kernel(const Args a) {
  constexpr int64_t tile = (int64_t)kUnroll * kThreads;
  for (int64_t base = (int64_t)blockIdx.x * tile; base < a.items; base += (int64_t)gridDim.x * tile) {
    Item<OP, KIND, V> x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      const int64_t i = base + u * kThreads + threadIdx.x;
      if (i < a.items) {
        locate<OP, KIND, V, LAYOUT>(a, i, x[u]);
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
      Item<OP, KIND, 1> e;
      int64_t col = a.nv * V + threadIdx.x;
#pragma unroll
      for (int t = 0; t < NT; t++) e.off[t] = col * a.st[t][3];
      load_item<OP, KIND, 1>(a, e);
      finish_item<OP, KIND, 1>(a, e);
    }
  }
}

/* Which (width, layout) pairs get a kernel of their own (the others take ANY). */
template <int KIND, int V>
constexpr bool has_layouts() {
  if (!ZG_CUDA_LAYOUTS || KIND == DT_MIXED || V == 1) return false;
  if (ZG_CUDA_LEAN) return V == (KIND == DT_F32 ? 4 : 8);
  return true;
}

template <int OP, int KIND, int V>
const void *kernel_by_layout(int layout) {
  if constexpr (has_layouts<KIND, V>()) {
    if (layout == L_FLAT) return reinterpret_cast<const void *>(gate_kernel<OP, KIND, V, L_FLAT>);
    if (layout == L_ROWS) return reinterpret_cast<const void *>(gate_kernel<OP, KIND, V, L_ROWS>);
  }
  return reinterpret_cast<const void *>(gate_kernel<OP, KIND, V, L_ANY>);
}

/* All-float32 problems stop at 4 elements a vector (cuda_backend.cu): no 8-wide kernel. */
template <int OP, int KIND>
const void *kernel_for(int v, int layout) {
  switch (v) {
    case 8:
      if constexpr (KIND != DT_F32) return kernel_by_layout<OP, KIND, 8>(layout);
      return nullptr;
    case 4: return kernel_by_layout<OP, KIND, 4>(layout);
    case 2: return kernel_by_layout<OP, KIND, 2>(layout);
    case 1: return kernel_by_layout<OP, KIND, 1>(L_ANY);
    default: return nullptr;
  }
}

}  // namespace
}  // namespace zgcu

/* The body of a kernels_<op>_<kind>.cu file. With ZG_CUDA_UNITY the files compile to
 * nothing on their own and cuda_backend.cu includes them all (one module: a benchmark
 * variant). */
#define ZG_CUDA_DEFINE_TABLE(name, OP, KIND) \
  const void *zgcu::name(int v, int layout) { return kernel_for<OP, KIND>(v, layout); }

#endif /* ZGATE_CUDA_KERNEL_CUH */
