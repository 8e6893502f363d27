/* Many threads calling zgate at once.
 *  1. Start race: every thread's first call uses the process-wide path (opts NULL), so
 *     they race the once-only ISA choice; each checks its result with the oracle, and all
 *     must report the same chosen path.
 *  2. Shared inputs, private outputs: every CPU path and thread count in turn, each result
 *     compared bit for bit with the one computed before the threads started for that path.
 *  3. Private inputs (fresh random, in place half the time): checked with the oracle.
 *  4. Failing calls in between: each thread sees its own status and message; a success
 *     leaves its message empty whatever the other threads are doing. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "zt.h"

#define NTHREADS 8
static const int64_t g_shape[4] = {1, 65, 8, 128}; /* above the library's parallel threshold */

static const char *const all_isas[] = {"scalar", "avx2", "avx512", "neon"};
static const char *g_isas[4];
static int g_nisas;

typedef struct shared_io {
  zt_tensor dout, z, o;
  zt_buf *b[3];
  /* expected bytes per path: dz (f32), dos (bf16), out (f16) */
  unsigned char *dz[4], *dos[4], *out[4];
} shared_io;

static shared_io g_in;
static pthread_barrier_t g_barrier;
static uint64_t g_seed;

typedef struct thread_result {
  int id;
  int64_t problems;
  char chosen[96];
} thread_result;

static void tproblem(thread_result *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL thread %d: ", r->id);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  r->problems++;
}

/* Outputs of the shared problem: dz float32, dout_scaled bfloat16, out float16. */
typedef struct outs {
  zt_tensor dz, dos, out;
  zt_buf *b[3];
} outs;

static void outs_init(outs *w) {
  w->b[0] = zt_buf_new((size_t)zt_numel(g_shape) * 4);
  w->b[1] = zt_buf_new((size_t)zt_numel(g_shape) * 2);
  w->b[2] = zt_buf_new((size_t)zt_numel(g_shape) * 2);
  zt_tensor_init(&w->dz, zt_f32, g_shape, NULL, w->b[0], 0, 0, 1);
  zt_tensor_init(&w->dos, zt_bf16, g_shape, NULL, w->b[1], 0, 0, 1);
  zt_tensor_init(&w->out, zt_f16, g_shape, NULL, w->b[2], 0, 0, 1);
}

static void outs_poison(outs *w) {
  for (int i = 0; i < 3; i++) memset(w->b[i]->mem, ZT_POISON, w->b[i]->size);
}

static void outs_free(outs *w) {
  for (int i = 0; i < 3; i++) zt_buf_free(w->b[i]);
}

/* Fresh private inputs (dout float32, z bfloat16, o float16), strided z. */
typedef struct priv_in {
  zt_tensor dout, z, o;
  zt_buf *b[3];
} priv_in;

static void priv_init(priv_in *p, zt_rng *r) {
  int64_t n = zt_numel(g_shape), zst[4];
  zt_compact_strides(g_shape, zst);
  zst[1] *= 3; /* z as a view into a wider projection */
  zst[0] = zst[1] * g_shape[1];
  p->b[0] = zt_buf_new((size_t)n * 4);
  p->b[1] = zt_buf_new((size_t)n * 3 * 2);
  p->b[2] = zt_buf_new((size_t)n * 2);
  zt_tensor_init(&p->dout, zt_f32, g_shape, NULL, p->b[0], 0, 0, 1);
  zt_tensor_init(&p->z, zt_bf16, g_shape, zst, p->b[1], 0, 0, 1);
  zt_tensor_init(&p->o, zt_f16, g_shape, NULL, p->b[2], 0, 0, 1);
  zt_fill(&p->dout.t, r, zt_rand_mag);
  zt_fill(&p->z.t, r, zt_rand_z);
  zt_fill(&p->o.t, r, zt_rand_mag);
}

static void priv_free(priv_in *p) {
  for (int i = 0; i < 3; i++) zt_buf_free(p->b[i]);
}

static int isa_index(const char *name) {
  for (int i = 0; i < g_nisas; i++)
    if (strcmp(g_isas[i], name) == 0) return i;
  return -1;
}

static void *worker(void *arg) {
  thread_result *res = arg;
  zt_rng rng = {g_seed + 0x1000u * (uint64_t)res->id};
  outs w;
  outs_init(&w);

  /* 1. the start race */
  pthread_barrier_wait(&g_barrier);
  {
    priv_in p;
    priv_init(&p, &rng);
    int rc = zgate_bwd(&p.dout.t, &p.z.t, &p.o.t, &w.dz.t, &w.dos.t, NULL);
    snprintf(res->chosen, sizeof res->chosen, "%s", zgate_cpu_isa_chosen());
    if (rc != ZGATE_OK) tproblem(res, "first call returned %d: %s", rc, zgate_last_error());
    zgate_check_stats a, b;
    zgate_check_stats_init(&a);
    zgate_check_stats_init(&b);
    if (zgate_check_bwd(&p.dout.t, &p.z.t, &p.o.t, &w.dz.t, &w.dos.t, &a, &b) || a.failures || b.failures)
      tproblem(res, "first call: wrong results (%lld + %lld failures)", (long long)a.failures,
               (long long)b.failures);
    priv_free(&p);
  }
  pthread_barrier_wait(&g_barrier);

  int iters = zt_quick() ? 4 : 16;
  for (int it = 0; it < iters; it++) {
    zgate_options opts;
    zgate_options_init(&opts);
    int k = (res->id + it) % (g_nisas + 1); /* g_nisas = the process-wide choice */
    opts.cpu_isa = k < g_nisas ? g_isas[k] : NULL;
    int ki = k < g_nisas ? k : isa_index(res->chosen);
    opts.num_threads = 1 + ((it + res->id) & 1);

    /* 2. shared inputs, private outputs, bit-exact */
    outs_poison(&w);
    int rc = zgate_bwd(&g_in.dout.t, &g_in.z.t, &g_in.o.t, &w.dz.t, &w.dos.t, &opts);
    if (rc != ZGATE_OK) tproblem(res, "shared bwd returned %d: %s", rc, zgate_last_error());
    else if (zgate_last_error()[0]) tproblem(res, "success left a message: %s", zgate_last_error());
    rc = zgate_fwd(&g_in.o.t, &g_in.z.t, &w.out.t, &opts);
    if (rc != ZGATE_OK) tproblem(res, "shared fwd returned %d: %s", rc, zgate_last_error());
    if (ki < 0) {
      tproblem(res, "chosen path %s is not among the available ones", res->chosen);
    } else {
      if (memcmp(w.b[0]->mem, g_in.dz[ki], w.b[0]->size))
        tproblem(res, "dz differs from the %s result (%d threads)", g_isas[ki], opts.num_threads);
      if (memcmp(w.b[1]->mem, g_in.dos[ki], w.b[1]->size))
        tproblem(res, "dout_scaled differs from the %s result", g_isas[ki]);
      if (memcmp(w.b[2]->mem, g_in.out[ki], w.b[2]->size))
        tproblem(res, "out differs from the %s result", g_isas[ki]);
    }

    /* 4. a failing call: its own code and message */
    rc = zgate_bwd(&g_in.dout.t, NULL, &g_in.o.t, &w.dz.t, &w.dos.t, &opts);
    if (rc != ZGATE_ERR_NULL_ARGUMENT || !zt_names(zgate_last_error(), "z"))
      tproblem(res, "NULL z gave %d: %s", rc, zgate_last_error());
    sched_yield();
    if (!zt_names(zgate_last_error(), "z"))
      tproblem(res, "message changed under another thread's calls: %s", zgate_last_error());

    /* 3. private inputs, checked by the oracle; in place every other time */
    if (it % 3 == 0) {
      priv_in p;
      priv_init(&p, &rng);
      zt_tensor dout_copy;
      zt_copy_compact(&dout_copy, &p.dout.t);
      int inplace = (it / 3) & 1;
      DLTensor *dos = inplace ? &p.dout.t : &w.dz.t;
      zt_tensor *dz = &w.dz;
      zt_tensor dos_f32;
      zt_buf *dosb = NULL;
      if (!inplace) {
        dosb = zt_buf_new((size_t)zt_numel(g_shape) * 4);
        zt_tensor_init(&dos_f32, zt_f32, g_shape, NULL, dosb, 0, 0, 1);
        dos = &dos_f32.t;
      }
      rc = zgate_bwd(&p.dout.t, &p.z.t, &p.o.t, &dz->t, dos, &opts);
      if (rc != ZGATE_OK) tproblem(res, "private bwd returned %d: %s", rc, zgate_last_error());
      zgate_check_stats a, b;
      zgate_check_stats_init(&a);
      zgate_check_stats_init(&b);
      if (zgate_check_bwd(&dout_copy.t, &p.z.t, &p.o.t, &dz->t, dos, &a, &b) || a.failures || b.failures)
        tproblem(res, "private bwd (%s, in place %d): %lld + %lld failures", opts.cpu_isa ? opts.cpu_isa : "default",
                 inplace, (long long)a.failures, (long long)b.failures);
      zt_buf_free(dosb);
      zt_buf_free(dout_copy.buf);
      priv_free(&p);
    }
  }
  outs_free(&w);
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  /* Shared inputs and the expected result of each path, computed with explicit paths only
   * so that the process-wide choice is still unmade when the threads start. */
  zt_rng rng = {g_seed};
  priv_in p;
  priv_init(&p, &rng);
  g_in.dout = p.dout; /* the DLTensors' shape pointers must follow the copies */
  g_in.z = p.z;
  g_in.o = p.o;
  g_in.dout.t.shape = g_in.dout.shape; g_in.dout.t.strides = NULL;
  g_in.z.t.shape = g_in.z.shape; g_in.z.t.strides = g_in.z.strides;
  g_in.o.t.shape = g_in.o.shape; g_in.o.t.strides = NULL;
  for (int i = 0; i < 3; i++) g_in.b[i] = p.b[i];
  for (int k = 0; k < g_nisas; k++) {
    outs w;
    outs_init(&w);
    zgate_options opts;
    zgate_options_init(&opts);
    opts.cpu_isa = g_isas[k];
    opts.num_threads = 1;
    assert_int_equal(zgate_bwd(&g_in.dout.t, &g_in.z.t, &g_in.o.t, &w.dz.t, &w.dos.t, &opts), ZGATE_OK);
    assert_int_equal(zgate_fwd(&g_in.o.t, &g_in.z.t, &w.out.t, &opts), ZGATE_OK);
    zgate_check_stats a, b, c;
    zgate_check_stats_init(&a);
    zgate_check_stats_init(&b);
    zgate_check_stats_init(&c);
    assert_int_equal(zgate_check_bwd(&g_in.dout.t, &g_in.z.t, &g_in.o.t, &w.dz.t, &w.dos.t, &a, &b), 0);
    assert_int_equal(zgate_check_fwd(&g_in.o.t, &g_in.z.t, &w.out.t, &c), 0);
    assert_int_equal(a.failures + b.failures + c.failures, 0);
    g_in.dz[k] = malloc(w.b[0]->size);
    g_in.dos[k] = malloc(w.b[1]->size);
    g_in.out[k] = malloc(w.b[2]->size);
    memcpy(g_in.dz[k], w.b[0]->mem, w.b[0]->size);
    memcpy(g_in.dos[k], w.b[1]->mem, w.b[1]->size);
    memcpy(g_in.out[k], w.b[2]->mem, w.b[2]->size);
    outs_free(&w);
  }

  pthread_t th[NTHREADS];
  thread_result res[NTHREADS];
  pthread_barrier_init(&g_barrier, NULL, NTHREADS);
  for (int i = 0; i < NTHREADS; i++) {
    memset(&res[i], 0, sizeof res[i]);
    res[i].id = i;
    assert_int_equal(pthread_create(&th[i], NULL, worker, &res[i]), 0);
  }
  int64_t problems = 0;
  for (int i = 0; i < NTHREADS; i++) {
    pthread_join(th[i], NULL);
    problems += res[i].problems;
    if (strcmp(res[i].chosen, res[0].chosen) != 0) {
      printf("FAIL: thread %d saw chosen path %s, thread 0 %s\n", i, res[i].chosen, res[0].chosen);
      problems++;
    }
  }
  pthread_barrier_destroy(&g_barrier);
  printf("%d threads, paths: ", NTHREADS);
  for (int k = 0; k < g_nisas; k++) printf("%s ", g_isas[k]);
  printf("(default %s)\n", res[0].chosen);
  for (int k = 0; k < g_nisas; k++) {
    free(g_in.dz[k]);
    free(g_in.dos[k]);
    free(g_in.out[k]);
  }
  for (int i = 0; i < 3; i++) zt_buf_free(g_in.b[i]);
  assert_int_equal(problems, 0);
}

int main(void) {
  g_seed = zt_seed("test_threads");
  for (int i = 0; i < 4; i++)
    if (zgate_cpu_isa_available(all_isas[i])) g_isas[g_nisas++] = all_isas[i];
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_threads)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
