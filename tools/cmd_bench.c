/* `zgate bench`: the bandwidth suite. For each backend, shape, dtype combination and layout:
 * the median time of the operator, the GB/s it moves (bytes read plus written), and the
 * percentage of a ceiling measured in the same run on the same number of bytes (CPU: the
 * fastest of several streaming loops with the operator's reads and writes, 3 + 2 for the
 * backward and 2 + 1 for the forward, on the same threads (stream_ceiling.c); CUDA: a
 * device-to-device copy). Prints a table, writes JSON, draws a PNG with gnuplot. */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define MAX_SHAPES 32
#define MAX_DTYPES 16

typedef struct bench_cfg {
  int64_t shapes[MAX_SHAPES][4];
  int nshapes;
  cli_dtypes dtypes[MAX_DTYPES];
  int ndtypes;
  unsigned layouts;
  const char *backend_spec, *backend_opt; /* backend_opt: --backend or --isa, for messages */
  double max_memory;                     /* bytes a configuration may take, 0 = what is available */
  int threads;
  int repeats, warmup;
  int ops;
  const char *json, *png;
  int plot;
  int settle; /* seconds to wait at most for a quiet machine, 0 = start at once */
} bench_cfg;

/* Small enough that the whole default suite runs in well under a minute on two cores. */
static const int64_t default_shapes[][4] = {{2, 2048, 24, 64}, {2, 2048, 40, 80}, {4, 4096, 32, 64}};
/* On a GPU the realistic training shapes (bf16 moves 63 MB to 1.3 GB per call). */
static const int64_t default_cuda_shapes[][4] = {{2, 2048, 24, 64},  {2, 2048, 40, 80},  {16, 2345, 32, 64},
                                                 {4, 4096, 64, 64},  {4, 4096, 48, 96},  {2, 8192, 32, 128},
                                                 {1, 32768, 64, 64}};
static const char *const default_dtypes[] = {"bf16", "f32"};

static void usage(FILE *f) {
  fprintf(f,
          "usage: zgate bench [options]\n"
          "\n"
          "Times the operator on each backend and reports GB/s (bytes read plus written, once\n"
          "each) and the percentage of a ceiling measured in the same run over the same bytes:\n"
          "on the CPU the fastest of several streaming loops with the operator's reads and\n"
          "writes (bwd 3 + 2, fwd 2 + 1) on the same threads: 16-, 32- and 64-byte loads where\n"
          "the CPU has them, non-temporal or plain stores, with and without software prefetch,\n"
          "timed round robin (each one's GB/s is printed after the table); on CUDA a\n"
          "device-to-device copy (L2 flushed before every timed call).\n"
          "Every figure comes with its range over the timed calls (fastest..slowest); a row whose\n"
          "calls spread more than %.2fx, or that exceeds %.0f%% of its ceiling, is flagged: the\n"
          "machine was busy (the load average at the start is printed and stored). Prints a\n"
          "table, writes JSON and a PNG chart (the chart needs gnuplot). Exits 0 when every\n"
          "configuration ran, 1 when zgate returned an error, 2 on bad options or an output path\n"
          "that cannot be written (checked before any work), 3 when a configuration did not run\n"
          "(not enough memory, no elements, no device).\n"
          "\n"
          "options:\n"
          "  --shape B,L,H,D    a shape; repeat for several (default on the CPU: (2,2048,24,64),\n"
          "                     (2,2048,40,80), (4,4096,32,64); on CUDA the seven realistic\n"
          "                     training shapes, (2,2048,24,64) to (1,32768,64,64))\n"
          "  --dtype SPEC       f32 | f16 | bf16, or per tensor: dout=bf16,z=f32,... (repeat for\n"
          "                     several; default: bf16 and f32)\n"
          "  --layout LIST      dense,zview,permuted,inplace or all (default dense,zview)\n"
          "  --backend LIST     best (default: the chosen CPU path) and every CUDA device; or all,\n"
          "                     cpu, scalar, avx2, avx512, neon, cuda, cuda:N\n"
          "  --isa LIST         the same for CPU paths only, e.g. --isa scalar,avx2\n"
          "  --op bwd|fwd|both  which direction to time (default bwd)\n"
          "  --threads N        CPU threads (default 0 = OpenMP default), for zgate and the ceiling\n"
          "  --repeats N        timed calls per configuration, the median is reported (default 10\n"
          "                     on the CPU, 50 on CUDA)\n"
          "  --warmup N         untimed calls first (default 2)\n"
          "  --max-memory SIZE  host memory a configuration may take, e.g. 8G (default: MemAvailable\n"
          "                     now); one that needs more is not run, and says how much it needs\n"
          "  --json PATH        results as JSON (default zgate-bench.json)\n"
          "  --png PATH         chart (default zgate-bench.png), with its gnuplot data and script\n"
          "                     beside it: PATH with .png replaced by .dat and .gp\n"
          "  --no-plot          do not write the chart\n"
          "  --settle S         first wait, at most S seconds, until the 1-minute load average is\n"
          "                     under %.2f per CPU (e.g. after a build); the table, JSON and chart\n"
          "                     say how long it waited and whether the machine settled\n"
          "  --help             this text\n",
          BENCH_NOISY_SPREAD, BENCH_MAX_PLAUSIBLE_PCT, BENCH_SETTLE_LOAD_PER_CPU);
}

static const cli_opt bench_opts[] = {{"shape", 1},   {"dtype", 1},   {"layout", 1}, {"backend", 1},
                                     {"op", 1},      {"threads", 1}, {"repeats", 1}, {"warmup", 1},
                                     {"json", 1},    {"png", 1},     {"no-plot", 0}, {"isa", 1},
                                     {"max-memory", 1}, {"settle", 1}};

static int on_opt(void *ctx, int which, const char *v) {
  bench_cfg *c = ctx;
  long long n;
  switch (which) {
  case 0:
    if (c->nshapes >= MAX_SHAPES) return cli_error("bench", "at most %d --shape options", MAX_SHAPES), -1;
    return cli_parse_shape("bench", v, c->shapes[c->nshapes++]);
  case 1:
    if (c->ndtypes >= MAX_DTYPES) return cli_error("bench", "at most %d --dtype options", MAX_DTYPES), -1;
    return cli_parse_dtypes("bench", v, &c->dtypes[c->ndtypes++]);
  case 2: return cli_parse_layouts("bench", v, &c->layouts);
  case 3: c->backend_spec = v, c->backend_opt = "--backend"; return 0;
  case 4: return cli_parse_op("bench", v, &c->ops);
  case 5:
    if (cli_parse_int("bench", "--threads", v, 0, 4096, &n)) return -1;
    c->threads = (int)n;
    return 0;
  case 6:
    if (cli_parse_int("bench", "--repeats", v, 1, 100000, &n)) return -1;
    c->repeats = (int)n;
    return 0;
  case 7:
    if (cli_parse_int("bench", "--warmup", v, 0, 100000, &n)) return -1;
    c->warmup = (int)n;
    return 0;
  case 8: c->json = v; return 0;
  case 9: c->png = v; return 0;
  case 10: c->plot = 0; return 0;
  case 11: /* --isa: the CPU paths only, same names as --backend */
    if (strstr(v, "cuda"))
      return cli_error("bench", "--isa takes CPU paths (scalar, avx2, avx512, neon); use --backend for CUDA"), -1;
    c->backend_spec = v, c->backend_opt = "--isa";
    return 0;
  case 12: return cli_parse_size("bench", "--max-memory", v, &c->max_memory);
  case 13:
    if (cli_parse_int("bench", "--settle", v, 0, 3600, &n)) return -1;
    c->settle = (int)n;
    return 0;
  }
  return -1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median, fastest and slowest of n times (sorts them). */
static void summarize(double *v, int n, double out[3]) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  out[0] = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  out[1] = v[0];
  out[2] = v[n - 1];
}

/* Inputs for timing: a repeating table of ordinary values, written row by row (fast even for
 * hundreds of millions of elements; the values do not change the speed). */
static void fill_fast(cli_buf *b, uint64_t seed) {
  enum { TABLE = 4093 }; /* prime, so rows do not repeat in step */
  unsigned char table[TABLE * 4];
  cli_rng rng = {seed};
  for (int i = 0; i < TABLE; i++) {
    double v = 3.0 * cli_rng_normal(&rng);
    int64_t one[4] = {0, 0, 0, 0};
    cli_buf tmp = *b; /* reuse the element store of this dtype on the table */
    tmp.host = table + i * b->esize;
    tmp.offset = 0;
    cli_buf_set(&tmp, one, v);
  }
  int64_t idx[4] = {0, 0, 0, 0}, k = 0;
  const int64_t *sh = b->shape, *st = b->strides;
  for (idx[0] = 0; idx[0] < sh[0]; idx[0]++)
    for (idx[1] = 0; idx[1] < sh[1]; idx[1]++)
      for (idx[2] = 0; idx[2] < sh[2]; idx[2]++) {
        unsigned char *row = b->host + (b->offset + idx[0] * st[0] + idx[1] * st[1] + idx[2] * st[2]) * b->esize;
        for (int64_t d = 0; d < sh[3]; d++, k++)
          memcpy(row + d * st[3] * b->esize, table + (k % TABLE) * b->esize, (size_t)b->esize);
      }
}

typedef struct bench_ctx {
  const bench_cfg *cfg;
  int index, total;
  int tty;
} bench_ctx;

static void progress(const bench_ctx *ctx, const bench_result *r, const char *what) {
  if (!ctx->tty && strcmp(what, "allocating") != 0) return; /* a log gets one line per configuration */
  char shape[64], dts[64];
  cli_shape_str(r->shape, shape, sizeof shape);
  cli_op_dtypes_str(&r->dt, r->op[0] == 'f', dts, sizeof dts);
  if (!ctx->tty)
    fprintf(stderr, "zgate bench [%d/%d] %s %s %s %s %s\n", ctx->index, ctx->total, r->backend, r->op, shape, dts,
            cli_layout_names[r->layout]);
  else
    fprintf(stderr, "\rzgate bench [%d/%d] %s %s %s %s %s: %-18s", ctx->index, ctx->total, r->backend, r->op, shape,
            dts, cli_layout_names[r->layout], what);
  fflush(stderr);
}

/* Runs the operator once; returns the zgate status. */
static int call_op(const bench_result *r, cli_buf *b, cli_buf *dos, const zgate_options *opts) {
  DLTensor t0 = cli_buf_tensor(&b[CLI_DOUT]), t1 = cli_buf_tensor(&b[CLI_Z]), t2 = cli_buf_tensor(&b[CLI_O]);
  DLTensor t3 = cli_buf_tensor(&b[CLI_DZ]), t4 = cli_buf_tensor(dos);
  if (r->op[0] == 'b') return zgate_bwd(&t0, &t1, &t2, &t3, &t4, opts);
  return zgate_fwd(&t2, &t1, &t3, opts);
}

/* The tensors a configuration allocates: the forward has no dout and dout_scaled, in place
 * writes dout_scaled over dout. */
static int uses_tensor(const bench_result *r, int which) {
  if (which == CLI_DOS && r->layout == CLI_INPLACE) return 0;
  return r->op[0] == 'b' || (which != CLI_DOUT && which != CLI_DOS);
}

/* The CPU ceiling's arrays: the backward's five (3 read, 2 written), the forward's three
 * (2 read, 1 written); the operator's tensors in that order: dout z o dz dout_scaled, or
 * o z out. */
static int ceiling_arrays(const bench_result *r) { return r->op[0] == 'b' ? 5 : 3; }
static const int ceiling_tensor[2][5] = {{CLI_DOUT, CLI_Z, CLI_O, CLI_DZ, CLI_DOS}, {CLI_O, CLI_Z, CLI_DZ, -1, -1}};

/* Each array: an equal share of the bytes, in whole 64-byte lines. */
static size_t ceiling_each(const bench_result *r) {
  return ((size_t)(r->bytes / ceiling_arrays(r)) + 63) & ~(size_t)63;
}

/* The CPU ceiling runs on the operator's own buffers when each holds that many bytes (the
 * memory zgate was just timed on: on a VM, where guest pages land can change a stream's
 * bandwidth by 20%), else on fresh ones (in place; mixed dtypes). */
static int ceiling_on_own_buffers(const bench_result *r) {
  if (r->layout == CLI_INPLACE) return 0;
  const int fwd = r->op[0] == 'f';
  for (int i = 0; i < ceiling_arrays(r); i++) {
    int t = ceiling_tensor[fwd][i];
    if (cli_buf_bytes(t, (cli_layout)r->layout, r->shape, r->dt.t[t]) < (double)ceiling_each(r)) return 0;
  }
  return 1;
}

/* Host bytes a configuration holds: its tensors, and on the CPU the ceiling's arrays when it
 * cannot use the tensors. */
static double config_bytes(const bench_result *r) {
  double sum = 0;
  for (int i = 0; i < CLI_NT; i++)
    if (uses_tensor(r, i)) sum += cli_buf_bytes(i, (cli_layout)r->layout, r->shape, r->dt.t[i]);
  if (!r->is_cuda && !ceiling_on_own_buffers(r)) sum += ceiling_arrays(r) * (double)ceiling_each(r);
  return sum;
}

static void measure_cpu(const bench_ctx *ctx, bench_result *r, cli_buf *b, cli_buf *dos, const char *isa) {
  const bench_cfg *cfg = ctx->cfg;
  zgate_options opts;
  zgate_options_init(&opts);
  opts.num_threads = cfg->threads;
  opts.cpu_isa = isa;
  int reps = cfg->repeats > 0 ? cfg->repeats : 10;
  double *t = malloc(sizeof(double) * (size_t)reps);
  if (!t) {
    snprintf(r->error, sizeof r->error, "out of memory");
    return;
  }
  progress(ctx, r, "warming up");
  for (int i = 0; i < cfg->warmup || i == 0; i++) {
    double t0 = cli_now();
    int st = call_op(r, b, dos, &opts);
    if (i == 0) r->first_s = cli_now() - t0;
    if (st != ZGATE_OK) {
      snprintf(r->error, sizeof r->error, "zgate returned %d (%s): %s", st, zgate_status_str(st), zgate_last_error());
      r->failed = 1;
      free(t);
      return;
    }
  }
  for (int i = 0; i < reps; i++) {
    char what[32];
    snprintf(what, sizeof what, "call %d/%d", i + 1, reps);
    progress(ctx, r, what);
    double t0 = cli_now();
    call_op(r, b, dos, &opts);
    t[i] = cli_now() - t0;
  }
  r->repeats = reps;
  summarize(t, reps, r->time_s);

  /* The ceiling over the same bytes: the operator's arrays, an equal share of the bytes each,
   * on its own buffers where they serve: on a VM, where guest pages land can change a
   * stream's bandwidth by 20%. Every stream variant, round robin; the fastest by median is
   * the ceiling. */
  const int na = ceiling_arrays(r), fwd = r->op[0] == 'f';
  size_t each = ceiling_each(r);
  void *a[5] = {0};
  int use_own = ceiling_on_own_buffers(r);
  int ok = 1;
  for (int i = 0; i < na; i++) {
    if (use_own) {
      int k = ceiling_tensor[fwd][i];
      a[i] = k == CLI_DOS ? dos->host : b[k].host;
      continue;
    }
    a[i] = aligned_alloc(64, each ? each : 64);
    if (!a[i]) ok = 0;
    else memset(a[i], i * 17 + 1, each); /* first touch outside the timing */
  }
  const int nv = zb_variant_count();
  double *w = ok ? malloc(sizeof(double) * (size_t)(nv * reps)) : NULL;
  if (ok && w) {
    zb_stream s = {a[0], a[1], na == 5 ? a[2] : NULL, na == 5 ? a[3] : a[2], na == 5 ? a[4] : NULL, each, 0, 0};
    progress(ctx, r, "ceiling");
    zb_stream_time(&s, cfg->threads, reps, w, NULL);
    r->nvariants = nv;
    r->ceiling_variant = -1;
    for (int v = 0; v < nv; v++) {
      double sv[3];
      if (!zb_summarize(w + v * reps, reps, sv)) {
        r->variant_gbps[v][0] = -1.0;
        continue;
      }
      const double bytes = (double)na * (double)each;
      for (int k = 0; k < 3; k++) r->variant_gbps[v][k] = bytes / sv[k ? 3 - k : 0] / 1e9;
      if (r->ceiling_variant < 0 || sv[0] < r->ceiling_s[0]) {
        r->ceiling_variant = v;
        memcpy(r->ceiling_s, sv, sizeof sv);
      }
    }
    r->ceiling_bytes = (double)na * (double)each;
    if (r->ceiling_variant < 0) snprintf(r->error, sizeof r->error, "no ceiling variant runs on these buffers");
  } else {
    snprintf(r->error, sizeof r->error, "out of memory for the ceiling buffers");
  }
  free(w);
  if (!use_own)
    for (int i = 0; i < na; i++) free(a[i]);
  free(t);
}

static void measure_cuda(const bench_ctx *ctx, bench_result *r, cli_buf *b, cli_buf *dos, int device) {
  const bench_cfg *cfg = ctx->cfg;
  zgate_options opts;
  zgate_options_init(&opts);
  int reps = cfg->repeats > 0 ? cfg->repeats : 50;
  const size_t flush_bytes = (size_t)256 << 20; /* several times any L2 */
  double *t = malloc(sizeof(double) * (size_t)reps);
  void *flush = cli_cuda_malloc(device, flush_bytes);
  cli_cuda_timer *tm = cli_cuda_timer_new(device);
  size_t half = ((size_t)(r->bytes / 2.0) + 255) & ~(size_t)255;
  void *src = NULL, *dst = NULL;
  if (!t || !flush || !tm) {
    snprintf(r->error, sizeof r->error, "CUDA setup failed: %s", cli_cuda_last_error());
    goto done;
  }
  progress(ctx, r, "upload");
  for (int i = 0; i < CLI_NT; i++)
    if (b[i].host && cli_buf_to_device(&b[i], device)) {
      snprintf(r->error, sizeof r->error, "CUDA memory: %s", cli_cuda_last_error());
      goto done;
    }
  progress(ctx, r, "warming up");
  for (int i = 0; i < cfg->warmup || i == 0; i++) {
    double t0 = cli_now();
    int st = call_op(r, b, dos, &opts);
    if (st == ZGATE_OK && cli_cuda_sync(device)) st = ZGATE_ERR_CUDA;
    if (i == 0) r->first_s = cli_now() - t0;
    if (st != ZGATE_OK) {
      snprintf(r->error, sizeof r->error, "zgate returned %d (%s): %s", st, zgate_status_str(st),
               zgate_last_error()[0] ? zgate_last_error() : cli_cuda_last_error());
      r->failed = 1;
      goto done;
    }
  }
  for (int i = 0; i < reps; i++) {
    double ms = 0;
    if (i % 8 == 0) {
      char what[32];
      snprintf(what, sizeof what, "call %d/%d", i + 1, reps);
      progress(ctx, r, what);
    }
    if (cli_cuda_flush(device, flush, flush_bytes) || cli_cuda_timer_start(tm)) goto cuda_fail;
    call_op(r, b, dos, &opts);
    if (cli_cuda_timer_stop(tm, &ms)) goto cuda_fail;
    t[i] = ms * 1e-3;
  }
  r->repeats = reps;
  summarize(t, reps, r->time_s);
  /* The ceiling: a device-to-device copy moving the same bytes (half read, half written). */
  src = cli_cuda_malloc(device, half);
  dst = cli_cuda_malloc(device, half);
  if (!src || !dst) {
    snprintf(r->error, sizeof r->error, "CUDA memory for the copy ceiling: %s", cli_cuda_last_error());
    goto done;
  }
  progress(ctx, r, "ceiling");
  cli_cuda_copy(device, dst, src, half);
  for (int i = 0; i < reps; i++) {
    double ms = 0;
    if (cli_cuda_flush(device, flush, flush_bytes) || cli_cuda_timer_start(tm) || cli_cuda_copy(device, dst, src, half) ||
        cli_cuda_timer_stop(tm, &ms))
      goto cuda_fail;
    t[i] = ms * 1e-3;
  }
  summarize(t, reps, r->ceiling_s);
  r->ceiling_bytes = 2.0 * (double)half;
  goto done;
cuda_fail:
  snprintf(r->error, sizeof r->error, "CUDA: %s", cli_cuda_last_error());
  r->failed = 1;
done:
  cli_cuda_free(device, src);
  cli_cuda_free(device, dst);
  cli_cuda_free(device, flush);
  cli_cuda_timer_free(tm);
  free(t);
}

static void run_config(const bench_ctx *ctx, bench_result *r, const cli_backend *be) {
  cli_buf b[CLI_NT];
  memset(b, 0, sizeof b);
  char why[160], shape[64];
  if (cli_memory_fits(config_bytes(r), ctx->cfg->max_memory, why, sizeof why)) {
    snprintf(r->error, sizeof r->error, "not run: %s", why);
    cli_shape_str(r->shape, shape, sizeof shape);
    fprintf(stderr, "%szgate bench: %s %s %s %s: %s\n", ctx->tty ? "\r" : "", r->backend, r->op, shape,
            cli_layout_names[r->layout], r->error);
    return;
  }
  int ok = 1;
  progress(ctx, r, "allocating");
  for (int i = 0; i < CLI_NT && ok; i++)
    if (uses_tensor(r, i) && cli_buf_make(&b[i], i, (cli_layout)r->layout, r->shape, r->dt.t[i])) ok = 0;
  if (!ok) {
    snprintf(r->error, sizeof r->error, "not run: out of host memory for this shape");
  } else {
    progress(ctx, r, "filling inputs");
    for (int i = 0; i < 3; i++)
      if (b[i].host) fill_fast(&b[i], 7u + (uint64_t)i);
    cli_buf *dos = r->layout == CLI_INPLACE ? &b[CLI_DOUT] : &b[CLI_DOS];
    if (be->is_cuda) measure_cuda(ctx, r, b, dos, be->device);
    else measure_cpu(ctx, r, b, dos, be->isa);
  }
  for (int i = 0; i < CLI_NT; i++) cli_buf_free(&b[i]);
  if (!r->error[0])
    for (int k = 0; k < 3; k++) { /* the lowest rate is the slowest call's */
      r->gbps[k] = r->bytes / r->time_s[k ? 3 - k : 0] / 1e9;
      r->ceiling_gbps[k] = r->ceiling_bytes / r->ceiling_s[k ? 3 - k : 0] / 1e9;
    }
  if (!r->error[0] && r->ceiling_gbps[0] > 0) {
    r->pct[0] = 100.0 * r->gbps[0] / r->ceiling_gbps[0];
    r->pct[1] = 100.0 * r->gbps[1] / r->ceiling_gbps[2];
    r->pct[2] = 100.0 * r->gbps[2] / r->ceiling_gbps[1];
  }
}

int cli_cmd_bench(int argc, char **argv) {
  bench_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.layouts = (1u << CLI_DENSE) | (1u << CLI_ZVIEW);
  cfg.warmup = 2;
  cfg.ops = 1;
  cfg.json = "zgate-bench.json";
  cfg.png = "zgate-bench.png";
  cfg.plot = 1;
  cfg.backend_opt = "--backend";
  int pr = cli_parse("bench", argc, argv, bench_opts, (int)(sizeof bench_opts / sizeof bench_opts[0]), on_opt, &cfg);
  if (pr < 0) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (pr) return pr;
  if (cli_check_output("bench", "--json", cfg.json) || (cfg.plot && cli_bench_check_png(cfg.png))) return CLI_EXIT_USAGE;
  const int user_shapes = cfg.nshapes > 0;
  if (cfg.ndtypes == 0) {
    cfg.ndtypes = (int)(sizeof default_dtypes / sizeof default_dtypes[0]);
    for (int i = 0; i < cfg.ndtypes; i++) cli_parse_dtypes("bench", default_dtypes[i], &cfg.dtypes[i]);
  }
  cli_backend be[CLI_MAX_BACKENDS];
  int nbe;
  if (cfg.backend_spec) {
    nbe = cli_backends("bench", cfg.backend_opt, cfg.backend_spec, be, NULL, 0);
  } else { /* the default path of the CPU, and every GPU */
    nbe = cli_backends("bench", "--backend", "best", be, NULL, 0);
    if (nbe >= 0 && zgate_cuda_built() && cli_cuda_device_count() > 0) {
      cli_backend more[CLI_MAX_BACKENDS];
      int nm = cli_backends("bench", "--backend", "cuda", more, NULL, 0);
      for (int i = 0; i < nm && nbe < CLI_MAX_BACKENDS; i++) be[nbe++] = more[i];
    }
  }
  if (nbe <= 0) return CLI_EXIT_USAGE;

  int nres = 0, cap = nbe * MAX_SHAPES * cfg.ndtypes * CLI_NLAYOUTS * 2;
  bench_result *res = calloc((size_t)cap, sizeof *res);
  if (!res) {
    cli_error("bench", "out of memory");
    return CLI_EXIT_FAIL;
  }
  for (int ib = 0; ib < nbe; ib++)
    for (int op = 0; op < 2; op++) {
      if (!(cfg.ops & (1 << op))) continue;
      if (!user_shapes) { /* each backend's default problem */
        const int cuda = be[ib].is_cuda;
        cfg.nshapes = cuda ? (int)(sizeof default_cuda_shapes / sizeof default_cuda_shapes[0])
                           : (int)(sizeof default_shapes / sizeof default_shapes[0]);
        memcpy(cfg.shapes, cuda ? (const void *)default_cuda_shapes : (const void *)default_shapes,
               (size_t)cfg.nshapes * sizeof cfg.shapes[0]);
      }
      for (int is = 0; is < cfg.nshapes; is++)
        for (int id = 0; id < cfg.ndtypes; id++)
          for (int il = 0; il < CLI_NLAYOUTS; il++) {
            if (!(cfg.layouts & (1u << il)) || (op == 1 && il == CLI_INPLACE)) continue;
            bench_result *r = &res[nres++];
            snprintf(r->backend, sizeof r->backend, "%s", be[ib].label);
            r->is_cuda = be[ib].is_cuda;
            snprintf(r->op, sizeof r->op, "%s", op ? "fwd" : "bwd");
            memcpy(r->shape, cfg.shapes[is], sizeof r->shape);
            r->dt = cfg.dtypes[id];
            if (il == CLI_INPLACE) r->dt.t[CLI_DOS] = r->dt.t[CLI_DOUT];
            r->layout = il;
            r->ceiling_variant = -1;
            r->elements = cli_numel(r->shape);
            int per = op ? cli_dtype_size(r->dt.t[CLI_O]) + cli_dtype_size(r->dt.t[CLI_Z]) + cli_dtype_size(r->dt.t[CLI_DZ])
                         : 0;
            if (!op)
              for (int t = 0; t < CLI_NT; t++) per += cli_dtype_size(r->dt.t[t]);
            r->bytes = (double)r->elements * per;
            r->threads = be[ib].is_cuda ? 0 : (cfg.threads ? cfg.threads : cli_max_threads());
          }
    }

  bench_meta meta;
  memset(&meta, 0, sizeof meta);
  meta.have_load = cli_loadavg(meta.load, &meta.cpus) == 0;
  if (cfg.settle > 0 && meta.have_load) { /* bounded wait for the machine to go quiet */
    double t0 = cli_now();
    meta.settle_asked = 1;
    while (!(meta.settled = meta.load[0] < BENCH_SETTLE_LOAD_PER_CPU * meta.cpus) && cli_now() - t0 < cfg.settle) {
      struct timespec one = {1, 0};
      nanosleep(&one, NULL);
      if (cli_loadavg(meta.load, &meta.cpus)) break;
    }
    meta.settle_wait_s = cli_now() - t0;
    printf("%s after %.0f s (1-minute load average %.2f, threshold %.2f)\n",
           meta.settled ? "the machine settled" : "the machine did NOT settle", meta.settle_wait_s, meta.load[0],
           BENCH_SETTLE_LOAD_PER_CPU * meta.cpus);
  }
  if (meta.have_load)
    printf("load average at start: %.2f %.2f %.2f on %d CPUs%s\n", meta.load[0], meta.load[1], meta.load[2], meta.cpus,
           meta.load[0] >= 0.5 ? " (other work is running: expect the figures to swing)" : "");
  bench_ctx ctx = {&cfg, 0, nres, cli_stderr_is_tty()};
  int nfail = 0, nnot_run = 0;
  for (int i = 0; i < nres; i++) {
    ctx.index = i + 1;
    const cli_backend *b = NULL;
    for (int k = 0; k < nbe; k++)
      if (!strcmp(be[k].label, res[i].backend)) b = &be[k];
    if (res[i].elements == 0) {
      snprintf(res[i].error, sizeof res[i].error, "not run: the shape has no elements");
    } else {
      run_config(&ctx, &res[i], b);
    }
    if (res[i].failed) nfail++;
    else if (res[i].error[0]) nnot_run++;
  }
  if (ctx.tty) fprintf(stderr, "\r%100s\r", "");

  meta.ceiling_cpu = "fastest stream variant (ceiling_variants), same reads, writes, threads and bytes";
  meta.ceiling_cuda = "device-to-device copy of the same bytes";
  meta.threads = cfg.threads ? cfg.threads : cli_max_threads();
  time_t now = time(NULL);
  strftime(meta.date, sizeof meta.date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
  cli_bench_print_table(res, nres, &meta);
  int rc = nfail ? CLI_EXIT_FAIL : nnot_run ? CLI_EXIT_NOT_RUN : CLI_EXIT_OK;
  if (cli_bench_write_json(cfg.json, res, nres, &meta)) {
    cli_error("bench", "cannot write the JSON results to '%s'", cfg.json);
    rc = CLI_EXIT_FAIL;
  } else {
    printf("results: %s\n", cfg.json);
  }
  if (cfg.plot) {
    int pl = cli_bench_plot(cfg.png, res, nres, &meta);
    if (pl == 0) printf("chart: %s\n", cfg.png);
    else if (pl < 0) rc = CLI_EXIT_FAIL;
  }
  if (nfail) cli_error("bench", "zgate failed on %d of %d configurations (see the table)", nfail, nres);
  if (nnot_run) cli_error("bench", "%d of %d configurations did not run (see the table)", nnot_run, nres);
  free(res);
  return rc;
}
