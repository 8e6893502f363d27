/* `zgate bench`: the bandwidth suite. For each backend, shape, dtype combination and layout:
 * the median time of the operator, the GB/s it moves (bytes read plus written), and the
 * percentage of a ceiling measured in the same run on the same number of bytes (CPU: the
 * fastest of several streaming loops with the operator's reads and writes, 3 + 2 for the
 * backward and 2 + 1 for the forward, on the same threads (stream_ceiling.c); CUDA: a
 * device-to-device copy). Prints a table, writes JSON, draws a PNG with gnuplot. */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zgate_check.h>

#include "bench.h"

/* Small enough that the whole default suite runs in well under a minute on two cores. */
static const int64_t default_shapes[][4] = {{2, 2048, 24, 64}, {2, 2048, 40, 80}, {4, 4096, 32, 64}};
/* On a GPU the realistic training shapes (bf16 moves 63 MB to 1.3 GB per call). */
static const int64_t default_cuda_shapes[][4] = {{2, 2048, 24, 64}, {2, 2048, 40, 80}, {16, 2345, 32, 64},
                                                 {4, 4096, 64, 64}, {4, 4096, 48, 96}, {2, 8192, 32, 128},
                                                 {1, 32768, 64, 64}};

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

/* Inputs for timing: a repeating table of ordinary values over the whole allocation (fast
 * even for hundreds of millions of elements; the values do not change the speed). */
static void fill_fast(cli_buf *b, uint64_t seed) {
  enum { TABLE = 4093 }; /* prime, so rows do not repeat in step */
  unsigned char table[TABLE * 4];
  cli_rng rng = {seed};
  for (int i = 0; i < TABLE; i++) zgate_check_store(b->dtype, table + i * b->esize, 3.0 * cli_rng_normal(&rng));
  for (int64_t i = 0; i < b->nslots; i++)
    memcpy(b->host + i * b->esize, table + i % TABLE * b->esize, (size_t)b->esize);
}

/* Does the configuration allocate tensor `which`: the forward has no dout and dout_scaled,
 * in place writes dout_scaled over dout. */
static int uses_tensor(const bench_result *r, int which) {
  if (which == CLI_DOS && r->layout == CLI_INPLACE) return 0;
  return !r->fwd || (which != CLI_DOUT && which != CLI_DOS);
}

/* The CPU ceiling's arrays: the operator's tensors in the order it streams them, dout z o dz
 * dout_scaled (3 read, 2 written), the forward's o z out (2 read, 1 written); each moves an
 * equal share of the bytes, in whole 64-byte lines. */
static const int ceiling_tensor[2][5] = {{CLI_DOUT, CLI_Z, CLI_O, CLI_DZ, CLI_DOS}, {CLI_O, CLI_Z, CLI_DZ}};
static size_t ceiling_each(const bench_result *r) { return ((size_t)(r->bytes / (r->fwd ? 3 : 5)) + 63) & ~(size_t)63; }

/* The CPU ceiling runs on the operator's own buffers when each holds that many bytes (the
 * memory zgate was just timed on: on a VM, where guest pages land can change a stream's
 * bandwidth by 20%), else on fresh ones (in place; mixed dtypes). */
static int ceiling_on_own_buffers(const bench_result *r) {
  for (int i = 0; i < (r->fwd ? 3 : 5); i++) {
    int t = ceiling_tensor[r->fwd][i];
    if (!uses_tensor(r, t) || cli_buf_bytes(t, (cli_layout)r->layout, r->shape, r->dt.t[t]) < (double)ceiling_each(r))
      return 0;
  }
  return 1;
}

/* Host bytes a configuration holds: its tensors, and on the CPU the ceiling's arrays when it
 * cannot use the tensors. */
static double config_bytes(const bench_result *r) {
  double sum = 0;
  for (int i = 0; i < CLI_NT; i++)
    if (uses_tensor(r, i)) sum += cli_buf_bytes(i, (cli_layout)r->layout, r->shape, r->dt.t[i]);
  if (!r->be->is_cuda && !ceiling_on_own_buffers(r)) sum += (r->fwd ? 3 : 5) * (double)ceiling_each(r);
  return sum;
}

/* The CPU ceiling: every stream variant over the operator's arrays, round robin; the fastest
 * by median is the ceiling. */
static void cpu_ceiling(const cli_cfg *cfg, bench_result *r, cli_buf *b, int reps) {
  const int na = r->fwd ? 3 : 5, own = ceiling_on_own_buffers(r), nv = zb_variant_count();
  const size_t each = ceiling_each(r);
  void *a[5] = {0};
  int ok = 1;
  for (int i = 0; i < na; i++) {
    a[i] = own ? b[ceiling_tensor[r->fwd][i]].host : aligned_alloc(64, each ? each : 64);
    if (!a[i]) ok = 0;
    else if (!own) memset(a[i], i * 17 + 1, each); /* first touch outside the timing */
  }
  double *w = ok ? malloc(sizeof(double) * (size_t)(nv * reps)) : NULL;
  if (w) {
    zb_stream s = {a[0], a[1], r->fwd ? NULL : a[2], a[r->fwd ? 2 : 3], r->fwd ? NULL : a[4], each};
    zb_stream_time(&s, cfg->threads, reps, w);
    r->nvariants = nv;
    r->ceiling_bytes = (double)na * (double)each;
    for (int v = 0; v < nv; v++) {
      double sv[3];
      r->variant_gbps[v][0] = -1.0;
      if (!zb_summarize(w + v * reps, reps, sv)) continue;
      for (int k = 0; k < 3; k++) r->variant_gbps[v][k] = r->ceiling_bytes / sv[k ? 3 - k : 0] / 1e9;
      if (r->ceiling_variant < 0 || sv[0] < r->ceiling_s[0]) r->ceiling_variant = v, memcpy(r->ceiling_s, sv, sizeof sv);
    }
    if (r->ceiling_variant < 0) snprintf(r->error, sizeof r->error, "no ceiling variant runs on these buffers");
  } else {
    snprintf(r->error, sizeof r->error, "out of memory for the ceiling buffers");
  }
  free(w);
  for (int i = 0; i < na && !own; i++) free(a[i]);
}

typedef struct bench_call {
  int fwd;
  cli_buf *b, *dos;
  zgate_options opts;
} bench_call;

static int call_op(void *p) {
  bench_call *c = p;
  return cli_call(c->fwd, c->b, c->dos, &c->opts);
}

/* Times the operator (warm-up calls first), then its ceiling, on tensors filled already. */
static void measure(const cli_cfg *cfg, bench_result *r, cli_buf *b, cli_buf *dos) {
  const cli_backend *be = r->be;
  const int reps = cfg->repeats ? cfg->repeats : be->is_cuda ? 50 : 10;
  bench_call call = {r->fwd, b, dos, {0}};
  zgate_options_init(&call.opts);
  if (!be->is_cuda) call.opts.num_threads = cfg->threads, call.opts.cpu_isa = be->isa;
  double *t = malloc(sizeof(double) * (size_t)reps);
  if (!t) {
    snprintf(r->error, sizeof r->error, "out of memory");
    return;
  }
  if (be->is_cuda && cli_bufs_to_device(b, CLI_NT, be->device)) {
    snprintf(r->error, sizeof r->error, "CUDA memory: %s", cli_cuda_last_error());
    free(t);
    return;
  }
  for (int i = 0; i < cfg->warmup || i == 0; i++) {
    double t0 = cli_now();
    int st = call_op(&call);
    if (st == ZGATE_OK && be->is_cuda && cli_cuda_sync(be->device)) st = ZGATE_ERR_CUDA;
    if (i == 0) r->first_s = cli_now() - t0;
    if (st != ZGATE_OK) {
      snprintf(r->error, sizeof r->error, "zgate returned %d (%s): %s", st, zgate_status_str(st),
               zgate_last_error()[0] ? zgate_last_error() : cli_cuda_last_error());
      r->failed = 1;
      free(t);
      return;
    }
  }
  for (int i = 0; i < reps && !be->is_cuda; i++) {
    double t0 = cli_now();
    call_op(&call);
    t[i] = cli_now() - t0;
  }
  r->repeats = reps;
  if (be->is_cuda && cli_cuda_time(be->device, call_op, &call, 0, reps, t)) {
    snprintf(r->error, sizeof r->error, "CUDA: %s", cli_cuda_last_error());
    r->failed = 1;
    free(t);
    return;
  }
  zb_summarize(t, reps, r->time_s);
  if (!be->is_cuda) {
    cpu_ceiling(cfg, r, b, reps);
  } else { /* a device-to-device copy moving the same bytes (half read, half written) */
    size_t half = ((size_t)(r->bytes / 2.0) + 255) & ~(size_t)255;
    r->ceiling_bytes = 2.0 * (double)half;
    if (cli_cuda_time(be->device, NULL, NULL, half, reps, t))
      snprintf(r->error, sizeof r->error, "CUDA copy ceiling: %s", cli_cuda_last_error());
    else zb_summarize(t, reps, r->ceiling_s);
  }
  free(t);
}

static void run_config(const cli_cfg *cfg, bench_result *r) {
  cli_buf b[CLI_NT];
  memset(b, 0, sizeof b);
  char why[160];
  if (cli_numel(r->shape) == 0) {
    snprintf(r->error, sizeof r->error, "not run: the shape has no elements");
    return;
  }
  if (cli_memory_fits(config_bytes(r), cfg->max_memory, why, sizeof why)) {
    snprintf(r->error, sizeof r->error, "not run: %s", why);
    return;
  }
  int ok = 1;
  for (int i = 0; i < CLI_NT && ok; i++)
    if (uses_tensor(r, i) && cli_buf_make(&b[i], i, (cli_layout)r->layout, r->shape, r->dt.t[i])) ok = 0;
  for (int i = 0; i < 3 && ok; i++)
    if (b[i].host) fill_fast(&b[i], 7u + (uint64_t)i);
  if (ok) measure(cfg, r, b, r->layout == CLI_INPLACE ? &b[CLI_DOUT] : &b[CLI_DOS]);
  else snprintf(r->error, sizeof r->error, "not run: out of host memory for this shape");
  for (int i = 0; i < CLI_NT; i++) cli_buf_free(&b[i]);
  for (int k = 0; k < 3 && !r->error[0]; k++) { /* the lowest rate is the slowest call's */
    r->gbps[k] = r->bytes / r->time_s[k ? 3 - k : 0] / 1e9;
    r->ceiling_gbps[k] = r->ceiling_bytes / r->ceiling_s[k ? 3 - k : 0] / 1e9;
  }
  for (int k = 0; k < 3 && !r->error[0]; k++) /* the range pairs zgate's slowest with the ceiling's fastest */
    r->pct[k] = 100.0 * r->gbps[k] / r->ceiling_gbps[k ? 3 - k : 0];
}

/* Waits, at most cfg->settle seconds, for the 1-minute load average to fall under the
 * threshold; the load at the start of the run either way. */
static void settle(const cli_cfg *cfg, bench_meta *m) {
  m->have_load = cli_loadavg(m->load, &m->cpus) == 0;
  if (cfg->settle > 0 && m->have_load) {
    double t0 = cli_now();
    m->settle_asked = 1;
    while (!(m->settled = m->load[0] < BENCH_SETTLE_LOAD_PER_CPU * m->cpus) && cli_now() - t0 < cfg->settle) {
      struct timespec one = {1, 0};
      nanosleep(&one, NULL);
      if (cli_loadavg(m->load, &m->cpus)) break;
    }
    m->settle_wait_s = cli_now() - t0;
    printf("%s after %.0f s (1-minute load average %.2f, threshold %.2f)\n",
           m->settled ? "the machine settled" : "the machine did NOT settle", m->settle_wait_s, m->load[0],
           BENCH_SETTLE_LOAD_PER_CPU * m->cpus);
  }
  if (m->have_load)
    printf("load average at start: %.2f %.2f %.2f on %d CPUs%s\n", m->load[0], m->load[1], m->load[2], m->cpus,
           m->load[0] >= 0.5 ? " (other work is running: expect the figures to swing)" : "");
}

int cli_cmd_bench(int argc, char **argv) {
  static const struct option opts[] = {
      CLI_SHARED_OPTS,          {"repeats", 1, NULL, CLI_O_REPEATS}, {"warmup", 1, NULL, CLI_O_WARMUP},
      {"json", 1, NULL, CLI_O_JSON}, {"png", 1, NULL, CLI_O_PNG},    {"no-plot", 0, NULL, CLI_O_NOPLOT},
      {"settle", 1, NULL, CLI_O_SETTLE}, {0}};
  cli_cfg cfg = {.cmd = "bench", .layouts = (1u << CLI_DENSE) | (1u << CLI_ZVIEW), .backend_opt = "--backend",
                 .ops = 1, .warmup = 2, .plot = 1, .json = "zgate-bench.json", .png = "zgate-bench.png"};
  int pr = cli_parse(&cfg, argc, argv, opts);
  if (pr < 0) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (pr) return pr;
  if (cli_check_output("bench", "--json", cfg.json) || (cfg.plot && bench_check_png(cfg.png))) return CLI_EXIT_USAGE;
  if (cfg.ndtypes == 0) { /* bf16 and f32 */
    cfg.ndtypes = 2;
    for (int i = 0; i < CLI_NT; i++) cfg.dtypes[0].t[i] = cli_dtype(2), cfg.dtypes[1].t[i] = cli_dtype(0);
  }
  /* By default the chosen path of the CPU, and every GPU. */
  const char *spec = cfg.backend_spec ? cfg.backend_spec : cli_cuda_device_count() > 0 ? "best,cuda" : "best";
  cli_backend be[CLI_MAX_BACKENDS];
  int nbe = cli_backends("bench", cfg.backend_opt, spec, be, NULL, 0);
  if (nbe < 0) return CLI_EXIT_USAGE;

  const int user_shapes = cfg.nshapes, max_shapes = user_shapes ? user_shapes : 7;
  bench_result *res = calloc((size_t)(nbe * 2 * max_shapes * cfg.ndtypes * CLI_NLAYOUTS), sizeof *res);
  int nres = 0;
  if (!res) {
    cli_error("bench", "out of memory");
    return CLI_EXIT_FAIL;
  }
  for (int ib = 0; ib < nbe; ib++)
    for (int fwd = 0; fwd < 2; fwd++) {
      if (!user_shapes) { /* each backend's default problem */
        cfg.nshapes = be[ib].is_cuda ? 7 : 3;
        memcpy(cfg.shapes, be[ib].is_cuda ? default_cuda_shapes : default_shapes, sizeof cfg.shapes[0] * cfg.nshapes);
      }
      for (int is = 0; is < cfg.nshapes && (cfg.ops >> fwd & 1); is++)
        for (int id = 0; id < cfg.ndtypes; id++)
          for (int il = 0; il < CLI_NLAYOUTS; il++) {
            if (!(cfg.layouts & (1u << il)) || (fwd && il == CLI_INPLACE)) continue;
            bench_result *r = &res[nres++];
            r->be = &be[ib];
            r->fwd = fwd;
            memcpy(r->shape, cfg.shapes[is], sizeof r->shape);
            r->dt = cfg.dtypes[id];
            if (il == CLI_INPLACE) r->dt.t[CLI_DOS] = r->dt.t[CLI_DOUT];
            r->layout = il;
            r->ceiling_variant = -1;
            for (int t = 0; t < CLI_NT; t++)
              if (!fwd || (t != CLI_DOUT && t != CLI_DOS)) r->bytes += (double)cli_numel(r->shape) * r->dt.t[t].bits / 8;
            r->threads = be[ib].is_cuda ? 0 : cfg.threads ? cfg.threads : cli_max_threads();
          }
    }

  bench_meta meta = {.threads = cfg.threads ? cfg.threads : cli_max_threads()};
  settle(&cfg, &meta);
  int nfail = 0, nnot_run = 0;
  for (int i = 0; i < nres; i++) {
    char shape[64], dts[64];
    cli_shape_str(res[i].shape, shape, sizeof shape);
    cli_dtypes_str(&res[i].dt, res[i].fwd, dts, sizeof dts);
    fprintf(stderr, "zgate bench [%d/%d] %s %s %s %s %s\n", i + 1, nres, res[i].be->label, res[i].fwd ? "fwd" : "bwd",
            shape, dts, cli_layout_names[res[i].layout]);
    run_config(&cfg, &res[i]);
    nfail += res[i].failed;
    nnot_run += !res[i].failed && res[i].error[0];
  }
  time_t now = time(NULL);
  strftime(meta.date, sizeof meta.date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
  bench_print_table(res, nres, &meta);
  int rc = nfail ? CLI_EXIT_FAIL : nnot_run ? CLI_EXIT_NOT_RUN : CLI_EXIT_OK;
  if (bench_write_json(cfg.json, res, nres, &meta)) {
    cli_error("bench", "cannot write the JSON results to '%s'", cfg.json);
    rc = CLI_EXIT_FAIL;
  } else {
    printf("results: %s\n", cfg.json);
  }
  int pl = cfg.plot ? bench_plot(cfg.png, res, nres, &meta) : 1;
  if (pl == 0) printf("chart: %s\n", cfg.png);
  if (pl < 0) rc = CLI_EXIT_FAIL;
  if (nfail) cli_error("bench", "zgate failed on %d of %d configurations (see the table)", nfail, nres);
  if (nnot_run) cli_error("bench", "%d of %d configurations did not run (see the table)", nnot_run, nres);
  free(res);
  return rc;
}
