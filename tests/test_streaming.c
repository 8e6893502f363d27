/* Streaming stores where timing cannot show them (the CPU path ZGATE_CPU_ISA names, or the
 * process-wide one):
 *  1. The plan's decision: outputs large enough to stream, starting 16 bytes past a 64-byte
 *     line (where malloc puts large blocks), stream. With row kernels, the first batch of
 *     rows is cut at the first output's first line (ordinary stores before it), both outputs
 *     stream when they sit at the same place within a line, and every later work item starts
 *     on a line. An output at another place keeps ordinary stores.
 *  2. Results at every placement 0..63 bytes (whole elements) of all five tensors, dense, z as
 *     a projection view with odd rows, in place: bit-identical to the placement on a line,
 *     that one within the float64 policy, nothing written outside the outputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cpu/cpu_kernels.h"
#include "zgate_check.h"

/* Big enough that 16-bit outputs stream (4 MiB each); rows of 31 * 37 elements for z's view. */
static const int64_t g_shape[4] = {1, 2048, 31, 37};
enum { NUMEL = 2048 * 31 * 37, ZROW = 2 * 31 * 37 + 5 }; /* z: the second half of odd-length rows */
enum { LAYOUT_DENSE, LAYOUT_ZVIEW, LAYOUT_INPLACE, NLAYOUTS };
static const char *const layout_name[NLAYOUTS] = {"dense", "zview", "inplace"};
static const DLDataType g_dtypes[3] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};
static const char *g_isa; /* NULL: the process-wide path */

/* One tensor in a buffer of its own with `GUARD` bytes of poison on both sides of its span;
 * the first element `at` bytes past a line. */
enum { GUARD = 256 };
typedef struct tensor {
  DLTensor t;
  int64_t shape[4], strides[4];
  unsigned char *mem;
  size_t size;
} tensor;

static void tensor_make(tensor *x, DLDataType dt, int zview, size_t at) {
  memcpy(x->shape, g_shape, sizeof x->shape);
  const int64_t row = zview ? ZROW : g_shape[2] * g_shape[3];
  x->strides[3] = 1, x->strides[2] = g_shape[3], x->strides[1] = row, x->strides[0] = g_shape[1] * row;
  const size_t es = dt.bits / 8, first = zview ? (size_t)(g_shape[2] * g_shape[3]) * es : 0;
  x->size = GUARD + first + (size_t)(g_shape[1] * row) * es + GUARD + 64;
  x->mem = aligned_alloc(64, (x->size + 63) & ~(size_t)63);
  assert_non_null(x->mem);
  memset(x->mem, 0xA5, x->size);
  memset(&x->t, 0, sizeof x->t);
  x->t.data = x->mem + GUARD + at + first;
  x->t.device.device_type = kDLCPU;
  x->t.ndim = 4;
  x->t.dtype = dt;
  x->t.shape = x->shape;
  x->t.strides = x->strides;
}

/* Values for the inputs, made once per dtype: `scale` times uniform on [-1/2, 1/2). */
static unsigned char *g_values[3][3]; /* [dtype][dout, z, o] */

static void make_values(int d) {
  static const double scale[3] = {4.0, 40.0, 4.0};
  const size_t es = g_dtypes[d].bits / 8;
  uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(d + 1);
  for (int i = 0; i < 3; i++) {
    g_values[d][i] = malloc((size_t)NUMEL * es);
    assert_non_null(g_values[d][i]);
    for (int64_t j = 0; j < NUMEL; j++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      zgate_check_store(g_dtypes[d], g_values[d][i] + j * es, scale[i] * ((double)(seed >> 11) * 0x1p-53 - 0.5));
    }
  }
}

/* Copies the values into x, one (h, d) plane per row of the view. */
static void fill(tensor *x, const unsigned char *v) {
  const size_t es = x->t.dtype.bits / 8, plane = (size_t)(g_shape[2] * g_shape[3]) * es;
  for (int64_t r = 0; r < g_shape[1]; r++)
    memcpy((char *)x->t.data + (size_t)(r * x->strides[1]) * es, v + (size_t)r * plane, plane);
}

/* The five tensors of one run; in place: dos is dout. */
typedef struct problem {
  tensor dout, z, o, dz, dos;
} problem;

static void problem_make(problem *q, int d, int layout, size_t at, size_t dos_at) {
  const DLDataType dt = g_dtypes[d];
  tensor_make(&q->dout, dt, 0, at);
  tensor_make(&q->z, dt, layout == LAYOUT_ZVIEW, at);
  tensor_make(&q->o, dt, 0, at);
  tensor_make(&q->dz, dt, 0, at);
  tensor_make(&q->dos, dt, 0, dos_at);
  fill(&q->dout, g_values[d][0]), fill(&q->z, g_values[d][1]), fill(&q->o, g_values[d][2]);
}

static void problem_free(problem *q) {
  tensor *all[5] = {&q->dout, &q->z, &q->o, &q->dz, &q->dos};
  for (int i = 0; i < 5; i++) free(all[i]->mem);
}

static DLTensor *dos_of(problem *q, int layout) { return layout == LAYOUT_INPLACE ? &q->dout.t : &q->dos.t; }

/* 1. The plan. */
static void plan_case(int d, int layout, size_t at, size_t dos_at) {
  const DLDataType dt = g_dtypes[d];
  const zg_cpu_kernels *k;
  assert_int_equal(zg_cpu_resolve(g_isa, &k), ZGATE_OK);
  problem q;
  problem_make(&q, d, layout, at, dos_at);
  const DLTensor *ts[5] = {&q.dout.t, &q.z.t, &q.o.t, &q.dz.t, dos_of(&q, layout)};
  zg_problem p;
  assert_int_equal(zg_validate(ZG_OP_BWD, ts, 0, &p), ZGATE_OK);
  const int64_t es = dt.bits / 8, per_line = 64 / es, head = (int64_t)((64 - at) % 64) / es;
  const int same = layout == LAYOUT_INPLACE || dos_at == at;
  int rows, streaming[2];
  zg_rows r;
  zg_cpu_plan_view(&p, k, 0, &rows, streaming, &r);
  printf("%s %s %s, outputs at +%zu/+%zu: rows %d, streaming %d %d, head %lld body %lld nt %d %d\n", k->name,
         zgate_check_dtype_name(dt), layout_name[layout], at, same ? at : dos_at, rows, streaming[0],
         streaming[1], (long long)r.head, (long long)r.body, r.nt[0], r.nt[1]);
  assert_true(streaming[0] && streaming[1]);
  if (rows) {
    assert_int_equal(r.head, head);
    assert_true(r.body > 0 && r.body % per_line == 0 && r.head + r.body <= r.len);
    assert_true(r.nt[0]);
    assert_int_equal(r.nt[1], same);
    zg_cpu_plan_view(&p, k, 1, &rows, streaming, &r); /* the next item starts on dz's line */
    assert_true(r.count > 0);
    assert_int_equal(((uintptr_t)r.out[0]) % 64, 0);
    assert_int_equal(r.head, 0);
  }
  problem_free(&q);
}

static void test_plan_streams_off_line(void **state) {
  (void)state;
  for (int d = 0; d < 3; d++)
    for (int l = 0; l < NLAYOUTS; l++) {
      plan_case(d, l, 16, 16);
      plan_case(d, l, 0, 0);
    }
  plan_case(0, LAYOUT_DENSE, 16, 48); /* outputs at two places: dz streams */
}

/* 2. Results at every placement. */
static int64_t changed_outside(const tensor *x, const unsigned char *view_lo, size_t view_bytes) {
  int64_t n = 0;
  for (size_t i = 0; i < x->size; i++) {
    const unsigned char *p = x->mem + i;
    if (p >= view_lo && p < view_lo + view_bytes) continue;
    n += *p != 0xA5;
  }
  return n;
}

/* judge: the first run (on a line), held to the policy; its results become ref_dz/ref_dos. */
static void placement_case(int d, int layout, size_t at, size_t dos_at, int judge, unsigned char *ref_dz,
                           unsigned char *ref_dos) {
  const DLDataType dt = g_dtypes[d];
  const size_t bytes = (size_t)NUMEL * (dt.bits / 8);
  problem q;
  problem_make(&q, d, layout, at, dos_at);
  DLTensor *dos = dos_of(&q, layout);
  zgate_options opts;
  zgate_options_init(&opts);
  opts.cpu_isa = g_isa;
  opts.num_threads = 2;
  /* in place: the reference needs the dout that was read */
  unsigned char *dout_before = malloc(bytes);
  assert_non_null(dout_before);
  memcpy(dout_before, q.dout.t.data, bytes);
  assert_int_equal(zgate_bwd(&q.dout.t, &q.z.t, &q.o.t, &q.dz.t, dos, &opts), ZGATE_OK);
  if (judge) {
    DLTensor dout0 = q.dout.t;
    dout0.data = dout_before;
    zgate_check_stats st[2];
    zgate_check_stats_init(&st[0]);
    zgate_check_stats_init(&st[1]);
    assert_int_equal(zgate_check_bwd(&dout0, &q.z.t, &q.o.t, &q.dz.t, dos, &st[0], &st[1]), 0);
    assert_int_equal(st[0].count, NUMEL);
    assert_int_equal(st[0].failures + st[1].failures, 0);
    memcpy(ref_dz, q.dz.t.data, bytes);
    memcpy(ref_dos, dos->data, bytes);
  }
  if (memcmp(ref_dz, q.dz.t.data, bytes) || memcmp(ref_dos, dos->data, bytes))
    fail_msg("%s %s at +%zu (dout_scaled +%zu): results differ from the placement on a line",
             zgate_check_dtype_name(dt), layout_name[layout], at, dos_at);
  assert_int_equal(changed_outside(&q.dz, q.dz.t.data, bytes), 0);
  assert_int_equal(changed_outside(layout == LAYOUT_INPLACE ? &q.dout : &q.dos, dos->data, bytes), 0);
  free(dout_before);
  problem_free(&q);
}

static void test_every_placement(void **state) {
  (void)state;
  const char *quick = getenv("ZGATE_TEST_QUICK");
  const size_t step_quick = quick && *quick == '1' ? 16 : 0;
  for (int d = 0; d < 3; d++)
    for (int l = 0; l < NLAYOUTS; l++) {
      const size_t es = g_dtypes[d].bits / 8, bytes = (size_t)NUMEL * es;
      unsigned char *ref_dz = malloc(bytes), *ref_dos = malloc(bytes);
      assert_non_null(ref_dz);
      assert_non_null(ref_dos);
      for (size_t at = 0; at < 64; at += step_quick ? step_quick : es)
        placement_case(d, l, at, at, at == 0, ref_dz, ref_dos);
      if (l != LAYOUT_INPLACE) placement_case(d, l, 16, 48, 0, ref_dz, ref_dos);
      free(ref_dz);
      free(ref_dos);
    }
}

int main(void) {
  const char *isa = getenv("ZGATE_CPU_ISA");
  g_isa = isa && *isa && strcmp(isa, "auto") ? isa : NULL;
  if (g_isa && !zgate_cpu_isa_available(g_isa)) {
    printf("ZGATE_CPU_ISA=%s: not available here\n", g_isa);
    return 77;
  }
  for (int d = 0; d < 3; d++) make_values(d);
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_plan_streams_off_line),
                                     cmocka_unit_test(test_every_placement)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
