/* The aarch64 NEON path: 4 floats per register, ARMv8.0-A baseline (no FP16 arithmetic,
 * no BF16 extension), so it runs on every aarch64 CPU, Kunpeng 920 included.
 * Built with the target's default flags (NEON is part of the base aarch64 ISA);
 * only zg_cpu_kernels_neon is visible.
 *
 * Math: the exp and sigmoid recipe of simd_exp.h, written with the same operations in the
 * same order as kernels_avx2.c (every operation is one IEEE-rounded add, sub, mul, div or
 * fma), so a given input gives the same bits here as on AVX2 (NaN payloads aside; checked
 * over every 255th float32 z, docs/perf-notes.md). Every element goes through the vector
 * code: a tail of fewer than 4 elements is run on a zero-padded copy, so a result never
 * depends on where a block starts or ends.
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
 * Non-temporal stores: the `streaming` flag is ignored and every store is a plain one
 * (always correct, no fence needed). AArch64's only non-temporal store is STNP, which ACLE
 * exposes no intrinsic for; whether it pays on Kunpeng could not be measured here.
 */
#include <arm_neon.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../gate_math.h"
#include "cpu_kernels.h"
#include "simd_exp.h"

#if !defined(__aarch64__) || !defined(__ARM_NEON)
#error "kernels_neon.c is the aarch64 NEON path: build it for aarch64 only"
#endif

/* ---- register-level math --------------------------------------------------------------- */

/* p + plo = exp(r) for |r| <= ln2/2 (plus a rounding), given k: steps 3-4 of simd_exp.h.
 * p is the rounded result; plo its rounding error (Fast2Sum). */
static inline float32x4_t v4_exp_core(float32x4_t x, float32x4_t k, float32x4_t *plo) {
  float32x4_t r1 = vfmsq_f32(x, k, vdupq_n_f32(ZG_EXP_LN2_HI)); /* exact */
  float32x4_t r = vfmsq_f32(r1, k, vdupq_n_f32(ZG_EXP_LN2_LO));
  float32x4_t c = vfmsq_f32(vsubq_f32(r1, r), k, vdupq_n_f32(ZG_EXP_LN2_LO)); /* r's rounding */
  /* Q by Estrin: a short dependency chain */
  float32x4_t r2 = vmulq_f32(r, r);
  float32x4_t q01 = vfmaq_f32(vdupq_n_f32(ZG_EXP_Q0), vdupq_n_f32(ZG_EXP_Q1), r);
  float32x4_t q23 = vfmaq_f32(vdupq_n_f32(ZG_EXP_Q2), vdupq_n_f32(ZG_EXP_Q3), r);
  float32x4_t q45 = vfmaq_f32(vdupq_n_f32(ZG_EXP_Q4), vdupq_n_f32(ZG_EXP_Q5), r);
  float32x4_t q = vfmaq_f32(vfmaq_f32(q01, r2, q23), vmulq_f32(r2, r2), q45);
  /* p = (1 + r) + (r^2 q + c), with 1 + r split exactly (Fast2Sum) so p rounds once */
  const float32x4_t one = vdupq_n_f32(1.0f);
  float32x4_t hi = vaddq_f32(one, r);
  float32x4_t lo = vaddq_f32(vsubq_f32(one, hi), r);
  float32x4_t u = vaddq_f32(vfmaq_f32(c, r2, q), lo);
  float32x4_t p = vaddq_f32(hi, u);
  *plo = vaddq_f32(vsubq_f32(hi, p), u);
  return p;
}

/* e + elo = exp(x) for x <= 0 or NaN (simd_exp.h). e alone: max 0.69 ulp for normal
 * results, 0.78 ulp for subnormal ones (x below -87.3: one rounding of p * 2^k); 0 below
 * -104.5; NaN for NaN. elo carries p's rounding error (exact for normal results).
 * The bound is the x86 exp's, measured over all 1.12e9 floats of [-104.5, 0]: this exp gives
 * the same e and elo bit for bit (checked on every 61st float there; docs/perf-notes.md).
 * k comes from the shifter trick: j = x*log2(e) + 1.5*2^23 (one fma) holds round(x*log2(e))
 * in its low mantissa bits. Vectors whose results are all normal (x >= -87, the common case)
 * take one scale; others split 2^k in two. Both give the same bits where both apply, so a
 * lane's result does not depend on its neighbours. */
static inline float32x4_t v4_exp_neg(float32x4_t x, float32x4_t *elo) {
  const float32x4_t shifter = vdupq_n_f32(0x1.8p23f);
  float32x4_t plo;
  if (vmaxvq_u32(vcltq_f32(x, vdupq_n_f32(-87.0f))) == 0) {
    float32x4_t j = vfmaq_f32(shifter, x, vdupq_n_f32(ZG_EXP_LOG2E));
    float32x4_t p = v4_exp_core(x, vsubq_f32(j, shifter), &plo);
    /* the low bits of j are 2^22 + k; shifting left by 23 drops 2^22 and leaves k */
    float32x4_t sc = vreinterpretq_f32_u32(vshlq_n_u32(vaddq_u32(vreinterpretq_u32_f32(j), vdupq_n_u32(127)), 23));
    *elo = vmulq_f32(plo, sc);
    return vmulq_f32(p, sc); /* NaN: p is NaN */
  }
  /* FMAX returns NaN when either operand is NaN: NaN passes through */
  x = vmaxq_f32(vdupq_n_f32(ZG_EXP_LO), x);
  float32x4_t j = vfmaq_f32(shifter, x, vdupq_n_f32(ZG_EXP_LOG2E));
  float32x4_t p = v4_exp_core(x, vsubq_f32(j, shifter), &plo);
  int32x4_t k = vsubq_s32(vreinterpretq_s32_f32(j), vreinterpretq_s32_f32(shifter));
  int32x4_t k1 = vshrq_n_s32(k, 1); /* floor(k / 2) */
  int32x4_t k2 = vsubq_s32(k, k1);
  const int32x4_t bias = vdupq_n_s32(127);
  float32x4_t sc1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k1, bias), 23));
  float32x4_t sc2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k2, bias), 23));
  *elo = vmulq_f32(vmulq_f32(plo, sc1), sc2); /* 0 once e is subnormal: fine */
  return vmulq_f32(vmulq_f32(p, sc1), sc2);
}

/* s = sigmoid(z) and oms = 1 - s from e + elo = exp(-|z|), each within about 0.5 ulp,
 * without cancellation (simd_exp.h): r = 1/(1 + E) and E*r with E = e + elo, each a
 * rounded leading term plus an fma-computed correction, so each is rounded once. */
static inline void v4_sigmoid_pair(float32x4_t z, float32x4_t e, float32x4_t elo, float32x4_t *s,
                                   float32x4_t *oms) {
  const float32x4_t one = vdupq_n_f32(1.0f);
  float32x4_t d = vaddq_f32(one, e);
  float32x4_t dlo = vaddq_f32(vsubq_f32(e, vsubq_f32(d, one)), elo); /* 1+E = d+dlo */
  float32x4_t r = vdivq_f32(one, d);
  /* res = 1 - r*(d + dlo): r*(1 + res) = 1/(1+E) to second order */
  float32x4_t res = vfmsq_f32(vfmsq_f32(one, r, d), r, dlo);
  float32x4_t er = vmulq_f32(e, r);
  float32x4_t erlo = vfmaq_f32(vfmaq_f32(vnegq_f32(er), e, r), elo, r); /* E*r - er */
  float32x4_t r_c = vfmaq_f32(r, r, res);
  float32x4_t er_c = vaddq_f32(er, vfmaq_f32(erlo, er, res));
  /* by the sign bit: z < 0 (and -0, where both choices are 1/2; and a NaN with its sign
   * bit set, where both are NaN) takes e*r */
  uint32x4_t neg = vcltzq_s32(vreinterpretq_s32_f32(z));
  *s = vbslq_f32(neg, er_c, r_c);
  *oms = vbslq_f32(neg, r_c, er_c);
}

/* dz = (dout*o) * h, h = s*(1 + z*(1-s)), dos = (dout*z)*s: gate_math.h's grouping, with
 * simd_exp.h's refinements: dout*o carried with its rounding error (a + alo), h formed as
 * fma(s*z, 1-s, s) (one rounding). Lanes that come out inf or NaN are redone afterwards
 * (fix_bwd). */
static inline void v4_bwd(float32x4_t dout, float32x4_t z, float32x4_t o, float32x4_t e,
                          float32x4_t elo, float32x4_t *dz, float32x4_t *dos) {
  float32x4_t s, oms;
  v4_sigmoid_pair(z, e, elo, &s, &oms);
  float32x4_t h = vfmaq_f32(s, vmulq_f32(s, z), oms);
  float32x4_t a = vmulq_f32(dout, o);
  float32x4_t alo = vfmaq_f32(vnegq_f32(a), dout, o); /* dout*o - a, exact */
  *dz = vfmaq_f32(vmulq_f32(alo, h), a, h);
  *dos = vmulq_f32(vmulq_f32(dout, z), s);
}

static inline float32x4_t v4_fwd(float32x4_t o, float32x4_t z, float32x4_t e, float32x4_t elo) {
  float32x4_t s, oms;
  v4_sigmoid_pair(z, e, elo, &s, &oms);
  return vmulq_f32(vmulq_f32(o, z), s);
}

/* All-ones in the lanes where v is finite (|v| < inf is false for inf and NaN). */
static inline uint32x4_t v4_finite(float32x4_t v) { return vcaltq_f32(v, vdupq_n_f32(INFINITY)); }

/* ---- float-array kernels ---------------------------------------------------------------- */

/* Up to 4 floats from p: a full load, or a zero-padded copy that never touches p[rem..4). */
static inline float32x4_t v4_load_part(const float *p, int64_t rem) {
  if (rem >= 4) return vld1q_f32(p);
  float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  memcpy(t, p, (size_t)rem * sizeof(float));
  return vld1q_f32(t);
}
static inline void v4_store_part(float *p, int64_t rem, float32x4_t v) {
  if (rem >= 4) {
    vst1q_f32(p, v);
    return;
  }
  float t[4];
  vst1q_f32(t, v);
  memcpy(p, t, (size_t)rem * sizeof(float));
}

/* The math runs in two passes over chunks of ZG_NEON_CHUNK elements: exp first, into a small
 * buffer, then the rest. One pass is a single long dependency chain per vector (exp,
 * division, corrections) that the out-of-order window cannot overlap enough of; two shorter
 * chains overlap better (the reason the x86 paths do the same; docs/perf-notes.md).
 * Inside each pass the loop over whole vectors has no call in it (the partial last vector and
 * the inf/NaN fix-up run after it), so the ~20 constants stay in registers: a call would
 * clobber them (AArch64 keeps only the low halves of v8-v15 across calls). */
#define ZG_NEON_CHUNK 64

static inline float32x4_t v4_negabs(float32x4_t z) {
  return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(z), vdupq_n_u32(0x80000000u)));
}

/* e + elo = exp(-|z|) for z[0..m), m <= ZG_NEON_CHUNK; a partial last vector fills its
 * whole slot of e and elo (the buffers hold ZG_NEON_CHUNK, a multiple of 4). */
static inline void exp_pass(float *e, float *elo, const float *z, int64_t m) {
  int64_t j = 0;
  for (; j + 4 <= m; j += 4) {
    float32x4_t lo;
    vst1q_f32(e + j, v4_exp_neg(v4_negabs(vld1q_f32(z + j)), &lo));
    vst1q_f32(elo + j, lo);
  }
  if (j < m) {
    float32x4_t lo;
    vst1q_f32(e + j, v4_exp_neg(v4_negabs(v4_load_part(z + j, m - j)), &lo));
    vst1q_f32(elo + j, lo);
  }
}

/* Redo, in double, the lanes of one vector of results that came out inf or NaN, from the
 * same s and 1 - s, with gate_math.h's grouping. A float32 intermediate can overflow where the
 * float64 formula does not (dout*z = inf times s = 0 gives NaN, not 0), and inf/NaN inputs
 * must give what the float64 formula gives. The same rule as the x86 paths.
 * which: 0 dz, 1 dout_scaled, 2 fwd out (then dout is o). */
static float32x4_t v4_fix_lanes(int which, float32x4_t v, float32x4_t dout, float32x4_t z,
                                float32x4_t o, float32x4_t s, float32x4_t oms) {
  float vv[4], vd[4], vz[4], vo[4], vs[4], voms[4];
  vst1q_f32(vv, v);
  vst1q_f32(vd, dout);
  vst1q_f32(vz, z);
  vst1q_f32(vo, o);
  vst1q_f32(vs, s);
  vst1q_f32(voms, oms);
  for (int j = 0; j < 4; j++) {
    if (isfinite(vv[j])) continue;
    double zd = vz[j], sd = vs[j];
    if (which == 0)
      vv[j] = (float)(((double)vd[j] * vo[j]) * (sd * (1.0 + zd * (double)voms[j])));
    else if (which == 1)
      vv[j] = (float)(((double)vd[j] * zd) * sd);
    else
      vv[j] = (float)(((double)vo[j] * zd) * sd);
  }
  return vld1q_f32(vv);
}

/* The fix-up pass over one chunk, run only when some result in it is inf or NaN (rare):
 * s and 1 - s are recomputed from the chunk's e and elo, bit for bit as the main pass. */
__attribute__((noinline, cold)) static void fix_bwd(float *dz, float *dos, const float *dout,
                                                    const float *z, const float *o,
                                                    const float *e, const float *elo, int64_t m) {
  for (int64_t j = 0; j < m; j += 4) {
    float32x4_t vdz = v4_load_part(dz + j, m - j), vdos = v4_load_part(dos + j, m - j);
    if (vminvq_u32(vandq_u32(v4_finite(vdz), v4_finite(vdos))) != 0) continue;
    float32x4_t vz = v4_load_part(z + j, m - j), s, oms;
    float32x4_t vdout = v4_load_part(dout + j, m - j), vo = v4_load_part(o + j, m - j);
    v4_sigmoid_pair(vz, vld1q_f32(e + j), vld1q_f32(elo + j), &s, &oms);
    v4_store_part(dz + j, m - j, v4_fix_lanes(0, vdz, vdout, vz, vo, s, oms));
    v4_store_part(dos + j, m - j, v4_fix_lanes(1, vdos, vdout, vz, vo, s, oms));
  }
}

__attribute__((noinline, cold)) static void fix_fwd(float *out, const float *o, const float *z,
                                                    const float *e, const float *elo, int64_t m) {
  for (int64_t j = 0; j < m; j += 4) {
    float32x4_t vout = v4_load_part(out + j, m - j);
    if (vminvq_u32(v4_finite(vout)) != 0) continue;
    float32x4_t vz = v4_load_part(z + j, m - j), vo = v4_load_part(o + j, m - j), s, oms;
    v4_sigmoid_pair(vz, vld1q_f32(e + j), vld1q_f32(elo + j), &s, &oms);
    v4_store_part(out + j, m - j, v4_fix_lanes(2, vout, vo, vz, vo, s, oms));
  }
}

static void bwd_neon(float *dz, float *dos, const float *dout, const float *z, const float *o,
                     int64_t n) {
  _Alignas(16) float e[ZG_NEON_CHUNK], elo[ZG_NEON_CHUNK];
  for (int64_t i = 0; i < n; i += ZG_NEON_CHUNK) {
    int64_t m = n - i < ZG_NEON_CHUNK ? n - i : ZG_NEON_CHUNK;
    exp_pass(e, elo, z + i, m);
    uint32x4_t finite = vdupq_n_u32(~0u);
    int64_t j = 0;
    for (; j + 4 <= m; j += 4) {
      float32x4_t vdz, vdos;
      v4_bwd(vld1q_f32(dout + i + j), vld1q_f32(z + i + j), vld1q_f32(o + i + j),
             vld1q_f32(e + j), vld1q_f32(elo + j), &vdz, &vdos);
      finite = vandq_u32(finite, v4_finite(vaddq_f32(vdz, vdos))); /* sum: only false alarms */
      vst1q_f32(dz + i + j, vdz);
      vst1q_f32(dos + i + j, vdos);
    }
    if (j < m) {
      float32x4_t vdz, vdos;
      v4_bwd(v4_load_part(dout + i + j, m - j), v4_load_part(z + i + j, m - j),
             v4_load_part(o + i + j, m - j), vld1q_f32(e + j), vld1q_f32(elo + j), &vdz, &vdos);
      finite = vandq_u32(finite, v4_finite(vaddq_f32(vdz, vdos)));
      v4_store_part(dz + i + j, m - j, vdz);
      v4_store_part(dos + i + j, m - j, vdos);
    }
    if (vminvq_u32(finite) == 0) fix_bwd(dz + i, dos + i, dout + i, z + i, o + i, e, elo, m);
  }
}

static void fwd_neon(float *out, const float *o, const float *z, int64_t n) {
  _Alignas(16) float e[ZG_NEON_CHUNK], elo[ZG_NEON_CHUNK];
  for (int64_t i = 0; i < n; i += ZG_NEON_CHUNK) {
    int64_t m = n - i < ZG_NEON_CHUNK ? n - i : ZG_NEON_CHUNK;
    exp_pass(e, elo, z + i, m);
    uint32x4_t finite = vdupq_n_u32(~0u);
    int64_t j = 0;
    for (; j + 4 <= m; j += 4) {
      float32x4_t vout = v4_fwd(vld1q_f32(o + i + j), vld1q_f32(z + i + j), vld1q_f32(e + j),
                                vld1q_f32(elo + j));
      finite = vandq_u32(finite, v4_finite(vout));
      vst1q_f32(out + i + j, vout);
    }
    if (j < m) {
      float32x4_t vout = v4_fwd(v4_load_part(o + i + j, m - j), v4_load_part(z + i + j, m - j),
                                vld1q_f32(e + j), vld1q_f32(elo + j));
      finite = vandq_u32(finite, v4_finite(vout));
      v4_store_part(out + i + j, m - j, vout);
    }
    if (vminvq_u32(finite) == 0) fix_fwd(out + i, o + i, z + i, e, elo, m);
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
    NULL, /* bwd16, fwd16: the float kernels serve 16-bit outputs too */
    NULL,
    {NULL, NULL, NULL}, /* no fused runs: staged */
    {NULL, NULL, NULL},
    NULL, /* stream_line: streaming is ignored (top of file) */
};

const zg_cpu_kernels *zg_cpu_kernels_neon(void) { return &neon_kernels; }
