/* The AVX-512 mapping for kernels_simd.c (F, BW, DQ, VL, plus FMA and F16C): 16 floats per
 * register. Inline wrappers only; the recipes live in kernels_simd.c. What only this ISA has
 * enters as hooks: rcp14 for 1/(1 + e) (VEC_HAS_AVX512: refined by the recipe's residual),
 * scalef for 2^k (one rounding, subnormal results included), VREDUCEPS for the 16-bit
 * recipe's exp, masked tails, and with AVX512_BF16 the bfloat16 narrowing of row kernels.
 *
 * bfloat16 staged stores use the exact integer round-to-nearest-even, not AVX512_BF16's
 * VCVTNEPS2BF16: that instruction treats subnormal inputs as zero and flushes subnormal
 * results (it ignores MXCSR and behaves as DAZ/FTZ; Intel SDM), so it is not the exact RNE
 * that zg_f32_to_bf16 defines. The bfloat16 row kernels use it where the CPU has it and send
 * every step with a subnormal, inf or NaN result through the integer rounding instead
 * (v2_st_run_bf16cvt). float16 uses VCVTPS2PH with the rounding mode in the immediate: it
 * ignores MXCSR.FTZ, so float16 subnormal results are exact. */
#ifndef ZGATE_VEC_AVX512_H
#define ZGATE_VEC_AVX512_H

#include <immintrin.h>

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || \
    !defined(__AVX512VL__) || !defined(__FMA__) || !defined(__F16C__)
#error "the avx512 instance of kernels_simd.c must be built with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma -mf16c"
#endif

typedef __m512 V;
typedef __m512i VI;
typedef struct { V a, b; } V2; /* 2*VL elements of a row kernel */
#define VL 16
#define VEC_ISA avx512
#define VEC_NAME "avx512"
#define VEC_CHUNK 128
#define VEC_HAS_OUT16 1
#define VEC_HAS_STREAM 1
#define VEC_HAS_AVX512 1
#define VEC_HAS_BF16CVT 1 /* a second table, chosen by dispatch on CPUs with AVX512_BF16 */

#define VEC_W 512
#include "vec_x86.h"

static inline V v_negabs(V a) {
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0x80000000u)));
}
static inline V v_abs(V a) { return _mm512_abs_ps(a); }
/* by the sign bit, on the integer pipes */
static inline V v_sel_neg(V z, V a, V b) {
  __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(z));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(neg, _mm512_castps_si512(b), _mm512_castps_si512(a)));
}
static inline unsigned v_lt_bits(V a, V b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
/* fpclass categories QNaN, +inf, -inf, SNaN */
static inline unsigned v_nonfinite_bits(V a) { return _mm512_fpclass_ps_mask(a, 0x99); }

/* ISA hooks of the recipes */
static inline V v_rcp14(V a) { return _mm512_rcp14_ps(a); }
static inline V v_recip(V d) { return v_rcp14(d); } /* within 2^-14: the recipe refines it */
static inline V v_scalef(V p, V k) { return _mm512_scalef_ps(p, k); }
static inline V v_reduce(V y) { /* y - round(y), exact */
  return _mm512_reduce_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* ---- memory ------------------------------------------------------------------------------ */

static inline __mmask16 v_mask(int64_t rem) { /* lanes [0, min(rem, 16)) */
  return rem >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rem) - 1u);
}
/* A whole vector by a plain load: a masked load with every lane set runs far slower than a
 * plain one on some CPUs (Zen 5). */
static inline V v_ld_part(const float *p, int64_t rem) {
  return rem >= VL ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(v_mask(rem), p);
}
static inline void v_st_part(float *p, int64_t rem, V a) { _mm512_mask_storeu_ps(p, v_mask(rem), a); }

static inline __m256i v_f16_bits(V x) { return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* Exact RNE to bfloat16, NaN kept quiet (zg_f32_to_bf16), packed to 16 bits. */
static inline __m256i v_bf16_bits(V x) {
  __m512i b = _mm512_castps_si512(x);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  __m512i rnd = _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  __mmask16 isnan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  rnd = _mm512_mask_mov_epi32(rnd, isnan, _mm512_or_si512(b, _mm512_set1_epi32(0x00400000)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(rnd, 16));
}
static inline V v_ld_h(int dt, const uint16_t *p) {
  __m256i h = _mm256_loadu_si256((const __m256i *)p);
  if (dt == ZG_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
static inline void v_st_h(int dt, uint16_t *p, V a, int nt) {
  __m256i w = dt == ZG_F16 ? v_f16_bits(a) : v_bf16_bits(a);
  if (nt) _mm256_stream_si256((__m256i *)p, w);
  else _mm256_storeu_si256((__m256i *)p, w);
}

/* Fused runs: 32 elements of a 16-bit dtype in one 512-bit access, as two vectors in an
 * order of their own: float16 by halves; bfloat16 split into the even elements (a, by a
 * shift) and the odd ones (b, by a mask), interleaved back when narrowed. */
static inline V2 v2_ld_run(int dt, const void *p) {
  V2 v;
  __m512i w = _mm512_loadu_si512(p);
  if (dt == ZG_BF16) {
    v.a = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    v.b = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)));
  } else {
    v.a = _mm512_cvtph_ps(_mm512_castsi512_si256(w));
    v.b = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w, 1));
  }
  return v;
}
/* RNE on the bits (x + 0x7fff + lsb), without the NaN case: a NaN here is the fix-up's
 * default NaN, whose low 16 bits are zero. */
static inline __m512i v_bf16_rne(V x) {
  __m512i b = _mm512_castps_si512(x);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  return _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb);
}
static inline void v_st512(void *p, __m512i w, int nt) {
  if (nt) _mm512_stream_si512(p, w);
  else _mm512_storeu_si512(p, w);
}
static inline void v2_st_run(int dt, void *p, V2 v, int nt) {
  __m512i w;
  if (dt == ZG_BF16)
    w = _mm512_or_si512(_mm512_srli_epi32(v_bf16_rne(v.a), 16),
                        _mm512_and_si512(v_bf16_rne(v.b), _mm512_set1_epi32((int)0xffff0000u)));
  else
    w = _mm512_inserti64x4(_mm512_castsi256_si512(v_f16_bits(v.a)), v_f16_bits(v.b), 1);
  v_st512(p, w, nt);
}

/* With AVX512_BF16: VCVTNE2PS2BF16 narrows 32 floats in one instruction, exact RNE for every
 * normal float32, zero and inf; a step with a NaN, inf or subnormal result (fpclass 0xb9)
 * takes the integer rounding instead. Same bits either way. A function attribute, not
 * #pragma GCC target: clang (the sanitizer build) ignores the pragma. */
#define VEC_TARGET_BF16 __attribute__((target("avx512bf16")))
VEC_TARGET_BF16 static inline void v2_st_run_bf16cvt(void *p, V2 v, int nt) {
  if (__builtin_expect((_mm512_fpclass_ps_mask(v.a, 0xb9) | _mm512_fpclass_ps_mask(v.b, 0xb9)) != 0, 0)) {
    v2_st_run(ZG_BF16, p, v, nt);
    return;
  }
  /* word 2j: even element j (the low half of the pair), word 2j+1: odd element j */
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  v_st512(p, _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(v.b, v.a)), nt);
}

#endif /* ZGATE_VEC_AVX512_H */
