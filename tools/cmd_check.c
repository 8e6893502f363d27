/* `zgate check`: the precision suite. Every available backend and CPU path, over shapes,
 * dtype combinations, layouts and special values, each output compared element by element
 * with the float64 reference under the team's numerics policy (check/zgate_check.h), plus
 * guard regions around every output and a thread-count invariance check. Writes a Markdown
 * report; exits 1 on any failure. */
#define _POSIX_C_SOURCE 200809L /* isatty under -std=c11 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zgate_cases.h>
#include <zgate_check.h>

#include "cli.h"

/* The inputs are the same on every run and on every backend: the seed of a case depends on
 * the case alone. */
#define SEED 1u

/* One line of the report: one call on one backend. */
typedef struct check_row {
  char backend[48], op[8], shape[64], dtypes[64], layout[16], inputs[24];
  char spec[64]; /* the case's dtypes (both directions of a case share it), for the summary */
  char err[96];  /* per output, the largest |got-ref| / allowed: "dz 0.50, dos 0.48" */
  double ratio;  /* the largest of those */
  int status;    /* 0 pass, 1 fail, 2 not run */
  char note[480];
} check_row;

static const char *const status_words[3] = {"pass", "FAIL", "not run"};

typedef struct check_run {
  const cli_cfg *cfg;
  check_row *rows;
  int nrows;
  int count[3]; /* rows passed, failed, not run */
  double worst_ratio;
  char worst_where[320];
} check_run;

static void usage(FILE *f) {
  fprintf(f,
          "usage: zgate check [options]\n"
          "\n"
          "Runs the precision suite on every backend and CPU path this machine offers and\n"
          "compares every output with the float64 reference under zgate's numerics policy\n"
          "(float32: 4 ulp of the elementwise scale; float16/bfloat16: 1 ulp of the type).\n"
          "Writes a Markdown report. Exit codes: see 'zgate --help' (1: a case failed).\n"
          "\n"
          "options:\n"
          "  --shape B,L,H,D    a shape (batch,seqlen,nheads,headdim); repeat for several\n"
          "                     (default: the QUICK and FULL shapes of check/cases.def)\n"
          "  --dtype SPEC       f32 | f16 | bf16, or per tensor by its name in the signature:\n"
          "                     dout=bf16,z=f32,o=f16,dz=f32,dout_scaled=bf16 (the forward's out is dz)\n"
          "                     (repeat for several; default: the combinations of check/cases.def)\n"
          "  --layout LIST      dense,zview,permuted,inplace or all (default all; the report says\n"
          "                     what each is)\n"
          "  --backend LIST     all (default), cpu, best, scalar, avx2, avx512, neon, cuda, cuda:N\n"
          "  --isa LIST         the same for CPU paths only, e.g. --isa scalar,avx2\n"
          "  --op bwd|fwd|both  which direction to check (default both)\n"
          "  --max-memory SIZE  host memory a case may take, e.g. 8G (default: MemAvailable now)\n"
          "  --threads N        CPU threads per call (default 0 = OpenMP default)\n"
          "  --no-special       skip the special-value cases (inf, NaN, |z| near 88, 104, 1e30, ...)\n"
          "  --report PATH      Markdown report (default zgate-check.md)\n"
          "  --help             this text\n");
}

/* ---- inputs ---------------------------------------------------------------------------- */

/* Random inputs: mostly ordinary values, with deliberate shares near the root of
 * 1 + z(1-s), across the exp overflow and through float32's subnormal sigmoid range. */
static double random_z(cli_rng *r) {
  double u = cli_rng_uniform(r);
  if (u < 0.60) return 4.0 * cli_rng_normal(r);
  if (u < 0.72) return -1.2784645427610738 + 0.02 * (cli_rng_uniform(r) - 0.5);
  if (u < 0.82) return 12.0 + 12.0 * cli_rng_uniform(r);   /* where 1 - s cancels */
  if (u < 0.92) return -80.0 - 30.0 * cli_rng_uniform(r);  /* subnormal s, exp overflow */
  if (u < 0.97) return 200.0 * (cli_rng_uniform(r) - 0.5);
  return 0.0;
}

/* Special values: every z below against every dout and every o (shape (1, 12, 12, 32)). */
static const double special_z[32] = {
    0.0, -0.0, 1e-40, -1e-40, 0x1p-140, INFINITY, -INFINITY, NAN,
    88.0, 88.75, 89.0, -87.5, -88.75, -89.0, -95.0, -103.0,
    -104.0, -105.0, 104.0, 1e30, -1e30, -1.2785, -1.27846454, -1.2784, 16.6, 17.5, 0.5, -0.5,
    3e38, -3e38, 65504.0, -70000.0};
static const double special_dout[12] = {1.0, -1.0, 0.0, -0.0, INFINITY, NAN, 1e6, 1e-30, -2.5, 65504.0, 1e-8, 3.0};
static const double special_o[12] = {1.0, -0.75, 0.0, -0.0, -INFINITY, NAN, 1e-6, 1e6, 2.5, 70000.0, 1e-20, -3.0};
static const int64_t special_shape[4] = {1, 12, 12, 32};

/* The inputs dout, z and o of b: random, or the special values (b of special_shape). */
static void fill_inputs(cli_buf *b, int special, uint64_t seed) {
  cli_rng rng = {seed};
  int64_t idx[4];
  const int64_t *sh = b[ZG_BWD_Z].shape;
  for (idx[0] = 0; idx[0] < sh[0]; idx[0]++)
    for (idx[1] = 0; idx[1] < sh[1]; idx[1]++)
      for (idx[2] = 0; idx[2] < sh[2]; idx[2]++)
        for (idx[3] = 0; idx[3] < sh[3]; idx[3]++) {
          double dout, z, o;
          if (special) {
            dout = special_dout[idx[2]], z = special_z[idx[3]], o = special_o[idx[1]];
          } else {
            dout = cli_rng_normal(&rng);
            z = random_z(&rng);
            o = 2.0 * cli_rng_normal(&rng);
          }
          cli_buf_set(&b[ZG_BWD_DOUT], idx, dout);
          cli_buf_set(&b[ZG_BWD_Z], idx, z);
          cli_buf_set(&b[ZG_BWD_O], idx, o);
        }
}

/* ---- one case -------------------------------------------------------------------------- */

/* The next row (the run holds room for every row it can have). */
static check_row *new_row(check_run *run, const cli_backend *be, zg_op op, const int64_t shape[4],
                          const cli_dtypes *dt, int layout, const char *inputs) {
  check_row *row = &run->rows[run->nrows++];
  memset(row, 0, sizeof *row);
  snprintf(row->backend, sizeof row->backend, "%s", be->label);
  snprintf(row->op, sizeof row->op, "%s", zg_ops[op].name);
  cli_shape_str(shape, row->shape, sizeof row->shape);
  cli_dtypes_str(dt, op, row->dtypes, sizeof row->dtypes);
  cli_dtypes_str(dt, ZG_OP_BWD, row->spec, sizeof row->spec);
  snprintf(row->layout, sizeof row->layout, "%s", cli_layout_names[layout]);
  snprintf(row->inputs, sizeof row->inputs, "%s", inputs);
  return row;
}

/* Appends to the row's note ("; " between parts); a failure outranks "not run", which
 * outranks a pass. */
static CLI_PRINTF(3, 4) void say(check_row *row, int status, const char *fmt, ...) {
  size_t len = strlen(row->note);
  va_list ap;
  if (len && len + 2 < sizeof row->note) memcpy(row->note + len, "; ", 3), len += 2;
  va_start(ap, fmt);
  vsnprintf(row->note + len, sizeof row->note - len, fmt, ap);
  va_end(ap);
  if (status == 1 || row->status == 0) row->status = status;
}

static void finish_row(check_run *run, const check_row *row) {
  run->count[row->status]++;
  if (row->status != 2 && row->ratio > run->worst_ratio) {
    run->worst_ratio = row->ratio;
    snprintf(run->worst_where, sizeof run->worst_where, "%s %s %s %s %s", row->backend, row->op, row->shape,
             row->dtypes, row->layout);
  }
  if (row->status != 0)
    printf("%-10s %-3s %-22s %-40s %-8s %-8s %s %s\n", row->backend, row->op, row->shape, row->dtypes, row->layout,
           status_words[row->status], row->err, row->note);
}

/* Folds one output's statistics into the row; dout is NULL for the forward. */
static void judge(check_row *row, const char *name, const zgate_check_stats *st, int64_t outside,
                  const cli_buf *dout, const cli_buf *z, const cli_buf *o) {
  size_t len = strlen(row->err);
  snprintf(row->err + len, sizeof row->err - len, "%s%s %.3g", len ? ", " : "", name, st->max_bound_ratio);
  if (st->max_bound_ratio > row->ratio) row->ratio = st->max_bound_ratio;
  if (st->failures) {
    /* The inputs of the first failing element, so the failure can be reproduced by hand. */
    int64_t idx[4], k = st->first_fail;
    for (int i = 3; i >= 0; i--) idx[i] = k % z->shape[i], k /= z->shape[i];
    char in[48] = "";
    if (dout) snprintf(in, sizeof in, "dout %.9g, ", cli_buf_get(dout, idx));
    say(row, 1,
        "%s: %lld of %lld outside the bound (%lld NaN, %lld inf mismatches); first at element %lld: got %.9g, "
        "reference %.9g (%sz %.9g, o %.9g)",
        name, (long long)st->failures, (long long)st->count, (long long)st->nan_mismatches,
        (long long)st->inf_mismatches, (long long)st->first_fail, st->first_got, st->first_ref, in,
        cli_buf_get(z, idx), cli_buf_get(o, idx));
  }
  if (outside > 0) say(row, 1, "%s: %lld elements written outside the tensor", name, (long long)outside);
  if (outside < 0) say(row, 2, "%s: out of memory to look for writes outside the tensor", name);
}

typedef struct case_desc {
  const cli_backend *be;
  const int64_t *shape;
  cli_dtypes dt;
  cli_layout layout;
  int special;
  uint64_t seed;
} case_desc;

/* Host bytes a case holds at its peak: its tensors, dout as it was (in place), the snapshots
 * of the outputs and the float64 references (two for the backward). */
static double case_bytes(const case_desc *c, unsigned ops) {
  const int inplace = c->layout == CLI_INPLACE, bwd = ops >> ZG_OP_BWD & 1; /* the backward has two outputs */
  double t[CLI_NSLOTS], sum = 0;
  for (int i = 0; i < CLI_NSLOTS; i++)
    sum += t[i] = inplace && i == ZG_BWD_DOS ? 0 : cli_buf_bytes(i, c->layout, c->shape, c->dt.t[i]);
  if (inplace) sum += t[ZG_BWD_DOUT];
  sum += t[ZG_BWD_DZ] + (bwd ? t[inplace ? ZG_BWD_DOUT : ZG_BWD_DOS] : 0);
  return sum + 8.0 * (double)cli_numel(c->shape) * (bwd ? 2 : 1);
}

/* One operator of a case on its filled tensors: the outputs poisoned (unless written in place
 * over an input) and snapshotted, the call (on CUDA on uploaded copies, brought back after),
 * the float64 oracle. dout_in holds the dout the call read; why, when not empty, is why the
 * case cannot run. */
static void run_op(check_run *run, const case_desc *c, zg_op op, cli_buf *b, cli_buf *dos, const cli_buf *dout_in,
                   const char *why) {
  check_row *row = new_row(run, c->be, op, c->shape, &c->dt, c->layout, c->special ? "special" : "random");
  const int n_in = zg_ops[op].n_in, n_out = zg_ops[op].n_out, cuda = c->be->is_cuda;
  cli_buf *out[2];
  int snapshots = 0;
  for (int k = 0; k < n_out; k++) {
    const int slot = cli_slot(op, n_in + k);
    out[k] = slot == ZG_BWD_DOS ? dos : &b[slot];
    if (!why[0] && out[k] != &b[ZG_BWD_DOUT]) cli_buf_poison(out[k]);
    if (!why[0] && cli_buf_take_snapshot(out[k])) snapshots = -1;
  }
  zgate_options opts;
  zgate_options_init(&opts);
  opts.num_threads = run->cfg->threads;
  opts.cpu_isa = cuda ? NULL : c->be->isa;
  if (why[0]) {
    say(row, 2, "%s", why);
  } else if (snapshots) {
    say(row, 2, "out of memory for the snapshots");
  } else if (cuda && cli_bufs_to_device(b, CLI_NSLOTS, c->be->device)) {
    say(row, 2, "CUDA memory: %s", cli_cuda_last_error());
  } else {
    int st = cli_call(op, b, dos, &opts);
    if (st == ZGATE_OK && cuda && cli_cuda_sync(c->be->device)) st = ZGATE_ERR_CUDA;
    if (cuda && cli_bufs_to_host(b, CLI_NSLOTS) && st == ZGATE_OK) st = ZGATE_ERR_CUDA;
    zgate_check_stats s[2];
    zgate_check_stats_init(&s[0]);
    zgate_check_stats_init(&s[1]);
    DLTensor dout = cli_buf_tensor(dout_in), z = cli_buf_tensor(&b[ZG_BWD_Z]), o = cli_buf_tensor(&b[ZG_BWD_O]);
    DLTensor got0 = cli_buf_tensor(out[0]), got1 = n_out > 1 ? cli_buf_tensor(out[1]) : got0;
    int cs = st != ZGATE_OK      ? 0
             : op == ZG_OP_FWD ? zgate_check_fwd(&o, &z, &got0, &s[0])
                               : zgate_check_bwd(&dout, &z, &o, &got0, &got1, &s[0], &s[1]);
    if (st != ZGATE_OK)
      say(row, 1, "zgate_%s returned %d (%s): %s", row->op, st, zgate_status_str(st),
          cuda && !zgate_last_error()[0] ? cli_cuda_last_error() : zgate_last_error());
    else if (cs)
      say(row, 2, "the float64 reference failed (%d): %s", cs, cs > 0 ? zgate_last_error() : "out of memory");
    else
      for (int k = 0; k < n_out; k++)
        judge(row, zg_ops[op].tensors[n_in + k], &s[k], cli_buf_outside_writes(out[k]),
              cli_uses(op, ZG_BWD_DOUT) ? dout_in : NULL, &b[ZG_BWD_Z], &b[ZG_BWD_O]);
  }
  finish_row(run, row);
}

static void run_case(check_run *run, const case_desc *c) {
  const int inplace = c->layout == CLI_INPLACE;
  cli_buf b[CLI_NSLOTS] = {0}, before = {0};
  char why[160] = "";
  if (cli_memory_fits(case_bytes(c, run->cfg->ops), run->cfg->max_memory, why, sizeof why) == 0) {
    int ok = 1;
    for (int i = 0; i < CLI_NSLOTS; i++)
      if (!(inplace && i == ZG_BWD_DOS) && cli_buf_make(&b[i], i, c->layout, c->shape, c->dt.t[i], CLI_PLACE_MALLOC)) ok = 0;
    /* In place the kernel overwrites dout: the oracle needs the values it read. */
    if (ok && inplace) ok = !cli_buf_make(&before, ZG_BWD_DOUT, c->layout, c->shape, c->dt.t[ZG_BWD_DOUT], CLI_PLACE_MALLOC);
    if (!ok) snprintf(why, sizeof why, "out of memory for this shape");
  }
  if (!why[0]) {
    fill_inputs(b, c->special, c->seed);
    if (inplace) { /* a byte copy of the allocation: the view at the same offset */
      memcpy(before.host, b[ZG_BWD_DOUT].host, (size_t)before.nslots * (size_t)before.esize);
      before.offset = b[ZG_BWD_DOUT].offset;
    }
  }
  for (int op = 0; op < ZG_NOPS; op++) /* in place is dout_scaled over dout: the backward's */
    if ((run->cfg->ops >> op & 1) && !(inplace && !cli_uses((zg_op)op, ZG_BWD_DOS)))
      run_op(run, c, (zg_op)op, b, inplace ? &b[ZG_BWD_DOUT] : &b[ZG_BWD_DOS], inplace ? &before : &b[ZG_BWD_DOUT],
             why);
  for (int i = 0; i < CLI_NSLOTS; i++) cli_buf_free(&b[i]);
  cli_buf_free(&before);
}

/* Results must not depend on the number of threads: one thread against all of them, bit for
 * bit, on a shape large enough to be split. b[k] share the inputs; k = 1 has its own outputs. */
static void run_thread_invariance(check_run *run, const cli_backend *be, DLDataType t) {
  const int64_t shape[4] = {1, 777, 2, 64}; /* ~100k elements: several of zgate's 32768-element work items */
  const int nt = cli_max_threads() > 1 ? cli_max_threads() : 2;
  cli_dtypes dt;
  cli_buf b[2][CLI_NSLOTS] = {0};
  char inputs[24], why[160] = "";
  for (int i = 0; i < CLI_NSLOTS; i++) dt.t[i] = t;
  snprintf(inputs, sizeof inputs, "threads 1 vs %d", nt);
  check_row *row = new_row(run, be, ZG_OP_BWD, shape, &dt, CLI_DENSE, inputs);
  cli_memory_fits(7 * cli_buf_bytes(ZG_BWD_DZ, CLI_DENSE, shape, t), run->cfg->max_memory, why, sizeof why);
  for (int i = 0; i < CLI_NSLOTS + 2 && !why[0]; i++)
    if (cli_buf_make(i < CLI_NSLOTS ? &b[0][i] : &b[1][i - 2], i < CLI_NSLOTS ? i : i - 2, CLI_DENSE, shape, t,
                     CLI_PLACE_MALLOC))
      snprintf(why, sizeof why, "out of memory");
  int st = ZGATE_OK;
  if (why[0]) {
    say(row, 2, "%s", why);
  } else {
    fill_inputs(b[0], 0, SEED * 7919u + 17u);
    memcpy(b[1], b[0], 3 * sizeof b[0][0]);
    for (int k = 0; k < 2 && st == ZGATE_OK; k++) {
      zgate_options opts;
      zgate_options_init(&opts);
      opts.cpu_isa = be->isa;
      opts.num_threads = k == 0 ? 1 : nt;
      st = cli_call(ZG_OP_BWD, b[k], &b[k][ZG_BWD_DOS], &opts);
    }
    /* the dense views (each allocation places its view where its own address puts it) */
    const size_t bytes = (size_t)cli_numel(shape) * (size_t)b[0][ZG_BWD_DZ].esize;
    if (st != ZGATE_OK) say(row, 1, "zgate_bwd returned %d (%s): %s", st, zgate_status_str(st), zgate_last_error());
    else if (!memcmp(cli_buf_first(&b[0][ZG_BWD_DZ]), cli_buf_first(&b[1][ZG_BWD_DZ]), bytes) &&
             !memcmp(cli_buf_first(&b[0][ZG_BWD_DOS]), cli_buf_first(&b[1][ZG_BWD_DOS]), bytes))
      say(row, 0, "bit-identical");
    else say(row, 1, "results differ between 1 and %d threads", nt);
  }
  for (int i = 0; i < CLI_NSLOTS; i++) cli_buf_free(&b[0][i]);
  cli_buf_free(&b[1][ZG_BWD_DZ]);
  cli_buf_free(&b[1][ZG_BWD_DOS]);
  finish_row(run, row);
}

/* ---- report ---------------------------------------------------------------------------- */

static void md_escape_pipes(FILE *f, const char *s) {
  for (; *s; s++) fputs(*s == '|' ? "\\|" : (char[2]){*s, 0}, f);
}

static int same_group(const check_row *a, const check_row *b) {
  return !strcmp(a->backend, b->backend) && !strcmp(a->spec, b->spec) && !strcmp(a->layout, b->layout);
}

/* A line per backend, dtype combination and layout, in the order they first appear. */
static void write_summary(FILE *f, const check_run *run) {
  fprintf(f, "| backend | dtypes | layout | cases | passed | failed | not run | worst error / bound |\n");
  fprintf(f, "|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < run->nrows; i++) {
    const check_row *r = &run->rows[i], *x;
    int first = 1, n = 0, st[3] = {0, 0, 0};
    double worst = 0;
    char w[16] = "-";
    for (int j = 0; j < i && first; j++) first = !same_group(&run->rows[j], r);
    for (x = r; x < run->rows + run->nrows && first; x++)
      if (same_group(x, r)) {
        n++, st[x->status]++;
        if (x->status != 2 && x->ratio > worst) worst = x->ratio;
      }
    if (!first) continue;
    if (st[2] < n) snprintf(w, sizeof w, "%.3f", worst);
    fprintf(f, "| %s | %s | %s | %d | %d | %s%d%s | %s%d%s | %s |\n", r->backend, r->spec, r->layout, n, st[0],
            st[1] ? "**" : "", st[1], st[1] ? "**" : "", st[2] ? "**" : "", st[2], st[2] ? "**" : "", w);
  }
}

static int write_report(const check_run *run, const char *path, const char *labels, const char *skipped,
                        const char *summary, double secs) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  char when[64];
  time_t now = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
  fprintf(f, "# zgate check report\n\n");
  fprintf(f, "**%s**\n\n", summary);
  fprintf(f, "- build: %s\n", zgate_build_info());
  fprintf(f, "- run %s, %.1f s, threads %s\n", when, secs, run->cfg->threads ? "as given" : "OpenMP default");
  fprintf(f, "- backends checked: %s\n- not checked here: %s\n", labels, skipped[0] ? skipped : "none");
  fprintf(f, "\nEach output is compared element by element with the same formula in float64 on the float64-widened "
             "inputs (`check/zgate_check.h`). float32 outputs must be within 4 ulp of the elementwise scale "
             "(`|dout*o|*s*(1+|z|*(1-s))` for dz, `|dout*z|*s` for dos, `|o*z|*s` for out), plus `4*2^-149` times the "
             "same products for s in float32's subnormal range; float16/bfloat16 outputs within 1 ulp of the type at "
             "the reference value, or the float32 bound plus half an ulp of the type. NaN exactly where the reference "
             "is NaN, infinities equal. Every output is poisoned (NaN) beforehand and surrounded by guard elements, "
             "which must be left untouched. The special-value cases cross 32 values of z (+-0, subnormals, +-inf, NaN, "
             "|z| near 88, 104, 1e30 and 3e38, the root near -1.2785) with 12 of dout and 12 of o, on every backend.\n\n"
             "*error / bound*: the largest `|got - ref|` divided by what the policy allows for that element, per "
             "output; at most 1 passes. (Counted in ulp of the scale instead, an element with z below about -87, where "
             "the absolute allowance for a subnormal s applies, can be millions of ulp from the reference and still "
             "well inside the policy.) A case *not run* (not enough memory, no device) is not a pass.\n\n"
             "Layouts:");
  for (int i = 0; i < CLI_NLAYOUTS; i++)
    fprintf(f, "%s *%s*: %s", i ? ";" : "", cli_layout_names[i], cli_layout_about[i]);
  fprintf(f, ".\n\n## Summary by backend, dtypes and layout\n\n");
  write_summary(f, run);
  fprintf(f, "\n## Every case\n\n");
  fprintf(f, "| # | backend | op | shape | dtypes | layout | inputs | error / bound | result |\n");
  fprintf(f, "|---|---|---|---|---|---|---|---|---|\n");
  for (int i = 0; i < run->nrows; i++) {
    const check_row *r = &run->rows[i];
    fprintf(f, "| %d | %s | %s | %s | %s | %s | %s | %s | %s", i + 1, r->backend, r->op, r->shape, r->dtypes,
            r->layout, r->inputs, r->err[0] ? r->err : "-", r->status == 1 ? "**FAIL**" : status_words[r->status]);
    if (r->note[0]) {
      fputs(": ", f);
      md_escape_pipes(f, r->note);
    }
    fputs(" |\n", f);
  }
  fprintf(f, "\n%s\n", summary);
  int bad = ferror(f);
  return (fclose(f) || bad) ? -1 : 0;
}

/* ---- entry ----------------------------------------------------------------------------- */

int cli_cmd_check(int argc, char **argv) {
  static const struct option opts[] = {CLI_SHARED_OPTS, {"report", 1, NULL, 'r'}, {"no-special", 0, NULL, 'S'}, {0}};
  cli_cfg cfg = {.cmd = "check", .layouts = (1u << CLI_NLAYOUTS) - 1u, .backend_spec = "all",
                 .backend_opt = "--backend", .ops = 3, .report = "zgate-check.md", .special = 1};
  int pr = cli_parse(&cfg, argc, argv, opts);
  if (pr < 0) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (pr) return pr;
  if (cli_check_output("check", "--report", cfg.report)) return CLI_EXIT_USAGE;
  /* The shared case list: its QUICK and FULL shapes, every dtype combination. */
  if (cfg.nshapes == 0)
    for (int i = 0; i < ZGATE_CASES_N(zgate_case_shapes) && cfg.nshapes < CLI_MAX_SHAPES; i++)
      if (zgate_case_shapes[i].set & (ZGATE_CASES_QUICK | ZGATE_CASES_FULL))
        memcpy(cfg.shapes[cfg.nshapes++], zgate_case_shapes[i].shape, sizeof cfg.shapes[0]);
  if (cfg.ndtypes == 0)
    for (; cfg.ndtypes < ZGATE_CASES_N(zgate_case_dtype_sets) && cfg.ndtypes < CLI_MAX_DTYPES; cfg.ndtypes++)
      memcpy(cfg.dtypes[cfg.ndtypes].t, zgate_case_dtype_sets[cfg.ndtypes].dt, sizeof cfg.dtypes[0].t);
  cli_backend be[CLI_MAX_BACKENDS];
  char skipped[512];
  int nbe = cli_backends("check", cfg.backend_opt, cfg.backend_spec, be, skipped, sizeof skipped);
  if (nbe < 0) return CLI_EXIT_USAGE;

  /* Per backend: both directions of every case, the special values', two thread checks. */
  const size_t nrows = (size_t)nbe * (2 * cfg.nshapes * cfg.ndtypes * CLI_NLAYOUTS + 2 * cfg.ndtypes + 2);
  check_run run = {.cfg = &cfg, .rows = calloc(nrows, sizeof(check_row))};
  if (!run.rows) {
    cli_error("check", "out of memory");
    return CLI_EXIT_FAIL;
  }
  double t0 = cli_now();
  int tty = isatty(2), ncases = nbe * cfg.nshapes * cfg.ndtypes * CLI_NLAYOUTS, done = 0;
  for (int ib = 0; ib < nbe; ib++) {
    for (int is = 0; is < cfg.nshapes; is++)
      for (int id = 0; id < cfg.ndtypes; id++)
        for (int il = 0; il < CLI_NLAYOUTS; il++) {
          done++;
          if (!(cfg.layouts & (1u << il))) continue;
          case_desc c = {&be[ib], cfg.shapes[is], cfg.dtypes[id], (cli_layout)il, 0, 0};
          c.seed = SEED + 1000003u * (uint64_t)((is * CLI_MAX_DTYPES + id) * CLI_NLAYOUTS + il);
          if (il == CLI_INPLACE) c.dt.t[ZG_BWD_DOS] = c.dt.t[ZG_BWD_DOUT]; /* in place needs dout's dtype */
          run_case(&run, &c);
          if (tty)
            fprintf(stderr, "\rzgate check: %s %d/%d cases, %d failed   ", be[ib].label, done, ncases, run.count[1]);
        }
    for (int id = 0; id < cfg.ndtypes && cfg.special; id++) {
      case_desc c = {&be[ib], special_shape, cfg.dtypes[id], CLI_DENSE, 1, 0};
      run_case(&run, &c);
    }
    if (!be[ib].is_cuda) {
      run_thread_invariance(&run, &be[ib], CLI_F32);
      run_thread_invariance(&run, &be[ib], CLI_BF16);
    }
  }
  if (tty) fprintf(stderr, "\r%60s\r", "");
  double secs = cli_now() - t0;

  char summary[768], labels[256] = "";
  for (int i = 0; i < nbe; i++) {
    size_t len = strlen(labels);
    snprintf(labels + len, sizeof labels - len, "%s%s", i ? ", " : "", be[i].label);
  }
  snprintf(summary, sizeof summary,
           "%s: %d cases on %s: %d passed, %d failed, %d not run%s; worst error %.3g of the allowed bound (%s)",
           run.count[1] ? "FAIL" : run.count[2] ? "INCOMPLETE" : "PASS", run.nrows, labels, run.count[0], run.count[1],
           run.count[2], run.count[2] ? " (a case that did not run is not a pass)" : "", run.worst_ratio,
           run.worst_where[0] ? run.worst_where : "no output compared");
  int rc = run.count[1] ? CLI_EXIT_FAIL : run.count[2] ? CLI_EXIT_NOT_RUN : CLI_EXIT_OK;
  if (write_report(&run, cfg.report, labels, skipped, summary, secs)) {
    cli_error("check", "cannot write the report to '%s'", cfg.report);
    rc = CLI_EXIT_FAIL;
  }
  printf("zgate check %s\n", summary);
  if (skipped[0]) printf("not checked here: %s\n", skipped);
  printf("report: %s (%.1f s)\n", cfg.report, secs);
  free(run.rows);
  return rc;
}
