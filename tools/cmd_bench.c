/* `zgate bench`: the bandwidth suite. For each backend, shape, dtype combination and layout:
 * the median time of the operator, the GB/s it moves (bytes read plus written), and the
 * percentage of a ceiling measured in the same run on the same number of bytes (CPU: the
 * fastest of several streaming loops with the operator's reads and writes, 3 + 2 for the
 * backward and 2 + 1 for the forward, on the same threads (stream_ceiling.c); CUDA: a
 * device-to-device copy). Prints a table, writes JSON, and draws a PNG chart (achieved GB/s
 * against the ceiling, one panel per backend) with gnuplot from a data file and a script
 * written next to the PNG. */
#define _POSIX_C_SOURCE 200809L /* sleep, access under -std=c11 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zgate_check.h>

#include "cli.h"
#include "stream_ceiling.h"

/* Rows whose figures cannot be trusted: the slowest timed call (the operator's or the
 * ceiling's) took more than NOISY_SPREAD times the fastest, or the operator beat its ceiling
 * by more than a memory-bound operator can (MAX_PLAUSIBLE_PCT): the machine was busy. */
#define BENCH_NOISY_SPREAD 1.25
#define BENCH_MAX_PLAUSIBLE_PCT 105.0
/* --settle waits until the 1-minute load average is under this many per CPU online: the
 * benchmark's own threads then meet little other work. */
#define BENCH_SETTLE_LOAD_PER_CPU 0.25

/* One measured configuration. Figures of three: [0] at the median time, [1] the lowest, [2]
 * the highest over the timed calls (times: median, fastest, slowest). */
typedef struct bench_result {
  const cli_backend *be;
  zg_op op;
  int64_t shape[4];
  cli_dtypes dt;
  int layout;
  int out_line_offset;  /* bytes from a 64-byte line to the first output's first element */
  double bytes;         /* bytes the operator reads plus writes */
  double ceiling_bytes; /* bytes the ceiling moves (the same, rounded up to whole lines) */
  int repeats;
  double time_s[3], ceiling_s[3], first_s;
  double gbps[3], ceiling_gbps[3];
  double pct[3]; /* 100 * gbps / ceiling_gbps; the range pairs the extremes */
  /* CPU: every stream variant's GB/s ([0] < 0: not usable on these buffers), and the
   * fastest by median, the ceiling (-1 on CUDA) */
  int nvariants, ceiling_variant;
  double variant_gbps[ZB_MAX_VARIANTS][3];
  int failed;      /* zgate returned an error (else error[] says why it did not run) */
  char error[256]; /* non-empty when the configuration could not run */
} bench_result;

typedef struct bench_meta {
  int threads;
  cli_placement placement;
  char date[64];
  int have_load, cpus; /* the load average when the run started, and the CPUs online */
  double load[3];
  int settle_asked, settled; /* --settle given; the load fell under the threshold in time */
  double settle_wait_s;
} bench_meta;

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
          "Times the operator on each backend: GB/s (bytes read plus written, once each) and the\n"
          "percentage of a ceiling measured in the same run over the same bytes (CPU: the fastest of\n"
          "several streaming loops with the operator's reads and writes, timed round robin, each\n"
          "one's GB/s listed after the table; CUDA: a device-to-device copy), each figure with its\n"
          "range over the timed calls. A row whose calls spread more than %.2fx, or above %.0f%% of\n"
          "its ceiling, is flagged: the machine was busy. Prints a table, writes JSON and a PNG chart\n"
          "(with gnuplot). Exit codes: see 'zgate --help' (3: a configuration did not run).\n"
          "\n"
          "options:\n"
          "  --shape B,L,H,D    a shape; repeat for several (default: three shapes on the CPU, from\n"
          "                     (2,2048,24,64); on CUDA seven training shapes, up to (1,32768,64,64))\n"
          "  --dtype SPEC       f32 | f16 | bf16, or per tensor: dout=bf16,z=f32,... (repeat for\n"
          "                     several; default: bf16 and f32)\n"
          "  --layout LIST      dense,zview,permuted,inplace or all (default dense,zview)\n"
          "  --backend LIST     best (default: the chosen CPU path) and every CUDA device; or all,\n"
          "                     cpu, scalar, avx2, avx512, neon, cuda, cuda:N\n"
          "  --isa LIST         the same for CPU paths only, e.g. --isa scalar,avx2\n"
          "  --op bwd|fwd|both  which direction to time (default bwd)\n"
          "  --threads N        CPU threads (default 0 = OpenMP default), for zgate and the ceiling\n"
          "  --repeats N        timed calls per configuration (default 10 on the CPU, 50 on CUDA)\n"
          "  --warmup N         untimed calls first (default 2)\n"
          "  --max-memory SIZE  host memory a configuration may take, e.g. 8G (default: MemAvailable now)\n"
          "  --aligned          every tensor's first element on a 64-byte line (default: 16 bytes past\n"
          "                     one, where glibc's malloc places large blocks, as users' buffers are)\n"
          "  --json PATH        results as JSON (default zgate-bench.json)\n"
          "  --png PATH         chart (default zgate-bench.png), with its gnuplot data and script\n"
          "                     beside it: PATH with .png replaced by .dat and .gp\n"
          "  --no-plot          do not write the chart\n"
          "  --settle S         first wait, at most S seconds, until the 1-minute load average is\n"
          "                     under %.2f per CPU; the output says whether the machine settled\n"
          "  --help             this text\n",
          BENCH_NOISY_SPREAD, BENCH_MAX_PLAUSIBLE_PCT, BENCH_SETTLE_LOAD_PER_CPU);
}

/* Why the configuration did not run; failed: zgate returned an error. */
static CLI_PRINTF(3, 4) void set_error(bench_result *r, int failed, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->error, sizeof r->error, fmt, ap);
  va_end(ap);
  r->failed = failed;
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

/* Does the configuration allocate the tensor of `slot`: in place writes dout_scaled over dout. */
static int uses_tensor(const bench_result *r, int slot) {
  return cli_uses(r->op, slot) && !(slot == ZG_BWD_DOS && r->layout == CLI_INPLACE);
}

/* The CPU ceiling's arrays: the operator's tensors in its signature's order, the inputs read
 * and the outputs written (backward 3 + 2, forward 2 + 1); each moves an equal share of the
 * bytes, in whole 64-byte lines. */
static size_t ceiling_each(const bench_result *r) { return ((size_t)(r->bytes / cli_nargs(r->op)) + 63) & ~(size_t)63; }

/* The CPU ceiling runs on the operator's own buffers when each holds that many bytes (the
 * memory zgate was just timed on: on a VM, where guest pages land changes a stream's
 * bandwidth), else on fresh ones (in place; mixed dtypes). */
static int ceiling_on_own_buffers(const bench_result *r) {
  for (int i = 0; i < cli_nargs(r->op); i++) {
    int t = cli_slot(r->op, i);
    if (!uses_tensor(r, t) || cli_buf_bytes(t, (cli_layout)r->layout, r->shape, r->dt.t[t]) < (double)ceiling_each(r))
      return 0;
  }
  return 1;
}

/* Host bytes a configuration holds: its tensors, and on the CPU the ceiling's arrays when it
 * cannot use the tensors. */
static double config_bytes(const bench_result *r) {
  double sum = 0;
  for (int i = 0; i < CLI_NSLOTS; i++)
    if (uses_tensor(r, i)) sum += cli_buf_bytes(i, (cli_layout)r->layout, r->shape, r->dt.t[i]);
  if (!r->be->is_cuda && !ceiling_on_own_buffers(r)) sum += cli_nargs(r->op) * (double)ceiling_each(r);
  return sum;
}

/* The CPU ceiling: every stream variant over the operator's arrays, round robin; the fastest
 * by median is the ceiling. */
static void cpu_ceiling(const cli_cfg *cfg, bench_result *r, cli_buf *b, int reps) {
  const int na = cli_nargs(r->op), n_in = zg_ops[r->op].n_in, own = ceiling_on_own_buffers(r), nv = zb_variant_count();
  const size_t each = ceiling_each(r);
  void *a[5] = {0};
  int ok = 1;
  for (int i = 0; i < na; i++) {
    a[i] = own ? b[cli_slot(r->op, i)].host : aligned_alloc(64, each ? each : 64);
    if (!a[i]) ok = 0;
    else if (!own) memset(a[i], i * 17 + 1, each); /* first touch outside the timing */
  }
  double *w = ok ? malloc(sizeof(double) * (size_t)(nv * reps)) : NULL;
  if (w) {
    zb_stream s = {a[0], a[1], n_in > 2 ? a[2] : NULL, a[n_in], a[n_in + 1], each}; /* a[na..]: NULL */
    zb_stream_time(&s, cfg->threads, reps, w);
    r->nvariants = nv;
    r->ceiling_bytes = (double)na * (double)each;
    for (int v = 0; v < nv; v++) {
      double sv[3];
      r->variant_gbps[v][0] = -1.0;
      if (!zb_summarize(w + v * reps, reps, sv)) continue;
      for (int k = 0; k < 3; k++) r->variant_gbps[v][k] = r->ceiling_bytes / sv[k ? 3 - k : 0] / 1e9;
      if (r->ceiling_variant < 0 || sv[0] < r->ceiling_s[0]) {
        r->ceiling_variant = v;
        memcpy(r->ceiling_s, sv, sizeof sv);
      }
    }
    if (r->ceiling_variant < 0) set_error(r, 0, "no ceiling variant runs on these buffers");
  } else {
    set_error(r, 0, "out of memory for the ceiling buffers");
  }
  free(w);
  for (int i = 0; i < na && !own; i++) free(a[i]);
}

typedef struct bench_call {
  zg_op op;
  cli_buf *b, *dos;
  zgate_options opts;
} bench_call;

static int call_op(void *p) {
  bench_call *c = p;
  return cli_call(c->op, c->b, c->dos, &c->opts);
}

/* Times the operator (warm-up calls first), then its ceiling, on tensors filled already. */
static void measure(const cli_cfg *cfg, bench_result *r, cli_buf *b, cli_buf *dos) {
  const cli_backend *be = r->be;
  const int reps = cfg->repeats ? cfg->repeats : be->is_cuda ? 50 : 10;
  /* CUDA's ceiling: a device-to-device copy moving the same bytes (half read, half written) */
  const size_t half = ((size_t)(r->bytes / 2.0) + 255) & ~(size_t)255;
  r->ceiling_bytes = 2.0 * (double)half; /* the CPU ceiling sets its own */
  bench_call call = {r->op, b, dos, {0}};
  zgate_options_init(&call.opts);
  if (!be->is_cuda) call.opts.num_threads = cfg->threads, call.opts.cpu_isa = be->isa;
  double *t = malloc(sizeof(double) * (size_t)reps);
  if (!t) set_error(r, 0, "out of memory");
  else if (be->is_cuda && cli_bufs_to_device(b, CLI_NSLOTS, be->device))
    set_error(r, 0, "CUDA memory: %s", cli_cuda_last_error());
  /* the warm-up calls (at least one), then on the CPU the timed ones: every status checked */
  const int warmup = cfg->warmup ? cfg->warmup : 1, calls = warmup + (be->is_cuda ? 0 : reps);
  for (int i = 0; !r->error[0] && i < calls; i++) {
    double t0 = cli_now();
    int st = call_op(&call);
    if (st == ZGATE_OK && be->is_cuda && cli_cuda_sync(be->device)) st = ZGATE_ERR_CUDA;
    if (i == 0) r->first_s = cli_now() - t0;
    if (i >= warmup) t[i - warmup] = cli_now() - t0;
    if (st != ZGATE_OK)
      set_error(r, 1, "zgate returned %d (%s): %s", st, zgate_status_str(st),
                zgate_last_error()[0] ? zgate_last_error() : cli_cuda_last_error());
  }
  if (!r->error[0] && be->is_cuda && cli_cuda_time(be->device, call_op, &call, 0, reps, t))
    set_error(r, 1, "CUDA: %s", cli_cuda_last_error());
  if (!r->error[0]) {
    r->repeats = reps;
    zb_summarize(t, reps, r->time_s);
    if (!be->is_cuda) cpu_ceiling(cfg, r, b, reps);
    else if (cli_cuda_time(be->device, NULL, NULL, half, reps, t))
      set_error(r, 0, "CUDA copy ceiling: %s", cli_cuda_last_error());
    else zb_summarize(t, reps, r->ceiling_s);
  }
  free(t);
}

static void run_config(const cli_cfg *cfg, bench_result *r) {
  cli_buf b[CLI_NSLOTS] = {0};
  char why[160];
  if (cli_numel(r->shape) == 0) set_error(r, 0, "not run: the shape has no elements");
  else if (cli_memory_fits(config_bytes(r), cfg->max_memory, why, sizeof why)) set_error(r, 0, "not run: %s", why);
  if (r->error[0]) return;
  int ok = 1;
  for (int i = 0; i < CLI_NSLOTS && ok; i++)
    if (uses_tensor(r, i) && cli_buf_make(&b[i], i, (cli_layout)r->layout, r->shape, r->dt.t[i], cfg->placement))
      ok = 0;
  if (ok) r->out_line_offset = (int)((uintptr_t)cli_buf_first(&b[cli_slot(r->op, zg_ops[r->op].n_in)]) & 63u);
  for (int i = 0; i < 3 && ok; i++)
    if (b[i].host) fill_fast(&b[i], 7u + (uint64_t)i);
  if (ok) measure(cfg, r, b, r->layout == CLI_INPLACE ? &b[ZG_BWD_DOUT] : &b[ZG_BWD_DOS]);
  else set_error(r, 0, "not run: out of host memory for this shape");
  for (int i = 0; i < CLI_NSLOTS; i++) cli_buf_free(&b[i]);
  /* The lowest rate is the slowest call's; the lowest % pairs zgate's slowest call with the
   * ceiling's fastest. */
  for (int k = 0; k < 3 && !r->error[0]; k++) {
    r->gbps[k] = r->bytes / r->time_s[k ? 3 - k : 0] / 1e9;
    r->ceiling_gbps[k] = r->ceiling_bytes / r->ceiling_s[k ? 3 - k : 0] / 1e9;
    r->pct[k] = 100.0 * r->bytes * r->ceiling_s[k] / (r->time_s[k ? 3 - k : 0] * r->ceiling_bytes);
  }
}

/* Waits, at most cfg->settle seconds, for the 1-minute load average to fall under the
 * threshold; the load at the start of the run either way. */
static void settle(const cli_cfg *cfg, bench_meta *m) {
  m->have_load = cli_loadavg(m->load, &m->cpus) == 0;
  if (cfg->settle > 0 && m->have_load) {
    double t0 = cli_now();
    m->settle_asked = 1;
    while (!(m->settled = m->load[0] < BENCH_SETTLE_LOAD_PER_CPU * m->cpus) && cli_now() - t0 < cfg->settle) {
      sleep(1);
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

/* ---- outputs: the table, JSON, the chart ------------------------------------------------ */

static const char ceiling_cpu[] = "fastest stream variant (ceiling_variants), same reads, writes, threads and bytes";
static const char ceiling_cuda[] = "device-to-device copy of the same bytes";

/* "" for a trustworthy row, else why not ("noisy", "above ceiling" or both). */
static const char *flag_of(const bench_result *r) {
  if (r->error[0]) return "";
  int noisy = r->time_s[2] > BENCH_NOISY_SPREAD * r->time_s[1] || r->ceiling_s[2] > BENCH_NOISY_SPREAD * r->ceiling_s[1];
  int above = r->pct[0] > BENCH_MAX_PLAUSIBLE_PCT;
  return noisy && above ? "noisy, above ceiling" : noisy ? "noisy" : above ? "above ceiling" : "";
}

/* The first columns of a row: backend, op, shape, dtype (one type, or "mixed": the JSON has
 * every tensor's), layout. */
static void row_head(const bench_result *r) {
  char shape[64], dts[64];
  cli_shape_str(r->shape, shape, sizeof shape);
  cli_dtypes_str(&r->dt, r->op, dts, sizeof dts);
  printf("%-10s %-3s %-22s %-8s %-8s %4d", r->be->label, zg_ops[r->op].name, shape, strchr(dts, ' ') ? "mixed" : dts,
         cli_layout_names[r->layout], r->out_line_offset);
}

/* "v (lo..hi)" of a figure of three. */
static const char *range_cell(char *buf, size_t n, const double v[3], double scale) {
  snprintf(buf, n, "%.1f (%.1f..%.1f)", v[0] * scale, v[1] * scale, v[2] * scale);
  return buf;
}

static void print_table(const bench_result *r, int n, cli_placement placement) {
  printf("%-10s %-3s %-22s %-8s %-8s %4s %9s  %-30s %-20s %-20s %-21s %s\n", "backend", "op", "shape", "dtype", "layout",
         "line", "MB moved", "median us (fastest..slowest)", "GB/s (range)", "ceil GB/s (range)", "% ceil (range)", "flag");
  int nflag = 0, nv = 0;
  for (int i = 0; i < n; i++) {
    const bench_result *x = &r[i];
    char c1[48], c2[48], c3[48], c4[48];
    row_head(x);
    if (x->error[0]) {
      printf(" %s\n", x->error);
      continue;
    }
    nflag += flag_of(x)[0] != 0;
    if (x->nvariants > nv) nv = x->nvariants;
    printf(" %9.1f  %-30s %-20s %-20s %-21s %s\n", x->bytes / 1e6, range_cell(c1, sizeof c1, x->time_s, 1e6),
           range_cell(c2, sizeof c2, x->gbps, 1.0), range_cell(c3, sizeof c3, x->ceiling_gbps, 1.0),
           range_cell(c4, sizeof c4, x->pct, 1.0), flag_of(x));
  }
  printf("(line: bytes from a 64-byte line to the first output's first element: %s; ranges: lowest..highest over the\n"
         " timed calls; %% ceil's pairs zgate's slowest call with the ceiling's fastest and back)\n",
         placement == CLI_PLACE_LINE ? "buffers on lines (--aligned)" : "buffers where malloc places large blocks");
  if (nflag)
    printf("%d of %d rows flagged: 'noisy' = the slowest timed call took more than %.2fx the fastest; 'above "
           "ceiling' = over %.0f%% of the ceiling. The machine was busy: rerun on a quiet one.\n",
           nflag, n, BENCH_NOISY_SPREAD, BENCH_MAX_PLAUSIBLE_PCT);
  if (!nv) return;
  /* The CPU ceiling's variants: a legend, then each CPU row's median GB/s of every variant. */
  printf("\nCPU ceiling: the fastest of %d stream variants on each row's buffers, timed round robin "
         "(median GB/s; * the ceiling, - not usable on these buffers):\n", nv);
  for (int v = 0; v < nv; v++) printf("  v%-2d %s\n", v + 1, zb_variant_get(v)->name);
  printf("%-10s %-3s %-22s %-8s %-8s %4s", "backend", "op", "shape", "dtype", "layout", "line");
  for (int v = 0; v < nv; v++) printf("  %5s%d ", "v", v + 1);
  printf("\n");
  for (int i = 0; i < n; i++) {
    const bench_result *x = &r[i];
    if (x->error[0] || !x->nvariants) continue;
    row_head(x);
    for (int v = 0; v < x->nvariants; v++) {
      if (x->variant_gbps[v][0] < 0) printf("  %6s ", "-");
      else printf("  %6.1f%s", x->variant_gbps[v][0], v == x->ceiling_variant ? "*" : " ");
    }
    printf("\n");
  }
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f), fputc(*s, f);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", (unsigned char)*s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

/* A number, or null for what JSON cannot hold (inf, NaN). */
static void json_num(FILE *f, const char *before, double v) {
  fprintf(f, v == v && v < 1e300 && v > -1e300 ? "%s%.6g" : "%snull", before, v);
}

/* ", name: v[0], name_range: [v[1], v[2]]". */
static void json_num3(FILE *f, const char *name, const double v[3], double scale) {
  fprintf(f, ", \"%s\": ", name);
  json_num(f, "", v[0] * scale);
  fprintf(f, ", \"%s_range\": ", name);
  json_num(f, "[", v[1] * scale);
  json_num(f, ", ", v[2] * scale);
  fputc(']', f);
}

static int write_json(const char *path, const bench_result *r, int n, const bench_meta *m) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  /* The version is the library's "major.minor.patch"; the build line can hold any text. */
  fprintf(f, "{\n  \"tool\": \"zgate bench\",\n  \"zgate_version\": \"%s\",\n  \"build\": ", zgate_version());
  json_str(f, zgate_build_info());
  fprintf(f, ",\n  \"date\": \"%s\",\n  \"cpu_threads\": %d,\n  \"load_average_at_start\": ", m->date, m->threads);
  if (m->have_load) fprintf(f, "[%.2f, %.2f, %.2f]", m->load[0], m->load[1], m->load[2]);
  else fputs("null", f);
  fprintf(f, ",\n  \"cpus_online\": %d,\n  \"settle\": ", m->cpus);
  if (m->settle_asked) fprintf(f, "{\"waited_s\": %.1f, \"settled\": %s}", m->settle_wait_s, m->settled ? "true" : "false");
  else fputs("null", f);
  fprintf(f, ",\n  \"ceiling\": {\"cpu\": \"%s\", \"cuda\": \"%s\"},\n", ceiling_cpu, ceiling_cuda);
  fprintf(f, "  \"bytes_counted\": \"bytes read plus bytes written by the operator, once each\",\n");
  fprintf(f, "  \"ranges\": \"[lowest, highest] over the timed calls; pct_of_ceiling's pairs zgate's slowest call "
             "with the ceiling's fastest and back\",\n");
  fprintf(f, "  \"flags\": \"noisy: the slowest timed call (zgate's or the ceiling's) took more than %.2fx the "
             "fastest; above ceiling: over %.0f%% of the ceiling\",\n", BENCH_NOISY_SPREAD, BENCH_MAX_PLAUSIBLE_PCT);
  fprintf(f, "  \"results\": [");
  for (int i = 0; i < n; i++) {
    const bench_result *x = &r[i];
    char dts[64];
    cli_dtypes_str(&x->dt, x->op, dts, sizeof dts);
    fprintf(f, "%s\n    {\"backend\": \"%s\", \"op\": \"%s\", \"shape\": [%lld, %lld, %lld, %lld], \"dtypes\": \"%s\"",
            i ? "," : "", x->be->label, zg_ops[x->op].name, (long long)x->shape[0], (long long)x->shape[1],
            (long long)x->shape[2], (long long)x->shape[3], dts);
    fprintf(f, ", \"layout\": \"%s\", \"placement\": \"%s\", \"out_line_offset\": %d", cli_layout_names[x->layout],
            m->placement == CLI_PLACE_LINE ? "64-byte aligned" : "as malloc places large blocks", x->out_line_offset);
    fprintf(f, ", \"elements\": %lld, \"bytes\": %.0f, \"repeats\": %d, \"threads\": %d", (long long)cli_numel(x->shape), x->bytes, x->repeats,
            x->be->is_cuda ? 0 : m->threads);
    if (x->error[0]) {
      fprintf(f, ", \"error\": ");
      json_str(f, x->error);
      fputc('}', f);
      continue;
    }
    json_num(f, ",\n     \"first_call_us\": ", x->first_s * 1e6);
    json_num3(f, "median_us", x->time_s, 1e6);
    json_num3(f, "gbps", x->gbps, 1.0);
    fputs("\n    ", f);
    json_num3(f, "ceiling_median_us", x->ceiling_s, 1e6);
    json_num3(f, "ceiling_gbps", x->ceiling_gbps, 1.0);
    json_num3(f, "pct_of_ceiling", x->pct, 1.0);
    if (x->ceiling_variant >= 0) {
      fprintf(f, ",\n     \"ceiling_variant\": \"%s\", \"ceiling_variants\": [",
              zb_variant_get(x->ceiling_variant)->name);
      for (int v = 0; v < x->nvariants; v++) {
        fprintf(f, "%s{\"name\": \"%s\"", v ? ", " : "", zb_variant_get(v)->name);
        if (x->variant_gbps[v][0] < 0) fprintf(f, ", \"usable\": false");
        else json_num3(f, "gbps", x->variant_gbps[v], 1.0);
        fputc('}', f);
      }
      fputc(']', f);
    }
    fprintf(f, ", \"flag\": \"%s\"}", flag_of(x));
  }
  fprintf(f, "\n  ]\n}\n");
  int bad = ferror(f);
  return (fclose(f) || bad) ? -1 : 0;
}

static int check_png(const char *png_path) {
  /* The path goes between single quotes in a shell command and a gnuplot string. */
  if (strpbrk(png_path, "'\"\n\\") || strlen(png_path) > 4000) {
    cli_error("bench", "--png %s: the path is too long or contains quotes or backslashes, which gnuplot cannot take",
              png_path);
    return -1;
  }
  return cli_check_output("bench", "--png", png_path);
}

static int plot(const char *png_path, const bench_result *r, int n, const bench_meta *m) {
  size_t len = strlen(png_path); /* at most 4000 (check_png) */
  char dat[4096], gp[4096], cmd[4200];
  int npanels = 0, rows = 0, maxrows = 0, nflag = 0;
  unsigned layouts = 0;
  FILE *f = NULL;
  if (len > 4 && !strcmp(png_path + len - 4, ".png")) len -= 4;
  sprintf(dat, "%.*s.dat", (int)len, png_path);
  sprintf(gp, "%.*s.gp", (int)len, png_path);

  /* One data block per backend (gnuplot's "index"); the results come backend by backend. */
  if (!(f = fopen(dat, "w"))) return cli_error("bench", "cannot write '%s'", dat), -1;
  fprintf(f, "# zgate bench: label, GB/s (median, lowest, highest), ceiling GB/s (the same), bar label\n");
  for (int i = 0; i < n; i++) {
    const bench_result *x = &r[i];
    if (i == 0 || x->be != r[i - 1].be) {
      fprintf(f, "%s# %s\n", npanels++ ? "\n\n" : "", x->be->label);
      rows = 0;
    }
    if (x->error[0]) continue;
    char dts[64];
    const char *flag = flag_of(x);
    cli_dtypes_str(&x->dt, x->op, dts, sizeof dts);
    nflag += flag[0] != 0;
    layouts |= 1u << x->layout;
    if (++rows > maxrows) maxrows = rows;
    fprintf(f, "\"%s %s %s %lldx%lldx%lldx%lld\" %.4g %.4g %.4g %.4g %.4g %.4g \"%.0f%%%s%s\"\n",
            zg_ops[x->op].name, strchr(dts, ' ') ? "mixed" : dts, cli_layout_names[x->layout],
            (long long)x->shape[0], (long long)x->shape[1], (long long)x->shape[2], (long long)x->shape[3], x->gbps[0],
            x->gbps[1], x->gbps[2], x->ceiling_gbps[0], x->ceiling_gbps[1], x->ceiling_gbps[2], x->pct[0],
            flag[0] ? " ! " : "", flag);
  }
  fclose(f);

  int nlines = 2 + m->have_load + m->settle_asked, width = 360 + 95 * (maxrows > 4 ? maxrows : 4);
  for (int i = 0; i < CLI_NLAYOUTS; i++) nlines += layouts >> i & 1u;
  width = width < 900 ? 900 : width > 2400 ? 2400 : width; /* at least the title's room */
  if (!(f = fopen(gp, "w"))) return cli_error("bench", "cannot write '%s'", gp), -1;
  fprintf(f, "# gnuplot script written by 'zgate bench'; run: gnuplot '%s'\n", gp);
  fprintf(f, "set terminal pngcairo size %d,%d font 'DejaVu Sans,10' noenhanced\n", width, 140 + 16 * nlines + 420 * npanels);
  fprintf(f, "set output '%s'\n", png_path);
  /* The title says what the bars, whiskers and marks are, and what each layout name means. */
  fprintf(f,
          "set multiplot layout %d,1 title \"zgate %s: achieved bandwidth vs the ceiling measured in the same run "
          "(%s)\\nbars: median of the timed calls; whiskers: their lowest..highest; '!': the calls spread more than "
          "%.2fx (noisy) or the row is above %.0f%% of its ceiling",
          npanels > 0 ? npanels : 1, zgate_version(), m->date, BENCH_NOISY_SPREAD, BENCH_MAX_PLAUSIBLE_PCT);
  if (m->have_load)
    fprintf(f, "\\nload average at start: %.2f %.2f %.2f on %d CPUs%s", m->load[0], m->load[1], m->load[2], m->cpus,
            nflag ? ": the machine was busy, so the flagged rows are not to be trusted" : "");
  if (m->settle_asked)
    fprintf(f, "\\n%s after waiting %.0f s for the load to fall",
            m->settled ? "the machine settled" : "THE MACHINE DID NOT SETTLE (figures may be low)", m->settle_wait_s);
  for (int i = 0; i < CLI_NLAYOUTS; i++)
    if (layouts >> i & 1u) fprintf(f, "\\n%s: %s", cli_layout_names[i], cli_layout_about[i]);
  fprintf(f, "\"\n");
  fprintf(f, "set style fill solid 0.9 border rgb '#333333'\nset boxwidth 0.38\nset grid ytics lc rgb '#dddddd'\n");
  fprintf(f, "set ylabel 'GB/s (bytes read + written)'\nset yrange [0:*]\nset offsets 0.6, 0.6, 0, 0\n");
  fprintf(f, "set xtics rotate by 25 right nomirror font ',9'\nset key top left opaque box\nset bmargin 8\nset lmargin 16\n");
  for (int i = 0, k = 0; i < n; i++) {
    if (i > 0 && r[i].be == r[i - 1].be) continue;
    if (r[i].be->is_cuda) fprintf(f, "set title '%s (ceiling: %s)'\n", r[i].be->label, ceiling_cuda);
    else fprintf(f, "set title '%s, %d threads (ceiling: %s)'\n", r[i].be->label, m->threads, ceiling_cpu);
    fprintf(f,
            "plot '%s' index %d using ($0-0.2):2 with boxes lc rgb '#2b6cb0' title 'zgate', \\\n"
            "     '' index %d using ($0+0.2):5 with boxes lc rgb '#c8c8c8' title 'ceiling', \\\n"
            "     '' index %d using ($0-0.2):2:3:4 with yerrorbars lc rgb '#000000' ps 0 title 'lowest..highest', \\\n"
            "     '' index %d using ($0+0.2):5:6:7 with yerrorbars lc rgb '#000000' ps 0 notitle, \\\n"
            "     '' index %d using ($0-0.2):4:8 with labels offset 0,0.8 font ',9' notitle, \\\n"
            "     '' index %d using 0:(0):xtic(1) with points ps 0 notitle\n",
            dat, k, k, k, k, k, k);
    k++;
  }
  fprintf(f, "unset multiplot\n");
  fclose(f);

  if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
    fprintf(stderr, "zgate bench: gnuplot not found, so no chart was drawn; wrote %s and %s "
                    "(install gnuplot-nox, then run: gnuplot '%s')\n", dat, gp, gp);
    return 1;
  }
  snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
  int st = system(cmd);
  if (st == 0 && access(png_path, R_OK) == 0) return 0;
  fprintf(stderr, "zgate bench: gnuplot failed on %s (exit status %d); the data is in %s\n", gp, st, dat);
  return -1;
}

/* ---- entry ----------------------------------------------------------------------------- */

int cli_cmd_bench(int argc, char **argv) {
  static const struct option opts[] = {CLI_SHARED_OPTS,         {"repeats", 1, NULL, 'n'}, {"warmup", 1, NULL, 'w'},
                                       {"settle", 1, NULL, 'q'}, {"json", 1, NULL, 'j'},    {"png", 1, NULL, 'p'},
                                       {"no-plot", 0, NULL, 'P'},
                                       {"aligned", 0, NULL, 'A'}, {0}};
  cli_cfg cfg = {.cmd = "bench", .layouts = (1u << CLI_DENSE) | (1u << CLI_ZVIEW), .backend_opt = "--backend",
                 .ops = 1, .warmup = 2, .plot = 1, .json = "zgate-bench.json", .png = "zgate-bench.png"};
  int pr = cli_parse(&cfg, argc, argv, opts);
  if (pr < 0) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (pr) return pr;
  if (cli_check_output("bench", "--json", cfg.json) || (cfg.plot && check_png(cfg.png))) return CLI_EXIT_USAGE;
  if (cfg.ndtypes == 0) { /* bf16 and f32 */
    cfg.ndtypes = 2;
    for (int i = 0; i < CLI_NSLOTS; i++) cfg.dtypes[0].t[i] = CLI_BF16, cfg.dtypes[1].t[i] = CLI_F32;
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
    for (int op = 0; op < ZG_NOPS; op++) {
      if (!user_shapes) { /* each backend's default problem */
        cfg.nshapes = be[ib].is_cuda ? 7 : 3;
        memcpy(cfg.shapes, be[ib].is_cuda ? default_cuda_shapes : default_shapes, sizeof cfg.shapes[0] * cfg.nshapes);
      }
      for (int is = 0; is < cfg.nshapes && (cfg.ops >> op & 1); is++)
        for (int id = 0; id < cfg.ndtypes; id++)
          for (int il = 0; il < CLI_NLAYOUTS; il++) {
            if (!(cfg.layouts & (1u << il)) || (il == CLI_INPLACE && !cli_uses((zg_op)op, ZG_BWD_DOS))) continue;
            bench_result *r = &res[nres++];
            r->be = &be[ib];
            r->op = (zg_op)op;
            memcpy(r->shape, cfg.shapes[is], sizeof r->shape);
            r->dt = cfg.dtypes[id];
            if (il == CLI_INPLACE) r->dt.t[ZG_BWD_DOS] = r->dt.t[ZG_BWD_DOUT];
            r->layout = il;
            r->ceiling_variant = -1;
            for (int i = 0; i < cli_nargs(r->op); i++)
              r->bytes += cli_numel(r->shape) * (r->dt.t[cli_slot(r->op, i)].bits / 8.0);
          }
    }

  bench_meta meta = {.threads = cfg.threads ? cfg.threads : cli_max_threads(), .placement = cfg.placement};
  settle(&cfg, &meta);
  int nfail = 0, nnot_run = 0;
  for (int i = 0; i < nres; i++) {
    char shape[64], dts[64];
    cli_shape_str(res[i].shape, shape, sizeof shape);
    cli_dtypes_str(&res[i].dt, res[i].op, dts, sizeof dts);
    fprintf(stderr, "zgate bench [%d/%d] %s %s %s %s %s\n", i + 1, nres, res[i].be->label, zg_ops[res[i].op].name,
            shape, dts, cli_layout_names[res[i].layout]);
    run_config(&cfg, &res[i]);
    nfail += res[i].failed;
    nnot_run += !res[i].failed && res[i].error[0];
  }
  time_t now = time(NULL);
  strftime(meta.date, sizeof meta.date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
  print_table(res, nres, meta.placement);
  int rc = nfail ? CLI_EXIT_FAIL : nnot_run ? CLI_EXIT_NOT_RUN : CLI_EXIT_OK;
  if (write_json(cfg.json, res, nres, &meta)) {
    cli_error("bench", "cannot write the JSON results to '%s'", cfg.json);
    rc = CLI_EXIT_FAIL;
  } else {
    printf("results: %s\n", cfg.json);
  }
  int pl = cfg.plot ? plot(cfg.png, res, nres, &meta) : 1;
  if (pl == 0) printf("chart: %s\n", cfg.png);
  if (pl < 0) rc = CLI_EXIT_FAIL;
  if (nfail) cli_error("bench", "zgate failed on %d of %d configurations (see the table)", nfail, nres);
  if (nnot_run) cli_error("bench", "%d of %d configurations did not run (see the table)", nnot_run, nres);
  free(res);
  return rc;
}
