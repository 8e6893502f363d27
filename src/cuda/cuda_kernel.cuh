/* The gate kernel body and the lookup that instantiates it for one (operator, dtype kind):
 * included by kernels.cu, compiled once per pair, one module each (cuda_kernels.h says
 * why). The operator is a template parameter, GateBwd or GateFwd (cuda_gate_math.cuh):
 * its operand counts and per-element math; everything here is the same for both.
 *
 * The grid covers every work item (a grid-stride loop takes over past 2^31-1 blocks); each
 * thread takes one item of its block's tile at a time.
 * A work item is V consecutive elements of one row of the collapsed problem (cuda_plan.h),
 * read once from each input and written once to each output.
 *   V = 8, 4, 2: rows contiguous in every tensor, vector accesses of up to 16 bytes; the row
 *                starts may be anywhere the strides say (Z as a view into the input
 *                projection, permuted heads, padded rows).
 *   V = 1:       any strides (a tensor not contiguous in its last dimension).
 * Index math by layout (cuda_plan.h, plan_items): FLAT (one row: item i is element i*V of
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
#include "cuda_vec.cuh"

namespace zgcu {
namespace {

template <int KIND>
__device__ __forceinline__ int dtype_of(const Args &a, int t) {
  return KIND == ZG_KIND_MIXED ? a.dtype[t] : KIND;
}

__device__ __forceinline__ int64_t elem_size(int dt) { return dt == ZG_F32 ? 4 : 2; }

/* Blocks a SM the register budget must allow (launch bounds): float32 at 12 (40 registers,
 * no spills), 16-bit and mixed dtypes at 8 (their packed and widest kernels
 * need up to 46 and 59 registers; capping the mixed ones at 40 spills). */
constexpr int min_blocks(int kind) { return kind == ZG_F32 ? 12 : 8; }

/* All-float16 and all-bfloat16 items of 2 or more elements stay packed (two values a
 * 32-bit word) from the load to the math, which widens one word of each input at a time and
 * packs its results at once: 12 registers of inputs instead of 24 floats for 8 elements,
 * which lets more warps share an SM. */
template <int KIND, int V>
__host__ __device__ constexpr bool packed() {
  return (KIND == ZG_F16 || KIND == ZG_BF16) && V >= 2;
}

/* One work item in registers: where its vectors are, and the input values (as floats, or
 * packed 16-bit words). */
template <class Op, int KIND, int V>
struct Item {
  int64_t off[Op::kIn + Op::kOut]; /* element offsets */
  float in[packed<KIND, V>() ? 1 : Op::kIn][packed<KIND, V>() ? 1 : V];
  uint32_t w[packed<KIND, V>() ? Op::kIn : 1][packed<KIND, V>() ? V / 2 : 1];
};

/* x / f.d for x < 2^32 (cuda_plan.h, FastDiv). */
__device__ __forceinline__ uint32_t divide(uint32_t x, const FastDiv &f) {
  return (uint32_t)(((uint64_t)__umulhi(x, f.m) + x) >> f.s);
}

/* Item index -> element offsets in every tensor. FLAT and ROWS need V > 1 (then every
 * tensor's innermost stride is 1); ROWS also n[0] = n[1] = 1 and fewer than 2^32 items. */
template <class Op, int KIND, int V, int LAYOUT>
__device__ __forceinline__ void locate(const Args &a, int64_t i, Item<Op, KIND, V> &it) {
  constexpr int NT = Op::kIn + Op::kOut;
  if constexpr (LAYOUT == L_FLAT) {
    const int64_t col = i * V;
#pragma unroll
    for (int t = 0; t < NT; t++) it.off[t] = col;
  } else if constexpr (LAYOUT == L_ROWS) {
    const uint32_t x = (uint32_t)i, r = divide(x, a.div_nv);
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
        const uint32_t x = (uint32_t)i, r = divide(x, a.div_nv);
        c = x - r * a.div_nv.d;
        const uint32_t r2 = divide(r, a.div_n2);
        i2 = r - r2 * a.div_n2.d;
        const uint32_t r1 = divide(r2, a.div_n1);
        i1 = r2 - r1 * a.div_n1.d;
        i0 = r1;
      }
    }
    int64_t col = c * V;
#pragma unroll
    for (int t = 0; t < NT; t++)
      it.off[t] = i0 * a.st[t][0] + i1 * a.st[t][1] + i2 * a.st[t][2] + col * a.st[t][3];
    if (a.nx > 0) { /* more than 4 dims (rare): i0 spans the outer ones (st[t][0] is 0) */
      for (int k = 0; k < a.nx; k++) {
        const int64_t q = i0 / a.xn[k], ck = i0 - q * a.xn[k];
        i0 = q;
#pragma unroll
        for (int t = 0; t < NT; t++) it.off[t] += ck * a.xst[t][k];
      }
    }
  }
}

template <class Op, int KIND, int V>
__device__ __forceinline__ void load_item(const Args &a, Item<Op, KIND, V> &it) {
#pragma unroll
  for (int t = 0; t < Op::kIn; t++) {
    int dt = dtype_of<KIND>(a, t);
    if constexpr (packed<KIND, V>())
      load_words<V / 2>(a.ptr[t] + it.off[t] * 2, it.w[t]);
    else
      load_vec<V>(a.ptr[t] + it.off[t] * elem_size(dt), dt, it.in[t]);
  }
}

/* Float32 outputs take the accurate recipe, 16-bit outputs the 16-bit one (Out16)
 * (cuda_gate_math.cuh); for mixed dtypes the choice is a uniform run-time branch
 * (Args.accurate). */
template <int KIND>
__device__ __forceinline__ bool accurate(const Args &a) {
  if constexpr (KIND == ZG_F32) return true;
  if constexpr (KIND == ZG_F16 || KIND == ZG_BF16) return false;
  return a.accurate != 0;
}

/* The packed form: one word (two elements) of each input at a time, the 16-bit recipe of the
 * 16-bit outputs, the results packed at once. */
template <class Op, int KIND, int V>
__device__ __forceinline__ void finish_packed(const Args &a, const Item<Op, KIND, V> &it) {
  constexpr int NI = Op::kIn, NO = Op::kOut;
  uint32_t out[NO][V / 2];
#pragma unroll
  for (int k = 0; k < V / 2; k++) {
    float lo[NI], hi[NI], y_lo[NO], y_hi[NO];
#pragma unroll
    for (int t = 0; t < NI; t++) {
      const float2 x = unpack2(it.w[t][k], KIND);
      lo[t] = x.x;
      hi[t] = x.y;
    }
    Op::template apply<Out16>(lo, y_lo);
    Op::template apply<Out16>(hi, y_hi);
#pragma unroll
    for (int t = 0; t < NO; t++) out[t][k] = pack2(y_lo[t], y_hi[t], KIND);
  }
#pragma unroll
  for (int t = 0; t < NO; t++) store_words<V / 2>(a.ptr[NI + t] + it.off[NI + t] * 2, out[t]);
}

/* y[t][k] = output t of element k, by recipe R. */
template <class Op, class R, int V>
__device__ __forceinline__ void apply_vec(const float (&in)[Op::kIn][V], float (&y)[Op::kOut][V]) {
#pragma unroll
  for (int k = 0; k < V; k++) {
    float x[Op::kIn], r[Op::kOut];
#pragma unroll
    for (int t = 0; t < Op::kIn; t++) x[t] = in[t][k];
    Op::template apply<R>(x, r);
#pragma unroll
    for (int t = 0; t < Op::kOut; t++) y[t][k] = r[t];
  }
}

template <class Op, int KIND, int V>
__device__ __forceinline__ void finish_floats(const Args &a, const Item<Op, KIND, V> &it) {
  constexpr int NI = Op::kIn;
  float y[Op::kOut][V];
  if (accurate<KIND>(a)) apply_vec<Op, Accurate, V>(it.in, y);
  else apply_vec<Op, Out16, V>(it.in, y);
#pragma unroll
  for (int t = 0; t < Op::kOut; t++) {
    const int dt = dtype_of<KIND>(a, NI + t);
    store_vec<V>(a.ptr[NI + t] + it.off[NI + t] * elem_size(dt), dt, y[t]);
  }
}

template <class Op, int KIND, int V>
__device__ __forceinline__ void finish_item(const Args &a, const Item<Op, KIND, V> &it) {
  if constexpr (packed<KIND, V>()) finish_packed<Op, KIND, V>(a, it);
  else finish_floats<Op, KIND, V>(a, it);
}

/* In place (dout_scaled is dout): each element is read by the thread that later writes it,
 * and the read comes first in that thread's program order, so no other ordering is needed.
 * A block's tile is kThreads consecutive items, thread t taking item t, so each load
 * instruction of a warp reads one contiguous span. */
template <class Op, int KIND, int V, int LAYOUT>
__global__ void __launch_bounds__(kThreads, min_blocks(KIND)) gate_kernel(const Args a) {
  for (int64_t base = (int64_t)blockIdx.x * kThreads; base < a.items; base += (int64_t)gridDim.x * kThreads) {
    const int64_t i = base + threadIdx.x;
    Item<Op, KIND, V> x;
    if (i < a.items) { /* every load issued before any math */
      locate<Op, KIND, V, LAYOUT>(a, i, x);
      load_item<Op, KIND, V>(a, x);
    }
    if (i < a.items) finish_item<Op, KIND, V>(a, x);
  }
  if constexpr (V > 1) {
    /* One row whose length is not a multiple of V: its last few elements, one per thread. */
    if (a.tail > 0 && blockIdx.x == 0 && threadIdx.x < (unsigned)a.tail) {
      Item<Op, KIND, 1> e;
      int64_t col = a.nv * V + threadIdx.x;
#pragma unroll
      for (int t = 0; t < Op::kIn + Op::kOut; t++) e.off[t] = col * a.st[t][3];
      load_item<Op, KIND, 1>(a, e);
      finish_item<Op, KIND, 1>(a, e);
    }
  }
}

/* Which (width, layout) pairs get a kernel of their own (the others take ANY). */
template <class Op, int KIND, int V>
const void *kernel_by_layout(int layout) {
  if constexpr (KIND != ZG_KIND_MIXED && V > 1) {
    if (layout == L_FLAT) return reinterpret_cast<const void *>(gate_kernel<Op, KIND, V, L_FLAT>);
    if (layout == L_ROWS) return reinterpret_cast<const void *>(gate_kernel<Op, KIND, V, L_ROWS>);
  }
  return reinterpret_cast<const void *>(gate_kernel<Op, KIND, V, L_ANY>);
}

/* All-float32 problems stop at 4 elements a vector (cuda_backend.cu): no 8-wide kernel. */
template <class Op, int KIND>
const void *kernel_for(int v, int layout) {
  switch (v) {
    case 8:
      if constexpr (KIND != ZG_F32) return kernel_by_layout<Op, KIND, 8>(layout);
      return nullptr;
    case 4: return kernel_by_layout<Op, KIND, 4>(layout);
    case 2: return kernel_by_layout<Op, KIND, 2>(layout);
    case 1: return kernel_by_layout<Op, KIND, 1>(L_ANY);
    default: return nullptr;
  }
}

}  // namespace
}  // namespace zgcu

/* The body of kernels.cu: Op is GateBwd or GateFwd, KIND a zg_dtype or ZG_KIND_MIXED. */
#define ZG_CUDA_DEFINE_TABLE(name, Op, KIND) \
  const void *zgcu::name(int v, int layout) { return kernel_for<Op, KIND>(v, layout); }

#endif /* ZGATE_CUDA_KERNEL_CUH */
