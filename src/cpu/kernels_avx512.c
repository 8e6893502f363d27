/* The AVX-512 path (F, BW, DQ, VL, plus FMA and F16C): 16 floats per register.
 * Built with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma -mf16c (src/CMakeLists.txt);
 * only zg_cpu_kernels_avx512 is visible. The accurate recipe (float32 outputs) follows
 * simd_exp.h as kernels_avx2.c does, except that 1/(1+e) starts from rcp14 instead of a
 * division (the fma residual that follows refines it: the same accuracy, not the same bits)
 * and 2^k is applied by scalef: avx2 and avx512 results are no longer bit-identical, each meets the bound on
 * its own. Problems whose outputs are all 16-bit use simd_exp.h's cheap recipe (bwd16 /
 * fwd16), and problems whose five (three) tensors share a dtype and rows run fused
 * (cpu_kernels.h, cpu_loop.c step 4). Every element goes through the same vector code
 * (tails are masked), so results never depend on block boundaries or the thread count.
 *
 * bfloat16 stores (store_bf16, the staged path) use the exact integer round-to-nearest-even,
 * not AVX512_BF16's VCVTNEPS2BF16: that instruction treats subnormal inputs as zero and
 * flushes subnormal results (it ignores MXCSR and behaves as DAZ/FTZ), so it is not the
 * exact RNE that zg_f32_to_bf16 defines (Intel SDM: "output denormals are always flushed to
 * zero and input denormals are always treated as zero"). The fused bfloat16 run uses it
 * where the CPU has it, and sends every step with a subnormal, inf or NaN result through the
 * integer rounding instead (bwd_run_bf16_cvt). float16 uses VCVTPS2PH with the rounding mode in
 * the immediate (round to nearest even): it ignores MXCSR.FTZ, so float16 subnormal results
 * are exact, and the float32 subnormals that MXCSR.DAZ would zero round to +-0 in float16
 * anyway. */
#include <immintrin.h>
#include <stdint.h>

#include "../gate_math.h"
#include "cpu_kernels.h"
#include "simd_exp.h"

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) || \
    !defined(__AVX512VL__) || !defined(__FMA__) || !defined(__F16C__)
#error "kernels_avx512.c must be built with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mfma -mf16c"
#endif

/* ---- register-level math (kernels_avx2.c's, with rcp14 for the division) ------------- */

/* p + plo = exp(r) for |r| <= ln2/2, given k: steps 3-4 of simd_exp.h. */
static inline __m512 v16_exp_core(__m512 x, __m512 k, __m512 *plo) {
  __m512 r1 = _mm512_fnmadd_ps(k, _mm512_set1_ps(ZG_EXP_LN2_HI), x); /* exact */
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(ZG_EXP_LN2_LO), r1);
  __m512 c = _mm512_fnmadd_ps(k, _mm512_set1_ps(ZG_EXP_LN2_LO), _mm512_sub_ps(r1, r));
  __m512 r2 = _mm512_mul_ps(r, r);
  __m512 q01 = _mm512_fmadd_ps(_mm512_set1_ps(ZG_EXP_Q1), r, _mm512_set1_ps(ZG_EXP_Q0));
  __m512 q23 = _mm512_fmadd_ps(_mm512_set1_ps(ZG_EXP_Q3), r, _mm512_set1_ps(ZG_EXP_Q2));
  __m512 q45 = _mm512_fmadd_ps(_mm512_set1_ps(ZG_EXP_Q5), r, _mm512_set1_ps(ZG_EXP_Q4));
  __m512 q = _mm512_fmadd_ps(_mm512_mul_ps(r2, r2), q45, _mm512_fmadd_ps(r2, q23, q01));
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 hi = _mm512_add_ps(one, r);
  __m512 lo = _mm512_add_ps(_mm512_sub_ps(one, hi), r);
  __m512 u = _mm512_add_ps(_mm512_fmadd_ps(r2, q, c), lo);
  __m512 p = _mm512_add_ps(hi, u);
  *plo = _mm512_add_ps(_mm512_sub_ps(hi, p), u);
  return p;
}

/* e + elo = exp(x) for x <= 0 or NaN (simd_exp.h; e alone max 0.69 ulp). 2^k by scalef,
 * one rounding for normal and subnormal results alike. */
static inline __m512 v16_exp_neg(__m512 x, __m512 *elo) {
  const __m512 shifter = _mm512_set1_ps(0x1.8p23f);
  __m512 plo;
  /* max(lo, x) returns its second operand when either is NaN: NaN passes through */
  x = _mm512_max_ps(_mm512_set1_ps(ZG_EXP_LO), x);
  __m512 k = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(ZG_EXP_LOG2E), shifter), shifter);
  __m512 p = v16_exp_core(x, k, &plo);
  /* scalef: p * 2^k rounded once, subnormal results included (the bits of avx2's one or
   * two multiplies) */
  *elo = _mm512_scalef_ps(plo, k);
  return _mm512_scalef_ps(p, k);
}

/* s and oms = 1 - s from e + elo = exp(-|z|), each rounded once (simd_exp.h). */
static inline void v16_sigmoid_pair(__m512 z, __m512 e, __m512 elo, __m512 *s, __m512 *oms) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 d = _mm512_add_ps(one, e);
  __m512 dlo = _mm512_add_ps(_mm512_sub_ps(e, _mm512_sub_ps(d, one)), elo);
  /* rcp14 alone (within 2^-14 of 1/d): res below is r's error, computed by fmas with one
   * rounding of a value below 2^-13, so r(1 + res) misses 1/(1+E) by about res^2 <= 2^-28
   * (0.06 ulp) before its own rounding. A 512-bit divide costs Zen 4 ~5 cycles of issue. */
  __m512 r = _mm512_rcp14_ps(d);
  __m512 res = _mm512_fnmadd_ps(r, dlo, _mm512_fnmadd_ps(r, d, one));
  __m512 er = _mm512_mul_ps(e, r);
  __m512 erlo = _mm512_fmadd_ps(elo, r, _mm512_fmsub_ps(e, r, er));
  __m512 r_c = _mm512_fmadd_ps(r, res, r);
  __m512 er_c = _mm512_add_ps(er, _mm512_fmadd_ps(er, res, erlo));
  /* select by the sign bit of z, as the avx2 path's blendv does (z = -0 and negative NaNs
   * take e*r) */
  __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(z));
  *s = _mm512_mask_blend_ps(neg, r_c, er_c);
  *oms = _mm512_mask_blend_ps(neg, er_c, r_c);
}

/* Lanes whose results came out inf or NaN, redone in double from the same s and 1 - s
 * (as kernels_avx2.c's v8_fix_lanes: float32 intermediates can overflow where the float64
 * formula does not). Out of line and by value: rare. which: 0 dz, 1 dout_scaled, 2 out. */
__attribute__((noinline, cold)) static __m512 v16_fix_lanes(int which, __m512 v, __m512 dout,
                                                            __m512 z, __m512 o, __m512 s,
                                                            __m512 oms) {
  float vv[16], vd[16], vz[16], vo[16], vs[16], voms[16];
  _mm512_storeu_ps(vv, v);
  _mm512_storeu_ps(vd, dout);
  _mm512_storeu_ps(vz, z);
  _mm512_storeu_ps(vo, o);
  _mm512_storeu_ps(vs, s);
  _mm512_storeu_ps(voms, oms);
  for (int j = 0; j < 16; j++) {
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
  return _mm512_loadu_ps(vv);
}

/* Any lane inf or NaN? (fpclass categories QNaN, +inf, -inf, SNaN) */
static inline int v16_any_nonfinite(__m512 v) { return _mm512_fpclass_ps_mask(v, 0x99) != 0; }

/* dz = (dout*o) * (s + (s*z)*oms) with dout*o carried as a + alo; dos = (dout*z)*s. With
 * fix = 0 inf/NaN lanes only turn *flag NaN and the caller redoes the chunk with fix = 1
 * (as kernels_avx2.c's v8_bwd). */
static inline void v16_bwd(__m512 dout, __m512 z, __m512 o, __m512 e, __m512 elo, __m512 *dz,
                           __m512 *dos, __m512 *flag, int fix) {
  __m512 s, oms;
  v16_sigmoid_pair(z, e, elo, &s, &oms);
  __m512 h = _mm512_fmadd_ps(_mm512_mul_ps(s, z), oms, s);
  __m512 a = _mm512_mul_ps(dout, o);
  __m512 alo = _mm512_fmsub_ps(dout, o, a);
  __m512 vdz = _mm512_fmadd_ps(a, h, _mm512_mul_ps(alo, h));
  __m512 vdos = _mm512_mul_ps(_mm512_mul_ps(dout, z), s);
  if (!fix) {
    *flag = _mm512_fmadd_ps(_mm512_add_ps(vdz, vdos), _mm512_setzero_ps(), *flag);
  } else if (v16_any_nonfinite(_mm512_add_ps(vdz, vdos))) {
    vdz = v16_fix_lanes(0, vdz, dout, z, o, s, oms);
    vdos = v16_fix_lanes(1, vdos, dout, z, o, s, oms);
  }
  *dz = vdz;
  *dos = vdos;
}

static inline __m512 v16_fwd(__m512 o, __m512 z, __m512 e, __m512 elo, __m512 *flag, int fix) {
  __m512 s, oms;
  v16_sigmoid_pair(z, e, elo, &s, &oms);
  __m512 out = _mm512_mul_ps(_mm512_mul_ps(o, z), s);
  if (!fix)
    *flag = _mm512_fmadd_ps(out, _mm512_setzero_ps(), *flag);
  else if (v16_any_nonfinite(out))
    out = v16_fix_lanes(2, out, o, z, o, s, oms);
  return out;
}

/* Lanes [0, min(rem, 16)) set. */
static inline __mmask16 v16_mask(int64_t rem) {
  return rem >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rem) - 1u);
}

/* ---- float-array kernels: two passes per chunk (exp, then the rest), as in avx2 ------ */

#define ZG_AVX512_CHUNK 128

static inline void exp_pass(float *e, float *elo, const float *z, int64_t m) {
  for (int64_t j = 0; j < m; j += 16) {
    __m512 lo;
    __m512 v = _mm512_maskz_loadu_ps(v16_mask(m - j), z + j);
    v = v16_exp_neg(_mm512_or_ps(v, _mm512_set1_ps(-0.0f)), &lo);
    _mm512_store_ps(e + j, v);
    _mm512_store_ps(elo + j, lo);
  }
}

static inline __m512 bwd_chunk(float *dz, float *dos, const float *dout, const float *z,
                               const float *o, const float *e, const float *elo, int64_t m,
                               int fix) {
  __m512 flag = _mm512_setzero_ps();
  for (int64_t j = 0; j < m; j += 16) {
    __mmask16 k = v16_mask(m - j);
    __m512 vdz, vdos;
    v16_bwd(_mm512_maskz_loadu_ps(k, dout + j), _mm512_maskz_loadu_ps(k, z + j),
            _mm512_maskz_loadu_ps(k, o + j), _mm512_load_ps(e + j), _mm512_load_ps(elo + j), &vdz,
            &vdos, &flag, fix);
    _mm512_mask_storeu_ps(dz + j, k, vdz);
    _mm512_mask_storeu_ps(dos + j, k, vdos);
  }
  return flag;
}

static void bwd_avx512(float *dz, float *dos, const float *dout, const float *z, const float *o,
                       int64_t n) {
  _Alignas(64) float e[ZG_AVX512_CHUNK], elo[ZG_AVX512_CHUNK];
  for (int64_t i = 0; i < n; i += ZG_AVX512_CHUNK) {
    int64_t m = n - i < ZG_AVX512_CHUNK ? n - i : ZG_AVX512_CHUNK;
    exp_pass(e, elo, z + i, m);
    __m512 flag = bwd_chunk(dz + i, dos + i, dout + i, z + i, o + i, e, elo, m, 0);
    if (v16_any_nonfinite(flag)) bwd_chunk(dz + i, dos + i, dout + i, z + i, o + i, e, elo, m, 1);
  }
}

static inline __m512 fwd_chunk(float *out, const float *o, const float *z, const float *e,
                               const float *elo, int64_t m, int fix) {
  __m512 flag = _mm512_setzero_ps();
  for (int64_t j = 0; j < m; j += 16) {
    __mmask16 k = v16_mask(m - j);
    _mm512_mask_storeu_ps(out + j, k,
                          v16_fwd(_mm512_maskz_loadu_ps(k, o + j), _mm512_maskz_loadu_ps(k, z + j),
                                  _mm512_load_ps(e + j), _mm512_load_ps(elo + j), &flag, fix));
  }
  return flag;
}

static void fwd_avx512(float *out, const float *o, const float *z, int64_t n) {
  _Alignas(64) float e[ZG_AVX512_CHUNK], elo[ZG_AVX512_CHUNK];
  for (int64_t i = 0; i < n; i += ZG_AVX512_CHUNK) {
    int64_t m = n - i < ZG_AVX512_CHUNK ? n - i : ZG_AVX512_CHUNK;
    exp_pass(e, elo, z + i, m);
    if (v16_any_nonfinite(fwd_chunk(out + i, o + i, z + i, e, elo, m, 0)))
      fwd_chunk(out + i, o + i, z + i, e, elo, m, 1);
  }
}

/* ---- loads: widen to float ------------------------------------------------------------ */

static void load_f32(float *dst, const void *src, int64_t n, int64_t stride) {
  const float *s = (const float *)src;
  if (stride == 1) {
    for (int64_t i = 0; i < n; i += 16) {
      __mmask16 k = v16_mask(n - i);
      _mm512_mask_storeu_ps(dst + i, k, _mm512_maskz_loadu_ps(k, s + i));
    }
    return;
  }
  for (int64_t i = 0; i < n; i++) dst[i] = s[i * stride];
}

static void load_f16(float *dst, const void *src, int64_t n, int64_t stride) {
  const uint16_t *s = (const uint16_t *)src;
  if (stride == 1) {
    for (int64_t i = 0; i < n; i += 16) {
      __mmask16 k = v16_mask(n - i);
      __m256i h = _mm256_maskz_loadu_epi16(k, s + i);
      _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(h));
    }
    return;
  }
  for (int64_t i = 0; i < n; i++) dst[i] = _cvtsh_ss(s[i * stride]);
}

static void load_bf16(float *dst, const void *src, int64_t n, int64_t stride) {
  const uint16_t *s = (const uint16_t *)src;
  if (stride == 1) {
    for (int64_t i = 0; i < n; i += 16) {
      __mmask16 k = v16_mask(n - i);
      __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, s + i));
      _mm512_mask_storeu_ps(dst + i, k, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
    return;
  }
  for (int64_t i = 0; i < n; i++) dst[i] = zg_bf16_to_f32(s[i * stride]);
}

/* ---- stores: narrow with round-to-nearest-even ------------------------------------------ */
/* No fence here: cpu_loop.c issues one sfence per thread after its last store of the call
 * (cpu_kernels.h). An sfence per 512-element store halved single-thread NT write speed. */

/* Elements to store normally before dst + head is 64-byte aligned (whole cache lines for
 * the non-temporal stores). */
static inline int64_t head_to_line(const void *dst, int64_t elem_size, int64_t n) {
  int64_t h = (int64_t)((64u - ((uintptr_t)dst & 63u)) & 63u) / elem_size;
  return h < n ? h : n;
}

static inline __m256i v16_to_f16(__m512 x) {
  return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* Exact RNE to bfloat16 on the bits; NaN kept quiet (same as zg_f32_to_bf16). */
static inline __m256i v16_to_bf16(__m512 x) {
  __m512i b = _mm512_castps_si512(x);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  __m512i rnd = _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  __mmask16 isnan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  rnd = _mm512_mask_mov_epi32(rnd, isnan, _mm512_or_si512(b, _mm512_set1_epi32(0x00400000)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(rnd, 16));
}

static void store_f32(void *dst, const float *src, int64_t n, int64_t stride, int streaming) {
  float *d = (float *)dst;
  int64_t i = 0;
  if (stride != 1) {
    for (; i < n; i++) d[i * stride] = src[i];
    return;
  }
  if (streaming) {
    int64_t h = head_to_line(d, 4, n);
    if (h > 0) _mm512_mask_storeu_ps(d, v16_mask(h), _mm512_maskz_loadu_ps(v16_mask(h), src));
    for (i = h; i + 16 <= n; i += 16) _mm512_stream_ps(d + i, _mm512_loadu_ps(src + i));
  }
  for (; i < n; i += 16) {
    __mmask16 k = v16_mask(n - i);
    _mm512_mask_storeu_ps(d + i, k, _mm512_maskz_loadu_ps(k, src + i));
  }
}

/* Contiguous 16-bit stores, `bf` picking the narrowing (a constant at both call sites):
 * a masked head up to a cache line, then whole lines by non-temporal stores when
 * streaming, then masked 16-element pieces. */
static inline __attribute__((always_inline)) __m256i v16_to_16(int bf, __m512 x) {
  return bf ? v16_to_bf16(x) : v16_to_f16(x);
}
static inline __attribute__((always_inline)) void store_16_dense(int bf, uint16_t *d, const float *src,
                                                                 int64_t n, int streaming) {
  int64_t i = 0;
  if (streaming) {
    int64_t h = head_to_line(d, 2, n);
    for (; i < h; i += 16) {
      __mmask16 k = v16_mask(h - i);
      _mm256_mask_storeu_epi16(d + i, k, v16_to_16(bf, _mm512_maskz_loadu_ps(k, src + i)));
    }
    i = h;
    for (; i + 32 <= n; i += 32) {
      __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(v16_to_16(bf, _mm512_loadu_ps(src + i))),
                                        v16_to_16(bf, _mm512_loadu_ps(src + i + 16)), 1);
      _mm512_stream_si512((void *)(d + i), both);
    }
  }
  for (; i < n; i += 16) {
    __mmask16 k = v16_mask(n - i);
    _mm256_mask_storeu_epi16(d + i, k, v16_to_16(bf, _mm512_maskz_loadu_ps(k, src + i)));
  }
}

static void store_f16(void *dst, const float *src, int64_t n, int64_t stride, int streaming) {
  uint16_t *d = (uint16_t *)dst;
  if (stride == 1) {
    store_16_dense(0, d, src, n, streaming);
    return;
  }
  for (int64_t i = 0; i < n; i++) d[i * stride] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

static void store_bf16(void *dst, const float *src, int64_t n, int64_t stride, int streaming) {
  uint16_t *d = (uint16_t *)dst;
  if (stride == 1) {
    store_16_dense(1, d, src, n, streaming);
    return;
  }
  for (int64_t i = 0; i < n; i++) d[i * stride] = zg_f32_to_bf16(src[i]);
}

/* ---- the fast recipe (simd_exp.h, "fast recipe"): problems with 16-bit outputs only ---- */

/* exp(-|z|) (NaN for NaN), within ~2.2e-7 relative for normal results (simd_exp.h); with
 * deg4, the bfloat16 variant's degree-4 polynomial (2.9e-6). */
static inline __attribute__((always_inline)) __m512 v16_exp_fast(__m512 z, int deg4) {
  /* No clamp: for y = -inf (z = +-inf, or |z| > ~2.4e38 overflowing y) VREDUCEPS gives
   * f = 0 and k = -inf, and scalef(p, -inf) = 0; huge finite y give f = 0, k = y and 0. */
  __m512 x = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(z), _mm512_set1_epi32((int)0x80000000u)));
  __m512 y = _mm512_mul_ps(x, _mm512_set1_ps(ZG_EXP_LOG2E));
  __m512 f = _mm512_reduce_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); /* y - round(y) */
  __m512 k = _mm512_sub_ps(y, f);                                                /* round(y), exact */
  __m512 p;
  if (deg4) {
    p = _mm512_fmadd_ps(_mm512_set1_ps(ZG_EXP2_H4), f, _mm512_set1_ps(ZG_EXP2_H3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ZG_EXP2_H2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ZG_EXP2_H1));
  } else {
    p = _mm512_fmadd_ps(_mm512_set1_ps(ZG_EXP2_G5), f, _mm512_set1_ps(ZG_EXP2_G4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ZG_EXP2_G3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ZG_EXP2_G2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(ZG_EXP2_G1));
  }
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, k); /* p * 2^k, one rounding, subnormals included */
}

static inline __m512 v16_blend(__mmask16 m, __m512 a, __m512 b) { /* integer pipes */
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(m, _mm512_castps_si512(a), _mm512_castps_si512(b)));
}

/* s, 1 - s and t = 1 + z(1 - s) by simd_exp.h's fast recipe; bf selects its bfloat16
 * variant (no Newton step; t = (d + z w) r). A constant at every call site. */
static inline __attribute__((always_inline)) void v16_gate_fast(int bf, __m512 z, __m512 *s,
                                                                __m512 *oms, __m512 *t) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 e = v16_exp_fast(z, bf);
  __m512 d = _mm512_add_ps(one, e);
  __m512 r = _mm512_rcp14_ps(d);
  if (!bf) r = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, one), r);
  __m512 er = _mm512_mul_ps(e, r);
  __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(z));
  *s = v16_blend(neg, r, er);
  *oms = v16_blend(neg, er, r);
  if (bf)
    *t = _mm512_mul_ps(_mm512_fmadd_ps(z, v16_blend(neg, e, one), d), r);
  else
    *t = _mm512_fmadd_ps(z, *oms, one);
}

/* dz = (dout*o) * (s*t), dos = (dout*z) * s: the grouping of simd_exp.h's fast recipe. */
static inline __attribute__((always_inline)) void v16_bwd_fast_raw(int bf, __m512 dout, __m512 z,
                                                                   __m512 o, __m512 *dz, __m512 *dos,
                                                                   __m512 *s, __m512 *oms) {
  __m512 t;
  v16_gate_fast(bf, z, s, oms, &t);
  *dz = _mm512_mul_ps(_mm512_mul_ps(dout, o), _mm512_mul_ps(*s, t));
  *dos = _mm512_mul_ps(_mm512_mul_ps(dout, z), *s);
}

/* The fast recipe's cold path: the lanes in `lanes` get gate_math.h's float64 formula on
 * their inputs, rounded once to float (NaN as the default quiet NaN, sign kept: the fused
 * bfloat16 narrowing relies on a NaN's low 16 bits being zero). which: 0 bwd, 1 fwd
 * (dout unused, *dos untouched). */
__attribute__((noinline, cold)) static void v16_fast_fix(int which, __mmask16 lanes, __m512 dout,
                                                         __m512 z, __m512 o, __m512 *dz, __m512 *dos) {
  float vdz[16], vdos[16], vd[16], vz[16], vo[16];
  _mm512_storeu_ps(vdz, *dz);
  _mm512_storeu_ps(vdos, *dos);
  _mm512_storeu_ps(vd, dout);
  _mm512_storeu_ps(vz, z);
  _mm512_storeu_ps(vo, o);
  for (int j = 0; j < 16; j++) {
    if (!((lanes >> j) & 1)) continue;
    double a, b = 0;
    if (which == 0) zg_gate_bwd_f64(vd[j], vz[j], vo[j], &a, &b);
    else a = zg_gate_fwd_f64(vo[j], vz[j]);
    vdz[j] = isnan(a) ? (signbit(a) ? -NAN : NAN) : (float)a;
    vdos[j] = isnan(b) ? (signbit(b) ? -NAN : NAN) : (float)b;
  }
  *dz = _mm512_loadu_ps(vdz);
  if (which == 0) *dos = _mm512_loadu_ps(vdos);
}

/* Lanes the fast recipe hands to v16_fast_fix: an inf or NaN result (a float32 product can
 * overflow where float64 does not), and with root = 1 those with |t| < 2^-6. There a float32
 * z can sit within ~1e-8 of the root, where t's absolute error (~1e-7) exceeds t itself: the
 * sign and size of dz would be noise, and the policy wants the reference's infinity when
 * |dz| overflows float16 (|dout*o| > ~1e12 is enough). A bfloat16 z is never closer than
 * 2.8e-3 to the root (|t| >= 2.7e-3, so t is within 4e-5 relative) and bfloat16 outputs
 * cannot overflow from a finite product, so the bfloat16 runs skip the test. */
static inline __mmask16 v16_fast_bad(int root, __m512 res, __m512 t) {
  __mmask16 bad = _mm512_fpclass_ps_mask(res, 0x99);
  if (root) bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(t), _mm512_set1_ps(0x1p-6f), _CMP_LT_OQ);
  return bad;
}

/* Fast dz, dos. bf selects the bfloat16 variant (and drops the root test: bfloat16 runs). */
static inline __attribute__((always_inline)) void v16_bwd_fast(int bf, __m512 dout, __m512 z,
                                                               __m512 o, __m512 *dz, __m512 *dos) {
  __m512 s, oms, t;
  v16_gate_fast(bf, z, &s, &oms, &t);
  __m512 vdz = _mm512_mul_ps(_mm512_mul_ps(dout, o), _mm512_mul_ps(s, t));
  __m512 vdos = _mm512_mul_ps(_mm512_mul_ps(dout, z), s);
  __mmask16 bad = v16_fast_bad(!bf, _mm512_add_ps(vdz, vdos), t);
  if (__builtin_expect(bad != 0, 0)) v16_fast_fix(0, bad, dout, z, o, &vdz, &vdos);
  *dz = vdz;
  *dos = vdos;
}

/* out = (o*z)*s has no cancellation: only inf/NaN lanes go cold. */
static inline __attribute__((always_inline)) __m512 v16_fwd_fast(int bf, __m512 o, __m512 z) {
  __m512 s, oms, t;
  v16_gate_fast(bf, z, &s, &oms, &t);
  __m512 out = _mm512_mul_ps(_mm512_mul_ps(o, z), s), unused = out;
  __mmask16 bad = v16_fast_bad(0, out, t);
  if (__builtin_expect(bad != 0, 0)) v16_fast_fix(1, bad, o, z, o, &out, &unused);
  return out;
}

/* Staged float kernels with the fast recipe (table entries bwd16 / fwd16). */
static void bwd16_avx512(float *dz, float *dos, const float *dout, const float *z, const float *o,
                         int64_t n) {
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k = v16_mask(n - j);
    __m512 vdz, vdos;
    v16_bwd_fast(0, _mm512_maskz_loadu_ps(k, dout + j), _mm512_maskz_loadu_ps(k, z + j),
                 _mm512_maskz_loadu_ps(k, o + j), &vdz, &vdos);
    _mm512_mask_storeu_ps(dz + j, k, vdz);
    _mm512_mask_storeu_ps(dos + j, k, vdos);
  }
}

static void fwd16_avx512(float *out, const float *o, const float *z, int64_t n) {
  for (int64_t j = 0; j < n; j += 16) {
    __mmask16 k = v16_mask(n - j);
    _mm512_mask_storeu_ps(out + j, k,
                          v16_fwd_fast(0, _mm512_maskz_loadu_ps(k, o + j), _mm512_maskz_loadu_ps(k, z + j)));
  }
}

/* ---- fused runs (cpu_kernels.h zg_bwd_run_fn): 32 elements per step ---------------------
 * 16-bit types: one 512-bit load holds 32 elements. bfloat16 widens by unpacking with zero
 * within each 128-bit lane (elements 0-3, 8-11, ... in the first vector, 4-7, 12-15, ... in
 * the second) and narrows with the inverse pack, so the order is restored; the math is
 * elementwise and every tensor goes through the same permutation. float16 converts the two
 * 256-bit halves. float32 is two plain vectors. Tails: the same code with masks. */

typedef struct { __m512 a, b; } v32f;

static inline __mmask32 v32_mask(int64_t rem) {
  return rem >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << rem) - 1u);
}

static inline __attribute__((always_inline)) v32f ld32(int dt, const void *p, __mmask32 m) {
  v32f v;
  if (dt == ZG_F32) {
    v.a = _mm512_maskz_loadu_ps((__mmask16)m, p);
    v.b = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), (const float *)p + 16);
  } else if (dt == ZG_BF16) {
    __m512i w = _mm512_maskz_loadu_epi16(m, p);
    v.a = _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), w));
    v.b = _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), w));
  } else {
    __m512i w = _mm512_maskz_loadu_epi16(m, p);
    v.a = _mm512_cvtph_ps(_mm512_castsi512_si256(w));
    v.b = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w, 1));
  }
  return v;
}

/* RNE to bfloat16 in the high half of each 32-bit lane. NaN needs no care here: a NaN
 * result is either a quieted bfloat16 input (low 16 bits zero, nothing carries) or one the
 * cold fix-up produced, which it makes the default quiet NaN. */
static inline __m512i v16_bf16_hi(__m512 x) {
  __m512i b = _mm512_castps_si512(x);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  return _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb), 16);
}

static inline __attribute__((always_inline)) void st32(int dt, void *p, v32f v, __mmask32 m, int nt) {
  if (dt == ZG_F32) {
    if (nt) {
      _mm512_stream_ps((float *)p, v.a);
      _mm512_stream_ps((float *)p + 16, v.b);
    } else {
      _mm512_mask_storeu_ps(p, (__mmask16)m, v.a);
      _mm512_mask_storeu_ps((float *)p + 16, (__mmask16)(m >> 16), v.b);
    }
    return;
  }
  __m512i w;
  if (dt == ZG_BF16)
    w = _mm512_packus_epi32(v16_bf16_hi(v.a), v16_bf16_hi(v.b));
  else
    w = _mm512_inserti64x4(_mm512_castsi256_si512(v16_to_f16(v.a)), v16_to_f16(v.b), 1);
  if (nt)
    _mm512_stream_si512(p, w);
  else
    _mm512_mask_storeu_epi16(p, m, w);
}

/* Elements before the first output is 64-byte aligned, when streaming. */
static inline int64_t run_head(const void *dst, int dt, int64_t n) {
  return head_to_line(dst, dt == ZG_F32 ? 4 : 2, n);
}
static inline int line_aligned(const void *p) { return ((uintptr_t)p & 63u) == 0; }
/* The head of a backward run: up to the line of dz when it streams, else of dout_scaled. */
static inline int64_t stream_head(int streaming, const void *dz, const void *dos, int dt, int64_t n) {
  return streaming ? run_head(streaming & 1 ? dz : dos, dt, n) : 0;
}

static inline __attribute__((always_inline)) void bwd_run_fast(int dt, void *dz, void *dos,
                                                               const void *dout, const void *z,
                                                               const void *o, int64_t n,
                                                               int streaming, const zg_run_next *next) {
  const int64_t es = dt == ZG_F32 ? 4 : 2;
  char *pdz = dz, *pdos = dos;
  const char *pd = dout, *pz = z, *po = o;
  int64_t i = 0, head = stream_head(streaming, pdz, pdos, dt, n), pf = zg_cpu_prefetch();
  if (!next) next = &zg_run_next_none;
  int nt0 = (streaming & 1) && line_aligned(pdz + head * es);
  int nt1 = (streaming & 2) && line_aligned(pdos + head * es);
  while (i < n) {
    int64_t m = i < head ? head - i : n - i;
    if (i < head || m < 32) { /* the head before alignment and the tail: masked */
      __mmask32 k = v32_mask(m);
      v32f d = ld32(dt, pd + i * es, k), zz = ld32(dt, pz + i * es, k), oo = ld32(dt, po + i * es, k);
      v32f rdz, rdos;
      v16_bwd_fast(dt == ZG_BF16, d.a, zz.a, oo.a, &rdz.a, &rdos.a);
      v16_bwd_fast(dt == ZG_BF16, d.b, zz.b, oo.b, &rdz.b, &rdos.b);
      st32(dt, pdz + i * es, rdz, k, 0);
      st32(dt, pdos + i * es, rdos, k, 0);
      i += m < 32 ? m : 32;
      continue;
    }
    for (; i + 32 <= n; i += 32) {
      if (pf) zg_prefetch_ahead(next, pd, pz, po, i * es + pf, n * es, 32 * es);
      v32f d = ld32(dt, pd + i * es, ~0u), zz = ld32(dt, pz + i * es, ~0u), oo = ld32(dt, po + i * es, ~0u);
      v32f rdz, rdos;
      v16_bwd_fast(dt == ZG_BF16, d.a, zz.a, oo.a, &rdz.a, &rdos.a);
      v16_bwd_fast(dt == ZG_BF16, d.b, zz.b, oo.b, &rdz.b, &rdos.b);
      st32(dt, pdz + i * es, rdz, ~0u, nt0);
      st32(dt, pdos + i * es, rdos, ~0u, nt1);
    }
  }
}

static inline __attribute__((always_inline)) void fwd_run_fast(int dt, void *out, const void *o,
                                                               const void *z, int64_t n,
                                                               int streaming, const zg_run_next *next) {
  const int64_t es = dt == ZG_F32 ? 4 : 2;
  char *pout = out;
  const char *pz = z, *po = o;
  int64_t i = 0, head = (streaming & 1) ? run_head(pout, dt, n) : 0, pf = zg_cpu_prefetch();
  if (!next) next = &zg_run_next_none;
  int nt0 = (streaming & 1) && line_aligned(pout + head * es);
  while (i < n) {
    int64_t m = i < head ? head - i : n - i;
    if (i < head || m < 32) {
      __mmask32 k = v32_mask(m);
      v32f zz = ld32(dt, pz + i * es, k), oo = ld32(dt, po + i * es, k), r;
      r.a = v16_fwd_fast(dt == ZG_BF16, oo.a, zz.a);
      r.b = v16_fwd_fast(dt == ZG_BF16, oo.b, zz.b);
      st32(dt, pout + i * es, r, k, 0);
      i += m < 32 ? m : 32;
      continue;
    }
    for (; i + 32 <= n; i += 32) {
      if (pf) zg_prefetch_ahead(next, po, pz, 0, i * es + pf, n * es, 32 * es);
      v32f zz = ld32(dt, pz + i * es, ~0u), oo = ld32(dt, po + i * es, ~0u), r;
      r.a = v16_fwd_fast(dt == ZG_BF16, oo.a, zz.a);
      r.b = v16_fwd_fast(dt == ZG_BF16, oo.b, zz.b);
      st32(dt, pout + i * es, r, ~0u, nt0);
    }
  }
}

/* float32: the accurate recipe (two passes per chunk, as bwd_avx512), outputs written
 * straight from registers, non-temporal when streaming; inf/NaN checked per vector (a
 * chunk cannot be redone in place: dout_scaled may already have overwritten dout). */
static void bwd_run_f32(void *dz, void *dos, const void *dout, const void *z, const void *o,
                        int64_t n, int streaming, const zg_run_next *next) {
  float *pdz = dz, *pdos = dos;
  const float *pd = dout, *pz = z, *po = o;
  int64_t head = stream_head(streaming, pdz, pdos, ZG_F32, n), pf = zg_cpu_prefetch();
  if (!next) next = &zg_run_next_none;
  int nt0 = (streaming & 1) && line_aligned(pdz + head);
  int nt1 = (streaming & 2) && line_aligned(pdos + head);
  _Alignas(64) float e[ZG_AVX512_CHUNK], elo[ZG_AVX512_CHUNK];
  for (int64_t i = 0; i < n;) {
    int64_t m = i < head ? head - i : n - i;
    if (m > ZG_AVX512_CHUNK) m = ZG_AVX512_CHUNK;
    if (pf)
      for (int64_t q = 0; q < m; q += 16) /* one line of each input in turn */
        zg_prefetch_ahead(next, (const char *)pd, (const char *)pz, (const char *)po, (i + q) * 4 + pf, n * 4, 64);
    exp_pass(e, elo, pz + i, m);
    for (int64_t j = 0; j < m; j += 16) {
      __m512 vdz, vdos, flag = _mm512_setzero_ps();
      if (i >= head && m - j >= 16) {
        v16_bwd(_mm512_loadu_ps(pd + i + j), _mm512_loadu_ps(pz + i + j), _mm512_loadu_ps(po + i + j),
                _mm512_load_ps(e + j), _mm512_load_ps(elo + j), &vdz, &vdos, &flag, 1);
        if (nt0) _mm512_stream_ps(pdz + i + j, vdz);
        else _mm512_storeu_ps(pdz + i + j, vdz);
        if (nt1) _mm512_stream_ps(pdos + i + j, vdos);
        else _mm512_storeu_ps(pdos + i + j, vdos);
      } else {
        __mmask16 k = v16_mask(m - j);
        v16_bwd(_mm512_maskz_loadu_ps(k, pd + i + j), _mm512_maskz_loadu_ps(k, pz + i + j),
                _mm512_maskz_loadu_ps(k, po + i + j), _mm512_load_ps(e + j), _mm512_load_ps(elo + j), &vdz,
                &vdos, &flag, 1);
        _mm512_mask_storeu_ps(pdz + i + j, k, vdz);
        _mm512_mask_storeu_ps(pdos + i + j, k, vdos);
      }
    }
    i += m;
  }
}

static void fwd_run_f32(void *out, const void *o, const void *z, int64_t n, int streaming,
                        const zg_run_next *next) {
  float *pout = out;
  const float *pz = z, *po = o;
  int64_t head = (streaming & 1) ? run_head(pout, ZG_F32, n) : 0, pf = zg_cpu_prefetch();
  if (!next) next = &zg_run_next_none;
  int nt0 = (streaming & 1) && line_aligned(pout + head);
  _Alignas(64) float e[ZG_AVX512_CHUNK], elo[ZG_AVX512_CHUNK];
  for (int64_t i = 0; i < n;) {
    int64_t m = i < head ? head - i : n - i;
    if (m > ZG_AVX512_CHUNK) m = ZG_AVX512_CHUNK;
    if (pf)
      for (int64_t q = 0; q < m; q += 16) /* one line of each input in turn */
        zg_prefetch_ahead(next, (const char *)po, (const char *)pz, 0, (i + q) * 4 + pf, n * 4, 64);
    exp_pass(e, elo, pz + i, m);
    for (int64_t j = 0; j < m; j += 16) {
      __m512 flag = _mm512_setzero_ps();
      if (i >= head && m - j >= 16) {
        __m512 v = v16_fwd(_mm512_loadu_ps(po + i + j), _mm512_loadu_ps(pz + i + j), _mm512_load_ps(e + j),
                           _mm512_load_ps(elo + j), &flag, 1);
        if (nt0) _mm512_stream_ps(pout + i + j, v);
        else _mm512_storeu_ps(pout + i + j, v);
      } else {
        __mmask16 k = v16_mask(m - j);
        _mm512_mask_storeu_ps(pout + i + j, k,
                              v16_fwd(_mm512_maskz_loadu_ps(k, po + i + j), _mm512_maskz_loadu_ps(k, pz + i + j),
                                      _mm512_load_ps(e + j), _mm512_load_ps(elo + j), &flag, 1));
      }
    }
    i += m;
  }
}

static void bwd_run_bf16(void *dz, void *dos, const void *dout, const void *z, const void *o,
                         int64_t n, int streaming, const zg_run_next *next) {
  bwd_run_fast(ZG_BF16, dz, dos, dout, z, o, n, streaming, next);
}

/* bfloat16 with AVX512_BF16 (Zen 4, Sapphire Rapids): VCVTNE2PS2BF16 narrows 32 floats in
 * one instruction with round-to-nearest-even, exact for every normal float32 and inf; it
 * flushes subnormal inputs to zero and its NaN is not zg_f32_to_bf16's, so every 32-element
 * step whose dz or dos has a NaN, inf or subnormal lane is redone by bwd_run_fast above
 * (its integer rounding is exact for all inputs). Both compute the same floats, so the
 * result is the same bits either way. Widening here splits each 32-bit pair: even elements
 * by a shift, odd ones by a mask, and the narrowed halves are interleaved back by VPERMW. */
/* a function attribute, not #pragma GCC target: clang (the sanitizer build) ignores the pragma */
#define ZG_TARGET_BF16 __attribute__((target("avx512bf16")))

static inline void ld32_eo(const void *p, __m512 *even, __m512 *odd) {
  __m512i w = _mm512_loadu_si512(p);
  *even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  *odd = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)));
}

ZG_TARGET_BF16 static inline __m512i v32_bf16_interleave(__m512 even, __m512 odd, __m512i idx) {
  return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(odd, even));
}

/* NaN, +-inf, subnormal (fpclass categories 0x01, 0x08, 0x10, 0x20, 0x80) */
static inline __mmask16 v16_not_normal_or_zero(__m512 v) { return _mm512_fpclass_ps_mask(v, 0xb9); }

ZG_TARGET_BF16 static void bwd_run_bf16_cvt(void *dz, void *dos, const void *dout, const void *z, const void *o,
                             int64_t n, int streaming, const zg_run_next *next) {
  uint16_t *pdz = dz, *pdos = dos;
  const uint16_t *pd = dout, *pz = z, *po = o;
  int64_t head = stream_head(streaming, pdz, pdos, ZG_BF16, n), pf = zg_cpu_prefetch();
  if (!next) next = &zg_run_next_none;
  int nt0 = (streaming & 1) && line_aligned(pdz + head);
  int nt1 = (streaming & 2) && line_aligned(pdos + head);
  /* word j of the packed pair: even element j/2 (low half) or odd element j/2 (high half) */
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  if (head > 0) bwd_run_fast(ZG_BF16, pdz, pdos, pd, pz, po, head, 0, 0);
  int64_t i = head;
  for (; i + 32 <= n; i += 32) {
    __m512 de, dd, ze, zd, oe, od, dze, dzo, dose, doso, s, oms;
    if (pf) zg_prefetch_ahead(next, (const char *)pd, (const char *)pz, (const char *)po, i * 2 + pf, n * 2, 64);
    ld32_eo(pd + i, &de, &dd);
    ld32_eo(pz + i, &ze, &zd);
    ld32_eo(po + i, &oe, &od);
    v16_bwd_fast_raw(1, de, ze, oe, &dze, &dose, &s, &oms);
    v16_bwd_fast_raw(1, dd, zd, od, &dzo, &doso, &s, &oms);
    if (__builtin_expect((v16_not_normal_or_zero(dze) | v16_not_normal_or_zero(dose) |
                          v16_not_normal_or_zero(dzo) | v16_not_normal_or_zero(doso)) != 0, 0)) {
      bwd_run_fast(ZG_BF16, pdz + i, pdos + i, pd + i, pz + i, po + i, 32, 0, 0);
      continue;
    }
    __m512i wdz = v32_bf16_interleave(dze, dzo, idx), wdos = v32_bf16_interleave(dose, doso, idx);
    if (nt0) _mm512_stream_si512((void *)(pdz + i), wdz);
    else _mm512_storeu_si512(pdz + i, wdz);
    if (nt1) _mm512_stream_si512((void *)(pdos + i), wdos);
    else _mm512_storeu_si512(pdos + i, wdos);
  }
  if (i < n) bwd_run_fast(ZG_BF16, pdz + i, pdos + i, pd + i, pz + i, po + i, n - i, 0, 0);
}
#undef ZG_TARGET_BF16
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

/* The loop driver's shared output lines (cpu_kernels.h, cpu_loop.c step 5). */
static void stream_line(void *dst, const void *src) { _mm512_stream_si512(dst, _mm512_load_si512(src)); }

/* ---- the table -------------------------------------------------------------------------- */

static const zg_cpu_kernels avx512_kernels = {
    "avx512",
    {load_f32, load_f16, load_bf16},
    {store_f32, store_f16, store_bf16},
    bwd_avx512,
    fwd_avx512,
    bwd16_avx512,
    fwd16_avx512,
    {bwd_run_f32, bwd_run_f16, bwd_run_bf16},
    {fwd_run_f32, fwd_run_f16, fwd_run_bf16},
    stream_line,
};

/* The same table with the AVX512_BF16 bfloat16 run (same results, fewer instructions). */
static const zg_cpu_kernels avx512_bf16_kernels = {
    "avx512",
    {load_f32, load_f16, load_bf16},
    {store_f32, store_f16, store_bf16},
    bwd_avx512,
    fwd_avx512,
    bwd16_avx512,
    fwd16_avx512,
    {bwd_run_f32, bwd_run_f16, bwd_run_bf16_cvt},
    {fwd_run_f32, fwd_run_f16, fwd_run_bf16},
    stream_line,
};

const zg_cpu_kernels *zg_cpu_kernels_avx512(void) {
  return __builtin_cpu_supports("avx512bf16") ? &avx512_bf16_kernels : &avx512_kernels;
}
