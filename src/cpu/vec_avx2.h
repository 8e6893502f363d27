/* The AVX2 + FMA + F16C mapping for kernels_simd.c: 8 floats per register. Inline wrappers
 * only; the recipes live in kernels_simd.c. Built with -mavx2 -mfma -mf16c. */
#ifndef ZGATE_VEC_AVX2_H
#define ZGATE_VEC_AVX2_H

#include <immintrin.h>

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "the avx2 instance of kernels_simd.c must be built with -mavx2 -mfma -mf16c"
#endif

typedef __m256 V;
typedef __m256i VI;
typedef struct { V a, b; } V2; /* 2*VL elements of a row kernel */
#define VL 8
#define VEC_ISA avx2
#define VEC_NAME "avx2"
#define VEC_CHUNK 64      /* elements per two-pass chunk (its exp buffers stay in L1) */
#define VEC_HAS_OUT16 1    /* the 16-bit recipe and the row kernels */
#define VEC_HAS_STREAM 1  /* non-temporal stores */
#define VEC_HAS_AVX512 0  /* rcp14, scalef, VREDUCEPS */
#define VEC_HAS_BF16CVT 0

#define VEC_W 256
#include "vec_x86.h"

static inline V v_recip(V d) { return v_div(v_set1(1.0f), d); } /* correctly rounded */
static inline V v_negabs(V a) { return _mm256_or_ps(a, _mm256_set1_ps(-0.0f)); }
static inline V v_abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
/* Lanes whose z has the sign bit set (negative, -0, negative NaN) take a, the others b. */
static inline V v_sel_neg(V z, V a, V b) { return _mm256_blendv_ps(b, a, z); }
static inline unsigned v_lt_bits(V a, V b) { return (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
/* Lanes that are inf or NaN (x*0 is NaN exactly then). */
static inline unsigned v_nonfinite_bits(V a) {
  V t = _mm256_mul_ps(a, _mm256_setzero_ps());
  return (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(t, t, _CMP_UNORD_Q));
}

static inline VI v_bits(V a) { return _mm256_castps_si256(a); }
static inline V v_from_bits(VI a) { return _mm256_castsi256_ps(a); }
static inline VI vi_set1(int x) { return _mm256_set1_epi32(x); }
static inline VI vi_add(VI a, VI b) { return _mm256_add_epi32(a, b); }
static inline VI vi_sub(VI a, VI b) { return _mm256_sub_epi32(a, b); }
static inline VI vi_half(VI a) { return _mm256_srai_epi32(a, 1); } /* floor(a / 2) */
static inline VI vi_exp_field(VI a) { return _mm256_slli_epi32(a, 23); }

/* ---- memory ------------------------------------------------------------------------------ */

static inline __m256i v_tail_mask(int64_t n) { /* lanes [0, n) for 0 < n < 8 */
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* Up to VL floats: a full access, or a masked one that never touches p[rem..VL). */
static inline V v_ld_part(const float *p, int64_t rem) {
  return rem >= VL ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, v_tail_mask(rem));
}
static inline void v_st_part(float *p, int64_t rem, V a) {
  if (rem >= VL) _mm256_storeu_ps(p, a);
  else _mm256_maskstore_ps(p, v_tail_mask(rem), a);
}

/* Exact RNE to bfloat16 in the low half of each lane; NaN kept quiet (zg_f32_to_bf16). */
static inline __m256i v_bf16_bits(V x) {
  __m256i b = _mm256_castps_si256(x);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  __m256i rnd = _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  __m256i qnan = _mm256_or_si256(b, _mm256_set1_epi32(0x00400000));
  __m256i isnan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_srli_epi32(_mm256_blendv_epi8(rnd, qnan, isnan), 16);
}
static inline __m128i v_f16_bits(V x) { return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT); }

/* VL 16-bit elements of dtype dt (ZG_F16 or ZG_BF16) in order, widened / narrowed. */
static inline V v_ld_h(int dt, const uint16_t *p) {
  __m128i h = _mm_loadu_si128((const __m128i *)p);
  if (dt == ZG_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline void v_st_h(int dt, uint16_t *p, V a, int nt) {
  __m128i w = dt == ZG_F16 ? v_f16_bits(a)
                           : _mm256_castsi256_si128(_mm256_permute4x64_epi64(
                                 _mm256_packus_epi32(v_bf16_bits(a), v_bf16_bits(a)), 0x08));
  if (nt) _mm_stream_si128((__m128i *)p, w);
  else _mm_storeu_si128((__m128i *)p, w);
}

/* Fused runs: 2*VL elements of a 16-bit dtype as two vectors, in an order of their own.
 * bfloat16 widens by unpacking with zero within each 128-bit lane (elements 0-3 and 8-11 in
 * the first vector, 4-7 and 12-15 in the second) and narrows by the inverse pack; the math
 * is elementwise and every tensor goes through the same permutation. */
static inline V2 v2_ld_run(int dt, const void *p) {
  V2 v;
  if (dt == ZG_BF16) {
    __m256i w = _mm256_loadu_si256((const __m256i *)p);
    v.a = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), w));
    v.b = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), w));
  } else {
    v.a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    v.b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p + 1));
  }
  return v;
}
/* RNE to bfloat16 in the high half of each lane, without the NaN case: a NaN here is the
 * fix-up's default NaN (low 16 bits zero, nothing carries). */
static inline __m256i v_bf16_hi(V x) {
  __m256i b = _mm256_castps_si256(x);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb), 16);
}
static inline void v2_st_run(int dt, void *p, V2 v, int nt) {
  __m256i w = dt == ZG_BF16 ? _mm256_packus_epi32(v_bf16_hi(v.a), v_bf16_hi(v.b))
                            : _mm256_set_m128i(v_f16_bits(v.b), v_f16_bits(v.a));
  if (nt) _mm256_stream_si256((__m256i *)p, w);
  else _mm256_storeu_si256((__m256i *)p, w);
}

#endif /* ZGATE_VEC_AVX2_H */
