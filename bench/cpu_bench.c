/* zgate_cpu_bench: the CPU benchmark (a program, not a test).
 *
 * For each dtype (float32 and bfloat16 by default), on dense tensors of >= 64M elements:
 *   - GB/s of zgate_bwd through the public API, counted as 3 reads + 2 writes of the
 *     tensors (zgate_fwd: 2 + 1), with all threads and with one thread;
 *   - the ceiling measured in the same run: streaming loops (stream_ceiling.c) that read the
 *     input buffers and write the output buffers, the same bytes as the operator, in every
 *     variant this CPU has (16-, 32-, 64-byte loads; non-temporal or plain stores; with and
 *     without software prefetch), timed round robin; zgate is judged against the fastest
 *     (all threads; also one thread), and the table of all variants is printed;
 *   - the plain scalar loop (plain_loop.c, -O2, no -march, one thread);
 *   - the same zgate call with Z as a view into an input projection (strides
 *     (L*d_in_proj, d_in_proj, D, 1)), the strided path of the real model, judged against
 *     the dense ceiling, with the fastest stream reading Z's rows from the projection beside it.
 * Every figure is the median of --repeats timed calls after one warm-up call, with the
 * min..max spread: the machine may be shared, so read the spread before the median.
 * Each row also gives a CPU-time figure: bytes / (process CPU seconds / threads). When other
 * processes take the cores, wall-clock GB/s falls with the share of the cores this process
 * got, while the CPU-time figure shows what the code does with the time it ran (threads
 * spinning at OpenMP barriers count, so it errs low). Wall clock is the headline on a quiet
 * machine; compare loadavg (printed) with the core count.
 *
 *   zgate_cpu_bench [--n N] [--threads T] [--repeats R] [--isa NAME] [--dtype f32,bf16,f16]
 *                   [--op bwd,fwd] [--layout dense,proj] [--d-in-proj P] [--offset B]
 *                   [--no-plain]
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign, clock_gettime under -std=c11 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#include <zgate.h>

#include "plain_loop.h"
#include "stream_ceiling.h"

/* ---- options -------------------------------------------------------------------------- */

typedef struct bench_opts {
  int64_t n;          /* elements per tensor (rounded down to a multiple of H*D) */
  int threads;        /* "all threads" count; 0 = OpenMP default */
  int repeats;
  const char *isa;    /* NULL = zgate's choice */
  const char *dtypes; /* comma list */
  const char *ops;
  const char *layouts;
  int64_t d_in_proj;
  int plain;
  int64_t offset;     /* bytes past a 4096-byte boundary where every buffer starts */
} bench_opts;

static int has_word(const char *list, const char *w) {
  size_t n = strlen(w);
  for (const char *p = list; (p = strstr(p, w)) != NULL; p += n)
    if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: zgate_cpu_bench [--n N] [--threads T] [--repeats R] [--isa scalar|avx2|avx512|neon]\n"
          "                       [--dtype f32,bf16,f16] [--op bwd,fwd] [--layout dense,proj]\n"
          "                       [--d-in-proj P] [--offset B] [--no-plain]\n"
          "defaults: --n 67108864 --repeats 9 --dtype f32,bf16 --op bwd,fwd --layout dense,proj\n"
          "          --d-in-proj 4352 (Z rows of H*D = 2048 contiguous elements, then a jump)\n"
          "          --offset 0: every buffer starts B bytes (a multiple of 16 below 4096) past a\n"
          "          page, e.g. 16 as numpy's large arrays do; PyTorch's are 64-byte aligned\n");
}

static int parse_i64(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < 0) return 0;
  *out = v;
  return 1;
}

/* ---- time, buffers -------------------------------------------------------------------- */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_s(void) { /* all threads of the process */
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *xalloc(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, bytes ? bytes : 64) != 0) {
    fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    exit(2);
  }
  return p;
}

static int nthreads_of(int t) {
#ifdef _OPENMP
  return t > 0 ? t : omp_get_max_threads();
#else
  (void)t;
  return 1;
#endif
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

/* Deterministic values of the realistic range (no NaN, no subnormals), written by the
 * threads that will use them (first touch places pages). `which` picks the tensor. */
static void fill(void *buf, int dtype_bits, int is_bf16, int64_t n, int which, int threads) {
  const float span = which == 1 ? 8.0f : 2.0f; /* z in [-8, 8], others in [-2, 2] */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads_of(threads))
#endif
  for (int64_t i = 0; i < n; i++) {
    uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)(which + 1) * 0xD1B54A32D192ED03ull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    float v = span * ((float)(h >> 40) * 0x1p-24f * 2.0f - 1.0f);
    if (dtype_bits == 32)
      ((float *)buf)[i] = v;
    else if (is_bf16)
      ((uint16_t *)buf)[i] = f32_to_bf16(v);
    else
      ((uint16_t *)buf)[i] = 0x3c00; /* float16 1.0; float16 values only matter for speed */
  }
}

/* ---- statistics ----------------------------------------------------------------------- */

typedef struct stat3 {
  double med, min, max;          /* GB/s, wall clock */
  double cmed, cmin, cmax;       /* GB/s, process CPU time / threads */
} stat3;

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static void summarize(double *gbs, int r, double *med, double *min, double *max) {
  qsort(gbs, (size_t)r, sizeof *gbs, cmp_d);
  *med = r % 2 ? gbs[r / 2] : 0.5 * (gbs[r / 2 - 1] + gbs[r / 2]);
  *min = gbs[0];
  *max = gbs[r - 1];
}

/* ---- one configuration ------------------------------------------------------------------ */

enum { K_ZGATE, K_PLAIN };

typedef struct bench_case {
  int op_bwd;     /* 1 = bwd (3 in, 2 out), 0 = fwd (2 in, 1 out) */
  int bits, bf16; /* 32/0 float32, 16/1 bfloat16, 16/0 float16 */
  int proj;       /* Z as a view into the input projection */
  int64_t shape[4];
  int64_t n;
  void *buf[5];   /* bwd: dout z o dz dos; fwd: o z out */
  void *zproj;    /* the projection buffer Z views, when proj */
  int64_t d_in_proj;
  void *alloc[6]; /* what xalloc returned: buf[] and zproj sit `--offset` bytes into these */
} bench_case;

static void make_tensor(DLTensor *t, void *data, const bench_case *c, int64_t *strides) {
  memset(t, 0, sizeof *t);
  t->data = data;
  t->device.device_type = kDLCPU;
  t->ndim = 4;
  t->dtype.code = c->bits == 32 ? kDLFloat : (c->bf16 ? kDLBfloat : kDLFloat);
  t->dtype.bits = (uint8_t)c->bits;
  t->dtype.lanes = 1;
  t->shape = (int64_t *)c->shape;
  t->strides = strides;
}

static int run_zgate(const bench_case *c, int threads, const char *isa) {
  DLTensor t[5];
  int64_t zstr[4] = {c->shape[1] * c->d_in_proj, c->d_in_proj, c->shape[3], 1};
  int nt = c->op_bwd ? 5 : 3, zi = 1; /* Z is slot 1 in both signatures */
  for (int i = 0; i < nt; i++)
    make_tensor(&t[i], i == zi && c->proj ? c->zproj : c->buf[i], c, i == zi && c->proj ? zstr : NULL);
  zgate_options o;
  zgate_options_init(&o);
  o.num_threads = threads;
  o.cpu_isa = isa;
  int st = c->op_bwd ? zgate_bwd(&t[0], &t[1], &t[2], &t[3], &t[4], &o)
                     : zgate_fwd(&t[0], &t[1], &t[2], &o);
  if (st != ZGATE_OK) {
    fprintf(stderr, "zgate failed: %s (%s)\n", zgate_status_str(st), zgate_last_error());
    exit(3);
  }
  return st;
}

static void run_plain(const bench_case *c) {
  void *const *b = c->buf;
  if (c->op_bwd) {
    if (c->bits == 32)
      plain_bwd_f32(b[0], b[1], b[2], b[3], b[4], c->n);
    else
      plain_bwd_bf16(b[0], b[1], b[2], b[3], b[4], c->n);
  } else {
    if (c->bits == 32)
      plain_fwd_f32(b[0], b[1], b[2], c->n);
    else
      plain_fwd_bf16(b[0], b[1], b[2], c->n);
  }
}

static stat3 measure(int kind, const bench_case *c, int threads, const char *isa, int repeats) {
  const double bytes = (double)(c->op_bwd ? 5 : 3) * (double)c->n * (c->bits / 8);
  double *gbs = malloc(sizeof(double) * (size_t)repeats);
  double *cgbs = malloc(sizeof(double) * (size_t)repeats);
  const int used = kind == K_PLAIN ? 1 : nthreads_of(threads);
  for (int r = -1; r < repeats; r++) { /* r = -1: warm-up */
    double c0 = cpu_s(), t0 = now_s();
    if (kind == K_ZGATE) {
      run_zgate(c, threads, isa);
    } else {
      run_plain(c);
    }
    double t = now_s() - t0, c = (cpu_s() - c0) / used;
    if (r >= 0) {
      gbs[r] = bytes / t * 1e-9;
      cgbs[r] = bytes / c * 1e-9;
    }
  }
  stat3 s;
  summarize(gbs, repeats, &s.med, &s.min, &s.max);
  summarize(cgbs, repeats, &s.cmed, &s.cmin, &s.cmax);
  free(gbs);
  free(cgbs);
  return s;
}

static void print_row(const char *what, stat3 s, const char *extra) {
  printf("  %-38s %6.2f [%6.2f .. %6.2f] | %6.2f [%6.2f .. %6.2f]  %s\n", what, s.med, s.min,
         s.max, s.cmed, s.cmin, s.cmax, extra ? extra : "");
}

/* ---- the ceiling (stream_ceiling.c) ------------------------------------------------------ */

/* The stream over this case's own buffers, the operator's bytes: bwd reads dout, z, o and
 * writes dz, dout_scaled; fwd reads o, z and writes out. view: z's rows from the projection. */
static zb_stream case_stream(const bench_case *c, int view) {
  const size_t es = (size_t)(c->bits / 8);
  zb_stream s;
  memset(&s, 0, sizeof s);
  s.a = c->buf[0];
  s.b = view ? c->zproj : c->buf[1];
  s.c = c->op_bwd ? c->buf[2] : NULL;
  s.d = c->buf[c->op_bwd ? 3 : 2];
  s.e = c->op_bwd ? c->buf[4] : NULL;
  s.bytes = (size_t)c->n * es;
  if (view) {
    s.b_row = (size_t)(c->shape[2] * c->shape[3]) * es;
    s.b_stride = (size_t)c->d_in_proj * es;
  }
  return s;
}

static stat3 to_stat(double *wall, double *cpu, int repeats, double bytes, int used, int *ok) {
  stat3 st;
  memset(&st, 0, sizeof st);
  double w[3], cp[3];
  *ok = zb_summarize(wall, repeats, w) > 0 && zb_summarize(cpu, repeats, cp) > 0;
  if (!*ok) return st;
  /* the fastest time is the highest rate */
  st.med = bytes / w[0] * 1e-9, st.min = bytes / w[2] * 1e-9, st.max = bytes / w[1] * 1e-9;
  st.cmed = bytes / (cp[0] / used) * 1e-9, st.cmin = bytes / (cp[2] / used) * 1e-9, st.cmax = bytes / (cp[1] / used) * 1e-9;
  return st;
}

typedef struct ceil_scan {
  int nv, best;                 /* best: the variant of the highest median (wall), -1 if none */
  int ok[ZB_MAX_VARIANTS];
  stat3 s[ZB_MAX_VARIANTS];
  stat3 z;                      /* zgate, timed in the same rounds */
  double ratio[3];              /* zgate's time / the ceiling's in the same round: median, min, max */
} ceil_scan;

/* Rounds of: every stream variant once on the dense buffers, then zgate once (Z as the view
 * when the case says so), `repeats` rounds after one untimed. A burst of other work on a
 * shared machine then hits the ceiling and zgate alike, and each round gives a ratio of
 * zgate to the ceiling's variant measured next to it. */
static ceil_scan measure_ceiling(const bench_case *c, int threads, int repeats, const char *isa) {
  ceil_scan cs;
  memset(&cs, 0, sizeof cs);
  const double bytes = (double)(c->op_bwd ? 5 : 3) * (double)c->n * (c->bits / 8);
  const int used = nthreads_of(threads);
  zb_stream s = case_stream(c, 0);
  cs.nv = zb_variant_count();
  const int nk = cs.nv + 1; /* the variants, then zgate */
  double *wall = malloc(sizeof(double) * (size_t)(nk * repeats)), *cpu = malloc(sizeof(double) * (size_t)(nk * repeats));
  double *rat = malloc(sizeof(double) * (size_t)repeats);
  if (!wall || !cpu || !rat) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  for (int r = -1; r < repeats; r++)
    for (int k = 0; k < nk; k++) {
      double c0 = cpu_s(), t0 = now_s();
      int st = k < cs.nv ? zb_stream_run(k, &s, threads) : (run_zgate(c, threads, isa), 0);
      double t = now_s() - t0, ct = cpu_s() - c0;
      if (r < 0) continue;
      wall[k * repeats + r] = st ? -1.0 : t;
      cpu[k * repeats + r] = st ? -1.0 : ct;
    }
  double *zw = wall + cs.nv * repeats;
  cs.best = -1;
  double bestmed = 0;
  for (int v = 0; v < cs.nv; v++) {
    double m[3], tmp[1000];
    memcpy(tmp, wall + v * repeats, sizeof(double) * (size_t)repeats);
    if (!zb_summarize(tmp, repeats, m)) continue;
    if (cs.best < 0 || m[0] < bestmed) cs.best = v, bestmed = m[0];
  }
  if (cs.best >= 0) {
    for (int r = 0; r < repeats; r++) rat[r] = wall[cs.best * repeats + r] / zw[r];
    zb_summarize(rat, repeats, cs.ratio);
  }
  int zok;
  cs.z = to_stat(zw, cpu + cs.nv * repeats, repeats, bytes, used, &zok);
  for (int v = 0; v < cs.nv; v++) cs.s[v] = to_stat(wall + v * repeats, cpu + v * repeats, repeats, bytes, used, &cs.ok[v]);
  free(wall);
  free(cpu);
  free(rat);
  return cs;
}

/* One variant, on the dense buffers or with Z's rows from the projection. */
static stat3 measure_variant(const bench_case *c, int v, int view, int threads, int repeats) {
  const double bytes = (double)(c->op_bwd ? 5 : 3) * (double)c->n * (c->bits / 8);
  zb_stream s = case_stream(c, view);
  double *wall = malloc(sizeof(double) * (size_t)repeats), *cpu = malloc(sizeof(double) * (size_t)repeats);
  if (!wall || !cpu) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  zb_stream_run(v, &s, threads);
  for (int r = 0; r < repeats; r++) {
    double c0 = cpu_s(), t0 = now_s();
    int st = zb_stream_run(v, &s, threads);
    wall[r] = st ? -1.0 : now_s() - t0;
    cpu[r] = st ? -1.0 : cpu_s() - c0;
  }
  int ok;
  stat3 out = to_stat(wall, cpu, repeats, bytes, nthreads_of(threads), &ok);
  free(wall);
  free(cpu);
  return out;
}

static void bench_one(const bench_opts *bo, bench_case *c) {
  const int all = nthreads_of(bo->threads);
  const double mb = (double)(c->op_bwd ? 5 : 3) * (double)c->n * (c->bits / 8) / 1e6;
  printf("\n%s %s, %s, shape (%lld, %lld, %lld, %lld) = %lld elements, %.0f MB moved per call\n",
         c->bits == 32 ? "float32" : (c->bf16 ? "bfloat16" : "float16"), c->op_bwd ? "bwd" : "fwd",
         c->proj ? "Z as input-projection view" : "dense",
         (long long)c->shape[0], (long long)c->shape[1], (long long)c->shape[2],
         (long long)c->shape[3], (long long)c->n, mb);
  if (c->proj) printf("  (Z strides (L*%lld, %lld, %lld, 1))\n", (long long)c->d_in_proj,
                      (long long)c->d_in_proj, (long long)c->shape[3]);
  char line[160], extra[200];
  printf("  %-38s %-24s | %-24s\n", "GB/s", "wall: median [min .. max]", "CPU time: median [min .. max]");

  ceil_scan scan = measure_ceiling(c, all, bo->repeats, bo->isa);
  if (scan.best < 0) {
    fprintf(stderr, "no ceiling variant runs on these buffers\n");
    exit(2);
  }
  printf("  ceiling variants, %d threads, timed in rounds with zgate (%d rounds):\n", all, bo->repeats);
  for (int v = 0; v < scan.nv; v++) {
    snprintf(line, sizeof line, "  %s", zb_variant_name(v));
    if (!scan.ok[v]) {
      printf("  %-38s (not usable on these buffers: alignment)\n", line);
      continue;
    }
    snprintf(extra, sizeof extra, "%5.1f%% of the fastest%s", 100.0 * scan.s[v].med / scan.s[scan.best].med,
             v == scan.best ? "  <- the ceiling" : "");
    print_row(line, scan.s[v], extra);
  }
  stat3 ceil_all = scan.s[scan.best];
  snprintf(line, sizeof line, "ceiling, %d threads", all);
  snprintf(extra, sizeof extra, "= %s", zb_variant_name(scan.best));
  print_row(line, ceil_all, extra);

  /* The same stream with Z read in rows of H*D elements, d_in_proj apart (as zgate reads them;
   * the other arrays dense): what a view costs a loop whose rows each restart the hardware
   * prefetchers. zgate, which prefetches across rows itself, can beat it, so it is printed
   * for reference and zgate is still judged against the dense ceiling. */
  if (c->proj) {
    stat3 ceil_view = measure_variant(c, scan.best, 1, all, bo->repeats);
    snprintf(line, sizeof line, "stream, Z as the view, %d thr.", all);
    snprintf(extra, sizeof extra, "%5.1f%% of the dense ceiling (wall); the ceiling's variant", 100.0 * ceil_view.med / ceil_all.med);
    print_row(line, ceil_view, extra);
  }

  stat3 z_all = scan.z;
  snprintf(line, sizeof line, "zgate %s, %d threads", bo->isa ? bo->isa : zgate_cpu_isa_chosen(), all);
  snprintf(extra, sizeof extra, "%5.1f%% of ceiling (wall), %5.1f%% (CPU time)", 100.0 * z_all.med / ceil_all.med,
           100.0 * z_all.cmed / ceil_all.cmed);
  print_row(line, z_all, extra);
  printf("  %-38s %6.1f%% [%5.1f%% .. %5.1f%%] per round (zgate vs the ceiling's variant next to it)\n",
         "zgate / ceiling, wall", 100.0 * scan.ratio[0], 100.0 * scan.ratio[1], 100.0 * scan.ratio[2]);

  /* One thread: the fastest variant of one thread (prefetch may matter more there). */
  ceil_scan scan1 = measure_ceiling(c, 1, bo->repeats, bo->isa);
  stat3 ceil_one = scan1.s[scan1.best];
  snprintf(extra, sizeof extra, "= %s (fastest of %d variants on 1 thread)", zb_variant_name(scan1.best), scan1.nv);
  print_row("ceiling, 1 thread", ceil_one, extra);
  stat3 z_one = scan1.z;
  snprintf(line, sizeof line, "zgate %s, 1 thread", bo->isa ? bo->isa : zgate_cpu_isa_chosen());
  snprintf(extra, sizeof extra, "%5.1f%% of 1-thread ceiling (wall), %5.1f%% (CPU time); per round %.1f%% [%.1f .. %.1f]",
           100.0 * z_one.med / ceil_one.med, 100.0 * z_one.cmed / ceil_one.cmed, 100.0 * scan1.ratio[0],
           100.0 * scan1.ratio[1], 100.0 * scan1.ratio[2]);
  print_row(line, z_one, extra);

  if (bo->plain && !c->proj && (c->bits == 32 || c->bf16)) {
    int reps = bo->repeats < 5 ? bo->repeats : 5; /* slow; 5 repeats tell its median */
    stat3 p = measure(K_PLAIN, c, 1, NULL, reps);
    snprintf(extra, sizeof extra, "zgate 1 thread = %.2fx this (wall), %.2fx (CPU time)", z_one.med / p.med,
             z_one.cmed / p.cmed);
    print_row("plain loop -O2, 1 thread", p, extra);
  }
  fflush(stdout);
}

/* ---- main --------------------------------------------------------------------------------- */

static void print_machine(void) {
  char model[256] = "?", la[128] = "?";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char l[512];
    while (fgets(l, sizeof l, f))
      if (strncmp(l, "model name", 10) == 0) {
        char *p = strchr(l, ':');
        if (p) snprintf(model, sizeof model, "%s", p + 2);
        model[strcspn(model, "\n")] = 0;
        break;
      }
    fclose(f);
  }
  f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fgets(la, sizeof la, f)) la[strcspn(la, "\n")] = 0;
    fclose(f);
  }
  printf("zgate_cpu_bench: %s\n", zgate_build_info());
  printf("machine: %s, %d OpenMP threads by default, loadavg %s\n", model, nthreads_of(0), la);
}

int main(int argc, char **argv) {
  bench_opts bo = {(int64_t)64 << 20, 0, 9, NULL, "f32,bf16", "bwd,fwd", "dense,proj", 4352, 1, 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t x;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 0; }
    else if (!strcmp(a, "--no-plain")) { bo.plain = 0; continue; }
    if (!v) { usage(); return 1; }
    i++;
    if (!strcmp(a, "--n") && parse_i64(v, &x) && x > 0) bo.n = x;
    else if (!strcmp(a, "--threads") && parse_i64(v, &x) && x <= 4096) bo.threads = (int)x;
    else if (!strcmp(a, "--repeats") && parse_i64(v, &x) && x > 0 && x <= 1000) bo.repeats = (int)x;
    else if (!strcmp(a, "--isa")) bo.isa = v;
    else if (!strcmp(a, "--dtype")) bo.dtypes = v;
    else if (!strcmp(a, "--op")) bo.ops = v;
    else if (!strcmp(a, "--layout")) bo.layouts = v;
    else if (!strcmp(a, "--d-in-proj") && parse_i64(v, &x) && x > 0) bo.d_in_proj = x;
    else if (!strcmp(a, "--offset") && parse_i64(v, &x) && x >= 0 && x < 4096 && x % 16 == 0) bo.offset = x;
    else { usage(); return 1; }
  }
  if (bo.isa && !zgate_cpu_isa_available(bo.isa)) {
    fprintf(stderr, "ISA %s is not built or not available on this CPU (built: %s)\n", bo.isa,
            zgate_cpu_isas_built());
    return 4;
  }
  print_machine();
  printf("buffers: each starts %lld bytes past a 4096-byte boundary\n", (long long)bo.offset);

  /* (B, L, H, D) = (1, L, 32, 64): H*D = 2048 per token, as a Mamba-3 layer of d_model 1024 */
  const int64_t H = 32, D = 64;
  int64_t L = bo.n / (H * D);
  if (L < 1) L = 1;
  if (bo.d_in_proj < H * D) bo.d_in_proj = H * D;
  const int64_t n = L * H * D;

  static const struct { const char *name; int bits, bf16; } dts[] = {
      {"f32", 32, 0}, {"bf16", 16, 1}, {"f16", 16, 0}};
  for (size_t di = 0; di < sizeof dts / sizeof dts[0]; di++) {
    if (!has_word(bo.dtypes, dts[di].name)) continue;
    const size_t es = (size_t)dts[di].bits / 8;
    bench_case c;
    memset(&c, 0, sizeof c);
    c.bits = dts[di].bits;
    c.bf16 = dts[di].bf16;
    c.n = n;
    c.shape[0] = 1; c.shape[1] = L; c.shape[2] = H; c.shape[3] = D;
    c.d_in_proj = bo.d_in_proj;
    for (int t = 0; t < 5; t++) {
      c.alloc[t] = xalloc((size_t)n * es + (size_t)bo.offset);
      c.buf[t] = (char *)c.alloc[t] + bo.offset;
      fill(c.buf[t], c.bits, c.bf16, n, t == 0 ? 0 : t == 1 ? 1 : 2, bo.threads);
    }
    if (has_word(bo.layouts, "proj")) {
      c.alloc[5] = xalloc((size_t)L * (size_t)bo.d_in_proj * es + (size_t)bo.offset);
      c.zproj = (char *)c.alloc[5] + bo.offset;
      fill(c.zproj, c.bits, c.bf16, L * bo.d_in_proj, 1, bo.threads);
    }
    for (int op = 1; op >= 0; op--) {
      if (!has_word(bo.ops, op ? "bwd" : "fwd")) continue;
      c.op_bwd = op;
      if (!op) { /* fwd: o, z, out = buffers 2, 1, 3 of bwd's set */
        void *keep[5];
        memcpy(keep, c.buf, sizeof keep);
        c.buf[0] = keep[2]; c.buf[1] = keep[1]; c.buf[2] = keep[3];
        for (int p = 0; p < 2; p++) {
          c.proj = p;
          if (has_word(bo.layouts, p ? "proj" : "dense")) bench_one(&bo, &c);
        }
        memcpy(c.buf, keep, sizeof keep);
      } else {
        for (int p = 0; p < 2; p++) {
          c.proj = p;
          if (has_word(bo.layouts, p ? "proj" : "dense")) bench_one(&bo, &c);
        }
      }
    }
    for (int t = 0; t < 6; t++) free(c.alloc[t]);
  }
  return 0;
}
