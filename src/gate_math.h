/* The gate's per-element math, written once: the scalar path, the SIMD tails and the
 * float64 reference (C, in double) and the CUDA kernels (nvcc, in float: all of the 16-bit
 * recipe, the choice of s and the scaled products of the other; cuda_gate_math.cuh) use
 * these functions, and this file is the documented formula.
 *
 *   e   = exp(-|z|)            in (0, 1], never overflows
 *   r   = 1 / (1 + e)          in [1/2, 1]
 *   z >= 0:  s = r,      1 - s = e * r      (no cancellation: 1 - s is never formed)
 *   z <  0:  s = e * r,  1 - s = r
 *   dz  = (dout * o) * (s * (1 + z * (1 - s)))
 *   dos = (dout * z) * s      ((dout * s) * z where dout * z is not finite)
 *   out = (o * z) * s         (likewise)
 *
 * The grouping is deliberate: for z below about -87 s is a float32 subnormal; a float32
 * path that multiplies it last by |dout*o| (or |dout*z|) keeps its absolute error within
 * the allowance of the numerics policy (4 * 2^-149 * |dout*o| * (1 + |z|)). NaN in z gives
 * NaN (z >= 0 is false and exp(NaN) is NaN). z = +inf gives NaN in dz (inf * 0) and
 * z = -inf NaN in dz and dos (0 * inf), exactly as the plain formula does in float64.
 *
 * Conversions are exact bit manipulations with round-to-nearest-even; NaN stays a quiet
 * NaN, values past the largest finite become inf, float16 subnormals are exact.
 */
#ifndef ZGATE_GATE_MATH_H
#define ZGATE_GATE_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__ || \
    defined(__USE_FAST_MATH__)
#error "zgate must not be built with -ffast-math / -ffinite-math-only / --use_fast_math: NaN, inf and exp accuracy matter"
#endif

/* ---- the formula, in zg_real ----------------------------------------------------------
 * C: double, plain operators (ISO C11 never contracts). nvcc: float; on the device each
 * operation is an IEEE intrinsic, rounded once and kept where it is written (never
 * contracted, reordered or speculated), and ZG_MADD, the one product that feeds an add, is
 * an fma. */
#ifdef __CUDACC__
typedef float zg_real;
#define ZG_FORMULA static __host__ __device__ __forceinline__
#else
typedef double zg_real;
#define ZG_FORMULA static inline
#endif
#ifdef __CUDA_ARCH__
#define ZG_ADD(a, b) __fadd_rn(a, b)
#define ZG_MUL(a, b) __fmul_rn(a, b)
#define ZG_RCP(a) __frcp_rn(a)
#define ZG_MADD(a, b, c) fmaf(a, b, c)
#else
#define ZG_ADD(a, b) ((a) + (b))
#define ZG_MUL(a, b) ((a) * (b))
#define ZG_RCP(a) (1 / (a))
#define ZG_MADD(a, b, c) ((a) * (b) + (c))
#endif

/* r = 1/(1 + e) and er = e*r for e = exp(-|z|) */
ZG_FORMULA void zg_sigmoid_parts(zg_real z, zg_real *r, zg_real *er) {
  zg_real e = exp(-fabs(z));
  *r = ZG_RCP(ZG_ADD(1, e));
  *er = ZG_MUL(e, *r);
}

/* s = sigmoid(z) and 1 - s from r and er; NaN z takes the z < 0 side */
ZG_FORMULA zg_real zg_sigmoid_s(zg_real z, zg_real r, zg_real er) { return z >= 0 ? r : er; }
ZG_FORMULA zg_real zg_sigmoid_oms(zg_real z, zg_real r, zg_real er) { return z >= 0 ? er : r; }

/* a*z*s as (a*z)*s; (a*s)*z where a*z is not finite (overflow, an infinity or NaN), which
 * float64 inputs near its range reach (0 where s is 0, as the formula gives).
 * check/zgate_check.c's formula is the same. */
ZG_FORMULA zg_real zg_scaled(zg_real a, zg_real z, zg_real s) {
  zg_real p = ZG_MUL(a, z);
  return isfinite(p) ? ZG_MUL(p, s) : ZG_MUL(ZG_MUL(a, s), z);
}

ZG_FORMULA zg_real zg_gate_dz(zg_real dout, zg_real z, zg_real o, zg_real s, zg_real oms) {
  return ZG_MUL(ZG_MUL(dout, o), ZG_MUL(s, ZG_MADD(z, oms, 1)));
}

#ifndef __CUDACC__ /* the rest is the CPU's: the CUDA kernels convert with their own
                      instructions (cuda_vec.cuh) */

static inline uint32_t zg_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float zg_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---- float64 entry points (the reference) -------------------------------------------- */

static inline void zg_sigmoid_pair_f64(double z, double *s, double *oms) {
  double r, er;
  zg_sigmoid_parts(z, &r, &er);
  *s = zg_sigmoid_s(z, r, er);
  *oms = zg_sigmoid_oms(z, r, er);
}

static inline void zg_gate_bwd_f64(double dout, double z, double o, double *dz, double *dos) {
  double s, oms;
  zg_sigmoid_pair_f64(z, &s, &oms);
  *dz = zg_gate_dz(dout, z, o, s, oms);
  *dos = zg_scaled(dout, z, s);
}

static inline double zg_gate_fwd_f64(double o, double z) {
  double s, oms;
  zg_sigmoid_pair_f64(z, &s, &oms);
  return zg_scaled(o, z, s);
}

/* ---- float32 entry points -------------------------------------------------------------
 * Float in, float out, one rounding: the scalar path evaluates the float64 formula above
 * on the (exactly widened) float inputs and rounds each result once, so it matches the
 * reference bit for bit on float32 outputs. Float32 arithmetic throughout would stack six
 * or more roundings (exp, 1+e, 1/(1+e), e*r, 1+z*(1-s), three products) and was measured at
 * up to 4.8 ulp of the scale near z = -17, over the 4-ulp policy; double costs the scalar
 * path little and leaves it the most accurate one. The SIMD paths do float32 arithmetic
 * with fma and a corrected reciprocal (simd_exp.h) and meet the policy on their own; their
 * lanes with an inf or NaN result (and, in the 16-bit recipe, near the root of 1 + z(1-s))
 * are recomputed by these two functions (kernels_simd.c's gate_fix). */

/* A NaN result is the default quiet NaN, 0x7fc00000, whatever the NaN it came from (an
 * input's payload and sign, or the NaN the hardware made for inf * 0, which is negative on
 * x86 and positive on aarch64): every CPU path gives these same bits. The SIMD paths send
 * every lane with an inf or NaN result here, so this is their NaN too. */
static inline float zg_f64_to_f32_nan_default(double d) { return d != d ? zg_bits_f32(0x7fc00000u) : (float)d; }

static inline void zg_gate_bwd_f32(float dout, float z, float o, float *dz, float *dos) {
  double ddz, ddos;
  zg_gate_bwd_f64(dout, z, o, &ddz, &ddos);
  *dz = zg_f64_to_f32_nan_default(ddz);
  *dos = zg_f64_to_f32_nan_default(ddos);
}

static inline float zg_gate_fwd_f32(float o, float z) { return zg_f64_to_f32_nan_default(zg_gate_fwd_f64(o, z)); }

/* ---- float16 <-> float32 -------------------------------------------------------------- */

static inline uint16_t zg_f32_to_f16(float f) {
  uint32_t x = zg_f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) /* NaN: keep the top payload bits, force quiet */
    return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) /* >= 65520 (tie above 65504 rounds to even = inf), or inf */
    return (uint16_t)(sign | 0x7c00u);
  if (ax >= 0x38800000u) { /* normal in float16: >= 2^-14 */
    uint32_t r = ax - 0x38000000u; /* rebias exponent 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
  }
  if (ax <= 0x33000000u) /* <= 2^-25: rounds to zero (2^-25 is a tie, even is 0) */
    return (uint16_t)sign;
  /* subnormal in float16: m * 2^-24, m = round(mant * 2^(exp - 126)) */
  uint32_t exp = ax >> 23;                         /* 102 .. 112 */
  uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - exp;                     /* 14 .. 24 */
  uint32_t m = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (m & 1u))) m++;
  return (uint16_t)(sign | m);                     /* m == 1024 is the smallest normal */
}

static inline float zg_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) /* inf or NaN (NaN made quiet) */
    return zg_bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  if (exp == 0) { /* zero or subnormal: mant * 2^-24 is exact in float */
    float v = (float)mant * 0x1p-24f;
    return zg_bits_f32(sign | zg_f32_bits(v));
  }
  return zg_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* ---- bfloat16 <-> float32 ------------------------------------------------------------- */

static inline uint16_t zg_f32_to_bf16(float f) {
  uint32_t x = zg_f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate, force quiet */
    return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u); /* overflow carries into inf, as it should */
  return (uint16_t)(x >> 16);
}

static inline float zg_bf16_to_f32(uint16_t b) { return zg_bits_f32((uint32_t)b << 16); }

/* ---- float64 -> narrow types, single rounding ------------------------------------------ */

/* double -> float rounded to odd: a sticky intermediate, so that a second rounding to a
 * type with at least 2 fewer significand bits (float16, bfloat16) equals one direct
 * round-to-nearest-even from double. */
static inline float zg_f64_to_f32_odd(double d) {
  float f = (float)d;
  if (d != d || (double)f == d) return f;
  uint32_t b = zg_f32_bits(f);
  if (fabs((double)f) > fabs(d)) b -= 1u; /* rounded away from zero: step back toward it */
  return zg_bits_f32(b | 1u);
}

static inline uint16_t zg_f64_to_f16(double d) { return zg_f32_to_f16(zg_f64_to_f32_odd(d)); }
static inline uint16_t zg_f64_to_bf16(double d) { return zg_f32_to_bf16(zg_f64_to_f32_odd(d)); }

#endif /* !__CUDACC__ */
#endif /* ZGATE_GATE_MATH_H */
