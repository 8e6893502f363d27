/* The AVX2 + FMA + F16C path: 8 floats per register.
 * Built with -mavx2 -mfma -mf16c (src/CMakeLists.txt); only zg_cpu_kernels_avx2 is visible.
 * Every element of the math goes through the same vector code (tails use masked loads and
 * stores, or a small buffer in the fused runs), so a result never depends on where a block
 * starts or ends: any thread count gives the same bits. Both recipes are documented in
 * simd_exp.h: the accurate one for float32 outputs (bwd, fwd, the float32 fused runs; NEON
 * gives the same bits), the cheap one when every output is 16-bit (bwd16, fwd16 and the
 * float16/bfloat16 fused runs). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../gate_math.h"
#include "cpu_kernels.h"
#include "simd_exp.h"

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "kernels_avx2.c must be built with -mavx2 -mfma -mf16c"
#endif

/* ---- register-level math --------------------------------------------------------------- */

/* p + plo = exp(r) for |r| <= ln2/2 (plus a rounding), given k: steps 3-4 of simd_exp.h.
 * p is the rounded result; plo its rounding error (Fast2Sum), for callers that carry it. */
static inline __m256 v8_exp_core(__m256 x, __m256 k, __m256 *plo) {
  __m256 r1 = _mm256_fnmadd_ps(k, _mm256_set1_ps(ZG_EXP_LN2_HI), x); /* exact */
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(ZG_EXP_LN2_LO), r1);
  __m256 c = _mm256_fnmadd_ps(k, _mm256_set1_ps(ZG_EXP_LN2_LO), _mm256_sub_ps(r1, r)); /* r's rounding */
  /* Q by Estrin: a short dependency chain (the out-of-order window limits this loop) */
  __m256 r2 = _mm256_mul_ps(r, r);
  __m256 q01 = _mm256_fmadd_ps(_mm256_set1_ps(ZG_EXP_Q1), r, _mm256_set1_ps(ZG_EXP_Q0));
  __m256 q23 = _mm256_fmadd_ps(_mm256_set1_ps(ZG_EXP_Q3), r, _mm256_set1_ps(ZG_EXP_Q2));
  __m256 q45 = _mm256_fmadd_ps(_mm256_set1_ps(ZG_EXP_Q5), r, _mm256_set1_ps(ZG_EXP_Q4));
  __m256 q = _mm256_fmadd_ps(_mm256_mul_ps(r2, r2), q45, _mm256_fmadd_ps(r2, q23, q01));
  /* p = (1 + r) + (r^2 q + c), with 1 + r split exactly (Fast2Sum) so p rounds once */
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 hi = _mm256_add_ps(one, r);
  __m256 lo = _mm256_add_ps(_mm256_sub_ps(one, hi), r);
  __m256 u = _mm256_add_ps(_mm256_fmadd_ps(r2, q, c), lo);
  __m256 p = _mm256_add_ps(hi, u);
  *plo = _mm256_add_ps(_mm256_sub_ps(hi, p), u);
  return p;
}

/* e + elo = exp(x) for x <= 0 or NaN. e alone: max 0.69 ulp (0.78 for subnormal results),
 * simd_exp.h; elo carries p's rounding error (exact for normal results).
 * k comes from the shifter trick: j = x*log2(e) + 1.5*2^23 holds round(x*log2(e)) in its
 * low mantissa bits. Vectors whose results are all normal (x >= -87, the common case) take
 * one scale; others split 2^k in two (step 5). Both give the same bits where both apply. */
static inline __m256 v8_exp_neg(__m256 x, __m256 *elo) {
  const __m256 shifter = _mm256_set1_ps(0x1.8p23f);
  __m256 plo;
  if (_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ)) == 0) {
    __m256 j = _mm256_fmadd_ps(x, _mm256_set1_ps(ZG_EXP_LOG2E), shifter);
    __m256 p = v8_exp_core(x, _mm256_sub_ps(j, shifter), &plo);
    /* the low bits of j are 2^22 + k; shifting left by 23 drops 2^22 and leaves k */
    __m256 sc = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_castps_si256(j), _mm256_set1_epi32(127)), 23));
    *elo = _mm256_mul_ps(plo, sc);
    return _mm256_mul_ps(p, sc); /* NaN: p is NaN */
  }
  /* max(lo, x) returns its second operand when either is NaN: NaN passes through */
  x = _mm256_max_ps(_mm256_set1_ps(ZG_EXP_LO), x);
  __m256 j = _mm256_fmadd_ps(x, _mm256_set1_ps(ZG_EXP_LOG2E), shifter);
  __m256 p = v8_exp_core(x, _mm256_sub_ps(j, shifter), &plo);
  __m256i k = _mm256_sub_epi32(_mm256_castps_si256(j), _mm256_castps_si256(shifter));
  __m256i k1 = _mm256_srai_epi32(k, 1); /* floor(k / 2) */
  __m256i k2 = _mm256_sub_epi32(k, k1);
  const __m256i bias = _mm256_set1_epi32(127);
  __m256 sc1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  __m256 sc2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  *elo = _mm256_mul_ps(_mm256_mul_ps(plo, sc1), sc2); /* 0 once e is subnormal: fine */
  return _mm256_mul_ps(_mm256_mul_ps(p, sc1), sc2);
}

/* s = sigmoid(z) and oms = 1 - s from e + elo = exp(-|z|), each within about 0.5 ulp,
 * without cancellation (simd_exp.h): r = 1/(1 + E) and E*r with E = e + elo, each a
 * rounded leading term plus an fma-computed correction, so each is rounded once. */
static inline void v8_sigmoid_pair(__m256 z, __m256 e, __m256 elo, __m256 *s, __m256 *oms) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 d = _mm256_add_ps(one, e);
  __m256 dlo = _mm256_add_ps(_mm256_sub_ps(e, _mm256_sub_ps(d, one)), elo); /* 1+E = d+dlo */
  __m256 r = _mm256_div_ps(one, d);
  /* res = 1 - r*(d + dlo): r*(1 + res) = 1/(1+E) to second order */
  __m256 res = _mm256_fnmadd_ps(r, dlo, _mm256_fnmadd_ps(r, d, one));
  __m256 er = _mm256_mul_ps(e, r);
  __m256 erlo = _mm256_fmadd_ps(elo, r, _mm256_fmsub_ps(e, r, er)); /* E*r - er */
  __m256 r_c = _mm256_fmadd_ps(r, res, r);
  __m256 er_c = _mm256_add_ps(er, _mm256_fmadd_ps(er, res, erlo));
  /* blendv picks by the sign bit: z < 0 (and -0, where both choices are 1/2) takes e*r */
  *s = _mm256_blendv_ps(r_c, er_c, z);
  *oms = _mm256_blendv_ps(er_c, r_c, z);
}

/* Lanes whose results came out inf or NaN: redone in double from the same s and 1 - s,
 * with gate_math.h's grouping. A float32 intermediate can overflow where the float64
 * formula does not (dout*z = inf times s = 0 gives NaN, not 0), and inf/NaN inputs must
 * give what the float64 formula gives. Rare, so out of line (and by value, so the hot path
 * keeps its registers); the same in every x86 path. which: 0 dz, 1 dout_scaled, 2 fwd out. */
__attribute__((noinline, cold)) static __m256 v8_fix_lanes(int which, __m256 v, __m256 dout,
                                                           __m256 z, __m256 o, __m256 s,
                                                           __m256 oms) {
  float vv[8], vd[8], vz[8], vo[8], vs[8], voms[8];
  _mm256_storeu_ps(vv, v);
  _mm256_storeu_ps(vd, dout);
  _mm256_storeu_ps(vz, z);
  _mm256_storeu_ps(vo, o);
  _mm256_storeu_ps(vs, s);
  _mm256_storeu_ps(voms, oms);
  for (int j = 0; j < 8; j++) {
    if (isfinite(vv[j])) continue;
    double zd = vz[j], sd = vs[j];
    if (which == 0)
      vv[j] = (float)(((double)vd[j] * vo[j]) * (sd * (1.0 + zd * (double)voms[j])));
    else if (which == 1)
      vv[j] = (float)(((double)vd[j] * zd) * sd);
    else
      vv[j] = (float)(((double)vo[j] * zd) * sd);
    /* NaN as the default quiet NaN (sign kept): the fused bfloat16 narrowing relies on a
     * NaN's low 16 bits being zero */
    if (isnan(vv[j])) vv[j] = signbit(vv[j]) ? -NAN : NAN;
  }
  return _mm256_loadu_ps(vv);
}

/* Any lane of v inf or NaN? (x*0 is NaN exactly then; a + b can only add false alarms.) */
static inline int v8_any_nonfinite(__m256 v) {
  __m256 t = _mm256_mul_ps(v, _mm256_setzero_ps());
  return _mm256_movemask_ps(_mm256_cmp_ps(t, t, _CMP_UNORD_Q)) != 0;
}

/* dz = (dout*o) * h, h = s*(1 + z*(1-s)), dos = (dout*z)*s: gate_math.h's grouping. dout*o
 * is carried with its rounding error (fma), taking one rounding out of dz; h is formed as
 * s + (s*z)*(1-s), rounded once where 1 + z*(1-s) then *s would round twice (a full ulp
 * near z = 0). With fix = 0 the results are only flagged: *flag turns NaN when a lane came
 * out inf or NaN (x*0 is NaN exactly then), and the caller redoes the chunk with fix = 1,
 * where such lanes go to v8_fix_lanes. One flag per chunk instead of a test per vector. */
static inline void v8_bwd(__m256 dout, __m256 z, __m256 o, __m256 e, __m256 elo, __m256 *dz,
                          __m256 *dos, __m256 *flag, int fix) {
  __m256 s, oms;
  v8_sigmoid_pair(z, e, elo, &s, &oms);
  __m256 h = _mm256_fmadd_ps(_mm256_mul_ps(s, z), oms, s);
  __m256 a = _mm256_mul_ps(dout, o);
  __m256 alo = _mm256_fmsub_ps(dout, o, a);
  __m256 vdz = _mm256_fmadd_ps(a, h, _mm256_mul_ps(alo, h));
  __m256 vdos = _mm256_mul_ps(_mm256_mul_ps(dout, z), s);
  if (!fix) {
    *flag = _mm256_fmadd_ps(_mm256_add_ps(vdz, vdos), _mm256_setzero_ps(), *flag);
  } else if (v8_any_nonfinite(_mm256_add_ps(vdz, vdos))) {
    vdz = v8_fix_lanes(0, vdz, dout, z, o, s, oms);
    vdos = v8_fix_lanes(1, vdos, dout, z, o, s, oms);
  }
  *dz = vdz;
  *dos = vdos;
}

static inline __m256 v8_fwd(__m256 o, __m256 z, __m256 e, __m256 elo, __m256 *flag, int fix) {
  __m256 s, oms;
  v8_sigmoid_pair(z, e, elo, &s, &oms);
  __m256 out = _mm256_mul_ps(_mm256_mul_ps(o, z), s);
  if (!fix)
    *flag = _mm256_fmadd_ps(out, _mm256_setzero_ps(), *flag);
  else if (v8_any_nonfinite(out))
    out = v8_fix_lanes(2, out, o, z, o, s, oms);
  return out;
}

/* Lanes [0, n) set, for 0 < n < 8. */
static inline __m256i v8_tail_mask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* ---- float-array kernels ---------------------------------------------------------------- */

/* Up to 8 floats from p: a full load, or a masked one that never touches p[rem..8). */
static inline __m256 v8_load_part(const float *p, int64_t rem) {
  return rem >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, v8_tail_mask(rem));
}
static inline void v8_store_part(float *p, int64_t rem, __m256 v) {
  if (rem >= 8) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, v8_tail_mask(rem), v);
}

/* The math runs in two passes over chunks of ZG_AVX2_CHUNK elements: exp first, into a
 * small buffer, then the rest. One pass chains ~90 cycles of latency per vector and the
 * out-of-order window cannot overlap enough vectors to hide it; two shorter chains run
 * about 1.6x faster (docs/perf-notes.md). */
#define ZG_AVX2_CHUNK 64 /* 64..512 measured the same (perf-notes) */

static inline void exp_pass(float *e, float *elo, const float *z, int64_t m) {
  for (int64_t j = 0; j < m; j += 8) {
    __m256 lo;
    __m256 v = v8_exp_neg(_mm256_or_ps(v8_load_part(z + j, m - j), _mm256_set1_ps(-0.0f)), &lo);
    _mm256_store_ps(e + j, v);
    _mm256_store_ps(elo + j, lo);
  }
}

/* The product pass over one chunk; returns the inf/NaN flag (NaN when any lane needs the
 * fix-up; only meaningful with fix = 0). */
static inline __m256 bwd_chunk(float *dz, float *dos, const float *dout, const float *z,
                               const float *o, const float *e, const float *elo, int64_t m,
                               int fix) {
  __m256 flag = _mm256_setzero_ps();
  for (int64_t j = 0; j < m; j += 8) {
    __m256 vdz, vdos;
    v8_bwd(v8_load_part(dout + j, m - j), v8_load_part(z + j, m - j), v8_load_part(o + j, m - j),
           _mm256_load_ps(e + j), _mm256_load_ps(elo + j), &vdz, &vdos, &flag, fix);
    v8_store_part(dz + j, m - j, vdz);
    v8_store_part(dos + j, m - j, vdos);
  }
  return flag;
}

static void bwd_avx2(float *dz, float *dos, const float *dout, const float *z, const float *o,
                     int64_t n) {
  _Alignas(32) float e[ZG_AVX2_CHUNK], elo[ZG_AVX2_CHUNK];
  for (int64_t i = 0; i < n; i += ZG_AVX2_CHUNK) {
    int64_t m = n - i < ZG_AVX2_CHUNK ? n - i : ZG_AVX2_CHUNK;
    exp_pass(e, elo, z + i, m);
    __m256 flag = bwd_chunk(dz + i, dos + i, dout + i, z + i, o + i, e, elo, m, 0);
    if (v8_any_nonfinite(flag)) bwd_chunk(dz + i, dos + i, dout + i, z + i, o + i, e, elo, m, 1);
  }
}

static inline __m256 fwd_chunk(float *out, const float *o, const float *z, const float *e,
                               const float *elo, int64_t m, int fix) {
  __m256 flag = _mm256_setzero_ps();
  for (int64_t j = 0; j < m; j += 8)
    v8_store_part(out + j, m - j,
                  v8_fwd(v8_load_part(o + j, m - j), v8_load_part(z + j, m - j),
                         _mm256_load_ps(e + j), _mm256_load_ps(elo + j), &flag, fix));
  return flag;
}

static void fwd_avx2(float *out, const float *o, const float *z, int64_t n) {
  _Alignas(32) float e[ZG_AVX2_CHUNK], elo[ZG_AVX2_CHUNK];
  for (int64_t i = 0; i < n; i += ZG_AVX2_CHUNK) {
    int64_t m = n - i < ZG_AVX2_CHUNK ? n - i : ZG_AVX2_CHUNK;
    exp_pass(e, elo, z + i, m);
    if (v8_any_nonfinite(fwd_chunk(out + i, o + i, z + i, e, elo, m, 0)))
      fwd_chunk(out + i, o + i, z + i, e, elo, m, 1);
  }
}

/* ---- loads: widen to float --------------------------------------------------------------- */

static void load_f32(float *dst, const void *src, int64_t n, int64_t stride) {
  const float *s = (const float *)src;
  int64_t i = 0;
  if (stride == 1) {
    for (; i + 16 <= n; i += 16) {
      _mm256_storeu_ps(dst + i, _mm256_loadu_ps(s + i));
      _mm256_storeu_ps(dst + i + 8, _mm256_loadu_ps(s + i + 8));
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_loadu_ps(s + i));
    if (i < n) {
      __m256i m = v8_tail_mask(n - i);
      _mm256_maskstore_ps(dst + i, m, _mm256_maskload_ps(s + i, m));
    }
    return;
  }
  for (; i < n; i++) dst[i] = s[i * stride];
}

static void load_f16(float *dst, const void *src, int64_t n, int64_t stride) {
  const uint16_t *s = (const uint16_t *)src;
  int64_t i = 0;
  if (stride == 1)
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
  for (; i < n; i++) dst[i] = _cvtsh_ss(s[i * stride]);
}

static void load_bf16(float *dst, const void *src, int64_t n, int64_t stride) {
  const uint16_t *s = (const uint16_t *)src;
  int64_t i = 0;
  if (stride == 1) {
    /* 16 at a time: put qwords in order 0 2 1 3, then interleaving zeros below each 16-bit
     * value (per 128-bit lane) gives elements 0-7 and 8-15 already shifted into place */
    const __m256i zero = _mm256_setzero_si256();
    for (; i + 16 <= n; i += 16) {
      __m256i w = _mm256_permute4x64_epi64(_mm256_loadu_si256((const __m256i *)(s + i)), 0xd8);
      _mm256_storeu_si256((__m256i *)(dst + i), _mm256_unpacklo_epi16(zero, w));
      _mm256_storeu_si256((__m256i *)(dst + i + 8), _mm256_unpackhi_epi16(zero, w));
    }
    for (; i + 8 <= n; i += 8) {
      __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i)));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
  }
  for (; i < n; i++) dst[i] = zg_bf16_to_f32(s[i * stride]);
}

/* ---- stores: narrow with round-to-nearest-even ------------------------------------------ */
/* No fence here: cpu_loop.c issues one sfence per thread after its last store of the call
 * (cpu_kernels.h). An sfence per 512-element store halved single-thread NT write speed. */

/* Elements to store normally before dst + head is 64-byte aligned (a whole cache line per
 * run of non-temporal stores, so write-combining flushes full lines). */
static inline int64_t head_to_line(const void *dst, int64_t elem_size, int64_t n) {
  int64_t h = (int64_t)((64u - ((uintptr_t)dst & 63u)) & 63u) / elem_size;
  return h < n ? h : n;
}

static inline __m128i v8_to_f16(__m256 x) { return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT); }

/* Exact RNE to bfloat16 on the bits, left in the low 16 bits of each 32-bit lane; NaN kept
 * quiet (same as zg_f32_to_bf16). */
static inline __m256i v8_bf16_bits(__m256 x) {
  __m256i b = _mm256_castps_si256(x);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  __m256i rnd = _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  __m256i qnan = _mm256_or_si256(b, _mm256_set1_epi32(0x00400000));
  __m256i isnan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_srli_epi32(_mm256_blendv_epi8(rnd, qnan, isnan), 16);
}

static inline __m128i v8_to_bf16(__m256 x) {
  __m256i h = v8_bf16_bits(x);
  /* packus works per 128-bit lane: gather qwords 0 and 2 into the low half */
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08));
}

/* 16 floats to 16 bfloat16 in order: one pack and one qword permute for both halves. */
static inline __m256i v16_to_bf16_avx2(const float *src) {
  __m256i lo = v8_bf16_bits(_mm256_loadu_ps(src)), hi = v8_bf16_bits(_mm256_loadu_ps(src + 8));
  return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
}

static void store_f32(void *dst, const float *src, int64_t n, int64_t stride, int streaming) {
  float *d = (float *)dst;
  int64_t i = 0;
  if (stride != 1) {
    for (; i < n; i++) d[i * stride] = src[i];
    return;
  }
  if (streaming) {
    for (int64_t h = head_to_line(d, 4, n); i < h; i++) d[i] = src[i];
    for (; i + 16 <= n; i += 16) {
      _mm256_stream_ps(d + i, _mm256_loadu_ps(src + i));
      _mm256_stream_ps(d + i + 8, _mm256_loadu_ps(src + i + 8));
    }
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_loadu_ps(src + i));
  if (i < n) {
    __m256i m = v8_tail_mask(n - i);
    _mm256_maskstore_ps(d + i, m, _mm256_maskload_ps(src + i, m));
  }
}

static void store_f16(void *dst, const float *src, int64_t n, int64_t stride, int streaming) {
  uint16_t *d = (uint16_t *)dst;
  int64_t i = 0;
  if (stride != 1) {
    for (; i < n; i++) d[i * stride] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
    return;
  }
  if (streaming) {
    for (int64_t h = head_to_line(d, 2, n); i < h; i++) d[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
    for (; i + 16 <= n; i += 16) {
      __m128i lo = v8_to_f16(_mm256_loadu_ps(src + i));
      __m128i hi = v8_to_f16(_mm256_loadu_ps(src + i + 8));
      _mm256_stream_si256((__m256i *)(d + i), _mm256_set_m128i(hi, lo));
    }
  }
  for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i *)(d + i), v8_to_f16(_mm256_loadu_ps(src + i)));
  for (; i < n; i++) d[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

static void store_bf16(void *dst, const float *src, int64_t n, int64_t stride, int streaming) {
  uint16_t *d = (uint16_t *)dst;
  int64_t i = 0;
  if (stride != 1) {
    for (; i < n; i++) d[i * stride] = zg_f32_to_bf16(src[i]);
    return;
  }
  if (streaming) {
    for (int64_t h = head_to_line(d, 2, n); i < h; i++) d[i] = zg_f32_to_bf16(src[i]);
    for (; i + 16 <= n; i += 16) _mm256_stream_si256((__m256i *)(d + i), v16_to_bf16_avx2(src + i));
  }
  for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(d + i), v16_to_bf16_avx2(src + i));
  for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i *)(d + i), v8_to_bf16(_mm256_loadu_ps(src + i)));
  for (; i < n; i++) d[i] = zg_f32_to_bf16(src[i]);
}

/* ---- the fast recipe (simd_exp.h, "fast recipe"): problems with 16-bit outputs only ---- */

/* exp(-|z|) (NaN for NaN), within ~1.7e-7 relative for normal results: Cody-Waite, the
 * degree-5 polynomial F, 2^k as in v8_exp_neg. */
static inline __m256 v8_exp_fast(__m256 z) {
  const __m256 shifter = _mm256_set1_ps(0x1.8p23f);
  __m256 x = _mm256_max_ps(_mm256_set1_ps(ZG_EXP_LO), _mm256_or_ps(z, _mm256_set1_ps(-0.0f)));
  __m256 j = _mm256_fmadd_ps(x, _mm256_set1_ps(ZG_EXP_LOG2E), shifter);
  __m256 k = _mm256_sub_ps(j, shifter);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(ZG_EXP_LN2_HI), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(ZG_EXP_LN2_LO), r);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(ZG_EXP_F5), r, _mm256_set1_ps(ZG_EXP_F4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ZG_EXP_F3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ZG_EXP_F2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ZG_EXP_F1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  if (_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ)) == 0)
    return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(
                                _mm256_add_epi32(_mm256_castps_si256(j), _mm256_set1_epi32(127)), 23)));
  __m256i ki = _mm256_sub_epi32(_mm256_castps_si256(j), _mm256_castps_si256(shifter));
  __m256i k1 = _mm256_srai_epi32(ki, 1);
  __m256i k2 = _mm256_sub_epi32(ki, k1);
  const __m256i bias = _mm256_set1_epi32(127);
  __m256 sc1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  __m256 sc2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, sc1), sc2);
}

/* s, 1 - s and t = 1 + z(1 - s): r = 1/(1 + E) by a division (the divider is its own unit
 * and one divide per 8 elements keeps it far from busy; the rcp estimate plus one Newton
 * step left 1/2 two ulp short of 0.5 at z = 0, where test_special wants dz = dout*o*s
 * exact), t = (d + z w) r with w = 1 for z < 0, E for z >= 0 (simd_exp.h: at the root only
 * d's rounding and E's error reach t; r's error scales it). */
static inline void v8_gate_fast(__m256 z, __m256 *s, __m256 *oms, __m256 *t) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 e = v8_exp_fast(z);
  __m256 d = _mm256_add_ps(one, e);
  __m256 r = _mm256_div_ps(one, d);
  __m256 er = _mm256_mul_ps(e, r);
  *s = _mm256_blendv_ps(r, er, z);
  *oms = _mm256_blendv_ps(er, r, z);
  *t = _mm256_mul_ps(_mm256_fmadd_ps(z, _mm256_blendv_ps(e, one, z), d), r);
}

/* The fast recipe's cold path, as kernels_avx512.c's v16_fast_fix: lanes whose bit is set
 * in `lanes` get gate_math.h's float64 formula, rounded once to float (NaN as the default
 * quiet NaN). which: 0 bwd, 1 fwd (dout unused, *dos untouched). */
__attribute__((noinline, cold)) static void v8_fast_fix(int which, int lanes, __m256 dout, __m256 z,
                                                        __m256 o, __m256 *dz, __m256 *dos) {
  float vdz[8], vdos[8], vd[8], vz[8], vo[8];
  _mm256_storeu_ps(vdz, *dz);
  _mm256_storeu_ps(vdos, *dos);
  _mm256_storeu_ps(vd, dout);
  _mm256_storeu_ps(vz, z);
  _mm256_storeu_ps(vo, o);
  for (int j = 0; j < 8; j++) {
    if (!((lanes >> j) & 1)) continue;
    double a, b = 0;
    if (which == 0) zg_gate_bwd_f64(vd[j], vz[j], vo[j], &a, &b);
    else a = zg_gate_fwd_f64(vo[j], vz[j]);
    vdz[j] = isnan(a) ? (signbit(a) ? -NAN : NAN) : (float)a;
    vdos[j] = isnan(b) ? (signbit(b) ? -NAN : NAN) : (float)b;
  }
  *dz = _mm256_loadu_ps(vdz);
  if (which == 0) *dos = _mm256_loadu_ps(vdos);
}

/* Lanes for v8_fast_fix: an inf or NaN in res (x*0 is NaN exactly then), and with root = 1
 * |t| < 2^-6 (kernels_avx512.c's v16_fast_bad says why; bfloat16 runs skip it). */
static inline int v8_fast_bad(int root, __m256 res, __m256 t) {
  __m256 nf = _mm256_mul_ps(res, _mm256_setzero_ps());
  __m256 bad = _mm256_cmp_ps(nf, nf, _CMP_UNORD_Q);
  if (root) {
    __m256 at = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), t);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(at, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ));
  }
  return _mm256_movemask_ps(bad);
}

/* dz = (dout*o) * (s*t), dos = (dout*z) * s; root: see v8_fast_bad. */
static inline __attribute__((always_inline)) void v8_bwd_fast(int root, __m256 dout, __m256 z,
                                                              __m256 o, __m256 *dz, __m256 *dos) {
  __m256 s, oms, t;
  v8_gate_fast(z, &s, &oms, &t);
  __m256 vdz = _mm256_mul_ps(_mm256_mul_ps(dout, o), _mm256_mul_ps(s, t));
  __m256 vdos = _mm256_mul_ps(_mm256_mul_ps(dout, z), s);
  int bad = v8_fast_bad(root, _mm256_add_ps(vdz, vdos), t);
  if (__builtin_expect(bad != 0, 0)) v8_fast_fix(0, bad, dout, z, o, &vdz, &vdos);
  *dz = vdz;
  *dos = vdos;
}

static inline __m256 v8_fwd_fast(__m256 o, __m256 z) {
  __m256 s, oms, t;
  v8_gate_fast(z, &s, &oms, &t);
  __m256 out = _mm256_mul_ps(_mm256_mul_ps(o, z), s), unused = out;
  int bad = v8_fast_bad(0, out, t);
  if (__builtin_expect(bad != 0, 0)) v8_fast_fix(1, bad, o, z, o, &out, &unused);
  return out;
}

/* Staged float kernels with the fast recipe (table entries bwd16 / fwd16). */
static void bwd16_avx2(float *dz, float *dos, const float *dout, const float *z, const float *o,
                       int64_t n) {
  for (int64_t j = 0; j < n; j += 8) {
    __m256 vdz, vdos;
    v8_bwd_fast(1, v8_load_part(dout + j, n - j), v8_load_part(z + j, n - j), v8_load_part(o + j, n - j),
                &vdz, &vdos);
    v8_store_part(dz + j, n - j, vdz);
    v8_store_part(dos + j, n - j, vdos);
  }
}

static void fwd16_avx2(float *out, const float *o, const float *z, int64_t n) {
  for (int64_t j = 0; j < n; j += 8)
    v8_store_part(out + j, n - j, v8_fwd_fast(v8_load_part(o + j, n - j), v8_load_part(z + j, n - j)));
}

/* ---- fused runs (cpu_kernels.h zg_bwd_run_fn): 16 elements per step ---------------------
 * bfloat16 widens by unpacking with zero within each 128-bit lane (elements 0-3 and 8-11 in
 * the first vector, 4-7 and 12-15 in the second) and narrows by the inverse pack; the math
 * is elementwise and every tensor goes through the same permutation. float16 converts the
 * two 128-bit halves, float32 is two plain vectors. A head before the outputs' cache-line
 * alignment and the tail go through a 16-element buffer and the same code. */

typedef struct { __m256 a, b; } v16f;

static inline __attribute__((always_inline)) v16f ld16(int dt, const void *p) {
  v16f v;
  if (dt == ZG_F32) {
    v.a = _mm256_loadu_ps((const float *)p);
    v.b = _mm256_loadu_ps((const float *)p + 8);
  } else if (dt == ZG_BF16) {
    __m256i w = _mm256_loadu_si256((const __m256i *)p);
    v.a = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), w));
    v.b = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), w));
  } else {
    v.a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    v.b = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p + 1));
  }
  return v;
}

/* RNE to bfloat16 in the high half of each lane, without zg_f32_to_bf16's NaN case: a NaN
 * here is a quieted bfloat16 input (low 16 bits zero, nothing carries) or one that
 * v8_fix_lanes made the default quiet NaN. */
static inline __m256i v8_bf16_hi(__m256 x) {
  __m256i b = _mm256_castps_si256(x);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), lsb), 16);
}

static inline __attribute__((always_inline)) void st16(int dt, void *p, v16f v, int nt) {
  if (dt == ZG_F32) {
    if (nt) {
      _mm256_stream_ps((float *)p, v.a);
      _mm256_stream_ps((float *)p + 8, v.b);
    } else {
      _mm256_storeu_ps((float *)p, v.a);
      _mm256_storeu_ps((float *)p + 8, v.b);
    }
    return;
  }
  __m256i w = dt == ZG_BF16 ? _mm256_packus_epi32(v8_bf16_hi(v.a), v8_bf16_hi(v.b))
                            : _mm256_set_m128i(v8_to_f16(v.b), v8_to_f16(v.a));
  if (nt) _mm256_stream_si256((__m256i *)p, w);
  else _mm256_storeu_si256((__m256i *)p, w);
}

static inline int line_aligned(const void *p) { return ((uintptr_t)p & 63u) == 0; }
/* The head of a backward run: up to the line of dz when it streams, else of dout_scaled. */
static inline int64_t stream_head(int streaming, const void *dz, const void *dos, int64_t es, int64_t n) {
  return streaming ? head_to_line(streaming & 1 ? dz : dos, es, n) : 0;
}

/* One step of the bwd run: 16 elements at byte offset i*es of each tensor. */
static inline __attribute__((always_inline)) void bwd_step_fast(int dt, char *dz, char *dos,
                                                                const char *dout, const char *z,
                                                                const char *o, int nt0, int nt1) {
  v16f d = ld16(dt, dout), zz = ld16(dt, z), oo = ld16(dt, o), rdz, rdos;
  v8_bwd_fast(dt != ZG_BF16, d.a, zz.a, oo.a, &rdz.a, &rdos.a);
  v8_bwd_fast(dt != ZG_BF16, d.b, zz.b, oo.b, &rdz.b, &rdos.b);
  st16(dt, dz, rdz, nt0);
  st16(dt, dos, rdos, nt1);
}

/* Fewer than 16 elements through buffers (zero-filled: the unused lanes compute harmlessly). */
static inline __attribute__((always_inline)) void bwd_part_fast(int dt, char *dz, char *dos,
                                                                const char *dout, const char *z,
                                                                const char *o, int64_t m) {
  const int64_t es = dt == ZG_F32 ? 4 : 2;
  _Alignas(32) char b[5][64] = {{0}};
  memcpy(b[0], dout, m * es);
  memcpy(b[1], z, m * es);
  memcpy(b[2], o, m * es);
  bwd_step_fast(dt, b[3], b[4], b[0], b[1], b[2], 0, 0);
  memcpy(dz, b[3], m * es);
  memcpy(dos, b[4], m * es);
}

static inline __attribute__((always_inline)) void bwd_run_fast(int dt, void *dz, void *dos,
                                                               const void *dout, const void *z,
                                                               const void *o, int64_t n,
                                                               int streaming, const zg_run_next *next) {
  const int64_t es = dt == ZG_F32 ? 4 : 2;
  char *pdz = dz, *pdos = dos;
  const char *pd = dout, *pz = z, *po = o;
  int64_t i = 0, head = stream_head(streaming, pdz, pdos, es, n), pf = zg_cpu_prefetch();
  if (!next) next = &zg_run_next_none;
  int nt0 = (streaming & 1) && line_aligned(pdz + head * es);
  int nt1 = (streaming & 2) && line_aligned(pdos + head * es);
  for (; i < head; i += 16) {
    int64_t m = head - i < 16 ? head - i : 16;
    bwd_part_fast(dt, pdz + i * es, pdos + i * es, pd + i * es, pz + i * es, po + i * es, m);
  }
  i = head;
  for (; i + 16 <= n; i += 16) {
    if (pf) zg_prefetch_ahead(next, pd, pz, po, i * es + pf, n * es, 16 * es);
    bwd_step_fast(dt, pdz + i * es, pdos + i * es, pd + i * es, pz + i * es, po + i * es, nt0, nt1);
  }
  if (i < n) bwd_part_fast(dt, pdz + i * es, pdos + i * es, pd + i * es, pz + i * es, po + i * es, n - i);
}

static inline __attribute__((always_inline)) void fwd_step_fast(int dt, char *out, const char *o,
                                                                const char *z, int nt) {
  v16f zz = ld16(dt, z), oo = ld16(dt, o), r;
  r.a = v8_fwd_fast(oo.a, zz.a);
  r.b = v8_fwd_fast(oo.b, zz.b);
  st16(dt, out, r, nt);
}

static inline __attribute__((always_inline)) void fwd_part_fast(int dt, char *out, const char *o,
                                                                const char *z, int64_t m) {
  const int64_t es = dt == ZG_F32 ? 4 : 2;
  _Alignas(32) char b[3][64] = {{0}};
  memcpy(b[0], o, m * es);
  memcpy(b[1], z, m * es);
  fwd_step_fast(dt, b[2], b[0], b[1], 0);
  memcpy(out, b[2], m * es);
}

static inline __attribute__((always_inline)) void fwd_run_fast(int dt, void *out, const void *o,
                                                               const void *z, int64_t n,
                                                               int streaming, const zg_run_next *next) {
  const int64_t es = dt == ZG_F32 ? 4 : 2;
  char *pout = out;
  const char *pz = z, *po = o;
  int64_t i = 0, head = (streaming & 1) ? head_to_line(pout, es, n) : 0, pf = zg_cpu_prefetch();
  if (!next) next = &zg_run_next_none;
  int nt0 = (streaming & 1) && line_aligned(pout + head * es);
  for (; i < head; i += 16) {
    int64_t m = head - i < 16 ? head - i : 16;
    fwd_part_fast(dt, pout + i * es, po + i * es, pz + i * es, m);
  }
  i = head;
  for (; i + 16 <= n; i += 16) {
    if (pf) zg_prefetch_ahead(next, po, pz, 0, i * es + pf, n * es, 16 * es);
    fwd_step_fast(dt, pout + i * es, po + i * es, pz + i * es, nt0);
  }
  if (i < n) fwd_part_fast(dt, pout + i * es, po + i * es, pz + i * es, n - i);
}

static void bwd_run_bf16(void *dz, void *dos, const void *dout, const void *z, const void *o,
                         int64_t n, int streaming, const zg_run_next *next) {
  bwd_run_fast(ZG_BF16, dz, dos, dout, z, o, n, streaming, next);
}
static void bwd_run_f16(void *dz, void *dos, const void *dout, const void *z, const void *o,
                        int64_t n, int streaming, const zg_run_next *next) {
  bwd_run_fast(ZG_F16, dz, dos, dout, z, o, n, streaming, next);
}
static void fwd_run_bf16(void *out, const void *o, const void *z, int64_t n, int streaming,
                         const zg_run_next *next) {
  fwd_run_fast(ZG_BF16, out, o, z, n, streaming, next);
}
static void fwd_run_f16(void *out, const void *o, const void *z, int64_t n, int streaming,
                        const zg_run_next *next) {
  fwd_run_fast(ZG_F16, out, o, z, n, streaming, next);
}

/* float32: the accurate recipe (two passes per chunk, as bwd_avx2), outputs written straight
 * from registers, non-temporal when streaming; inf/NaN checked per vector (a chunk cannot be
 * redone in place: dout_scaled may already have overwritten dout). */
static void bwd_run_f32(void *dz, void *dos, const void *dout, const void *z, const void *o,
                        int64_t n, int streaming, const zg_run_next *next) {
  float *pdz = dz, *pdos = dos;
  const float *pd = dout, *pz = z, *po = o;
  int64_t head = stream_head(streaming, pdz, pdos, 4, n), pf = zg_cpu_prefetch();
  if (!next) next = &zg_run_next_none;
  int nt0 = (streaming & 1) && line_aligned(pdz + head);
  int nt1 = (streaming & 2) && line_aligned(pdos + head);
  _Alignas(32) float e[ZG_AVX2_CHUNK], elo[ZG_AVX2_CHUNK];
  for (int64_t i = 0; i < n;) {
    int64_t m = i < head ? head - i : n - i;
    if (m > ZG_AVX2_CHUNK) m = ZG_AVX2_CHUNK;
    if (pf)
      for (int64_t q = 0; q < m; q += 16) /* one line of each input in turn */
        zg_prefetch_ahead(next, (const char *)pd, (const char *)pz, (const char *)po, (i + q) * 4 + pf, n * 4, 64);
    exp_pass(e, elo, pz + i, m);
    for (int64_t j = 0; j < m; j += 8) {
      __m256 vdz, vdos, flag = _mm256_setzero_ps();
      v8_bwd(v8_load_part(pd + i + j, m - j), v8_load_part(pz + i + j, m - j), v8_load_part(po + i + j, m - j),
             _mm256_load_ps(e + j), _mm256_load_ps(elo + j), &vdz, &vdos, &flag, 1);
      if (i >= head && m - j >= 8) {
        if (nt0) _mm256_stream_ps(pdz + i + j, vdz);
        else _mm256_storeu_ps(pdz + i + j, vdz);
        if (nt1) _mm256_stream_ps(pdos + i + j, vdos);
        else _mm256_storeu_ps(pdos + i + j, vdos);
      } else {
        v8_store_part(pdz + i + j, m - j, vdz);
        v8_store_part(pdos + i + j, m - j, vdos);
      }
    }
    i += m;
  }
}

static void fwd_run_f32(void *out, const void *o, const void *z, int64_t n, int streaming,
                        const zg_run_next *next) {
  float *pout = out;
  const float *pz = z, *po = o;
  int64_t head = (streaming & 1) ? head_to_line(pout, 4, n) : 0, pf = zg_cpu_prefetch();
  if (!next) next = &zg_run_next_none;
  int nt0 = (streaming & 1) && line_aligned(pout + head);
  _Alignas(32) float e[ZG_AVX2_CHUNK], elo[ZG_AVX2_CHUNK];
  for (int64_t i = 0; i < n;) {
    int64_t m = i < head ? head - i : n - i;
    if (m > ZG_AVX2_CHUNK) m = ZG_AVX2_CHUNK;
    if (pf)
      for (int64_t q = 0; q < m; q += 16) /* one line of each input in turn */
        zg_prefetch_ahead(next, (const char *)po, (const char *)pz, 0, (i + q) * 4 + pf, n * 4, 64);
    exp_pass(e, elo, pz + i, m);
    for (int64_t j = 0; j < m; j += 8) {
      __m256 flag = _mm256_setzero_ps();
      __m256 v = v8_fwd(v8_load_part(po + i + j, m - j), v8_load_part(pz + i + j, m - j), _mm256_load_ps(e + j),
                        _mm256_load_ps(elo + j), &flag, 1);
      if (i >= head && m - j >= 8) {
        if (nt0) _mm256_stream_ps(pout + i + j, v);
        else _mm256_storeu_ps(pout + i + j, v);
      } else {
        v8_store_part(pout + i + j, m - j, v);
      }
    }
    i += m;
  }
}

/* The loop driver's shared output lines (cpu_kernels.h, cpu_loop.c step 5). */
static void stream_line(void *dst, const void *src) {
  _mm256_stream_si256((__m256i *)dst, _mm256_load_si256((const __m256i *)src));
  _mm256_stream_si256((__m256i *)dst + 1, _mm256_load_si256((const __m256i *)src + 1));
}

/* ---- the table -------------------------------------------------------------------------- */

static const zg_cpu_kernels avx2_kernels = {
    "avx2",
    {load_f32, load_f16, load_bf16},
    {store_f32, store_f16, store_bf16},
    bwd_avx2,
    fwd_avx2,
    bwd16_avx2,
    fwd16_avx2,
    {bwd_run_f32, bwd_run_f16, bwd_run_bf16},
    {fwd_run_f32, fwd_run_f16, fwd_run_bf16},
    stream_line,
};

const zg_cpu_kernels *zg_cpu_kernels_avx2(void) { return &avx2_kernels; }
