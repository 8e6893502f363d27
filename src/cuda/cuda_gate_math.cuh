/* Per-element math of the CUDA backend: the two recipes that evaluate gate_math.h's formula
 * in float, chosen by the output types, and the two operators built on them as the kernel's
 * template parameter (cuda_kernel.cuh).
 *  - Accurate (float32 outputs): the CPU SIMD paths' recipe (src/cpu/simd_exp.h for it and
 *    its measured error), its steps from the same code (src/cpu/simd_recipe.h). CUDA's expf
 *    is good to 2 ulp, and the five roundings of the plain formula on top of it reach about
 *    4.8 ulp of the scale (measured on the CPU with an exact exp), over the policy's 4. Here
 *    exp carries its rounding error (e + elo), r and e*r are each corrected to about half an
 *    ulp, and dout*o keeps its rounding error through an fma, as on the CPU. About 60
 *    instructions an element: affordable at float32's element rate (20 bytes an element),
 *    not at bfloat16's (10).
 *  - Out16 (float16/bfloat16 outputs): gate_math.h's functions as written, CUDA's expf. Its
 *    error, at most about 13 units of 2^-24 relative to the scale, is far below half an ulp
 *    of a 16-bit type; near the root of 1 + z(1-s) the error is dominated by 1-s's (about 3
 *    units of 2^-24 of the scale), within the policy's float32 bound plus half an ulp of the
 *    type.
 * dos and out group as gate_math.h does (zg_scaled): z*s first would round a subnormal z*s
 * (z itself tiny) before |dout| > 1 scales it up; where dout*z overflows (|z| near FLT_MAX),
 * (dout*s)*z gives 0 where s is 0 and the infinity otherwise, as the float64 formula does
 * (the CPU paths recompute such lanes in float64).
 * Every fma is written out (fmaf here, ZG_MADD in gate_math.h) and the other operations
 * are __fadd_rn / __fmul_rn / __frcp_rn, which nvcc never contracts. Subnormals are kept
 * (no -ftz); the build never passes --use_fast_math (gate_math.h refuses it). */
#ifndef ZGATE_CUDA_GATE_MATH_CUH
#define ZGATE_CUDA_GATE_MATH_CUH

#include "cpu/simd_exp.h"
#include "gate_math.h"

namespace zgcu {

/* Below this z, exp(-|z|) underflows to 0 in float64 too (the reference's s is 0, and
 * dout = inf gives NaN there); above it the true s is positive, so s is kept at least the
 * smallest subnormal: an infinite dout or o then gives the reference's infinity instead of
 * inf * 0 = NaN, and finite results move by at most 2^-149 * |dout*o| * |1 + z(1-s)|, inside
 * the policy's absolute allowance for s in the subnormal range. */
#define ZG_S_UNDERFLOW_Z (-745.133219f)

__device__ __forceinline__ float s_floor(float z, float s) {
  return z >= ZG_S_UNDERFLOW_Z ? fmaxf(s, 0x1p-149f) : s; /* NaN z: unchanged */
}

/* The CPU's accurate recipe (simd_recipe.h) on one float: the same operations, each an
 * IEEE intrinsic (never contracted), 1/d correctly rounded. */
namespace recipe {
typedef float V;
#define ZG_INLINE __device__ __forceinline__
ZG_INLINE V v_set1(float x) { return x; }
ZG_INLINE V v_add(V a, V b) { return __fadd_rn(a, b); }
ZG_INLINE V v_sub(V a, V b) { return __fsub_rn(a, b); }
ZG_INLINE V v_mul(V a, V b) { return __fmul_rn(a, b); }
ZG_INLINE V v_fma(V a, V b, V c) { return fmaf(a, b, c); }
ZG_INLINE V v_fnma(V a, V b, V c) { return fmaf(-a, b, c); }
ZG_INLINE V v_fms(V a, V b, V c) { return fmaf(a, b, -c); }
ZG_INLINE V v_recip(V d) { return __frcp_rn(d); }
#include "cpu/simd_recipe.h"
#undef ZG_INLINE
}  // namespace recipe

/* e + elo = exp(x) for x <= 0 (or NaN): simd_exp.h steps 1-5. */
__device__ __forceinline__ float exp_neg(float x, float &elo) {
  const float shifter = 0x1.8p23f;
  x = x < ZG_EXP_LO ? ZG_EXP_LO : x; /* a NaN x passes through */
  float j = fmaf(x, ZG_EXP_LOG2E, shifter);
  float k = __fsub_rn(j, shifter);
  float plo, p = recipe::exp_core(x, k, &plo);
  int ki = __float_as_int(j) - __float_as_int(shifter);
  if (x >= -87.0f) { /* normal result: one scale */
    float sc = __int_as_float((ki + 127) << 23);
    elo = __fmul_rn(plo, sc);
    return __fmul_rn(p, sc);
  }
  int k1 = ki >> 1, k2 = ki - k1; /* NaN also lands here: p is NaN, any scale keeps it */
  float sc1 = __int_as_float((k1 + 127) << 23), sc2 = __int_as_float((k2 + 127) << 23);
  elo = __fmul_rn(__fmul_rn(plo, sc1), sc2);
  return __fmul_rn(__fmul_rn(p, sc1), sc2);
}

/* The recipes. Each gives r = 1/(1+e) and er = e*r for e = exp(-|z|), and
 * dz = (dout*o) * h with h = s*(1 + z*oms) from s and oms = 1 - s. */
struct Accurate { /* each within about half an ulp, without cancellation (simd_recipe.h) */
  __device__ static __forceinline__ void sigmoid_parts(float z, float &r, float &er) {
    float elo;
    float e = exp_neg(-fabsf(z), elo);
    recipe::sigmoid_parts_acc(e, elo, &r, &er);
  }
  __device__ static __forceinline__ float dz(float dout, float z, float o, float s, float oms) {
    float a, h, fused = recipe::dz_acc(dout, z, o, s, oms, &a, &h);
    return isnan(fused) ? __fmul_rn(a, h) : fused; /* a = inf: keep the plain product */
  }
};

struct Out16 { /* gate_math.h's formula as written, CUDA's expf */
  __device__ static __forceinline__ void sigmoid_parts(float z, float &r, float &er) {
    zg_sigmoid_parts(z, &r, &er);
  }
  __device__ static __forceinline__ float dz(float dout, float z, float o, float s, float oms) {
    return zg_gate_dz(dout, z, o, s, oms);
  }
};

/* s = sigmoid(z) and oms = 1 - s by recipe R. */
template <class R>
__device__ __forceinline__ void sigmoid_pair(float z, float &s, float &oms) {
  float r, er;
  R::sigmoid_parts(z, r, er);
  s = s_floor(z, zg_sigmoid_s(z, r, er));
  oms = zg_sigmoid_oms(z, r, er);
}

/* The operators, each the template parameter of the kernel body (cuda_kernel.cuh): its
 * input and output counts, in the order of zg_problem's operands (zgate_internal.h), and
 * apply<R>, one element's outputs from its inputs by recipe R. */
struct GateBwd { /* dout, z, o -> dz, dout_scaled */
  static constexpr int kIn = 3, kOut = 2;
  template <class R>
  __device__ static __forceinline__ void apply(const float (&x)[kIn], float (&y)[kOut]) {
    const float dout = x[0], z = x[1], o = x[2];
    float s, oms;
    sigmoid_pair<R>(z, s, oms);
    y[0] = R::dz(dout, z, o, s, oms);
    y[1] = zg_scaled(dout, z, s);
  }
};

struct GateFwd { /* o, z -> out */
  static constexpr int kIn = 2, kOut = 1;
  template <class R>
  __device__ static __forceinline__ void apply(const float (&x)[kIn], float (&y)[kOut]) {
    const float o = x[0], z = x[1];
    float s, oms;
    sigmoid_pair<R>(z, s, oms);
    y[0] = zg_scaled(o, z, s);
  }
};

}  // namespace zgcu

#endif /* ZGATE_CUDA_GATE_MATH_CUH */
