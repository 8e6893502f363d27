/* The oracle itself (check/zgate_check.h): exact conversions, round-to-nearest-even at every
 * midpoint, ulp definitions, each rule of the numerics policy, and tensor comparison that
 * finds a planted error. If the oracle is wrong every other test is too. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "zt.h"

static zt_rng g_rng;

static uint16_t bits16(DLDataType t, double v) {
  uint16_t h;
  zgate_check_store(t, &h, v);
  return h;
}

/* Every float16 / bfloat16 bit pattern widens exactly and stores back to itself; every
 * midpoint between neighbours rounds to the even one, and just off it to the nearer. */
static void exhaustive_16(DLDataType t, uint16_t inf_bits, double overflow) {
  for (uint32_t b = 0; b < 0x10000; b++) {
    uint16_t h = (uint16_t)b;
    double v = zgate_check_load(t, &h);
    if (isnan(v)) {
      assert_true(isnan(zgate_check_load(t, (uint16_t[]){bits16(t, v)})));
      continue;
    }
    assert_int_equal(bits16(t, v), h);
  }
  for (uint16_t h = 0; h < inf_bits; h++) { /* positive finite values, ascending */
    uint16_t n = (uint16_t)(h + 1);
    double a = zgate_check_load(t, &h), b = n == inf_bits ? overflow : zgate_check_load(t, &n);
    double mid = 0.5 * (a + b); /* exact in double */
    uint16_t even = (h & 1) ? n : h;
    assert_int_equal(bits16(t, mid), even);
    assert_int_equal(bits16(t, nextafter(mid, 0)), h);
    assert_int_equal(bits16(t, nextafter(mid, INFINITY)), n);
    assert_int_equal(bits16(t, -mid), (uint16_t)(even | 0x8000));
  }
}

static void test_conversions(void **state) {
  (void)state;
  exhaustive_16(zt_f16, 0x7C00, 0x1p16);
  exhaustive_16(zt_bf16, 0x7F80, 0x1p128);
  /* float32: rounding from double is the C conversion. */
  for (int i = 0; i < 200000; i++) {
    double v = ldexp(zt_uniform(&g_rng, -1, 1), (int)zt_int(&g_rng, -160, 130));
    float f = (float)v, g;
    zgate_check_store(zt_f32, &g, v);
    assert_memory_equal(&f, &g, 4);
    assert_true(zgate_check_round(zt_f32, v) == (double)f || (isinf(f) && isinf(zgate_check_round(zt_f32, v))));
  }
  /* bfloat16 from a float: the well-known integer rounding of the top half. */
  for (int i = 0; i < 200000; i++) {
    uint32_t u = (uint32_t)zt_next(&g_rng);
    float f;
    memcpy(&f, &u, 4);
    if (isnan(f)) continue;
    uint16_t want = (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
    assert_int_equal(bits16(zt_bf16, f), want);
  }
  /* Straight from double, one rounding: 1 + 2^-8 + 2^-30 is above the bfloat16 midpoint
   * (rounds up), though rounding through float first would land on the midpoint. */
  assert_true(zgate_check_round(zt_bf16, 1.0 + 0x1p-8 + 0x1p-30) == 1.0 + 0x1p-7);
  assert_true(zgate_check_round(zt_bf16, 1.0 + 0x1p-8) == 1.0);
  assert_true(isinf(zgate_check_round(zt_f16, 65520.0)));
  assert_true(zgate_check_round(zt_f16, 65519.99) == 65504.0);
  assert_true(zgate_check_round(zt_f16, 0x1p-25) == 0.0);            /* tie to even (zero) */
  assert_true(zgate_check_round(zt_f16, 0x1.8p-25) == 0x1p-24);
  assert_int_equal(zgate_check_dtype_size(zt_f64), 8);
  assert_int_equal(zgate_check_dtype_size((DLDataType){kDLInt, 32, 1}), -1);
  assert_string_equal(zgate_check_dtype_name(zt_bf16), "bf16");
}

static void test_ulp(void **state) {
  (void)state;
  assert_true(zgate_check_ulp(zt_f16, 1.0) == 0x1p-10);
  assert_true(zgate_check_ulp(zt_f16, 0.999) == 0x1p-11);
  assert_true(zgate_check_ulp(zt_f16, 0.0) == 0x1p-24);
  assert_true(zgate_check_ulp(zt_f16, 1e-6) == 0x1p-24);
  assert_true(zgate_check_ulp(zt_f16, -65504.0) == 32.0);
  assert_true(zgate_check_ulp(zt_bf16, 1.0) == 0x1p-7);
  assert_true(zgate_check_ulp(zt_bf16, 1e-40) == 0x1p-133);
  assert_true(zgate_check_ulp(zt_f32, 1.0) == 0x1p-23);
  assert_true(zgate_check_ulp(zt_f32, 3.0) == 0x1p-22);
  assert_true(zgate_check_ulp(zt_f32, 1e-40) == 0x1p-149);
}

#define V(q, dt, got, ref, d, z, o) zgate_check_element(q, dt, got, ref, d, z, o, NULL, NULL)

static void test_policy(void **state) {
  (void)state;
  const zgate_check_quantity DZ = ZGATE_CHECK_DZ, DOS = ZGATE_CHECK_DOS, OUT = ZGATE_CHECK_OUT;
  /* NaN exactly where the reference has it. */
  assert_int_equal(V(DZ, zt_f32, NAN, NAN, 1, 1, 1), ZGATE_CHECK_PASS);
  assert_int_equal(V(DZ, zt_f32, NAN, 1.0, 1, 1, 1), ZGATE_CHECK_FAIL_NAN);
  assert_int_equal(V(DZ, zt_f16, 1.0, NAN, 1, 1, 1), ZGATE_CHECK_FAIL_NAN);
  /* Infinities equal, sign too. */
  assert_int_equal(V(DOS, zt_f32, INFINITY, INFINITY, 1, INFINITY, 1), ZGATE_CHECK_PASS);
  assert_int_equal(V(DOS, zt_f32, -INFINITY, INFINITY, 1, INFINITY, 1), ZGATE_CHECK_FAIL_INF);
  assert_int_equal(V(DOS, zt_f16, 65504, INFINITY, 1, INFINITY, 1), ZGATE_CHECK_FAIL_INF);
  assert_int_equal(V(DOS, zt_f32, 1e30, 1e30, 1, 1e30, 1), ZGATE_CHECK_PASS);
  /* Beyond float16's range the infinity is owed; just under the threshold either rounding. */
  assert_int_equal(V(OUT, zt_f16, INFINITY, 70000, 0, 80, 875), ZGATE_CHECK_PASS);
  assert_int_equal(V(OUT, zt_f16, 65504, 70000, 0, 80, 875), ZGATE_CHECK_FAIL_INF);
  assert_int_equal(V(OUT, zt_f16, INFINITY, 65519, 0, 80, 65519.0 / 80), ZGATE_CHECK_PASS);
  assert_int_equal(V(OUT, zt_f16, 65504, 65519, 0, 80, 65519.0 / 80), ZGATE_CHECK_PASS);
  assert_int_equal(V(OUT, zt_f16, INFINITY, 60000, 0, 80, 750), ZGATE_CHECK_FAIL_INF);
  assert_int_equal(V(OUT, zt_f32, INFINITY, 3e38, 0, 80, 3e38 / 80), ZGATE_CHECK_FAIL_INF);
  assert_int_equal(V(OUT, zt_f32, INFINITY, 1e39, 0, 80, 1e39 / 80), ZGATE_CHECK_PASS);
  /* float32: 4 ulp of the scale. dz at z = 0: s = 1/2, scale = |dout*o|/2. */
  assert_int_equal(V(DZ, zt_f32, 0.5 + 4 * 0x1p-24, 0.5, 1, 0, 1), ZGATE_CHECK_PASS);
  assert_int_equal(V(DZ, zt_f32, 0.5 + 5 * 0x1p-24, 0.5, 1, 0, 1), ZGATE_CHECK_FAIL_VALUE);
  assert_int_equal(V(DZ, zt_f32, -0.5 - 4 * 0x1p-24, -0.5, -1, 0, 1), ZGATE_CHECK_PASS);
  /* ... of the scale, not of the value: near the root of 1 + z(1-s) the value is tiny. */
  {
    double z = -1.2784, d = 1000, s = 1 / (1 + exp(-z)), ref = d * d * s * (1 + z * (1 - s));
    double scale = d * d * s * (1 + fabs(z) * (1 - s)), u = zgate_check_ulp(zt_f32, scale);
    assert_true(fabs(ref) < 1e-3 * scale);
    assert_int_equal(V(DZ, zt_f32, ref + 3.9 * u, ref, d, z, d), ZGATE_CHECK_PASS);
    assert_int_equal(V(DZ, zt_f32, ref + 4.1 * u, ref, d, z, d), ZGATE_CHECK_FAIL_VALUE);
    /* float16 there: 1 ulp of float16 at ref is far too tight; f32 bound + half ulp. */
    double uh = zgate_check_ulp(zt_f16, ref);
    assert_true(uh < u);
    assert_int_equal(V(DZ, zt_f16, ref + 3.9 * u, ref, d, z, d), ZGATE_CHECK_PASS);
    assert_int_equal(V(DZ, zt_f16, ref + 4 * u + 0.6 * uh, ref, d, z, d), ZGATE_CHECK_FAIL_VALUE);
  }
  /* float16 / bfloat16 elsewhere: one ulp of the type at the reference. */
  assert_int_equal(V(DOS, zt_f16, 3.0 + 0x1p-9, 3.0, 1, 100, 1), ZGATE_CHECK_PASS);
  assert_int_equal(V(DOS, zt_f16, 3.0 + 0x1p-8, 3.0, 1, 100, 1), ZGATE_CHECK_FAIL_VALUE);
  assert_int_equal(V(DOS, zt_bf16, 3.0 - 0x1p-6, 3.0, 1, 100, 1), ZGATE_CHECK_PASS);
  assert_int_equal(V(DOS, zt_bf16, 3.0 - 0x1p-5, 3.0, 1, 100, 1), ZGATE_CHECK_FAIL_VALUE);
  /* Absolute allowance in float32's subnormal range of s: dout_scaled at z = -100 is
   * about -3.7e-42; flushing s to zero is outside it, 10% error of a subnormal is inside. */
  {
    double z = -100, s = 1 / (1 + exp(-z)), ref = s * z;
    assert_int_equal(V(DOS, zt_f32, 0.0, ref, 1, z, 1), ZGATE_CHECK_FAIL_VALUE);
    assert_int_equal(V(DOS, zt_f32, ref * 1.1, ref, 1, z, 1), ZGATE_CHECK_PASS);
  }
  /* Signed zeros are equal. */
  assert_int_equal(V(DZ, zt_f32, -0.0, 0.0, 0, 1, 1), ZGATE_CHECK_PASS);
  /* The measures. */
  double eu, ratio;
  zgate_check_element(DZ, zt_f32, 0.5 + 2 * 0x1p-24, 0.5, 1, 0, 1, &eu, &ratio);
  assert_true(eu == 2.0);
  assert_true(ratio > 0.49 && ratio <= 0.5);
}

static void test_formula(void **state) {
  (void)state;
  const zgate_check_quantity DZ = ZGATE_CHECK_DZ, DOS = ZGATE_CHECK_DOS, OUT = ZGATE_CHECK_OUT;
  assert_true(zgate_check_formula(DZ, 1, 0, 1) == 0.5);
  assert_true(zgate_check_formula(DOS, 2, 0, 1) == 0.0);
  assert_true(isnan(zgate_check_formula(DZ, 1, INFINITY, 1)));  /* inf * (1 - 1) */
  assert_true(isnan(zgate_check_formula(DZ, 1, -INFINITY, 1))); /* 0 * -inf */
  assert_true(zgate_check_formula(DOS, 1, INFINITY, 7) == INFINITY);
  assert_true(isnan(zgate_check_formula(OUT, 0, -INFINITY, 1)));
  assert_true(isnan(zgate_check_formula(DZ, 0, 1, INFINITY)));
  assert_true(zgate_check_formula(OUT, 0, -1e30, 1e18) == 0.0);  /* finite: s = 0 */
  assert_true(zgate_check_formula(DZ, 3, 1e30, 2) == 6.0);
}

/* A strided float16 output compared with a float64 reference: clean, then one planted
 * error found at its row-major index, then a NaN. Unusable tensors are refused. */
static void test_tensor_compare(void **state) {
  (void)state;
  static const int64_t shape[4] = {2, 3, 2, 5};
  int64_t pad[4] = {3 * 2 * 16, 2 * 16, 16, 2};
  zt_tensor d, z, o, got, ref;
  zt_buf *b[4];
  for (int i = 0; i < 4; i++) b[i] = zt_buf_new(4096);
  zt_tensor_init(&d, zt_bf16, shape, NULL, b[0], 64, 0, 1);
  zt_tensor_init(&z, zt_f32, shape, pad, b[1], 64, 1, 1);
  zt_tensor_init(&o, zt_f16, shape, NULL, b[2], 64, 0, 1);
  zt_tensor_init(&got, zt_f16, shape, pad, b[3], 62, 0, 1);
  zt_make_f64(&ref, shape);
  zt_fill(&d.t, &g_rng, zt_rand_mag);
  zt_fill(&z.t, &g_rng, zt_rand_z);
  zt_fill(&o.t, &g_rng, zt_rand_mag);
  int64_t idx[4];
  for (idx[0] = 0; idx[0] < 2; idx[0]++)
    for (idx[1] = 0; idx[1] < 3; idx[1]++)
      for (idx[2] = 0; idx[2] < 2; idx[2]++)
        for (idx[3] = 0; idx[3] < 5; idx[3]++) {
          double r = zgate_check_formula(ZGATE_CHECK_DZ, zt_get(&d.t, idx), zt_get(&z.t, idx), zt_get(&o.t, idx));
          zt_set(&ref.t, idx, r);
          zt_set(&got.t, idx, r);
        }
  zgate_check_stats st;
  zgate_check_stats_init(&st);
  assert_int_equal(zgate_check_tensor(ZGATE_CHECK_DZ, &got.t, &ref.t, &d.t, &z.t, &o.t, &st), 0);
  assert_int_equal(st.count, 60);
  assert_int_equal(st.failures, 0);
  assert_true(st.max_err_units <= 0.5);
  /* Plant an error of 3 ulp at (1, 2, 0, 3): row-major index 1*30 + 2*10 + 0*5 + 3 = 53. */
  int64_t at[4] = {1, 2, 0, 3};
  double r = zt_get(&ref.t, at), g = zt_get(&got.t, at);
  zt_set(&got.t, at, g + 3 * zgate_check_ulp(zt_f16, r) * (g < 0 ? -1 : 1) + (g == 0 ? 1 : 0));
  zgate_check_stats_init(&st);
  assert_int_equal(zgate_check_tensor(ZGATE_CHECK_DZ, &got.t, &ref.t, &d.t, &z.t, &o.t, &st), 0);
  assert_int_equal(st.failures, 1);
  assert_int_equal(st.first_fail, 53);
  assert_true(st.max_bound_ratio > 1);
  zt_set(&got.t, at, NAN);
  zgate_check_stats_init(&st);
  zgate_check_tensor(ZGATE_CHECK_DZ, &got.t, &ref.t, &d.t, &z.t, &o.t, &st);
  assert_int_equal(st.nan_mismatches, 1);
  assert_int_equal(st.failures, 1);
  char line[256];
  zgate_check_stats_format(&st, line, sizeof line);
  assert_non_null(strstr(line, "fail=1"));
  /* Any rank: the same tensors as rank 8 (size-1 dims appended, strides of any value there)
   * give the same verdicts and row-major indices; rank 0 is one element. */
  {
    DLTensor *t4[5] = {&got.t, &ref.t, &d.t, &z.t, &o.t};
    DLTensor t8[5];
    int64_t shape8[8] = {2, 3, 2, 5, 1, 1, 1, 1}, strides8[5][8];
    for (int k = 0; k < 5; k++) {
      t8[k] = *t4[k];
      t8[k].ndim = 8;
      t8[k].shape = shape8;
      int64_t run = 1;
      for (int i = 3; i >= 0; i--) {
        strides8[k][i] = t4[k]->strides ? t4[k]->strides[i] : run;
        run *= shape[i];
      }
      for (int i = 4; i < 8; i++) strides8[k][i] = 7 * i;
      t8[k].strides = strides8[k];
    }
    zgate_check_stats s8;
    zgate_check_stats_init(&s8);
    assert_int_equal(zgate_check_tensor(ZGATE_CHECK_DZ, &t8[0], &t8[1], &t8[2], &t8[3], &t8[4], &s8), 0);
    assert_int_equal(s8.count, 60);
    assert_int_equal(s8.failures, 1);
    assert_int_equal(s8.first_fail, 53);
    for (int k = 0; k < 5; k++) { /* rank 0: the first element, shape and strides NULL */
      t8[k].ndim = 0;
      t8[k].shape = t8[k].strides = NULL;
    }
    zgate_check_stats_init(&s8);
    assert_int_equal(zgate_check_tensor(ZGATE_CHECK_DZ, &t8[0], &t8[1], &t8[2], &t8[3], &t8[4], &s8), 0);
    assert_int_equal(s8.count, 1);
    assert_int_equal(s8.failures, 0);
    t8[0].ndim = ZGATE_CHECK_MAX_NDIM + 1; /* more than the API's ranks */
    assert_int_equal(zgate_check_tensor(ZGATE_CHECK_DZ, &t8[0], &t8[1], &t8[2], &t8[3], &t8[4], &s8), -1);
  }
  /* Refused: ndims that differ, GPU memory, a missing dout for dz. */
  zgate_check_stats_init(&st);
  got.t.ndim = 3;
  assert_int_equal(zgate_check_tensor(ZGATE_CHECK_DZ, &got.t, &ref.t, &d.t, &z.t, &o.t, &st), -1);
  got.t.ndim = 4;
  got.t.device.device_type = kDLCUDA;
  assert_int_equal(zgate_check_tensor(ZGATE_CHECK_DZ, &got.t, &ref.t, &d.t, &z.t, &o.t, &st), -1);
  got.t.device.device_type = kDLCPU;
  assert_int_equal(zgate_check_tensor(ZGATE_CHECK_DZ, &got.t, &ref.t, NULL, &z.t, &o.t, &st), -1);
  assert_int_equal(st.count, 0);
  for (int i = 0; i < 4; i++) zt_buf_free(b[i]);
  zt_free_f64(&ref);
}

/* The request's figures beside the policy: the error over the elementwise scale, floored at
 * the output type's smallest normal, and the elements past ZGATE_CHECK_REQUEST_REL of it. */
static void test_request_figures(void **state) {
  (void)state;
  int64_t shape[1] = {5};
  /* dz at dout = o = 1, z = 0: scale 0.5 = the value; the fourth's scale is 2^-141 */
  float dout[5] = {1, 1, 1, 0x1p-141f, 1}, z[5] = {0}, o[5] = {1, 1, 1, 1, 1};
  float got[5] = {0.5f, 0.5f * 1.002f, 0.5f * 1.0005f, 0x1p-141f + 0x1p-140f, NAN};
  double ref[5] = {0.5, 0.5, 0.5, 0x1p-142, 0.5};
  DLTensor t[5];
  void *data[5] = {got, ref, dout, z, o};
  for (int i = 0; i < 5; i++)
    t[i] = (DLTensor){.data = data[i], .device = {kDLCPU, 0}, .ndim = 1, .shape = shape,
                      .dtype = i == 1 ? zt_f64 : zt_f32};
  zgate_check_stats st, m;
  zgate_check_stats_init(&st);
  assert_int_equal(zgate_check_tensor(ZGATE_CHECK_DZ, &t[0], &t[1], &t[2], &t[3], &t[4], &st), 0);
  /* 0.2% past; 0.05% not; 5 * 2^-142 over 2^-126 (not over the scale 2^-142) not; NaN not counted */
  assert_int_equal(st.past_request, 1);
  assert_true(st.max_scale_err > 0.00199 && st.max_scale_err < 0.00201);
  got[2] = 0.5f * 1.0011f;
  zgate_check_stats_init(&m);
  assert_int_equal(zgate_check_tensor(ZGATE_CHECK_DZ, &t[0], &t[1], &t[2], &t[3], &t[4], &m), 0);
  assert_int_equal(m.past_request, 2);
  zgate_check_stats_merge(&m, &st);
  assert_int_equal(m.past_request, 3);
  assert_true(m.max_scale_err == st.max_scale_err);
}

/* The convenience entry points against the library, and a planted error. */
static void test_check_bwd_fwd(void **state) {
  (void)state;
  static const int64_t shape[4] = {1, 7, 3, 9};
  zt_tensor x[5];
  zt_buf *b[5];
  for (int i = 0; i < 5; i++) {
    b[i] = zt_buf_new(189 * 4);
    zt_tensor_init(&x[i], i == 4 ? zt_bf16 : zt_f32, shape, NULL, b[i], 0, 0, 1);
  }
  zt_fill(&x[0].t, &g_rng, zt_rand_mag);
  zt_fill(&x[1].t, &g_rng, zt_rand_z);
  zt_fill(&x[2].t, &g_rng, zt_rand_mag);
  assert_int_equal(zgate_bwd(&x[0].t, &x[1].t, &x[2].t, &x[3].t, &x[4].t, NULL), ZGATE_OK);
  zgate_check_stats a, c;
  zgate_check_stats_init(&a);
  zgate_check_stats_init(&c);
  assert_int_equal(zgate_check_bwd(&x[0].t, &x[1].t, &x[2].t, &x[3].t, &x[4].t, &a, &c), ZGATE_OK);
  assert_int_equal(a.failures + c.failures, 0);
  assert_int_equal(a.count, 189);
  int64_t at[4] = {0, 4, 1, 8};
  zt_set(&x[3].t, at, zt_get(&x[3].t, at) * 1.001 + 1e-30);
  zgate_check_stats_init(&a);
  zgate_check_stats_init(&c);
  assert_int_equal(zgate_check_bwd(&x[0].t, &x[1].t, &x[2].t, &x[3].t, &x[4].t, &a, &c), ZGATE_OK);
  assert_int_equal(a.failures, 1);
  assert_int_equal(a.first_fail, 4 * 27 + 1 * 9 + 8);
  assert_int_equal(zgate_fwd(&x[2].t, &x[1].t, &x[3].t, NULL), ZGATE_OK);
  zgate_check_stats_init(&a);
  assert_int_equal(zgate_check_fwd(&x[2].t, &x[1].t, &x[3].t, &a), ZGATE_OK);
  assert_int_equal(a.failures, 0);
  zgate_check_stats m;
  zgate_check_stats_init(&m);
  zgate_check_stats_merge(&m, &a);
  zgate_check_stats_merge(&m, &c);
  assert_int_equal(m.count, 2 * 189);
  /* A bad tensor: the reference's status comes back. */
  x[1].t.ndim = ZGATE_MAX_NDIM + 1;
  assert_int_equal(zgate_check_fwd(&x[2].t, &x[1].t, &x[3].t, &a), ZGATE_ERR_NDIM);
  for (int i = 0; i < 5; i++) zt_buf_free(b[i]);
}

int main(void) {
  g_rng.s = zt_seed("test_check");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_conversions),   cmocka_unit_test(test_ulp),
      cmocka_unit_test(test_policy),        cmocka_unit_test(test_formula),
      cmocka_unit_test(test_tensor_compare), cmocka_unit_test(test_request_figures),
      cmocka_unit_test(test_check_bwd_fwd),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
