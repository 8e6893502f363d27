/* The aarch64 NEON mapping for kernels_simd.c: 4 floats per register, ARMv8.0-A baseline
 * (no FP16 arithmetic, no BF16 extension), so it runs on every aarch64 CPU. Built with the
 * target's default flags. Every operation of the recipes is one IEEE-rounded add, sub, mul,
 * div or fma, as on AVX2, so a given input gives the same bits here as there.
 *
 * Floating-point environment: results assume the FPCR that Linux gives every process
 * (round to nearest even, FZ = FZ16 = 0 so subnormals are kept, DN = 0, AHP = 0 so float16
 * is IEEE binary16). Under it FCVTL (vcvt_f32_f16) widens exactly, subnormals included, and
 * quiets a signalling NaN; FCVTN (vcvt_f16_f32) rounds to nearest even, overflows to inf,
 * keeps a NaN's sign and top payload bits with the quiet bit set: both match gate_math.h's
 * conversions bit for bit (the native half conversion is this mapping's hook).
 * Non-temporal stores: none (VEC_HAS_STREAM 0; `streaming` is ignored). AArch64's only
 * non-temporal store is STNP, which ACLE exposes no intrinsic for. */
#ifndef ZGATE_VEC_NEON_H
#define ZGATE_VEC_NEON_H

#include <arm_neon.h>
#include <math.h>
#include <string.h>

#if !defined(__aarch64__) || !defined(__ARM_NEON)
#error "the neon instance of kernels_simd.c is for aarch64 only"
#endif

typedef float32x4_t V;
typedef int32x4_t VI;
#define VL 4
#define VEC_ISA neon
#define VEC_NAME "neon"
#define VEC_CHUNK 64
#define VEC_HAS_OUT16 0 /* float kernels only: 16-bit outputs take the accurate recipe */
#define VEC_HAS_STREAM 0
#define VEC_HAS_AVX512 0
#define VEC_HAS_BF16CVT 0

static inline V v_set1(float x) { return vdupq_n_f32(x); }
static inline V v_zero(void) { return vdupq_n_f32(0.0f); }
static inline V v_add(V a, V b) { return vaddq_f32(a, b); }
static inline V v_sub(V a, V b) { return vsubq_f32(a, b); }
static inline V v_mul(V a, V b) { return vmulq_f32(a, b); }
static inline V v_div(V a, V b) { return vdivq_f32(a, b); }
static inline V v_max(V a, V b) { return vmaxq_f32(a, b); } /* NaN when either is NaN */
static inline V v_recip(V d) { return vdivq_f32(vdupq_n_f32(1.0f), d); } /* correctly rounded */
static inline V v_fma(V a, V b, V c) { return vfmaq_f32(c, a, b); }
static inline V v_fnma(V a, V b, V c) { return vfmsq_f32(c, a, b); }
static inline V v_fms(V a, V b, V c) { return vfmaq_f32(vnegq_f32(c), a, b); }
static inline V v_negabs(V a) {
  return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(a), vdupq_n_u32(0x80000000u)));
}
static inline V v_abs(V a) { return vabsq_f32(a); }
static inline V v_sel_neg(V z, V a, V b) { return vbslq_f32(vcltzq_s32(vreinterpretq_s32_f32(z)), a, b); }
static inline unsigned v_lanes_bits(uint32x4_t m) {
  const uint32x4_t w = {1u, 2u, 4u, 8u};
  return vaddvq_u32(vandq_u32(m, w));
}
static inline unsigned v_lt_bits(V a, V b) { return v_lanes_bits(vcltq_f32(a, b)); }
/* |a| < inf is false exactly for inf and NaN */
static inline unsigned v_nonfinite_bits(V a) {
  return v_lanes_bits(vmvnq_u32(vcaltq_f32(a, vdupq_n_f32(INFINITY))));
}

static inline VI v_bits(V a) { return vreinterpretq_s32_f32(a); }
static inline V v_from_bits(VI a) { return vreinterpretq_f32_s32(a); }
static inline VI vi_set1(int x) { return vdupq_n_s32(x); }
static inline VI vi_add(VI a, VI b) { return vaddq_s32(a, b); }
static inline VI vi_sub(VI a, VI b) { return vsubq_s32(a, b); }
static inline VI vi_half(VI a) { return vshrq_n_s32(a, 1); }
static inline VI vi_exp_field(VI a) { return vshlq_n_s32(a, 23); }

/* ---- memory: tails through a zero-padded copy that never touches p[rem..VL) -------------- */

static inline V v_ld(const float *p) { return vld1q_f32(p); }
static inline void v_st(float *p, V a) { vst1q_f32(p, a); }
static inline void v_stream(float *p, V a) { vst1q_f32(p, a); }
static inline V v_ld_part(const float *p, int64_t rem) {
  if (rem >= VL) return vld1q_f32(p);
  float t[VL] = {0.0f, 0.0f, 0.0f, 0.0f};
  memcpy(t, p, (size_t)rem * sizeof(float));
  return vld1q_f32(t);
}
static inline void v_st_part(float *p, int64_t rem, V a) {
  if (rem >= VL) {
    vst1q_f32(p, a);
    return;
  }
  float t[VL];
  vst1q_f32(t, a);
  memcpy(p, t, (size_t)rem * sizeof(float));
}

static inline V v_ld_h(int dt, const uint16_t *p) {
  uint16x4_t h = vld1_u16(p);
  if (dt == ZG_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
  return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}
/* bfloat16: RNE on the bits, NaN kept quiet (zg_f32_to_bf16) */
static inline void v_st_h(int dt, uint16_t *p, V a, int nt) {
  (void)nt;
  if (dt == ZG_F16) {
    vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(a)));
    return;
  }
  uint32x4_t b = vreinterpretq_u32_f32(a);
  uint32x4_t bias = vaddq_u32(vdupq_n_u32(0x7fff), vandq_u32(vshrq_n_u32(b, 16), vdupq_n_u32(1)));
  uint16x4_t rnd = vaddhn_u32(b, bias);
  uint16x4_t qnan = vorr_u16(vshrn_n_u32(b, 16), vdup_n_u16(0x40));
  vst1_u16(p, vbsl_u16(vmovn_u32(vceqq_f32(a, a)), rnd, qnan));
}
static inline float v_h2f_1(uint16_t h) { return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0); }
static inline uint16_t v_f2h_1(float f) { return vget_lane_u16(vreinterpret_u16_f16(vcvt_f16_f32(vdupq_n_f32(f))), 0); }

#endif /* ZGATE_VEC_NEON_H */
