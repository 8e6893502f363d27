/* The 16-bit recipe and the fused runs of one x86 SIMD path
 * (src/cpu/kernels_simd.c over vec_avx2.h or vec_avx512.h, picked by ZG_TEST_AVX512 as in
 * test_simd_exp.c; the kernel file is included whole):
 *   - bwd_out16 / fwd_out16 (simd_exp.h, the 16-bit recipe) rounded to float16 and to bfloat16 meet the
 *     numerics policy (check/zgate_check.h's oracle) with margin on random inputs, on a
 *     dense sweep of the root of 1 + z(1-s) and on the subnormal-s region; the float32
 *     error at the root is printed in ulp of the scale (the analysis says ~1/3 of 4);
 *   - the fused runs give the same bits as staging (load, bwd_out16/fwd_out16 or bwd/fwd, store)
 *     for float32 and float16, and as one whole run for bfloat16 (its runs use the
 *     recipe's bfloat16 form and skip the root test, so staging differs there), whatever
 *     the run is split into, streaming or not, in place or not, special values included;
 *   - avx512: the AVX512_BF16 bfloat16 run equals the integer-rounding one bit for bit.
 * A CPU (or OS) without the path exits 77. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "simd_test_support.h"

#include "zgate_check.h"

#ifdef ZG_TEST_AVX512
#define ZG_VEC_AVX512 1
#include "cpu/kernels_simd.c"
static const char *isa_name = "avx512";
static const zg_cpu_kernels *table(void) { return zg_cpu_kernels_avx512(); }
#define VW 16
typedef __m512 vf;
typedef __mmask16 VMASK;
static VMASK vmask(int64_t rem) { return v_mask(rem); }
static vf vmload(VMASK k, const float *p) { return _mm512_maskz_loadu_ps(k, p); }
static void vmstore(VMASK k, float *p, vf v) { _mm512_mask_storeu_ps(p, k, v); }
#define BF16_OWN_RECIPE 1 /* the bfloat16 variant: fused bfloat16 runs differ from staging */
#else
#define ZG_VEC_AVX2 1
#include "cpu/kernels_simd.c"
static const char *isa_name = "avx2";
static const zg_cpu_kernels *table(void) { return zg_cpu_kernels_avx2(); }
#define VW 8
typedef __m256 vf;
typedef int64_t VMASK;
static VMASK vmask(int64_t rem) { return rem; }
static vf vmload(VMASK k, const float *p) { return v_ld_part(p, k); }
static void vmstore(VMASK k, float *p, vf v) { v_st_part(p, k, v); }
/* AVX2 has one 16-bit recipe for both 16-bit types (simd_exp.h) */
#define BF16_OWN_RECIPE 1 /* fused bfloat16 runs skip the root test that bwd_out16 does */
#endif
/* the 16-bit recipe of kernels_simd.c; bf: the bfloat16 variant (no root test) */
#define VBWD_FAST(bf, d, z, o, dz, dos) gate_out16(ZG_OP_BWD, bf, d, z, o, dz, dos)
static vf VFWD_FAST(int bf, vf o, vf z) {
  vf r0, r1;
  gate_out16(ZG_OP_FWD, bf, o, z, z, &r0, &r1);
  return r0;
}


enum { NN = 1 << 20 };

/* z: the root (a dense sweep and random points near it), wide, the subnormal-s region,
 * small |z|; dout and o over 2^-6..2^6 (inside float16's range after the products). */
static void fill_inputs(float *dout, float *z, float *o, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    int mode = (int)(i % 6);
    z[i] = (float)(mode == 0 ? -1.2785 + (double)(i - n / 2) * 0x1p-24
                 : mode == 1 ? -1.2785 + unif(-1e-2, 1e-2)
                 : mode == 2 ? unif(-30, 30)
                 : mode == 3 ? unif(-104, -85)
                 : mode == 4 ? unif(-1, 1) * pow(10, unif(-6, 1))
                             : unif(-120, 120));
    dout[i] = (float)(unif(-1, 1) * pow(2, unif(-6, 6)));
    o[i] = (float)(unif(-1, 1) * pow(2, unif(-6, 6)));
  }
}

static DLDataType dt_of(int t) {
  DLDataType d = {kDLFloat, 32, 1};
  if (t == ZG_F16) d.bits = 16;
  if (t == ZG_BF16) d.code = kDLBfloat, d.bits = 16;
  return d;
}

static double round_to(int t, float f) {
  return t == ZG_F16 ? zg_f16_to_f32(zg_f32_to_f16(f)) : zg_bf16_to_f32(zg_f32_to_bf16(f));
}

/* The policy's float32 bound (4 ulp of the scale + A), for the root report. */
static double f32_bound(int q, double dout, double z, double o) {
  double s, oms;
  zg_sigmoid_pair_f64(z, &s, &oms);
  double a = q == 0 ? fabs(dout * o) : fabs((q == 1 ? dout : o) * z);
  double sc = q == 0 ? a * s * (1 + fabs(z) * oms) : a * s;
  double al = q == 0 ? 4 * 0x1p-149 * a * (1 + fabs(z)) : 4 * 0x1p-149 * a;
  return 4 * zgate_check_ulp(dt_of(ZG_F32), sc) + al;
}

/* The bfloat16 variant of the recipe on float arrays (what the fused bfloat16 run computes
 * before narrowing). */
static void bwd_bf16_variant(float *dz, float *dos, const float *dout, const float *z, const float *o,
                             int64_t n) {
  for (int64_t j = 0; j < n; j += VW) {
    VMASK k = vmask(n - j);
    vf vdz, vdos;
    VBWD_FAST(1, vmload(k, dout + j), vmload(k, z + j), vmload(k, o + j), &vdz, &vdos);
    vmstore(k, dz + j, vdz);
    vmstore(k, dos + j, vdos);
  }
}
static void fwd_bf16_variant(float *out, const float *o, const float *z, int64_t n) {
  for (int64_t j = 0; j < n; j += VW) {
    VMASK k = vmask(n - j);
    vmstore(k, out + j, VFWD_FAST(1, vmload(k, o + j), vmload(k, z + j)));
  }
}

/* Worst bound_ratio of one recipe's float results rounded to type t; *root gets the worst
 * distance of dz's float32 value (before rounding to t) near the root, in units of the
 * float32 bound, plus half an ulp of t at the reference when half_ulp is set (the
 * near-root clause of the policy: the bfloat16 variant's rcp14 error is relative, ~2^-13,
 * and that clause's half ulp absorbs it; the constant part is what must stay small). */
static void judge(const char *what, int t, const float *dout, const float *z, const float *o,
                  const float *dz, const float *dos, const float *out, double worst[3], double *root,
                  int half_ulp) {
  for (int64_t i = 0; i < NN; i++) {
    double rdz, rdos;
    zg_gate_bwd_f64(dout[i], z[i], o[i], &rdz, &rdos);
    double rout = zg_gate_fwd_f64(o[i], z[i]);
    double got[3] = {dz[i], dos[i], out[i]}, ref[3] = {rdz, rdos, rout};
    for (int q = 0; q < 3; q++) {
      double ratio = 0;
      zgate_check_verdict v = zgate_check_element((zgate_check_quantity)q, dt_of(t), round_to(t, (float)got[q]),
                                                  ref[q], dout[i], z[i], o[i], NULL, &ratio);
      if (v != ZGATE_CHECK_PASS)
        fail_msg("%s %s t=%d q=%d i=%ld: dout %a z %a o %a got %a ref %a", isa_name, what, t, q, (long)i,
                 dout[i], z[i], o[i], got[q], ref[q]);
      if (ratio > worst[q]) worst[q] = ratio;
      if (q == 0 && i % 6 < 2) { /* dz's float32 value itself near the root */
        double allowed = f32_bound(q, dout[i], z[i], o[i]);
        if (half_ulp) allowed += zgate_check_ulp(dt_of(t), ref[q]) / 2;
        double r = fabs(got[q] - ref[q]) / allowed;
        if (r > *root) *root = r;
      }
    }
  }
}

static void test_fast_recipe_policy(void **state) {
  (void)state;
  const zg_cpu_kernels *k = table();
#ifdef ZG_EXPECT_OUT16
  assert_non_null(k->bwd_out16);
  assert_non_null(k->fwd_out16);
#endif
  if (!k->bwd_out16 || !k->fwd_out16) {
    printf("[%s] no 16-bit recipe in this table\n", isa_name);
    return;
  }
  float *dout = malloc(NN * 4), *z = malloc(NN * 4), *o = malloc(NN * 4);
  float *dz = malloc(NN * 4), *dos = malloc(NN * 4), *out = malloc(NN * 4);
  assert_non_null(out);
  fill_inputs(dout, z, o, NN);
  double w16[3] = {0}, wbf[3] = {0}, wvar[3] = {0}, root = 0, root_var = 0;
  k->bwd_out16(dz, dos, dout, z, o, NN);
  k->fwd_out16(out, o, z, NN);
  judge("out16", ZG_F16, dout, z, o, dz, dos, out, w16, &root, 0);
  judge("out16", ZG_BF16, dout, z, o, dz, dos, out, wbf, &root, 0);
  /* the bfloat16 variant only ever sees bfloat16 inputs (fused bfloat16 runs): round them */
  for (int64_t i = 0; i < NN; i++) {
    dout[i] = zg_bf16_to_f32(zg_f32_to_bf16(dout[i]));
    z[i] = zg_bf16_to_f32(zg_f32_to_bf16(z[i]));
    o[i] = zg_bf16_to_f32(zg_f32_to_bf16(o[i]));
  }
  bwd_bf16_variant(dz, dos, dout, z, o, NN);
  fwd_bf16_variant(out, o, z, NN);
  judge("bf16 variant", ZG_BF16, dout, z, o, dz, dos, out, wvar, &root_var, 1);
  printf("[%s] 16-bit recipe, worst bound_ratio: f16 dz %.3f dos %.3f out %.3f; bf16 dz %.3f dos %.3f out %.3f;"
         " dz near the root within %.3f of the float32 bound\n",
         isa_name, w16[0], w16[1], w16[2], wbf[0], wbf[1], wbf[2], root);
  printf("[%s] its bfloat16 variant: bf16 dz %.3f dos %.3f out %.3f; dz near the root within %.3f of the"
         " float32 bound + half an ulp of bfloat16\n", isa_name, wvar[0], wvar[1], wvar[2], root_var);
  for (int q = 0; q < 3; q++) assert_true(w16[q] <= 0.75 && wbf[q] <= 0.75 && wvar[q] <= 0.75);
  assert_true(root <= 0.6 && root_var <= 0.6);
  free(dout); free(z); free(o); free(dz); free(dos); free(out);
}

/* ---- fused runs vs staging --------------------------------------------------------------- */

enum { RN = 6007 };

static float special_value(void) {
  static const float sv[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-40f, -3e-39f, 88.7f,
                             -88.7f, -100.0f, -103.9f, 104.0f, 1e30f, -1e30f, 3e38f, -1.2785f, 65504.0f};
  return sv[next_u64() % (sizeof sv / sizeof sv[0])];
}

static void fill_typed(int t, void *p, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float f = next_u64() % 16 == 0 ? special_value() : (float)(unif(-1, 1) * pow(2, unif(-8, 8)));
    if (next_u64() % 8 == 0) f = (float)unif(-110, 110);
    if (t == ZG_F32) ((float *)p)[i] = f;
    else if (t == ZG_F16) ((uint16_t *)p)[i] = zg_f32_to_f16(f);
    else ((uint16_t *)p)[i] = zg_f32_to_bf16(f);
  }
}

/* Bits equal, or both NaN (payloads are not pinned by the contract). */
static void assert_same(int t, const void *a, const void *b, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    if (t == ZG_F32) {
      float x = ((const float *)a)[i], y = ((const float *)b)[i];
      if (isnan(x) && isnan(y)) continue;
      if (zg_f32_bits(x) != zg_f32_bits(y)) fail_msg("%s f32 element %ld: %a vs %a", isa_name, (long)i, x, y);
    } else {
      uint16_t x = ((const uint16_t *)a)[i], y = ((const uint16_t *)b)[i];
      uint16_t inf = t == ZG_F16 ? 0x7c00u : 0x7f80u;
      if ((x & 0x7fffu) > inf && (y & 0x7fffu) > inf) continue;
      if (x != y) fail_msg("%s dtype %d element %ld: %04x vs %04x", isa_name, t, (long)i, x, y);
    }
  }
}

/* The staged result: widen, the float kernel the loop driver would pick, narrow. */
static void staged_bwd(const zg_cpu_kernels *k, int t, void *dz, void *dos, const void *dout,
                       const void *z, const void *o, int64_t n) {
  float *f = malloc(5 * (size_t)n * 4);
  assert_non_null(f);
  k->load[t](f, dout, n, 1);
  k->load[t](f + n, z, n, 1);
  k->load[t](f + 2 * n, o, n, 1);
  zg_bwd_fn bwd = t == ZG_F32 || !k->bwd_out16 ? k->bwd : k->bwd_out16;
  for (int64_t i = 0; i < n; i += ZG_CPU_BLOCK) {
    int64_t m = n - i < ZG_CPU_BLOCK ? n - i : ZG_CPU_BLOCK;
    bwd(f + 3 * n + i, f + 4 * n + i, f + i, f + n + i, f + 2 * n + i, m);
  }
  k->store[t](dz, f + 3 * n, n, 1, 0);
  k->store[t](dos, f + 4 * n, n, 1, 0);
  free(f);
}

static void staged_fwd(const zg_cpu_kernels *k, int t, void *out, const void *o, const void *z, int64_t n) {
  float *f = malloc(3 * (size_t)n * 4);
  assert_non_null(f);
  k->load[t](f, o, n, 1);
  k->load[t](f + n, z, n, 1);
  zg_fwd_fn fwd = t == ZG_F32 || !k->fwd_out16 ? k->fwd : k->fwd_out16;
  for (int64_t i = 0; i < n; i += ZG_CPU_BLOCK) {
    int64_t m = n - i < ZG_CPU_BLOCK ? n - i : ZG_CPU_BLOCK;
    fwd(f + 2 * n + i, f + i, f + n + i, m);
  }
  k->store[t](out, f + 2 * n, n, 1, 0);
  free(f);
}

/* One row-kernel call: `count` rows of `len` elements, rows `len` elements apart (so the
 * batch covers count*len contiguous elements); nt asks the outputs to stream wherever they
 * start, cut as the loop driver cuts, with a software prefetch distance too. */
static void rows_call(const zg_cpu_kernels *k, int t, int bwd, char *o0, char *o1, const char *i0,
                      const char *i1, const char *i2, int64_t len, int64_t count, int nt) {
  const int64_t es = t == ZG_F32 ? 4 : 2, step = len * es;
  zg_rows r;
  memset(&r, 0, sizeof r);
  r.in[0] = i0; r.in[1] = i1; r.in[2] = bwd ? i2 : NULL;
  r.out[0] = o0; r.out[1] = bwd ? o1 : NULL;
  for (int q = 0; q < 3; q++) r.in_step[q] = r.in[q] ? step : 0;
  for (int q = 0; q < 2; q++) r.out_step[q] = r.out[q] ? step : 0;
  r.len = len;
  r.count = count;
  /* the driver's cut (cpu_loop.c, zg_rows_batch): at o0's first line, the same for every row
   * when rows are whole lines apart */
  r.body = len;
  if (nt && (count == 1 || step % 64 == 0)) {
    r.head = zg_line_head(o0, es, len);
    r.body = (len - r.head) / (64 / es) * (64 / es);
    r.nt[0] = 1;
    r.nt[1] = bwd && ((uintptr_t)o1 - (uintptr_t)o0) % 64 == 0;
  }
  r.prefetch = nt ? 256 : 0;
  (bwd ? k->bwd_rows : k->fwd_rows)[t](&r);
}

/* Random pieces of RN elements: a single row, or whole rows of a random length. */
static void rows_split(const zg_cpu_kernels *k, int t, int bwd, char *o0, char *o1, const char *i0,
                       const char *i1, const char *i2) {
  const int64_t es = t == ZG_F32 ? 4 : 2;
  for (int64_t i = 0; i < RN;) {
    int64_t m = 1 + (int64_t)(next_u64() % 700), len = m, count = 1;
    if (i + m > RN) m = len = RN - i;
    if (next_u64() % 2) { /* rows of len elements */
      len = 1 + (int64_t)(next_u64() % 96);
      count = m / len;
      if (count == 0) { len = m; count = 1; }
      m = len * count;
    }
    rows_call(k, t, bwd, o0 + i * es, bwd ? o1 + i * es : NULL, i0 + i * es, i1 + i * es,
              bwd ? i2 + i * es : NULL, len, count, (int)(next_u64() % 2));
    i += m;
  }
}

static void check_runs(const zg_cpu_kernels *k, const char *what) {
  for (int t = ZG_F32; t <= ZG_BF16; t++) {
    if (!k->bwd_rows[t] && !k->fwd_rows[t]) continue;
    const int64_t es = t == ZG_F32 ? 4 : 2, pad = 64;
    for (int rep = 0; rep < 20; rep++) {
      /* buffers 64-byte aligned plus a random offset, so heads and streaming both occur */
      const size_t bytes = (size_t)(3 * (RN + pad) * es + 63) & ~(size_t)63; /* C11: a multiple */
      char *in = aligned_alloc(64, bytes), *ref = aligned_alloc(64, bytes), *got = aligned_alloc(64, bytes);
      assert_non_null(got);
      int64_t off = (int64_t)(next_u64() % 40);
      char *d = in + off * es, *zz = in + (RN + pad + off) * es, *oo = in + (2 * (RN + pad) + off) * es;
      fill_typed(t, d, RN);
      fill_typed(t, zz, RN);
      fill_typed(t, oo, RN);
      char *rdz = ref + off * es, *rdos = ref + (RN + pad + off) * es, *rout = ref + (2 * (RN + pad) + off) * es;
      char *gdz = got + off * es, *gdos = got + (RN + pad + off) * es, *gout = got + (2 * (RN + pad) + off) * es;
      if (k->bwd_rows[t]) {
        /* bfloat16 runs use the recipe's bfloat16 variant, which staging (bwd_out16, for any
         * 16-bit output) does not: there the reference is one whole run, checked against
         * the policy by test_fast_recipe_policy and, end to end, by test_accuracy */
        if (t == ZG_BF16 && BF16_OWN_RECIPE) rows_call(k, t, 1, rdz, rdos, d, zz, oo, RN, 1, 0);
        else staged_bwd(k, t, rdz, rdos, d, zz, oo, RN);
        memset(got, 0x5a, 3 * (RN + pad) * es);
        rows_split(k, t, 1, gdz, gdos, d, zz, oo); /* random splits and nt, as the driver makes */
        _mm_sfence();
        assert_same(t, rdz, gdz, RN);
        assert_same(t, rdos, gdos, RN);
        for (int64_t i = RN; i < RN + 32; i++) assert_int_equal((unsigned char)gdz[i * es], 0x5a);
        /* in place: dout_scaled over dout */
        char *copy = malloc(RN * es);
        assert_non_null(copy);
        memcpy(copy, d, RN * es);
        rows_call(k, t, 1, gdz, d, d, zz, oo, RN, 1, 1);
        _mm_sfence();
        assert_same(t, rdos, d, RN);
        memcpy(d, copy, RN * es);
        free(copy);
      }
      if (k->fwd_rows[t]) {
        if (t == ZG_BF16 && BF16_OWN_RECIPE) rows_call(k, t, 0, rout, NULL, oo, zz, NULL, RN, 1, 0);
        else staged_fwd(k, t, rout, oo, zz, RN);
        rows_split(k, t, 0, gout, NULL, oo, zz, NULL);
        _mm_sfence();
        assert_same(t, rout, gout, RN);
      }
      free(in); free(ref); free(got);
    }
  }
  printf("[%s] row kernels (%s) equal staging for every dtype they cover\n", isa_name, what);
}

static void test_fused_runs(void **state) {
  (void)state;
  const zg_cpu_kernels *k = table();
#ifdef ZG_EXPECT_OUT16
  for (int t = ZG_F32; t <= ZG_BF16; t++) assert_non_null(k->bwd_rows[t]);
#endif
  check_runs(k, "table");
#ifdef ZG_TEST_AVX512
  if (__builtin_cpu_supports("avx512bf16")) {
    check_runs(zg_cpu_kernels_avx512_bf16(), "AVX512_BF16 table");
    /* and its bfloat16 run gives the integer-rounding run's bits, specials included */
    uint16_t *in = malloc(3 * RN * 2), *a = malloc(2 * RN * 2), *b = malloc(2 * RN * 2);
    assert_non_null(b);
    for (int rep = 0; rep < 50; rep++) {
      fill_typed(ZG_BF16, in, 3 * RN);
      if (rep % 2) /* results in float32's subnormal range: z far below -87 */
        for (int64_t i = 0; i < RN; i++) in[RN + i] = zg_f32_to_bf16((float)unif(-104, -86));
      int64_t off = (int64_t)(next_u64() % 32);
      rows_call(zg_cpu_kernels_avx512(), ZG_BF16, 1, (char *)a, (char *)(a + RN), (char *)(in + off),
                (char *)(in + RN), (char *)(in + 2 * RN), RN - off, 1, 0);
      rows_call(zg_cpu_kernels_avx512_bf16(), ZG_BF16, 1, (char *)b, (char *)(b + RN), (char *)(in + off),
                (char *)(in + RN), (char *)(in + 2 * RN), RN - off, 1, 0);
      assert_same(ZG_BF16, a, b, RN - off);
      assert_same(ZG_BF16, a + RN, b + RN, RN - off);
    }
    free(in); free(a); free(b);
  } else {
    printf("[%s] no AVX512_BF16 here: its bfloat16 run not tested\n", isa_name);
  }
#endif
}

int main(void) {
  rng = 0x9E3779B97F4A7C15ull;
  if (!cpu_can_run()) {
    printf("SKIP: this CPU/OS cannot run the %s path\n", isa_name);
    return 77;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fast_recipe_policy),
      cmocka_unit_test(test_fused_runs),
  };
  return cmocka_run_group_tests_name(isa_name, tests, NULL, NULL);
}
