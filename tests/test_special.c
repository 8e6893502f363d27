/* Special values on one CPU path (ZGATE_CPU_ISA), in every dtype combination, against the
 * float64 formula (zgate_check_formula) and the library's float64 reference:
 * +-0, denormals, +-inf, NaN, |z| around 88, 104, 1e30 and the float32 maximum, z at and
 * around the root of 1 + z*(1-s) (z ~ -1.2785), products that overflow float16.
 *
 * Every (dout, z, o) triple of the value lists below is one element, none left out: an
 * infinite dout or o with z in [-746, -103] too, where float64's sigmoid is still a (tiny)
 * nonzero number, so the formula gives +-inf while float32's has underflowed to 0 (inf * 0 is
 * NaN). Every CPU path sends the lanes whose float32 result is inf or NaN to gate_math.h's
 * float64 formula, so it must give the infinity; NaN results must be the default quiet NaN
 * (check_default_nan). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "zt.h"

static const char *g_isa;

static const double mags[] = {0.0,  -0.0, 1e-40, -3e-39, 6e-8,  1e-5,     0.3,       1.0,
                              -2.5, 300,  -6e4,  1e18,   -1e18, INFINITY, -INFINITY, NAN};

/* z values; the root neighbourhood is added at run time. */
static const double zs_fixed[] = {
    0.0,   -0.0,   1e-40, -1e-40, 6e-8,   0.5,    1.0,    -1.0,   2.0,    -2.0,    -1.25,
    -1.3,  15.0,   -15.0, 16.0,   -16.0,  16.5,   20.0,   -20.0,  30.0,   -30.0,   87.0,
    -87.0, 87.5,   -87.5, 88.0,   -88.0,  88.72,  -88.72, 89.0,   -89.0,  95.0,    -95.0,
    100.0, -100.0, 103.0, -103.0, 103.5,  -103.5, 104.0,  -104.0, 110.0,  -110.0,  150.0,
    -150.0, 1e4,   -1e4,  1e30,   -1e30,  3.4e38, -3.4e38, INFINITY, -INFINITY, NAN};

/* The root of 1 + z*(1 - sigmoid(z)) = 1 + z/(1+e^z), by bisection in float64. */
static double dz_root(void) {
  double lo = -2.0, hi = -1.0;
  for (int i = 0; i < 200; i++) {
    double mid = 0.5 * (lo + hi);
    double f = 1.0 + mid / (1.0 + exp(mid));
    if (f > 0) hi = mid; else lo = mid;
  }
  return 0.5 * (lo + hi);
}

/* A NaN result is the default quiet NaN of its type, the same bits on every CPU path:
 * 0x7fc00000 (float32), 0x7e00 (float16), 0x7fc0 (bfloat16). */
static int check_default_nan(const DLTensor *t, const int64_t idx[4]) {
  const void *p = zt_elem(t, idx);
  if (t->dtype.bits == 32) {
    uint32_t u;
    memcpy(&u, p, 4);
    return u == 0x7fc00000u;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  return h == (t->dtype.code == kDLBfloat ? 0x7fc0u : 0x7e00u);
}

typedef struct triples {
  double *dout, *z, *o;
  int64_t n;
} triples;

/* All triples, each rounded to its input dtype. */
static triples make_triples(const DLDataType dt[3], int fwd) {
  double zs[128];
  int nz = 0;
  for (size_t i = 0; i < sizeof zs_fixed / sizeof zs_fixed[0]; i++) zs[nz++] = zs_fixed[i];
  double root = dz_root(), u = zgate_check_ulp(dt[1], root);
  for (int k = -6; k <= 6; k++) zs[nz++] = zgate_check_round(dt[1], root) + k * u;
  zs[nz++] = -1.2785;
  int nd = fwd ? 1 : (int)(sizeof mags / sizeof mags[0]);
  int no = (int)(sizeof mags / sizeof mags[0]);
  triples t;
  size_t cap = (size_t)nd * (size_t)nz * (size_t)no;
  t.dout = malloc(cap * sizeof(double));
  t.z = malloc(cap * sizeof(double));
  t.o = malloc(cap * sizeof(double));
  t.n = 0;
  for (int a = 0; a < nd; a++)
    for (int b = 0; b < nz; b++)
      for (int c = 0; c < no; c++) {
        double dv = fwd ? 1.0 : zgate_check_round(dt[0], mags[a]);
        double zv = zgate_check_round(dt[1], zs[b]);
        double ov = zgate_check_round(dt[2], mags[c]);
        t.dout[t.n] = dv;
        t.z[t.n] = zv;
        t.o[t.n] = ov;
        t.n++;
      }
  return t;
}

static void free_triples(triples *t) {
  free(t->dout);
  free(t->z);
  free(t->o);
}

static int64_t g_failed_cases;

/* One dtype combination in one layout (padded: headdim stride 2, padded rows). */
static void run_special(int fwd, const DLDataType in[3], DLDataType out_dt, int padded) {
  triples tr = make_triples(in, fwd);
  const int64_t W = 61;
  int64_t rows = (tr.n + W - 1) / W;
  int64_t shape[4] = {1, rows, 1, W};
  const int nt = fwd ? 3 : 5, n_in = fwd ? 2 : 3;
  /* slot -> (dtype, role): bwd dout z o dz dos; fwd o z out */
  DLDataType dts[5];
  if (fwd) { dts[0] = in[2]; dts[1] = in[1]; dts[2] = out_dt; }
  else { dts[0] = in[0]; dts[1] = in[1]; dts[2] = in[2]; dts[3] = dts[4] = out_dt; }
  zt_tensor x[5];
  zt_buf *bufs[5];
  for (int i = 0; i < nt; i++) {
    int64_t st[4];
    zt_compact_strides(shape, st);
    if (padded) {
      st[3] = 2;
      st[2] = 2 * W + 1;
      st[1] = 2 * W + 3;
      st[0] = rows * st[1];
    }
    size_t lead = 64 + (size_t)(i * zgate_check_dtype_size(dts[i]));
    bufs[i] = zt_buf_new(lead + zt_span_bytes(dts[i], shape, st) + 64);
    zt_tensor_init(&x[i], dts[i], shape, padded ? st : NULL, bufs[i], lead, 0, 1);
  }
  /* Fill: element e of the row-major order is triple e (padding triples: 1, 1, 1). */
  int64_t idx[4] = {0, 0, 0, 0}, e = 0;
  for (idx[1] = 0; idx[1] < rows; idx[1]++)
    for (idx[3] = 0; idx[3] < W; idx[3]++, e++) {
      double dv = e < tr.n ? tr.dout[e] : 1.0, zv = e < tr.n ? tr.z[e] : 1.0,
             ov = e < tr.n ? tr.o[e] : 1.0;
      if (fwd) {
        zt_set(&x[0].t, idx, ov);
        zt_set(&x[1].t, idx, zv);
      } else {
        zt_set(&x[0].t, idx, dv);
        zt_set(&x[1].t, idx, zv);
        zt_set(&x[2].t, idx, ov);
      }
    }
  for (int i = 0; i < nt; i++) zt_buf_snapshot(bufs[i]);

  zgate_options opts;
  zgate_options_init(&opts);
  opts.num_threads = 1;
  opts.cpu_isa = g_isa;
  int rc = fwd ? zgate_fwd(&x[0].t, &x[1].t, &x[2].t, &opts)
               : zgate_bwd(&x[0].t, &x[1].t, &x[2].t, &x[3].t, &x[4].t, &opts);
  char desc[160];
  snprintf(desc, sizeof desc, "%s in=%s/%s/%s out=%s %s", fwd ? "fwd" : "bwd",
           zgate_check_dtype_name(in[0]), zgate_check_dtype_name(in[1]),
           zgate_check_dtype_name(in[2]), zgate_check_dtype_name(out_dt),
           padded ? "padded" : "dense");
  int problems = 0;
  if (rc != ZGATE_OK) {
    printf("FAIL [%s]: returned %d (%s)\n", desc, rc, zgate_last_error());
    problems++;
    goto out;
  }

  /* Against the library's float64 reference. */
  zgate_check_stats st[2];
  zgate_check_stats_init(&st[0]);
  zgate_check_stats_init(&st[1]);
  rc = fwd ? zgate_check_fwd(&x[0].t, &x[1].t, &x[2].t, &st[0])
           : zgate_check_bwd(&x[0].t, &x[1].t, &x[2].t, &x[3].t, &x[4].t, &st[0], &st[1]);
  if (rc != 0) {
    printf("FAIL [%s]: reference check returned %d (%s)\n", desc, rc, zgate_last_error());
    problems++;
  }
  for (int k = 0; k < nt - n_in; k++) {
    if (!st[k].failures) continue;
    char line[256];
    zgate_check_stats_format(&st[k], line, sizeof line);
    printf("FAIL [%s] vs reference, %s: %s\n", desc, fwd ? "out" : (k ? "dout_scaled" : "dz"), line);
    problems++;
  }

  /* Against the formula, element by element, printing the first few misses. */
  int printed = 0;
  e = 0;
  for (idx[1] = 0; idx[1] < rows; idx[1]++)
    for (idx[3] = 0; idx[3] < W; idx[3]++, e++) {
      double dv = fwd ? 1.0 : zt_get(&x[0].t, idx), zv = zt_get(&x[1].t, idx);
      double ov = zt_get(&x[fwd ? 0 : 2].t, idx);
      for (int k = 0; k < nt - n_in; k++) {
        zgate_check_quantity q = fwd ? ZGATE_CHECK_OUT : (k ? ZGATE_CHECK_DOS : ZGATE_CHECK_DZ);
        double ref = zgate_check_formula(q, dv, zv, ov), got = zt_get(&x[n_in + k].t, idx);
        double eu;
        zgate_check_verdict v = zgate_check_element(q, out_dt, got, ref, dv, zv, ov, &eu, NULL);
        if (v == ZGATE_CHECK_PASS && isnan(got) && !check_default_nan(&x[n_in + k].t, idx)) {
          problems++;
          if (printed++ < 8)
            printf("FAIL [%s] %s: dout=%.9g z=%.9g o=%.9g: NaN is not the default quiet NaN\n", desc,
                   fwd ? "out" : (k ? "dout_scaled" : "dz"), dv, zv, ov);
          continue;
        }
        if (v == ZGATE_CHECK_PASS) continue;
        problems++;
        if (printed++ < 8)
          printf("FAIL [%s] %s: dout=%.9g z=%.9g o=%.9g got %.9g formula %.17g (%.3g units, verdict %d)\n",
                 desc, fwd ? "out" : (k ? "dout_scaled" : "dz"), dv, zv, ov, got, ref, eu, (int)v);
      }
    }

  const DLTensor *outs[2] = {&x[n_in].t, nt - n_in > 1 ? &x[n_in + 1].t : NULL};
  for (int i = 0; i < nt; i++)
    if (zt_buf_changed_outside(bufs[i], outs, nt - n_in, desc)) problems++;

out:
  if (problems) g_failed_cases++;
  for (int i = 0; i < nt; i++) zt_buf_free(bufs[i]);
  free_triples(&tr);
}

static void special(int fwd) {
  int quick = zt_quick();
  int64_t before = g_failed_cases, n = 0;
  /* Input dtype triples: all uniform, plus every arrangement of three distinct dtypes. */
  static const int in_combos[9][3] = {{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {0, 1, 2}, {0, 2, 1},
                                      {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  int nin = quick ? 3 : 9;
  for (int a = 0; a < nin; a++)
    for (int b = 0; b < 3; b++)
      for (int padded = 0; padded < (quick ? 1 : 2); padded++) {
        DLDataType in[3] = {zt_dtypes[in_combos[a][0]], zt_dtypes[in_combos[a][1]],
                            zt_dtypes[in_combos[a][2]]};
        run_special(fwd, in, zt_dtypes[b], padded);
        n++;
      }
  printf("%s special values: %lld combinations, %lld failed\n", fwd ? "fwd" : "bwd", (long long)n,
         (long long)(g_failed_cases - before));
  assert_int_equal(g_failed_cases - before, 0);
}

static void test_bwd_special(void **state) { (void)state; special(0); }
static void test_fwd_special(void **state) { (void)state; special(1); }

/* The library's reference against the formula, on the special values in float32, judged
 * as tightly as float64 allows: NaN and infinities exactly, finite values to 1e-12 of the
 * float32 bound's unit. Both sides are float64; a wrong reference makes every other
 * accuracy test meaningless. */
static void test_reference_matches_formula(void **state) {
  (void)state;
  DLDataType in[3] = {zt_f32, zt_f32, zt_f32};
  int64_t bad = 0;
  for (int fwd = 0; fwd < 2; fwd++) {
    triples tr = make_triples(in, fwd);
    int64_t shape[4] = {1, 1, 1, tr.n};
    zt_tensor x[3], ref[2];
    zt_buf *b[3];
    for (int i = 0; i < 3; i++) {
      b[i] = zt_buf_new((size_t)tr.n * 4);
      zt_tensor_init(&x[i], zt_f32, shape, NULL, b[i], 0, 0, 1);
    }
    zt_make_f64(&ref[0], shape);
    zt_make_f64(&ref[1], shape);
    for (int64_t e = 0; e < tr.n; e++) {
      int64_t idx[4] = {0, 0, 0, e};
      zt_set(&x[0].t, idx, tr.dout[e]);
      zt_set(&x[1].t, idx, tr.z[e]);
      zt_set(&x[2].t, idx, tr.o[e]);
    }
    int rc = fwd ? zgate_fwd_reference(&x[2].t, &x[1].t, &ref[0].t)
                 : zgate_bwd_reference(&x[0].t, &x[1].t, &x[2].t, &ref[0].t, &ref[1].t);
    assert_int_equal(rc, ZGATE_OK);
    for (int64_t e = 0; e < tr.n; e++) {
      int64_t idx[4] = {0, 0, 0, e};
      for (int k = 0; k < (fwd ? 1 : 2); k++) {
        zgate_check_quantity q = fwd ? ZGATE_CHECK_OUT : (k ? ZGATE_CHECK_DOS : ZGATE_CHECK_DZ);
        double f = zgate_check_formula(q, tr.dout[e], tr.z[e], tr.o[e]);
        double g = zt_get(&ref[k].t, idx);
        double eu;
        int ok;
        if (isnan(f) || isnan(g) || isinf(f) || isinf(g)) ok = (isnan(f) && isnan(g)) || f == g;
        else ok = zgate_check_element(q, zt_f64, g, f, tr.dout[e], tr.z[e], tr.o[e], &eu, NULL) ==
                      ZGATE_CHECK_PASS && eu <= 1e-6;
        if (!ok && bad++ < 8)
          printf("reference %s: dout=%.9g z=%.9g o=%.9g reference %.17g formula %.17g\n",
                 fwd ? "out" : (k ? "dout_scaled" : "dz"), tr.dout[e], tr.z[e], tr.o[e], g, f);
      }
    }
    for (int i = 0; i < 3; i++) zt_buf_free(b[i]);
    zt_free_f64(&ref[0]);
    zt_free_f64(&ref[1]);
    free_triples(&tr);
  }
  assert_int_equal(bad, 0);
}

/* Round-to-nearest-even of the outputs, bit for bit. The numerics policy allows 1 ulp in
 * float16/bfloat16, so truncation or ties-away would pass the accuracy tests; here the
 * float32 result is exact and known: at z = 0, s = 1/2 and 1 + z*(1-s) = 1, so with o = 2
 * dz = dout exactly. dout runs over ties of both types (near 1, subnormal, large), their
 * neighbours, float16's overflow threshold 65520, and random float32 bit patterns. */
static void test_rounding(void **state) {
  (void)state;
  zt_rng rng = {0x5eed};
  const int64_t n = 4096;
  int64_t shape[4] = {1, 1, 1, n}, idx[4] = {0, 0, 0, 0};
  int64_t bad = 0;
  for (int od = 0; od < 3; od++) {
    DLDataType odt = zt_dtypes[od];
    zt_tensor x[5];
    zt_buf *b[5];
    for (int i = 0; i < 5; i++) {
      b[i] = zt_buf_new((size_t)n * 4);
      zt_tensor_init(&x[i], i < 3 ? zt_f32 : odt, shape, NULL, b[i], 0, 0, 1);
    }
    for (idx[3] = 0; idx[3] < n; idx[3]++) {
      double d;
      int64_t k = idx[3];
      if (k < 1024) { /* ties, their neighbours, subnormal ties, the float16 overflow edge */
        double j = (double)(k & 127), odd = 2 * j + 1;
        switch (k >> 7) {
          case 0: d = 1 + odd * 0x1p-11; break;               /* float16 ties */
          case 1: d = 1 + odd * 0x1p-8; break;                /* bfloat16 ties */
          case 2: d = 1 + odd * 0x1p-11 + 0x1p-22; break;     /* just above */
          case 3: d = -(1 + odd * 0x1p-8 - 0x1p-22); break;   /* just below, negative */
          case 4: d = odd * 0x1p-25; break;                   /* float16 subnormal ties */
          case 5: d = -(65520 + (j - 64) / 8); break;         /* float16 overflow threshold */
          case 6: d = 0x1p100 * (1 + odd * 0x1p-8); break;    /* large bfloat16 ties */
          default: d = odd * 0x1p-134; break;                 /* bfloat16 subnormal ties */
        }
      } else { /* random float32 bit patterns, |d| in [2^-30, 2^17) */
        uint32_t u = (uint32_t)zt_next(&rng);
        u = (u & 0x807FFFFFu) | ((uint32_t)zt_int(&rng, 127 - 30, 127 + 16) << 23);
        float f;
        memcpy(&f, &u, 4);
        d = f;
      }
      zt_set(&x[0].t, idx, d);
      zt_set(&x[1].t, idx, 0.0);
      zt_set(&x[2].t, idx, 2.0);
    }
    zgate_options opts;
    zgate_options_init(&opts);
    opts.cpu_isa = g_isa;
    assert_int_equal(zgate_bwd(&x[0].t, &x[1].t, &x[2].t, &x[3].t, &x[4].t, &opts), ZGATE_OK);
    for (idx[3] = 0; idx[3] < n; idx[3]++) {
      double d = zt_get(&x[0].t, idx);
      unsigned char want[4] = {0};
      zgate_check_store(odt, want, d);
      if (memcmp(want, zt_elem(&x[3].t, idx), (size_t)zgate_check_dtype_size(odt)) != 0 &&
          bad++ < 8)
        printf("FAIL rounding to %s: dz for dout=%.17g (z=0, o=2) is %.17g, round-to-nearest-even "
               "gives %.17g\n", zgate_check_dtype_name(odt), d, zt_get(&x[3].t, idx),
               zgate_check_load(odt, want));
      if (zt_get(&x[4].t, idx) != 0.0 && bad++ < 8) printf("FAIL: dout_scaled at z=0 not 0\n");
    }
    for (int i = 0; i < 5; i++) zt_buf_free(b[i]);
  }
  assert_int_equal(bad, 0);
}

int main(void) {
  int skip;
  g_isa = zt_isa(&skip);
  if (skip) return skip;
  printf("path: %s%s\n", g_isa ? g_isa : zgate_cpu_isa_chosen(), zt_quick() ? " (quick)" : "");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reference_matches_formula),
      cmocka_unit_test(test_rounding),
      cmocka_unit_test(test_bwd_special),
      cmocka_unit_test(test_fwd_special),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
