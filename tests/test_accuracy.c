/* Accuracy of zgate_bwd / zgate_fwd on one CPU path (ZGATE_CPU_ISA, set per ctest entry)
 * against the float64 reference, over the shared case list (check/cases.def: shapes x dtype
 * combinations) x memory layouts (the list's four and the CPU loop's own: byte offsets,
 * padding, broadcast inputs, output orders).
 *
 * Every case: fresh random inputs; outputs and all padding poisoned (NaN bytes); guard bytes
 * before and after every tensor; the float64 reference computed first; one run on 1 thread
 * checked by the oracle (check/zgate_check.h) and for untouched bytes outside the outputs
 * (inputs, padding, guards, other columns of a projection); a second run on 2 threads from
 * the same poisoned state must give bit-identical buffers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "zgate_cases.h"
#include "zgate_private.h"
#include "zt.h"

enum {
  L_DENSE,         /* compact, strides NULL or spelled out, odd misalignment to 64 bytes */
  L_OFFSET,        /* compact, position carried in byte_offset (data = allocation start) */
  L_ZPROJ,         /* z a view into an input projection: cases.def's view "projection" */
  L_CASES_PERMUTED, /* cases.def's layout "permuted": a view per tensor, z's headdim strided */
  L_PERMUTED,      /* each tensor a memory order of its dims taken in turn from perms */
  L_PADDED,        /* padding after every dim, headdim stride 1 or 2 */
  L_BCAST,         /* inputs with zero strides (broadcast); outputs dense */
  L_INPLACE,       /* dout_scaled is dout */
  L_ZPROJ_INPLACE, /* the common real case: projection z, in place dout */
  L_LAST_OUT_LB,   /* compact, but the last output in memory order (L, B, H, D): the outputs'
                    * rows follow each other in different orders */
  L_COUNT,
  L_MIXED = L_COUNT /* each tensor its own layout (acc_case.lay), z maybe a projection view */
};
static const char *const layout_names[L_COUNT + 1] = {"dense", "byte_offset", "zproj", "permuted",
                                                      "shuffled", "padded", "broadcast", "inplace",
                                                      "zproj+inplace", "last-output-LB", "mixed"};

typedef struct acc_case {
  int fwd;
  int64_t shape[4];
  int layout;
  DLDataType dt[5]; /* bwd: dout z o dz dout_scaled; fwd: o z out */
  int lay[5];       /* L_MIXED: per tensor L_DENSE, L_OFFSET, L_PERMUTED, L_PADDED, L_BCAST */
  int mixed_inplace, mixed_zproj;
  int same_lead; /* every buffer starts at the same place within a cache line (else random) */
} acc_case;

typedef struct acc_run {
  const char *isa; /* the forced path, or NULL for the default choice */
  zt_rng rng;
  int64_t cases, failed, counter;
} acc_run;

static acc_run g_run;
/* Worst case seen per output dtype (f32, f16, bf16), for the summary line. */
static zgate_check_stats g_worst[3];

/* Operand i's name in the case's signature. */
static const char *name_of(const acc_case *c, int i) { return zg_ops[c->fwd ? ZG_OP_FWD : ZG_OP_BWD].tensors[i]; }

/* Memory orders (outer to inner) used by L_PERMUTED. */
static const int perms[6][4] = {{0, 2, 1, 3}, {1, 0, 2, 3}, {3, 2, 1, 0}, {2, 3, 0, 1},
                                {0, 1, 3, 2}, {1, 3, 0, 2}};

static void strides_for_order(const int64_t shape[4], const int order[4], int64_t st[4]) {
  int64_t acc = 1;
  for (int k = 3; k >= 0; k--) {
    int d = order[k];
    st[d] = acc;
    acc *= shape[d] > 0 ? shape[d] : 1;
  }
}

static void describe(const acc_case *c, char *buf, size_t n) {
  int nt = c->fwd ? 3 : 5;
  int k = snprintf(buf, n, "%s %s %s dtypes", c->fwd ? "fwd" : "bwd", zt_shape_str(c->shape),
                   layout_names[c->layout]);
  for (int i = 0; i < nt && k > 0 && (size_t)k < n; i++)
    k += snprintf(buf + k, n - (size_t)k, " %s=%s", name_of(c, i),
                  zgate_check_dtype_name(c->dt[i]));
  if (c->layout == L_MIXED)
    for (int i = 0; i < nt && k > 0 && (size_t)k < n; i++)
      k += snprintf(buf + k, n - (size_t)k, " %s:%s", name_of(c, i),
                    (c->mixed_inplace && i == 4) ? "inplace"
                    : (c->mixed_zproj && i == 1) ? "zproj"
                                                 : layout_names[c->lay[i]]);
}

static int fail_case(const acc_case *c, const char *fmt, ...) {
  char d[256];
  describe(c, d, sizeof d);
  printf("FAIL [%s] isa=%s: ", d, g_run.isa ? g_run.isa : zgate_cpu_isa_chosen());
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  return 1;
}

/* Runs one case; returns the number of problems found (0 = pass). */
static int run_case(acc_case *c) {
  const int nt = c->fwd ? 3 : 5, n_in = c->fwd ? 2 : 3;
  const int iz = 1; /* z is slot 1 in both signatures */
  const int mixed = c->layout == L_MIXED;
  const int inplace = !c->fwd && (c->layout == L_INPLACE || c->layout == L_ZPROJ_INPLACE ||
                                  (mixed && c->mixed_inplace));
  const int zproj = c->layout == L_ZPROJ || c->layout == L_ZPROJ_INPLACE || (mixed && c->mixed_zproj);
  const int64_t *sh = c->shape, numel = zt_numel(sh);
  zt_rng *r = &g_run.rng;
  int problems = 0;
  if (inplace) c->dt[4] = c->dt[0];

  zt_tensor x[5];
  zt_buf *bufs[5] = {0};
  /* Empty problems: half the time NULL data (allowed), else real guarded buffers. */
  const int null_data = numel == 0 && (zt_next(r) & 1);
  const int64_t lead_elems = zt_int(r, 0, 7);
  for (int i = 0; i < nt; i++) {
    if (inplace && i == 4) {
      /* Same data, byte_offset, dtype and strides as dout (a distinct struct). */
      zt_tensor_init(&x[4], x[0].t.dtype, sh, x[0].t.strides ? x[0].strides : NULL, x[0].buf,
                     0, 0, 1);
      x[4].t.data = x[0].t.data;
      x[4].t.byte_offset = x[0].t.byte_offset;
      continue;
    }
    DLDataType dt = c->dt[i];
    int64_t esize = zgate_check_dtype_size(dt), st[4];
    const int64_t *strides = NULL;
    int64_t H = sh[2], D = sh[3];
    zt_compact_strides(sh, st);
    const int lay = mixed ? c->lay[i] : c->layout;
    int use_off = lay == L_OFFSET;
    int as_null = (i + (int)g_run.counter) & 1;
    /* a guard before, and an odd alignment */
    size_t lead = 64 + (size_t)(c->same_lead ? lead_elems : zt_int(r, 0, 7)) * (size_t)esize;
    size_t extra = 0;                                          /* bytes before the first element */
    /* the view cases.def gives this tensor, if any */
    const int *permuted = zgate_case_layouts[ZGATE_CASE_LAYOUT_permuted].view;
    int view = zproj && i == iz ? ZGATE_CASE_VIEW_projection
               : lay == L_CASES_PERMUTED ? permuted[c->fwd ? zgate_case_fwd_slot[i] : i]
                                         : -1;
    int64_t view_elems = 0;
    if (view >= 0) {
      int64_t offset, n = zgate_case_strides(&zgate_case_views[view], sh, st, &offset);
      extra = (size_t)(offset * esize);
      view_elems = n ? n - offset : 0;
      strides = st;
    } else if (lay == L_LAST_OUT_LB && i == nt - 1) {
      static const int lb[4] = {1, 0, 2, 3};
      strides_for_order(sh, lb, st);
      strides = st;
    } else if (lay == L_PERMUTED) {
      strides_for_order(sh, perms[(i + (int)g_run.counter) % 6], st);
      strides = st;
    } else if (lay == L_PADDED) {
      st[3] = 1 + (i & 1);
      st[2] = D * st[3] + 1 + i;
      st[1] = H * st[2] + 3;
      st[0] = sh[1] * st[1] + 5;
      strides = st;
    } else if (lay == L_BCAST && i < n_in) {
      if (i == iz) st[3] = 0;       /* one z per (b, l, h) */
      else if (i == 0) st[1] = 0;   /* dout (bwd) / o (fwd) shared over seqlen */
      else st[0] = 0;               /* o (bwd) shared over batch */
      strides = st;
    } else if (!as_null || lay == L_OFFSET) {
      strides = st; /* compact, spelled out */
    }
    size_t span = view >= 0 ? (size_t)(view_elems * esize) : zt_span_bytes(dt, sh, st);
    if (null_data) {
      zt_tensor_init(&x[i], dt, sh, strides, NULL, 0, 0, 1);
      continue;
    }
    bufs[i] = zt_buf_new(lead + extra + span + 64 + (size_t)zt_int(r, 0, 3) * 2);
    zt_tensor_init(&x[i], dt, sh, strides, bufs[i], lead + extra, use_off, 1);
  }

  /* Inputs: random values; z in its own distribution. */
  for (int i = 0; i < n_in; i++) {
    if (!x[i].buf) continue;
    zt_fill(&x[i].t, r, i == iz ? zt_rand_z : zt_rand_mag);
  }

  /* Reference, and (in place) a copy of dout as it was. */
  zt_tensor ref[2], dout_copy;
  const int n_out = nt - n_in;
  for (int k = 0; k < n_out; k++) zt_make_f64(&ref[k], sh);
  int rc = c->fwd ? zgate_fwd_reference(&x[0].t, &x[1].t, &ref[0].t)
                  : zgate_bwd_reference(&x[0].t, &x[1].t, &x[2].t, &ref[0].t, &ref[1].t);
  if (rc != ZGATE_OK) {
    problems += fail_case(c, "reference returned %d (%s)", rc, zgate_last_error());
    goto done_refs;
  }
  const DLTensor *dout_in = c->fwd ? NULL : &x[0].t;
  if (inplace) {
    zt_copy_compact(&dout_copy, &x[0].t);
    dout_in = &dout_copy.t;
  }

  for (int i = 0; i < nt; i++)
    if (bufs[i]) zt_buf_snapshot(bufs[i]);

  /* Run 1: one thread; half the calls name the path per call, half rely on the env choice. */
  zgate_options opts;
  zgate_options_init(&opts);
  opts.num_threads = 1;
  opts.cpu_isa = (g_run.counter & 1) ? g_run.isa : NULL;
  DLTensor *dos_arg = inplace && (g_run.counter & 2) ? &x[0].t : (c->fwd ? NULL : &x[4].t);
  rc = c->fwd ? zgate_fwd(&x[0].t, &x[1].t, &x[2].t, &opts)
              : zgate_bwd(&x[0].t, &x[1].t, &x[2].t, &x[3].t, dos_arg, &opts);
  if (rc != ZGATE_OK) {
    problems += fail_case(c, "call returned %d (%s)", rc, zgate_last_error());
    goto done_copy;
  }
  if (zgate_last_error()[0])
    problems += fail_case(c, "success left a last-error message: %s", zgate_last_error());

  if (numel > 0) {
    for (int k = 0; k < n_out; k++) {
      zgate_check_stats st;
      zgate_check_stats_init(&st);
      zgate_check_quantity q = c->fwd ? ZGATE_CHECK_OUT : (k == 0 ? ZGATE_CHECK_DZ : ZGATE_CHECK_DOS);
      const DLTensor *got = &x[n_in + k].t;
      int od = got->dtype.code == kDLBfloat ? 2 : got->dtype.bits == 16 ? 1 : 0;
      if (zgate_check_tensor(q, got, &ref[k].t, dout_in, &x[1].t, c->fwd ? &x[0].t : &x[2].t, &st)) {
        problems += fail_case(c, "oracle refused the tensors");
      } else if ((zgate_check_stats_merge(&g_worst[od], &st), st.failures)) {
        char line[256];
        zgate_check_stats_format(&st, line, sizeof line);
        problems += fail_case(c, "%s: %s", name_of(c, n_in + k), line);
      }
    }
  }
  /* Nothing but output elements may change: inputs, padding, guards, projection columns. */
  const DLTensor *outs[2] = {&x[n_in].t, n_out > 1 ? &x[n_in + 1].t : NULL};
  for (int i = 0; i < nt; i++) {
    if (!bufs[i]) continue;
    int64_t changed = zt_buf_changed_outside(bufs[i], outs, n_out,
                                             name_of(c, i));
    if (changed) problems += fail_case(c, "%lld bytes changed outside the outputs", (long long)changed);
  }

  /* Run 2: two threads, from the same poisoned state: bit-identical buffers. */
  unsigned char *first[5] = {0};
  for (int i = 0; i < nt; i++) {
    if (!bufs[i]) continue;
    first[i] = malloc(bufs[i]->size ? bufs[i]->size : 1);
    memcpy(first[i], bufs[i]->mem, bufs[i]->size);
    zt_buf_restore(bufs[i]);
  }
  opts.num_threads = 2;
  opts.cpu_isa = (g_run.counter & 1) ? NULL : g_run.isa;
  rc = c->fwd ? zgate_fwd(&x[0].t, &x[1].t, &x[2].t, &opts)
              : zgate_bwd(&x[0].t, &x[1].t, &x[2].t, &x[3].t, dos_arg, &opts);
  if (rc != ZGATE_OK) problems += fail_case(c, "2-thread call returned %d (%s)", rc, zgate_last_error());
  for (int i = 0; i < nt; i++) {
    if (!bufs[i]) continue;
    if (rc == ZGATE_OK && memcmp(first[i], bufs[i]->mem, bufs[i]->size) != 0)
      problems += fail_case(c, "%s differs between 1 and 2 threads", name_of(c, i));
    free(first[i]);
  }

done_copy:
  if (inplace) zt_buf_free(dout_copy.buf);
done_refs:
  for (int k = 0; k < n_out; k++) zt_free_f64(&ref[k]);
  for (int i = 0; i < nt; i++) zt_buf_free(bufs[i]);
  g_run.cases++;
  g_run.counter++;
  if (problems) g_run.failed++;
  return problems;
}

/* The shared case list's dtype combinations (check/cases.def), then (full runs) a few random
 * ones. The forward takes o, z and out from a combination's o, z and dz. */
static int dtype_combos(int fwd, int reduced, DLDataType out[16][5]) {
  int n = 0, nt = fwd ? 3 : 5;
  for (; n < ZGATE_CASES_N(zgate_case_dtype_sets); n++) {
    const DLDataType *d = zgate_case_dtype_sets[n].dt;
    if (fwd) out[n][0] = d[2], out[n][1] = d[1], out[n][2] = d[3];
    else memcpy(out[n], d, sizeof out[n]);
  }
  for (int k = 0; k < (reduced ? 0 : 3); k++, n++)
    for (int i = 0; i < nt; i++) out[n][i] = zt_dtypes[zt_next(&g_run.rng) % 3];
  return n;
}

/* The shared case list's shapes: QUICK in quick runs, QUICK and FULL otherwise; every
 * layout for each, the uniform-dtype combinations only for those above 20000 elements
 * (cases.def lists them first). */
static void matrix(int fwd) {
  const int sets = ZGATE_CASES_QUICK | (zt_quick() ? 0 : ZGATE_CASES_FULL);
  int64_t before = g_run.failed;
  int64_t ncases = 0;
  for (int s = 0; s < ZGATE_CASES_N(zgate_case_shapes); s++) {
    if (!(zgate_case_shapes[s].set & sets)) continue;
    const int64_t *shape = zgate_case_shapes[s].shape;
    int big = zt_numel(shape) > 20000;
    for (int l = 0; l < L_COUNT; l++) {
      if (fwd && (l == L_INPLACE || l == L_ZPROJ_INPLACE)) continue;
      DLDataType combos[16][5];
      int nc = dtype_combos(fwd, zt_quick() || big, combos);
      /* quick: the three uniform combinations and one other, in turn over shapes and layouts */
      for (int j = 0; j < (big ? 3 : zt_quick() ? 4 : nc); j++) {
        int k = zt_quick() && j == 3 ? 3 + (s + l) % (nc - 3) : j;
        acc_case c = {0};
        c.fwd = fwd;
        memcpy(c.shape, shape, sizeof c.shape);
        c.layout = l;
        memcpy(c.dt, combos[k], sizeof c.dt);
        run_case(&c);
        ncases++;
      }
    }
  }
  printf("%s matrix: %lld cases, %lld failed\n", fwd ? "fwd" : "bwd", (long long)ncases,
         (long long)(g_run.failed - before));
  static const char *const dn[3] = {"f32", "f16", "bf16"};
  for (int d = 0; d < 3; d++)
    printf("  so far, %s outputs: %lld elements, max %.3g units, max %.3g of the bound\n", dn[d],
           (long long)g_worst[d].count, g_worst[d].max_err_units, g_worst[d].max_bound_ratio);
  assert_int_equal(g_run.failed - before, 0);
}

static void test_bwd_matrix(void **state) { (void)state; matrix(0); }
static void test_fwd_matrix(void **state) { (void)state; matrix(1); }

/* Random shapes (sizes 0 included, headdims around every vector width), random dtypes, and
 * each tensor in its own layout: combinations the fixed matrix does not reach. */
static void test_random_layouts(void **state) {
  (void)state;
  static const int64_t dims[] = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 80, 96, 127, 128, 129};
  static const int lays[5] = {L_DENSE, L_OFFSET, L_PERMUTED, L_PADDED, L_BCAST};
  zt_rng *r = &g_run.rng;
  int n = zt_quick() ? 40 : 400;
  int64_t before = g_run.failed;
  for (int k = 0; k < n; k++) {
    acc_case c = {0};
    c.fwd = (int)(zt_next(r) & 1);
    c.layout = L_MIXED;
    c.shape[0] = zt_int(r, 1, 3);
    c.shape[1] = zt_int(r, 1, 40);
    c.shape[2] = zt_int(r, 1, 5);
    c.shape[3] = dims[zt_next(r) % (sizeof dims / sizeof dims[0])];
    if (zt_next(r) % 32 == 0) c.shape[zt_next(r) % 4] = 0;
    for (int i = 0; i < 5; i++) {
      c.dt[i] = zt_dtypes[zt_next(r) % 3];
      c.lay[i] = lays[zt_next(r) % (i < (c.fwd ? 2 : 3) ? 5 : 4)]; /* outputs never broadcast */
    }
    c.mixed_inplace = !c.fwd && (zt_next(r) & 1);
    if (c.mixed_inplace && c.lay[0] == L_BCAST) c.lay[0] = L_DENSE; /* dout is an output then */
    c.mixed_zproj = (int)(zt_next(r) & 1);
    run_case(&c);
  }
  printf("random layouts: %d cases, %lld failed\n", n, (long long)(g_run.failed - before));
  assert_int_equal(g_run.failed - before, 0);
}

/* Large problems: the multi-threaded split and the streaming-store path (outputs of 4 MiB
 * and more), with odd sizes so every thread's range has a tail. Rows of 1089 elements start
 * at every place within a cache line, items end inside rows, and the outputs either share
 * their place within a line (the loop driver's shared-line step, cpu_loop.c step 5) or
 * mostly do not (its fallback); with the last output in (L, B, H, D) order a thread's row
 * pieces stop continuing each other in it at every row. */
static void test_large(void **state) {
  (void)state;
  if (zt_quick()) {
    printf("quick mode: large cases skipped\n");
    return;
  }
  /* 2.2M elements, 4.5 MB in 16 bits; rows of 1089, or for the (L, B) order rows of 704 (11
   * lines of bfloat16), which start at the same place within a line, so that pieces that
   * do not continue each other still get the shared-line step */
  static const int64_t shape[4] = {3, 683, 9, 121}, shape_lb[4] = {3, 1024, 11, 64};
  static const int layouts[4] = {L_DENSE, L_ZPROJ_INPLACE, L_ZPROJ, L_LAST_OUT_LB};
  int64_t before = g_run.failed;
  for (int fwd = 0; fwd < 2; fwd++)
    for (int t = 0; t < 3; t++)
      for (int l = 0; l < 4; l++)
        for (int same = 0; same < 2; same++) {
          if (fwd && (l == 1 || l == 3)) continue; /* no in place; one output */
          if (t == 1 && l == 0) continue; /* float16 adds nothing dense that bfloat16 does not */
          acc_case c = {0};
          c.fwd = fwd;
          memcpy(c.shape, l == 3 ? shape_lb : shape, sizeof c.shape);
          c.layout = layouts[l];
          c.same_lead = same;
          for (int i = 0; i < 5; i++) c.dt[i] = zt_dtypes[t];
          run_case(&c);
        }
  assert_int_equal(g_run.failed - before, 0);
}

/* The forced path is the one the library reports. */
static void test_isa_choice(void **state) {
  (void)state;
  printf("build: %s\n", zgate_build_info());
  if (!g_run.isa) return;
  assert_string_equal(zgate_cpu_isa_chosen(), g_run.isa);
}

int main(void) {
  int skip;
  g_run.isa = zt_isa(&skip);
  if (skip) return skip;
  g_run.rng.s = zt_seed("test_accuracy");
  for (int d = 0; d < 3; d++) zgate_check_stats_init(&g_worst[d]);
  printf("path: %s%s\n", g_run.isa ? g_run.isa : zgate_cpu_isa_chosen(),
         zt_quick() ? " (quick)" : "");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_isa_choice),
      cmocka_unit_test(test_bwd_matrix),
      cmocka_unit_test(test_fwd_matrix),
      cmocka_unit_test(test_random_layouts),
      cmocka_unit_test(test_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
