/* The SIMD CPU path, written once: the exp, sigmoid, backward and forward recipes, their
 * chunk loops, tails, fix-ups, conversions and row kernels. CMake compiles this file once per
 * ISA with that ISA's flags and one of ZG_VEC_AVX2, ZG_VEC_AVX512, ZG_VEC_NEON defined, which
 * selects the mapping header (vec_<isa>.h: inline wrappers over the intrinsics, plus hooks
 * for what only one ISA has). Everything is static except the table getter, whose name
 * carries the ISA (zg_cpu_kernels_avx2, ...).
 *
 * The recipes are documented in simd_exp.h: the accurate one for float32 outputs (bwd, fwd,
 * the float32 row kernels), the 16-bit one when every output is 16-bit (bwd_out16, fwd_out16 and the
 * float16/bfloat16 row kernels, where the mapping has VEC_HAS_OUT16). AVX2 and NEON use the
 * same operations in the same order and give the same bits; AVX-512 takes 1/(1 + e) from
 * rcp14 and 2^k from scalef (the same bound, not always the same bits).
 *
 * Every element goes through the same vector code (tails are masked or run on a zero-padded
 * copy), so a result never depends on where a block or a run starts or ends: any thread
 * count gives the same bits. Lanes whose result comes out inf or NaN, and in the 16-bit
 * recipe lanes near the root of 1 + z(1 - s), are recomputed by gate_math.h's float64
 * formula on their inputs (zg_gate_bwd_f32 / zg_gate_fwd_f32), the same function the scalar
 * path uses: every NaN result of every CPU path is the default quiet NaN 0x7fc00000. */
#include <stdint.h>
#include <string.h>

#include "../gate_math.h"
#include "cpu_kernels.h"
#include "simd_exp.h"

#if defined(ZG_VEC_AVX2)
#include "vec_avx2.h"
#elif defined(ZG_VEC_AVX512)
#include "vec_avx512.h"
#elif defined(ZG_VEC_NEON)
#include "vec_neon.h"
#else
#error "kernels_simd.c: define ZG_VEC_AVX2, ZG_VEC_AVX512 or ZG_VEC_NEON"
#endif

#define ZG_INLINE static inline __attribute__((always_inline))
#include "simd_recipe.h"
#define ZG_PASTE2(a, b) a##b
#define ZG_PASTE(a, b) ZG_PASTE2(a, b)

/* ---- the accurate exp and sigmoid (simd_exp.h, steps 1-5) -------------------------------- */

/* p * 2^k for x's k (j from the shifter: its low mantissa bits hold 2^22 + k). One scale
 * when every result is normal; else 2^k1 * 2^k2 with k1 = floor(k/2) (step 5). Both give
 * the same bits where both apply. AVX-512: scalef, one rounding for all results. */
ZG_INLINE V exp_scale(V p, V j, V k, int split) {
#if VEC_HAS_AVX512
  (void)j;
  (void)split;
  return v_scalef(p, k);
#else
  (void)k;
  const VI bias = vi_set1(127);
  if (!split) return v_mul(p, v_from_bits(vi_exp_field(vi_add(v_bits(j), bias))));
  VI ki = vi_sub(v_bits(j), v_bits(v_set1(0x1.8p23f)));
  VI k1 = vi_half(ki);
  VI k2 = vi_sub(ki, k1);
  return v_mul(v_mul(p, v_from_bits(vi_exp_field(vi_add(k1, bias)))), v_from_bits(vi_exp_field(vi_add(k2, bias))));
#endif
}

/* e + elo = exp(x) for x <= 0 or NaN: e alone within 0.69 ulp (0.78 for subnormal results),
 * elo its rounding error scaled (simd_exp.h). The max passes a NaN x through. */
ZG_INLINE V exp_neg(V x, V *elo) {
  const V shifter = v_set1(0x1.8p23f);
  x = v_max(v_set1(ZG_EXP_LO), x);
  V j = v_fma(x, v_set1(ZG_EXP_LOG2E), shifter);
  V k = v_sub(j, shifter);
  V plo, p = exp_core(x, k, &plo);
  int split = v_lt_bits(x, v_set1(-87.0f)) != 0;
  *elo = exp_scale(plo, j, k, split); /* 0 once e is subnormal: fine */
  return exp_scale(p, j, k, split);
}

/* s = sigmoid(z) and oms = 1 - s from e + elo = exp(-|z|) (simd_recipe.h); z < 0 (and -0,
 * where both are 1/2) takes e*r. */
ZG_INLINE void sigmoid_pair(V z, V e, V elo, V *s, V *oms) {
  V r, er;
  sigmoid_parts_acc(e, elo, &r, &er);
  *s = v_sel_neg(z, er, r);
  *oms = v_sel_neg(z, r, er);
}

/* ---- the one fix-up ------------------------------------------------------------------------
 * Lanes set in m0 (first output: dz or out) and m1 (dout_scaled) get gate_math.h's float64
 * formula on their inputs, rounded once (zg_gate_bwd_f32 / zg_gate_fwd_f32, NaN as the
 * default quiet NaN). A float32 intermediate can overflow or underflow where float64 does
 * not (dout*z = inf times s = 0; s = 0 below z ~ -103.97 times an infinite dout or o), so
 * this is what makes inf/NaN inputs and such products follow the formula. Rare: out of line
 * and by value, so the hot loops keep their registers. x0, x1, x2 are the op's inputs in the
 * order of its parameters (bwd: dout, z, o; fwd: o, z). */

__attribute__((noinline, cold)) static void gate_fix(int op, unsigned m0, unsigned m1, V x0, V x1, V x2,
                                                     V *r0, V *r1) {
  float a[VL], b[VL], c[VL], p[VL], q[VL];
  v_st(a, x0);
  v_st(b, x1);
  v_st(c, x2);
  v_st(p, *r0);
  v_st(q, *r1);
  for (int j = 0; j < VL; j++) {
    float f0, f1 = 0.0f;
    if (!(((m0 | m1) >> j) & 1u)) continue;
    if (op == ZG_OP_BWD) zg_gate_bwd_f32(a[j], b[j], c[j], &f0, &f1);
    else f0 = zg_gate_fwd_f32(a[j], b[j]);
    if ((m0 >> j) & 1u) p[j] = f0;
    if ((m1 >> j) & 1u) q[j] = f1;
  }
  *r0 = v_ld(p);
  *r1 = v_ld(q);
}

/* ---- the accurate recipe: one vector -------------------------------------------------------
 * bwd: dz by dz_acc (simd_recipe.h), dos = (dout*z)*s. fwd: out = (o*z)*s.
 * With fix = 0 the results are only flagged (*flag turns NaN when a lane came out inf or NaN)
 * and the caller redoes the chunk with fix = 1: one test per chunk instead of per vector. */
ZG_INLINE void gate_acc(int op, V x0, V x1, V x2, V e, V elo, V *r0, V *r1, V *flag, int fix) {
  V s, oms, a0, a1 = v_zero(), chk;
  sigmoid_pair(x1, e, elo, &s, &oms);
  if (op == ZG_OP_BWD) {
    V a, h;
    a0 = dz_acc(x0, x1, x2, s, oms, &a, &h); /* an infinite a: gate_fix */
    a1 = v_mul(v_mul(x0, x1), s);
    chk = v_add(a0, a1); /* a sum can only add false alarms */
  } else {
    a0 = v_mul(v_mul(x0, x1), s);
    chk = a0;
  }
  if (!fix)
    *flag = v_fma(chk, v_zero(), *flag);
  else if (v_nonfinite_bits(chk))
    gate_fix(op, v_nonfinite_bits(a0), op == ZG_OP_BWD ? v_nonfinite_bits(a1) : 0u, x0, x1, x2, &a0, &a1);
  *r0 = a0;
  *r1 = a1;
}

/* The math runs in two passes over chunks of VEC_CHUNK elements: exp first, into a small
 * buffer in L1, then the rest. One pass chains ~90 cycles of latency per vector, more than the
 * out-of-order window overlaps; two shorter chains keep the vector units busy. */
ZG_INLINE void exp_pass(float *e, float *elo, const float *z, int64_t m) {
  for (int64_t j = 0; j < m; j += VL) {
    V lo, v = exp_neg(v_negabs(v_ld_part(z + j, m - j)), &lo);
    v_st(e + j, v);
    v_st(elo + j, lo);
  }
}

/* Inputs of one vector at element i (fwd has two: x2 is not read). */
#define ZG_LD3(op, in, i, rem, x0, x1, x2)                                               \
  V x0 = v_ld_part((in)[0] + (i), rem), x1 = v_ld_part((in)[1] + (i), rem),              \
    x2 = (op) == ZG_OP_BWD ? v_ld_part((in)[2] + (i), rem) : x1

/* The product pass over one chunk of m elements; returns the flag (only with fix = 0). */
ZG_INLINE V acc_chunk(int op, float *const *out, const float *const *in, const float *e,
                      const float *elo, int64_t m, int fix) {
  V flag = v_zero();
  for (int64_t j = 0; j < m; j += VL) {
    V r0, r1;
    ZG_LD3(op, in, j, m - j, x0, x1, x2);
    gate_acc(op, x0, x1, x2, v_ld(e + j), v_ld(elo + j), &r0, &r1, &flag, fix);
    v_st_part(out[0] + j, m - j, r0);
    if (op == ZG_OP_BWD) v_st_part(out[1] + j, m - j, r1);
  }
  return flag;
}

/* The float kernels (cpu_kernels.h zg_bwd_fn / zg_fwd_fn): outputs never alias inputs, so a
 * chunk with an inf/NaN lane can be redone from its inputs. */
ZG_INLINE void acc_kernel(int op, float *o0, float *o1, const float *i0, const float *i1,
                          const float *i2, int64_t n) {
  _Alignas(64) float e[VEC_CHUNK], elo[VEC_CHUNK];
  for (int64_t i = 0; i < n; i += VEC_CHUNK) {
    int64_t m = n - i < VEC_CHUNK ? n - i : VEC_CHUNK;
    float *out[2] = {o0 + i, o1 ? o1 + i : 0};
    const float *in[3] = {i0 + i, i1 + i, i2 ? i2 + i : 0};
    exp_pass(e, elo, in[1], m);
    if (v_nonfinite_bits(acc_chunk(op, out, in, e, elo, m, 0))) acc_chunk(op, out, in, e, elo, m, 1);
  }
}

/* The float kernels of the table (zg_bwd_fn / zg_fwd_fn) over one of the recipes. */
#define ZG_KERNEL_FNS(sfx, IMPL)                                                                  \
  static void bwd##sfx(float *dz, float *dos, const float *dout, const float *z, const float *o, \
                       int64_t n) {                                                              \
    IMPL(ZG_OP_BWD, dz, dos, dout, z, o, n);                                                        \
  }                                                                                              \
  static void fwd##sfx(float *out, const float *o, const float *z, int64_t n) {                  \
    IMPL(ZG_OP_FWD, out, 0, o, z, 0, n);                                                            \
  }
ZG_KERNEL_FNS(_kernel, acc_kernel)

/* ---- loads and stores of the staged path ---------------------------------------------------
 * Conversions are exact (float16 and bfloat16 widen exactly; narrowing is round to nearest
 * even, NaN kept quiet), so these give gate_math.h's bits whatever instructions they use.
 * No fence here: cpu_loop.c issues one sfence per thread after its last store of the call. */

ZG_INLINE V ld_dt(int dt, const void *base, int64_t i, int64_t rem) {
  if (dt == ZG_F32) return v_ld_part((const float *)base + i, rem);
  const uint16_t *p = (const uint16_t *)base + i;
  if (rem >= VL) return v_ld_h(dt, p);
  uint16_t t[VL] = {0};
  memcpy(t, p, (size_t)rem * 2);
  return v_ld_h(dt, t);
}

ZG_INLINE void st_dt(int dt, void *base, int64_t i, int64_t rem, V a, int nt) {
  if (dt == ZG_F32) {
    if (rem >= VL && nt) v_stream((float *)base + i, a);
    else v_st_part((float *)base + i, rem, a);
    return;
  }
  uint16_t *p = (uint16_t *)base + i, t[VL];
  if (rem >= VL) {
    v_st_h(dt, p, a, nt);
    return;
  }
  v_st_h(dt, t, a, 0);
  memcpy(p, t, (size_t)rem * 2);
}

ZG_INLINE void load_dt(int dt, float *dst, const void *src, int64_t n, int64_t stride) {
  if (stride != 1) {
    const uint16_t *h = (const uint16_t *)src;
    for (int64_t i = 0; i < n; i++)
      dst[i] = dt == ZG_F32 ? ((const float *)src)[i * stride]
             : dt == ZG_F16 ? v_h2f_1(h[i * stride]) : zg_bf16_to_f32(h[i * stride]);
    return;
  }
  for (int64_t i = 0; i < n; i += VL) v_st_part(dst + i, n - i, ld_dt(dt, src, i, n - i));
}

ZG_INLINE void store_dt(int dt, void *dst, const float *src, int64_t n, int64_t stride, int streaming) {
  int64_t i = 0;
  if (stride != 1) {
    uint16_t *h = (uint16_t *)dst;
    for (; i < n; i++) {
      if (dt == ZG_F32) ((float *)dst)[i * stride] = src[i];
      else h[i * stride] = dt == ZG_F16 ? v_f2h_1(src[i]) : zg_f32_to_bf16(src[i]);
    }
    return;
  }
#if VEC_HAS_STREAM
  if (streaming) {
    /* ordinary stores up to a line, so that each run of non-temporal ones fills whole lines */
    int64_t h = zg_line_head(dst, dt == ZG_F32 ? 4 : 2, n);
    for (; i < h; i += VL) st_dt(dt, dst, i, h - i, v_ld_part(src + i, h - i), 0);
    for (i = h; i + VL <= n; i += VL) st_dt(dt, dst, i, VL, v_ld(src + i), 1);
  }
#else
  (void)streaming;
#endif
  for (; i < n; i += VL) st_dt(dt, dst, i, n - i, v_ld_part(src + i, n - i), 0);
}

#define ZG_DTYPE_FNS(sfx, DT)                                                                    \
  static void load_##sfx(float *dst, const void *src, int64_t n, int64_t stride) {              \
    load_dt(DT, dst, src, n, stride);                                                            \
  }                                                                                              \
  static void store_##sfx(void *dst, const float *src, int64_t n, int64_t stride, int streaming) { \
    store_dt(DT, dst, src, n, stride, streaming);                                                \
  }
ZG_DTYPE_FNS(f32, ZG_F32)
ZG_DTYPE_FNS(f16, ZG_F16)
ZG_DTYPE_FNS(bf16, ZG_BF16)

/* ---- row kernels ------------------------------------------------------------------------
 * A row kernel (cpu_kernels.h, zg_rows) takes each row in three parts, [i0, i1) with the
 * row's own pointers: the head, the streamed whole lines, the rest (the driver's cut). Every
 * part runs the same vector code, so the cut never changes a bit. */

/* Where the inputs are prefetched from: `dist` bytes ahead of the loads (0 = no prefetch),
 * within the row (row_bytes of each input) and then in the next row of the call (NULL
 * where this row is the call's last). */
typedef struct zg_pf {
  const char *next[3];
  int64_t dist, row_bytes;
} zg_pf;

/* One prefetch per input for the line `at + dist` bytes into the row. always_inline: gcc
 * treats a function that only prefetches as const and drops calls it did not inline. */
ZG_INLINE void prefetch_at(int op, const char *const *in, const zg_pf *pf, int64_t at) {
  const int64_t ahead = at + pf->dist;
  for (int t = 0; t < (op == ZG_OP_BWD ? 3 : 2); t++) {
    if (ahead < pf->row_bytes) __builtin_prefetch(in[t] + ahead, 0, 3);
    else if (pf->next[t] && ahead - pf->row_bytes < pf->row_bytes)
      __builtin_prefetch(pf->next[t] + (ahead - pf->row_bytes), 0, 3);
  }
}

/* Elements [i0, i1) of one float32 row: the accurate recipe (two passes per chunk, as
 * acc_kernel), outputs straight from registers, whole vectors non-temporally where nt0 / nt1
 * (the part is whole lines then); inf/NaN checked per vector (a chunk cannot be redone in
 * place: dout_scaled may already have overwritten dout). */
ZG_INLINE void row_acc(int op, char *const *out, const char *const *in, int64_t i0, int64_t i1, int nt0,
                       int nt1, const zg_pf *pf) {
  float *o0 = (float *)out[0], *o1 = (float *)out[1];
  const float *fin[3] = {(const float *)in[0], (const float *)in[1], (const float *)in[2]};
  _Alignas(64) float e[VEC_CHUNK], elo[VEC_CHUNK];
  for (int64_t i = i0; i < i1; i += VEC_CHUNK) {
    const int64_t m = i1 - i < VEC_CHUNK ? i1 - i : VEC_CHUNK;
    if (pf->dist)
      for (int64_t q = 0; q < m; q += 16) prefetch_at(op, in, pf, (i + q) * 4);
    exp_pass(e, elo, fin[1] + i, m);
    for (int64_t j = 0; j < m; j += VL) {
      V r0, r1, flag = v_zero();
      ZG_LD3(op, fin, i + j, m - j, x0, x1, x2);
      gate_acc(op, x0, x1, x2, v_ld(e + j), v_ld(elo + j), &r0, &r1, &flag, 1);
      if (VEC_HAS_STREAM && nt0) v_stream(o0 + i + j, r0);
      else v_st_part(o0 + i + j, m - j, r0);
      if (op == ZG_OP_BWD && VEC_HAS_STREAM && nt1) v_stream(o1 + i + j, r1);
      else if (op == ZG_OP_BWD) v_st_part(o1 + i + j, m - j, r1);
    }
  }
}

#if VEC_HAS_OUT16
/* ---- the 16-bit recipe (simd_exp.h): problems with 16-bit outputs only ----
 * bf selects the bfloat16 variant, a constant at every call site: on AVX-512 the exp's
 * degree-4 polynomial, rcp14 without the Newton step and t = (d + z w) r; on every ISA it
 * drops the root test (bfloat16 runs: a bfloat16 z is never within 2.8e-3 of the root). */

/* exp(-|z|) (NaN for NaN). AVX2: Cody-Waite, the degree-5 polynomial F, 2^k as exp_scale;
 * within ~1.7e-7 relative for normal results. AVX-512: y = -|z| log2(e), f = y - round(y)
 * by VREDUCEPS, 2^f by G (or H with bf), scalef; no clamp needed (y = -inf gives f = 0 and
 * scalef(p, -inf) = 0). */
ZG_INLINE V exp_out16(V z, int bf) {
  const V one = v_set1(1.0f);
#if VEC_HAS_AVX512
  V y = v_mul(v_negabs(z), v_set1(ZG_EXP_LOG2E));
  V f = v_reduce(y);
  V k = v_sub(y, f); /* round(y), exact */
  V p;
  if (bf) {
    p = v_fma(v_set1(ZG_EXP2_H4), f, v_set1(ZG_EXP2_H3));
    p = v_fma(p, f, v_set1(ZG_EXP2_H2));
    p = v_fma(p, f, v_set1(ZG_EXP2_H1));
  } else {
    p = v_fma(v_set1(ZG_EXP2_G5), f, v_set1(ZG_EXP2_G4));
    p = v_fma(p, f, v_set1(ZG_EXP2_G3));
    p = v_fma(p, f, v_set1(ZG_EXP2_G2));
    p = v_fma(p, f, v_set1(ZG_EXP2_G1));
  }
  return v_scalef(v_fma(p, f, one), k);
#else
  (void)bf;
  const V shifter = v_set1(0x1.8p23f);
  V x = v_max(v_set1(ZG_EXP_LO), v_negabs(z));
  V j = v_fma(x, v_set1(ZG_EXP_LOG2E), shifter);
  V k = v_sub(j, shifter);
  V r = v_fnma(k, v_set1(ZG_EXP_LN2_LO), v_fnma(k, v_set1(ZG_EXP_LN2_HI), x));
  V p = v_fma(v_set1(ZG_EXP_F5), r, v_set1(ZG_EXP_F4));
  p = v_fma(p, r, v_set1(ZG_EXP_F3));
  p = v_fma(p, r, v_set1(ZG_EXP_F2));
  p = v_fma(p, r, v_set1(ZG_EXP_F1));
  return exp_scale(v_fma(p, r, one), j, k, v_lt_bits(x, v_set1(-87.0f)) != 0);
#endif
}

/* s, 1 - s and t = 1 + z(1 - s). r = 1/(1 + E): AVX2 a division (1/2 exactly at z = 0,
 * where test_special wants dz = dout*o*s exact), AVX-512 rcp14 and one Newton step (none
 * with bf). t = (d + z w) r with w = 1 for z < 0, E for z >= 0 (at the root only d's
 * rounding and E's error reach t), except AVX-512 without bf: fma(z, 1 - s, 1). */
ZG_INLINE void sigmoid_out16(int bf, V z, V *s, V *oms, V *t) {
  const V one = v_set1(1.0f);
  V e = exp_out16(z, bf);
  V d = v_add(one, e);
#if VEC_HAS_AVX512
  V r = v_rcp14(d);
  if (!bf) r = v_fma(r, v_fnma(d, r, one), r);
#else
  V r = v_div(one, d);
#endif
  V er = v_mul(e, r);
  *s = v_sel_neg(z, er, r);
  *oms = v_sel_neg(z, r, er);
  if (VEC_HAS_AVX512 && !bf) *t = v_fma(z, *oms, one);
  else *t = v_mul(v_fma(z, v_sel_neg(z, one, e), d), r);
}

/* dz = (dout*o) * (s*t), dos = (dout*z) * s, out = (o*z) * s: the products of two inputs
 * first (simd_exp.h). Lanes with an inf or NaN result, and for bwd without bf those with
 * |t| < 2^-6 (z within ~1e-8 of the root makes t smaller than its error), go to gate_fix. */
ZG_INLINE void gate_out16(int op, int bf, V x0, V x1, V x2, V *r0, V *r1) {
  V s, oms, t, a0, a1 = v_zero(), chk;
  sigmoid_out16(bf, x1, &s, &oms, &t);
  if (op == ZG_OP_BWD) {
    a0 = v_mul(v_mul(x0, x2), v_mul(s, t));
    a1 = v_mul(v_mul(x0, x1), s);
    chk = v_add(a0, a1);
  } else {
    a0 = v_mul(v_mul(x0, x1), s);
    chk = a0;
  }
  unsigned bad = v_nonfinite_bits(chk);
  if (op == ZG_OP_BWD && !bf) bad |= v_lt_bits(v_abs(t), v_set1(0x1p-6f));
  if (__builtin_expect(bad != 0, 0)) gate_fix(op, bad, bad, x0, x1, x2, &a0, &a1);
  *r0 = a0;
  *r1 = a1;
}

/* Staged float kernels with the 16-bit recipe (table entries bwd_out16 / fwd_out16). */
ZG_INLINE void out16_kernel(int op, float *o0, float *o1, const float *i0, const float *i1,
                           const float *i2, int64_t n) {
  const float *in[3] = {i0, i1, i2};
  for (int64_t j = 0; j < n; j += VL) {
    V r0, r1;
    ZG_LD3(op, in, j, n - j, x0, x1, x2);
    gate_out16(op, 0, x0, x1, x2, &r0, &r1);
    v_st_part(o0 + j, n - j, r0);
    if (op == ZG_OP_BWD) v_st_part(o1 + j, n - j, r1);
  }
}
ZG_KERNEL_FNS(_out16_kernel, out16_kernel)

/* 16-bit rows: 2*VL elements per step, widened and narrowed in registers (the
 * mapping's v2_ld_run / v2_st_run; with cvt, AVX512_BF16's narrowing). */
ZG_INLINE void out16_step(int op, int dt, int cvt, char *const *out, const char *const *in, int64_t at,
                         int nt0, int nt1) {
  V2 x0 = v2_ld_run(dt, in[0] + at), x1 = v2_ld_run(dt, in[1] + at);
  V2 x2 = op == ZG_OP_BWD ? v2_ld_run(dt, in[2] + at) : x1, r0, r1;
  gate_out16(op, dt == ZG_BF16, x0.a, x1.a, x2.a, &r0.a, &r1.a);
  gate_out16(op, dt == ZG_BF16, x0.b, x1.b, x2.b, &r0.b, &r1.b);
  for (int k = 0; k < (op == ZG_OP_BWD ? 2 : 1); k++) {
#if VEC_HAS_BF16CVT
    if (cvt) {
      v2_st_run_bf16cvt(out[k] + at, k ? r1 : r0, k ? nt1 : nt0);
      continue;
    }
#endif
    (void)cvt;
    v2_st_run(dt, out[k] + at, k ? r1 : r0, k ? nt1 : nt0);
  }
}

/* Elements [a, a + m) of a row of len elements, m < 2*VL, written alone: one whole step over
 * a window of the row that holds them, its inputs read in place, or, in a row shorter than a
 * step, over zero-filled copies. Lanes outside [a, a + m) are discarded, so what they read
 * may already be overwritten (in place): every lane depends on its own inputs only. */
ZG_INLINE void out16_part(int op, int dt, char *const *out, const char *const *in, int64_t a, int64_t m,
                          int64_t len) {
  const int64_t step = 2 * VL;
  _Alignas(64) char b[5][4 * VL];
  char *bout[2] = {b[3], b[4]};
  const char *win[3] = {b[0], b[1], b[2]};
  int64_t w = a; /* the window's first element */
  if (len >= step) {
    if (a + step > len) w = len - step;
    for (int t = 0; t < (op == ZG_OP_BWD ? 3 : 2); t++) win[t] = in[t] + w * 2;
  } else {
    memset(b, 0, 3 * sizeof b[0]);
    for (int t = 0; t < (op == ZG_OP_BWD ? 3 : 2); t++) memcpy(b[t], in[t] + a * 2, (size_t)(m * 2));
  }
  out16_step(op, dt, 0, bout, win, 0, 0, 0);
  for (int k = 0; k < (op == ZG_OP_BWD ? 2 : 1); k++) memcpy(out[k] + a * 2, bout[k] + (a - w) * 2, (size_t)(m * 2));
}

/* Elements [i0, i1) of one 16-bit row of len elements: whole steps of 2*VL elements
 * (non-temporal where nt0 / nt1: the part is whole lines then), then the rest. */
ZG_INLINE void row_out16(int op, int dt, int cvt, char *const *out, const char *const *in, int64_t i0,
                         int64_t i1, int64_t len, int nt0, int nt1, const zg_pf *pf) {
  const int64_t es = 2, step = 2 * VL;
  int64_t i = i0;
  for (; i + step <= i1; i += step) {
    if (pf->dist) prefetch_at(op, in, pf, i * es);
    out16_step(op, dt, cvt, out, in, i * es, nt0, nt1);
  }
  if (i < i1) out16_part(op, dt, out, in, i, i1 - i, len);
}
#endif /* VEC_HAS_OUT16 */

/* The row kernels of cpu_kernels.h (zg_rows_fn), one per operator, dtype dt and cvt (the
 * AVX512_BF16 narrowing): the parts of each row by row_acc (float32) or row_out16. */
#define ZG_ROW_PART(op, dt, cvt, out, in, i0, i1, len, nt0, nt1, pf)                            \
  do {                                                                                           \
    if (dt == ZG_F32) row_acc(op, out, in, i0, i1, nt0, nt1, pf);                                \
    else row_out16(op, dt, cvt, out, in, i0, i1, len, nt0, nt1, pf);                             \
  } while (0)
#define ZG_ROWS_FN(name, ATTR, op, dt, cvt)                                                      \
  ATTR static void name(const zg_rows *r) {                                                      \
    const int64_t es = dt == ZG_F32 ? 4 : 2, h = r->head, hb = r->head + r->body;                \
    for (int64_t k = 0; k < r->count; k++) {                                                     \
      /* fwd's in[2] and out[1] are NULL: never offset */                                      \
      char *out[2] = {r->out[0] + k * r->out_step[0],                                            \
                      op == ZG_OP_BWD ? r->out[1] + k * r->out_step[1] : NULL};                     \
      const char *in[3] = {r->in[0] + k * r->in_step[0], r->in[1] + k * r->in_step[1],           \
                           op == ZG_OP_BWD ? r->in[2] + k * r->in_step[2] : NULL};                  \
      zg_pf pf = {{NULL, NULL, NULL}, r->prefetch, r->len * es};                                 \
      for (int t = 0; t < (op == ZG_OP_BWD ? 3 : 2) && k + 1 < r->count; t++)                      \
        pf.next[t] = in[t] + r->in_step[t];                                                      \
      ZG_ROW_PART(op, dt, cvt, out, in, 0, h, r->len, 0, 0, &pf);                                \
      ZG_ROW_PART(op, dt, cvt, out, in, h, hb, r->len, r->nt[0], r->nt[1], &pf);                 \
      ZG_ROW_PART(op, dt, cvt, out, in, hb, r->len, r->len, 0, 0, &pf);                          \
    }                                                                                            \
  }
#define ZG_ROWS_FNS(sfx, ATTR, dt, cvt)              \
  ZG_ROWS_FN(bwd_rows_##sfx, ATTR, ZG_OP_BWD, dt, cvt) \
  ZG_ROWS_FN(fwd_rows_##sfx, ATTR, ZG_OP_FWD, dt, cvt)
#if VEC_HAS_OUT16
ZG_ROWS_FNS(f32, , ZG_F32, 0)
ZG_ROWS_FNS(f16, , ZG_F16, 0)
ZG_ROWS_FNS(bf16, , ZG_BF16, 0)
#if VEC_HAS_BF16CVT
ZG_ROWS_FNS(bf16_cvt, VEC_TARGET_BF16, ZG_BF16, 1)
#endif
#endif

/* ---- the tables --------------------------------------------------------------------------- */

#if VEC_HAS_OUT16
#define ZG_TABLE(BF16_ROWS)                                                                      \
  {VEC_NAME,         {load_f32, load_f16, load_bf16},       {store_f32, store_f16, store_bf16}, \
   bwd_kernel,       fwd_kernel,                            bwd_out16_kernel,                       \
   fwd_out16_kernel,     {bwd_rows_f32, bwd_rows_f16, bwd_rows_##BF16_ROWS},                       \
   {fwd_rows_f32, fwd_rows_f16, fwd_rows_##BF16_ROWS}}
#else /* staged only; 16-bit outputs take the float kernels; streaming is ignored */
#define ZG_TABLE(BF16_ROWS)                                                                      \
  {VEC_NAME, {load_f32, load_f16, load_bf16}, {store_f32, store_f16, store_bf16}, bwd_kernel,   \
   fwd_kernel, NULL, NULL, {NULL, NULL, NULL}, {NULL, NULL, NULL}}
#endif

static const zg_cpu_kernels simd_kernels = ZG_TABLE(bf16);
const zg_cpu_kernels *ZG_PASTE(zg_cpu_kernels_, VEC_ISA)(void) { return &simd_kernels; }

#if VEC_HAS_BF16CVT
/* The same table with the AVX512_BF16 bfloat16 runs (same results, fewer instructions);
 * cpu_dispatch.c picks it when the CPU has AVX512_BF16. */
static const zg_cpu_kernels simd_kernels_bf16 = ZG_TABLE(bf16_cvt);
const zg_cpu_kernels *ZG_PASTE(ZG_PASTE(zg_cpu_kernels_, VEC_ISA), _bf16)(void) { return &simd_kernels_bf16; }
#endif
