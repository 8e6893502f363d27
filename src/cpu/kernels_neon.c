/* The aarch64 NEON path: 4 floats per register, ARMv8.0-A baseline (no FP16 arithmetic,
 * no BF16 extension), so it runs on every aarch64 CPU, Kunpeng 920 included.
 * Built with the target's default flags (NEON is part of the base aarch64 ISA);
 * only zg_cpu_kernels_neon is visible.
 *
 * Math: the exp and sigmoid recipe of simd_exp.h, written with the same operations in the
 * same order as the x86 paths (every operation is one IEEE-rounded add, mul, div or fma),
 * so a given input gives the same bits here as on AVX2 (NaN payloads aside). Every element
 * goes through the vector code: a tail of fewer than 4 elements is run on a zero-padded
 * copy, so a result never depends on where a block starts or ends.
 *
 * Floating-point environment: results assume the FPCR that Linux gives every process
 * (round to nearest even, FZ = FZ16 = 0 so subnormals are kept, DN = 0, AHP = 0 so float16
 * is IEEE binary16). Under it:
 *   float16: FCVTL (vcvt_f32_f16) widens exactly, subnormals included, and quiets a
 *            signalling NaN; FCVTN (vcvt_f16_f32) rounds to nearest even, overflows to inf,
 *            keeps a NaN's sign and top payload bits with the quiet bit set. Both match
 *            gate_math.h's zg_f16_to_f32 / zg_f32_to_f16 bit for bit.
 *   bfloat16: exact integer round-to-nearest-even on the float bits, NaN kept quiet
 *            (the same rule as zg_f32_to_bf16); widening is a 16-bit shift.
 * Non-temporal stores: the `streaming` flag is ignored. AArch64 has STNP, but GCC offers no
 * intrinsic for it and on the cores we target plain stores to whole lines already avoid the
 * read-for-ownership; plain stores also need no fence.
 */
#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "../gate_math.h"
#include "cpu_kernels.h"
#include "simd_exp.h"

#if !defined(__aarch64__) || !defined(__ARM_NEON)
#error "kernels_neon.c is the aarch64 NEON path: build it for aarch64 only"
#endif

/* ---- register-level math --------------------------------------------------------------- */

/* exp(x) for x <= 0 or NaN (simd_exp.h). Error: max 0.87 ulp over every float in
 * [-104, 0]; results in the subnormal range (x < -87.3) are the correctly rounded
 * subnormal of p * 2^k (0.5 ulp + 2^-24 relative); 0 below -104.5; NaN for NaN.
 * Checked exhaustively against double exp (docs/perf-notes.md, "neon"). */
static inline float32x4_t v4_exp_neg(float32x4_t x) {
  /* FMAX returns NaN when either operand is NaN: NaN passes through */
  x = vmaxq_f32(vdupq_n_f32(ZG_EXP_LO), x);
  /* k = round-to-nearest-even(x * log2 e), as an integer and as a float (both exact) */
  int32x4_t ki = vcvtnq_s32_f32(vmulq_f32(x, vdupq_n_f32(ZG_EXP_LOG2E)));
  float32x4_t k = vcvtq_f32_s32(ki);
  float32x4_t r = vfmsq_f32(x, k, vdupq_n_f32(ZG_EXP_LN2_HI)); /* exact */
  r = vfmsq_f32(r, k, vdupq_n_f32(ZG_EXP_LN2_LO));
  float32x4_t q = vdupq_n_f32(ZG_EXP_Q5);
  q = vfmaq_f32(vdupq_n_f32(ZG_EXP_Q4), q, r);
  q = vfmaq_f32(vdupq_n_f32(ZG_EXP_Q3), q, r);
  q = vfmaq_f32(vdupq_n_f32(ZG_EXP_Q2), q, r);
  q = vfmaq_f32(vdupq_n_f32(ZG_EXP_Q1), q, r);
  q = vfmaq_f32(vdupq_n_f32(ZG_EXP_Q0), q, r);
  float32x4_t t = vfmaq_f32(r, vmulq_f32(r, r), q);
  float32x4_t p = vaddq_f32(vdupq_n_f32(1.0f), t);
  /* 2^k = 2^k1 * 2^k2, k1 = floor(k/2) (arithmetic shift), both normal: subnormal results
   * round once, in the second multiply */
  int32x4_t k1 = vshrq_n_s32(ki, 1);
  int32x4_t k2 = vsubq_s32(ki, k1);
  const int32x4_t bias = vdupq_n_s32(127);
  float32x4_t sc1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k1, bias), 23));
  float32x4_t sc2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k2, bias), 23));
  return vmulq_f32(vmulq_f32(p, sc1), sc2);
}

/* s = sigmoid(z) and oms = 1 - s without cancellation (simd_exp.h):
 * e = exp(-|z|), r = 1/(1+e) (one correction step), z >= 0: s = r, oms = e*r; else swapped. */
static inline void v4_sigmoid_pair(float32x4_t z, float32x4_t *s, float32x4_t *oms) {
  const float32x4_t one = vdupq_n_f32(1.0f);
  float32x4_t negabs = vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(z), vdupq_n_u32(0x80000000u)));
  float32x4_t e = v4_exp_neg(negabs);
  float32x4_t d = vaddq_f32(one, e);
  float32x4_t r = vdivq_f32(one, d);
  /* d dropped e - (d - 1) (exact); fold it and the division's rounding into one step */
  float32x4_t dlost = vsubq_f32(e, vsubq_f32(d, one));
  float32x4_t res = vfmsq_f32(one, r, d);
  res = vfmsq_f32(res, r, dlost);
  r = vfmaq_f32(r, r, res);
  float32x4_t er = vmulq_f32(e, r);
  uint32x4_t pos = vcgezq_f32(z); /* false for NaN: s = e*r = NaN */
  *s = vbslq_f32(pos, r, er);
  *oms = vbslq_f32(pos, er, r);
}

/* Same grouping as gate_math.h (see its comment for why). */
static inline void v4_bwd(float32x4_t dout, float32x4_t z, float32x4_t o, float32x4_t *dz,
                          float32x4_t *dos) {
  float32x4_t s, oms;
  v4_sigmoid_pair(z, &s, &oms);
  float32x4_t g = vfmaq_f32(vdupq_n_f32(1.0f), z, oms);
  *dz = vmulq_f32(vmulq_f32(dout, o), vmulq_f32(s, g));
  *dos = vmulq_f32(vmulq_f32(dout, z), s);
}

static inline float32x4_t v4_fwd(float32x4_t o, float32x4_t z) {
  float32x4_t s, oms;
  v4_sigmoid_pair(z, &s, &oms);
  return vmulq_f32(vmulq_f32(o, z), s);
}

/* ---- float-array kernels ---------------------------------------------------------------- */

static void bwd_neon(float *dz, float *dos, const float *dout, const float *z, const float *o,
                     int64_t n) {
  int64_t i = 0;
  /* two registers per step: two independent exp chains for the pipeline */
  for (; i + 8 <= n; i += 8) {
    float32x4_t dz0, dos0, dz1, dos1;
    v4_bwd(vld1q_f32(dout + i), vld1q_f32(z + i), vld1q_f32(o + i), &dz0, &dos0);
    v4_bwd(vld1q_f32(dout + i + 4), vld1q_f32(z + i + 4), vld1q_f32(o + i + 4), &dz1, &dos1);
    vst1q_f32(dz + i, dz0);
    vst1q_f32(dz + i + 4, dz1);
    vst1q_f32(dos + i, dos0);
    vst1q_f32(dos + i + 4, dos1);
  }
  for (; i + 4 <= n; i += 4) {
    float32x4_t vdz, vdos;
    v4_bwd(vld1q_f32(dout + i), vld1q_f32(z + i), vld1q_f32(o + i), &vdz, &vdos);
    vst1q_f32(dz + i, vdz);
    vst1q_f32(dos + i, vdos);
  }
  if (i < n) { /* 1..3 left: the same vector code on a zero-padded copy */
    size_t m = (size_t)(n - i) * sizeof(float);
    float a[4] = {0}, b[4] = {0}, c[4] = {0}, x[4], y[4];
    memcpy(a, dout + i, m);
    memcpy(b, z + i, m);
    memcpy(c, o + i, m);
    float32x4_t vdz, vdos;
    v4_bwd(vld1q_f32(a), vld1q_f32(b), vld1q_f32(c), &vdz, &vdos);
    vst1q_f32(x, vdz);
    vst1q_f32(y, vdos);
    memcpy(dz + i, x, m);
    memcpy(dos + i, y, m);
  }
}

static void fwd_neon(float *out, const float *o, const float *z, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    float32x4_t out0 = v4_fwd(vld1q_f32(o + i), vld1q_f32(z + i));
    float32x4_t out1 = v4_fwd(vld1q_f32(o + i + 4), vld1q_f32(z + i + 4));
    vst1q_f32(out + i, out0);
    vst1q_f32(out + i + 4, out1);
  }
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, v4_fwd(vld1q_f32(o + i), vld1q_f32(z + i)));
  if (i < n) {
    size_t m = (size_t)(n - i) * sizeof(float);
    float a[4] = {0}, b[4] = {0}, x[4];
    memcpy(a, o + i, m);
    memcpy(b, z + i, m);
    vst1q_f32(x, v4_fwd(vld1q_f32(a), vld1q_f32(b)));
    memcpy(out + i, x, m);
  }
}

/* ---- conversions ------------------------------------------------------------------------ */

/* Single elements through the same instructions as the vector path (FCVTL / FCVTN). */
static inline float f16_to_f32_1(uint16_t h) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}
static inline uint16_t f32_to_f16_1(float f) {
  return vget_lane_u16(vreinterpret_u16_f16(vcvt_f16_f32(vdupq_n_f32(f))), 0);
}

/* 8 floats -> 8 bfloat16, RNE on the bits, NaN kept quiet (as zg_f32_to_bf16). */
static inline uint16x8_t v8_to_bf16(float32x4_t lo, float32x4_t hi) {
  uint32x4_t blo = vreinterpretq_u32_f32(lo), bhi = vreinterpretq_u32_f32(hi);
  const uint32x4_t one = vdupq_n_u32(1), half = vdupq_n_u32(0x7fff);
  /* bias = 0x7fff + lsb of the kept half; addhn adds and keeps the top 16 bits */
  uint32x4_t biaslo = vaddq_u32(half, vandq_u32(vshrq_n_u32(blo, 16), one));
  uint32x4_t biashi = vaddq_u32(half, vandq_u32(vshrq_n_u32(bhi, 16), one));
  uint16x8_t rnd = vaddhn_high_u32(vaddhn_u32(blo, biaslo), bhi, biashi);
  /* NaN: the top half (odd 16-bit lanes, little endian) with the quiet bit set */
  uint16x8_t qnan = vorrq_u16(vuzp2q_u16(vreinterpretq_u16_u32(blo), vreinterpretq_u16_u32(bhi)),
                              vdupq_n_u16(0x40));
  uint16x8_t notnan = vuzp1q_u16(vreinterpretq_u16_u32(vceqq_f32(lo, lo)),
                                 vreinterpretq_u16_u32(vceqq_f32(hi, hi)));
  return vbslq_u16(notnan, rnd, qnan);
}

/* ---- loads: widen to float --------------------------------------------------------------- */

static void load_f32(float *dst, const void *src, int64_t n, int64_t stride) {
  const float *s = (const float *)src;
  int64_t i = 0;
  if (stride == 1) {
    for (; i + 8 <= n; i += 8) {
      float32x4_t a = vld1q_f32(s + i), b = vld1q_f32(s + i + 4);
      vst1q_f32(dst + i, a);
      vst1q_f32(dst + i + 4, b);
    }
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, vld1q_f32(s + i));
    for (; i < n; i++) dst[i] = s[i];
    return;
  }
  for (; i < n; i++) dst[i] = s[i * stride];
}

static void load_f16(float *dst, const void *src, int64_t n, int64_t stride) {
  const uint16_t *s = (const uint16_t *)src;
  int64_t i = 0;
  if (stride == 1) {
    for (; i + 8 <= n; i += 8) {
      float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(s + i));
      vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
      vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
    }
    for (; i < n; i++) dst[i] = f16_to_f32_1(s[i]);
    return;
  }
  for (; i < n; i++) dst[i] = f16_to_f32_1(s[i * stride]);
}

static void load_bf16(float *dst, const void *src, int64_t n, int64_t stride) {
  const uint16_t *s = (const uint16_t *)src;
  int64_t i = 0;
  if (stride == 1) {
    for (; i + 8 <= n; i += 8) {
      uint16x8_t h = vld1q_u16(s + i);
      vst1q_f32(dst + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
      vst1q_f32(dst + i + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
    }
    for (; i < n; i++) dst[i] = zg_bf16_to_f32(s[i]);
    return;
  }
  for (; i < n; i++) dst[i] = zg_bf16_to_f32(s[i * stride]);
}

/* ---- stores: narrow with round-to-nearest-even (streaming ignored, see top) ------------- */

static void store_f32(void *dst, const float *src, int64_t n, int64_t stride, int streaming) {
  (void)streaming;
  float *d = (float *)dst;
  int64_t i = 0;
  if (stride == 1) {
    for (; i + 8 <= n; i += 8) {
      float32x4_t a = vld1q_f32(src + i), b = vld1q_f32(src + i + 4);
      vst1q_f32(d + i, a);
      vst1q_f32(d + i + 4, b);
    }
    for (; i + 4 <= n; i += 4) vst1q_f32(d + i, vld1q_f32(src + i));
    for (; i < n; i++) d[i] = src[i];
    return;
  }
  for (; i < n; i++) d[i * stride] = src[i];
}

static void store_f16(void *dst, const float *src, int64_t n, int64_t stride, int streaming) {
  (void)streaming;
  uint16_t *d = (uint16_t *)dst;
  int64_t i = 0;
  if (stride == 1) {
    for (; i + 8 <= n; i += 8) {
      float16x8_t h = vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(src + i)), vld1q_f32(src + i + 4));
      vst1q_u16(d + i, vreinterpretq_u16_f16(h));
    }
    for (; i < n; i++) d[i] = f32_to_f16_1(src[i]);
    return;
  }
  for (; i < n; i++) d[i * stride] = f32_to_f16_1(src[i]);
}

static void store_bf16(void *dst, const float *src, int64_t n, int64_t stride, int streaming) {
  (void)streaming;
  uint16_t *d = (uint16_t *)dst;
  int64_t i = 0;
  if (stride == 1) {
    for (; i + 8 <= n; i += 8) vst1q_u16(d + i, v8_to_bf16(vld1q_f32(src + i), vld1q_f32(src + i + 4)));
    for (; i < n; i++) d[i] = zg_f32_to_bf16(src[i]);
    return;
  }
  for (; i < n; i++) d[i * stride] = zg_f32_to_bf16(src[i]);
}

/* ---- the table -------------------------------------------------------------------------- */

static const zg_cpu_kernels neon_kernels = {
    "neon",
    {load_f32, load_f16, load_bf16},
    {store_f32, store_f16, store_bf16},
    bwd_neon,
    fwd_neon,
};

const zg_cpu_kernels *zg_cpu_kernels_neon(void) { return &neon_kernels; }
