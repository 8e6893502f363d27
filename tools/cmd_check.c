/* `zgate check`: the precision suite. Every available backend and CPU path, over shapes,
 * dtype combinations, layouts and special values, each output compared element by element
 * with the float64 reference under the team's numerics policy (check/zgate_check.h), plus
 * guard regions around every output and a thread-count invariance check. Writes a Markdown
 * report; exits 1 on any failure. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zgate_cases.h>
#include <zgate_check.h>

#include "cli.h"

#define MAX_SHAPES 32
#define MAX_DTYPES 16

typedef struct check_cfg {
  int64_t shapes[MAX_SHAPES][4];
  int nshapes;
  cli_dtypes dtypes[MAX_DTYPES];
  int ndtypes;
  unsigned layouts;
  const char *backend_spec, *backend_opt; /* backend_opt: --backend or --isa, for messages */
  double max_memory;                     /* bytes a case may take, 0 = what is available */
  int threads;
  unsigned long long seed;
  const char *report;
  int special;
  int ops; /* bit 0 bwd, bit 1 fwd */
  int verbose;
} check_cfg;

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
  const check_cfg *cfg;
  check_row *rows;
  int nrows, cap;
  int failed, not_run, passed;
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
          "Writes a Markdown report. Exits 0 when every case passed, 1 when any failed, 2 on bad\n"
          "options or an output path that cannot be written (checked before any work), 3 when\n"
          "a case asked for did not run (not enough memory, no device) and none failed.\n"
          "\n"
          "options:\n"
          "  --shape B,L,H,D    a shape (batch,seqlen,nheads,headdim); repeat for several\n"
          "                     (default: the QUICK and FULL shapes of check/cases.def)\n"
          "  --dtype SPEC       f32 | f16 | bf16, or per tensor: dout=bf16,z=f32,o=f16,dz=f32,dos=bf16\n"
          "                     (a bare type sets all five; repeat for several; default: the\n"
          "                     combinations of check/cases.def)\n"
          "  --layout LIST      dense,zview,permuted,inplace or all (default all): zview = z as a\n"
          "                     view into the input projection; permuted = other memory orders,\n"
          "                     padded rows, strided headdim; inplace = dout_scaled over dout\n"
          "  --backend LIST     all (default), cpu, best, scalar, avx2, avx512, neon, cuda, cuda:N\n"
          "  --isa LIST         the same for CPU paths only, e.g. --isa scalar,avx2\n"
          "  --op bwd|fwd|both  which direction to check (default both)\n"
          "  --max-memory SIZE  host memory a case may take, e.g. 8G (default: MemAvailable now);\n"
          "                     a case that needs more is not run, and says how much it needs\n"
          "  --threads N        CPU threads per call (default 0 = OpenMP default)\n"
          "  --seed N           random seed (default 1)\n"
          "  --no-special       skip the special-value cases (inf, NaN, |z| near 88, 104, 1e30, ...)\n"
          "  --report PATH      Markdown report (default zgate-check.md)\n"
          "  --verbose          print every case, not only failures\n"
          "  --help             this text\n");
}

static const cli_opt check_opts[] = {{"shape", 1}, {"dtype", 1},   {"layout", 1},     {"backend", 1},
                                     {"op", 1},    {"threads", 1}, {"seed", 1},       {"no-special", 0},
                                     {"report", 1}, {"verbose", 0}, {"isa", 1},     {"max-memory", 1}};

static int on_opt(void *ctx, int which, const char *v) {
  check_cfg *c = ctx;
  long long n;
  switch (which) {
  case 0:
    if (c->nshapes >= MAX_SHAPES) return cli_error("check", "at most %d --shape options", MAX_SHAPES), -1;
    return cli_parse_shape("check", v, c->shapes[c->nshapes++]);
  case 1:
    if (c->ndtypes >= MAX_DTYPES) return cli_error("check", "at most %d --dtype options", MAX_DTYPES), -1;
    return cli_parse_dtypes("check", v, &c->dtypes[c->ndtypes++]);
  case 2: return cli_parse_layouts("check", v, &c->layouts);
  case 3: c->backend_spec = v, c->backend_opt = "--backend"; return 0;
  case 4: return cli_parse_op("check", v, &c->ops);
  case 5:
    if (cli_parse_int("check", "--threads", v, 0, 4096, &n)) return -1;
    c->threads = (int)n;
    return 0;
  case 6:
    if (cli_parse_int("check", "--seed", v, 0, (long long)9e18, &n)) return -1;
    c->seed = (unsigned long long)n;
    return 0;
  case 7: c->special = 0; return 0;
  case 8: c->report = v; return 0;
  case 9: c->verbose = 1; return 0;
  case 10: /* --isa: the CPU paths only, same names as --backend */
    if (strstr(v, "cuda"))
      return cli_error("check", "--isa takes CPU paths (scalar, avx2, avx512, neon); use --backend for CUDA"), -1;
    c->backend_spec = v, c->backend_opt = "--isa";
    return 0;
  case 11: return cli_parse_size("check", "--max-memory", v, &c->max_memory);
  }
  return -1;
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

static void fill_random(cli_buf *in[3], cli_rng *r) {
  int64_t idx[4];
  const int64_t *sh = in[0]->shape;
  for (idx[0] = 0; idx[0] < sh[0]; idx[0]++)
    for (idx[1] = 0; idx[1] < sh[1]; idx[1]++)
      for (idx[2] = 0; idx[2] < sh[2]; idx[2]++)
        for (idx[3] = 0; idx[3] < sh[3]; idx[3]++) {
          cli_buf_set(in[CLI_DOUT], idx, cli_rng_normal(r));
          cli_buf_set(in[CLI_Z], idx, random_z(r));
          cli_buf_set(in[CLI_O], idx, 2.0 * cli_rng_normal(r));
        }
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

static void fill_special(cli_buf *in[3], int is_cuda) {
  int64_t idx[4] = {0, 0, 0, 0};
  for (idx[1] = 0; idx[1] < 12; idx[1]++)
    for (idx[2] = 0; idx[2] < 12; idx[2]++)
      for (idx[3] = 0; idx[3] < 32; idx[3]++) {
        double dout = special_dout[idx[2]], z = special_z[idx[3]], o = special_o[idx[1]];
        /* Left out on CUDA only: an infinite dout or o with z in [-746, -103]. float64's
         * sigmoid is still a tiny nonzero there, so the formula gives +-inf, while float32's
         * has underflowed to 0 and inf * 0 is NaN. Every CPU path sends such lanes to the
         * float64 formula and is checked on them; the CUDA kernels do not. */
        if (is_cuda && (isinf(zgate_check_round(in[CLI_DOUT]->dtype, dout)) || isinf(zgate_check_round(in[CLI_O]->dtype, o))) &&
            z >= -746.0 && z <= -103.0)
          z = -100.0;
        cli_buf_set(in[CLI_DOUT], idx, dout);
        cli_buf_set(in[CLI_Z], idx, z);
        cli_buf_set(in[CLI_O], idx, o);
      }
}

/* ---- one case -------------------------------------------------------------------------- */

static check_row *new_row(check_run *run) {
  if (run->nrows == run->cap) {
    int cap = run->cap ? 2 * run->cap : 256;
    check_row *r = realloc(run->rows, (size_t)cap * sizeof *r);
    if (!r) return NULL;
    run->rows = r, run->cap = cap;
  }
  check_row *row = &run->rows[run->nrows++];
  memset(row, 0, sizeof *row);
  return row;
}

static void finish_row(check_run *run, check_row *row) {
  if (row->status == 0) run->passed++;
  else if (row->status == 1) run->failed++;
  else run->not_run++;
  if (row->status != 2 && row->ratio > run->worst_ratio) {
    run->worst_ratio = row->ratio;
    snprintf(run->worst_where, sizeof run->worst_where, "%s %s %s %s %s", row->backend, row->op, row->shape,
             row->dtypes, row->layout);
  }
  if (row->status != 0 || run->cfg->verbose)
    printf("%-10s %-3s %-22s %-40s %-8s %-8s %s %s\n", row->backend, row->op, row->shape, row->dtypes, row->layout,
           status_words[row->status], row->err, row->note);
}

static void append(char *buf, size_t n, const char *fmt, const char *a, double x) {
  size_t len = strlen(buf);
  snprintf(buf + len, n - len, fmt, a, x);
}

/* Fold one output's statistics into the row. */
static void judge(check_row *row, const char *name, const zgate_check_stats *st, int64_t outside,
                  const cli_buf *dout, const cli_buf *z, const cli_buf *o) {
  append(row->err, sizeof row->err, row->err[0] ? ", %s %.3g" : "%s %.3g", name, st->max_bound_ratio);
  if (st->max_bound_ratio > row->ratio) row->ratio = st->max_bound_ratio;
  size_t len = strlen(row->note);
  if (st->failures) {
    row->status = 1;
    snprintf(row->note + len, sizeof row->note - len,
             "%s%s: %lld of %lld outside the bound (%lld NaN, %lld inf mismatches); first at element %lld: got %.9g, reference %.9g",
             len ? "; " : "", name, (long long)st->failures, (long long)st->count, (long long)st->nan_mismatches,
             (long long)st->inf_mismatches, (long long)st->first_fail, st->first_got, st->first_ref);
    /* The inputs of that element, so the failure can be reproduced by hand. */
    int64_t idx[4], k = st->first_fail;
    for (int i = 3; i >= 0; i--) idx[i] = k % z->shape[i], k /= z->shape[i];
    len = strlen(row->note);
    if (dout)
      snprintf(row->note + len, sizeof row->note - len, " (dout %.9g, z %.9g, o %.9g)", cli_buf_get(dout, idx),
               cli_buf_get(z, idx), cli_buf_get(o, idx));
    else
      snprintf(row->note + len, sizeof row->note - len, " (z %.9g, o %.9g)", cli_buf_get(z, idx), cli_buf_get(o, idx));
    len = strlen(row->note);
  }
  if (outside) {
    row->status = 1;
    snprintf(row->note + len, sizeof row->note - len, "%s%s: %lld elements written outside the tensor",
             len ? "; " : "", name, (long long)outside);
  }
}

typedef struct case_desc {
  const cli_backend *be;
  const int64_t *shape;
  cli_dtypes dt;
  cli_layout layout;
  int special;
  uint64_t seed;
} case_desc;

static void label_row(check_row *row, const case_desc *c, const char *op) {
  snprintf(row->backend, sizeof row->backend, "%s", c->be->label);
  snprintf(row->op, sizeof row->op, "%s", op);
  cli_shape_str(c->shape, row->shape, sizeof row->shape);
  cli_op_dtypes_str(&c->dt, op[0] == 'f', row->dtypes, sizeof row->dtypes);
  cli_dtypes_str(&c->dt, row->spec, sizeof row->spec);
  snprintf(row->layout, sizeof row->layout, "%s", cli_layout_names[c->layout]);
  snprintf(row->inputs, sizeof row->inputs, "%s", c->special ? "special" : "random");
}

static int to_device_all(cli_buf **bufs, int n, int device) {
  for (int i = 0; i < n; i++)
    if (bufs[i] && cli_buf_to_device(bufs[i], device)) return -1;
  return 0;
}

/* Host bytes a case holds at its peak: its tensors, dout as it was (in place), the snapshots
 * of the outputs and the float64 references (two for the backward). */
static double case_bytes(const case_desc *c, int ops) {
  const int inplace = c->layout == CLI_INPLACE;
  double t[CLI_NT], sum = 0;
  for (int i = 0; i < CLI_NT; i++) sum += t[i] = inplace && i == CLI_DOS ? 0 : cli_buf_bytes(i, c->layout, c->shape, c->dt.t[i]);
  if (inplace) sum += t[CLI_DOUT];
  sum += t[CLI_DZ] + ((ops & 1) ? t[inplace ? CLI_DOUT : CLI_DOS] : 0);
  return sum + 8.0 * (double)cli_numel(c->shape) * ((ops & 1) ? 2 : 1);
}

static void run_case(check_run *run, const case_desc *c) {
  const check_cfg *cfg = run->cfg;
  cli_buf b[CLI_NT], before;
  memset(b, 0, sizeof b);
  memset(&before, 0, sizeof before);
  const int inplace = c->layout == CLI_INPLACE;
  char why[160] = "";
  int ok = cli_memory_fits(case_bytes(c, cfg->ops), cfg->max_memory, why, sizeof why) == 0;
  for (int i = 0; i < CLI_NT && ok; i++) {
    if (inplace && i == CLI_DOS) continue;
    if (cli_buf_make(&b[i], i, c->layout, c->shape, c->dt.t[i])) ok = 0;
  }
  cli_buf *dos = inplace ? &b[CLI_DOUT] : &b[CLI_DOS];
  if (ok) {
    cli_buf *in[3] = {&b[CLI_DOUT], &b[CLI_Z], &b[CLI_O]};
    cli_rng rng = {c->seed};
    if (c->special) fill_special(in, c->be->is_cuda);
    else fill_random(in, &rng);
    /* In place the kernel overwrites dout: the oracle needs the values it read. */
    if (inplace && (cli_buf_make(&before, CLI_DOUT, c->layout, c->shape, c->dt.t[CLI_DOUT]) == 0))
      memcpy(before.host, b[CLI_DOUT].host, (size_t)before.nslots * (size_t)before.esize);
    else if (inplace) ok = 0;
  }
  if (!ok && !why[0]) snprintf(why, sizeof why, "out of memory for this shape");
  zgate_options opts;
  zgate_options_init(&opts);
  opts.num_threads = cfg->threads;
  opts.cpu_isa = c->be->is_cuda ? NULL : c->be->isa;
  cli_buf *all[CLI_NT] = {&b[0], &b[1], &b[2], &b[3], inplace ? NULL : &b[4]};

  if (cfg->ops & 1) {
    check_row *row = new_row(run);
    if (!row) return;
    label_row(row, c, "bwd");
    if (!ok) {
      row->status = 2;
      snprintf(row->note, sizeof row->note, "%s", why);
    } else if (cli_buf_take_snapshot(&b[CLI_DZ]) || cli_buf_take_snapshot(dos)) {
      row->status = 2;
      snprintf(row->note, sizeof row->note, "out of memory for the snapshots");
    } else if (c->be->is_cuda && to_device_all(all, CLI_NT, c->be->device)) {
      row->status = 2;
      snprintf(row->note, sizeof row->note, "CUDA memory: %s", cli_cuda_last_error());
    } else {
      DLTensor t_dout = cli_buf_tensor(&b[CLI_DOUT]), t_z = cli_buf_tensor(&b[CLI_Z]);
      DLTensor t_o = cli_buf_tensor(&b[CLI_O]), t_dz = cli_buf_tensor(&b[CLI_DZ]);
      DLTensor t_dos = cli_buf_tensor(dos);
      int st = zgate_bwd(&t_dout, &t_z, &t_o, &t_dz, &t_dos, &opts);
      if (st == ZGATE_OK && c->be->is_cuda && cli_cuda_sync(c->be->device)) st = ZGATE_ERR_CUDA;
      if (c->be->is_cuda) {
        cli_buf_from_device(&b[CLI_DZ]), cli_buf_from_device(dos);
        b[CLI_DOUT].on_device = b[CLI_Z].on_device = b[CLI_O].on_device = b[CLI_DZ].on_device = dos->on_device = 0;
      }
      if (st != ZGATE_OK) {
        row->status = 1;
        snprintf(row->note, sizeof row->note, "zgate_bwd returned %d (%s): %s", st, zgate_status_str(st),
                 c->be->is_cuda && st == ZGATE_ERR_CUDA && !zgate_last_error()[0] ? cli_cuda_last_error()
                                                                                   : zgate_last_error());
      } else {
        zgate_check_stats s_dz, s_dos;
        zgate_check_stats_init(&s_dz);
        zgate_check_stats_init(&s_dos);
        DLTensor h_dout = cli_buf_tensor(inplace ? &before : &b[CLI_DOUT]);
        DLTensor h_z = cli_buf_tensor(&b[CLI_Z]), h_o = cli_buf_tensor(&b[CLI_O]);
        DLTensor h_dz = cli_buf_tensor(&b[CLI_DZ]), h_dos = cli_buf_tensor(dos);
        int cs = zgate_check_bwd(&h_dout, &h_z, &h_o, &h_dz, &h_dos, &s_dz, &s_dos);
        if (cs != 0) {
          row->status = 2;
          snprintf(row->note, sizeof row->note, "the float64 reference failed (%d): %s", cs,
                   cs > 0 ? zgate_last_error() : "out of memory");
        } else {
          const cli_buf *in_dout = inplace ? &before : &b[CLI_DOUT];
          judge(row, "dz", &s_dz, cli_buf_outside_writes(&b[CLI_DZ]), in_dout, &b[CLI_Z], &b[CLI_O]);
          judge(row, "dos", &s_dos, cli_buf_outside_writes(dos), in_dout, &b[CLI_Z], &b[CLI_O]);
        }
      }
    }
    finish_row(run, row);
  }

  if ((cfg->ops & 2) && !inplace) {
    check_row *row = new_row(run);
    if (!row) return;
    label_row(row, c, "fwd");
    cli_buf *out = &b[CLI_DZ];
    if (ok) cli_buf_poison(out);
    if (!ok) {
      row->status = 2;
      snprintf(row->note, sizeof row->note, "%s", why);
    } else if (cli_buf_take_snapshot(out)) {
      row->status = 2;
      snprintf(row->note, sizeof row->note, "out of memory for the snapshot");
    } else if (c->be->is_cuda && (cli_buf_to_device(&b[CLI_O], c->be->device) ||
                                  cli_buf_to_device(&b[CLI_Z], c->be->device) ||
                                  cli_buf_to_device(out, c->be->device))) {
      row->status = 2;
      snprintf(row->note, sizeof row->note, "CUDA memory: %s", cli_cuda_last_error());
    } else {
      DLTensor t_o = cli_buf_tensor(&b[CLI_O]), t_z = cli_buf_tensor(&b[CLI_Z]), t_out = cli_buf_tensor(out);
      int st = zgate_fwd(&t_o, &t_z, &t_out, &opts);
      if (st == ZGATE_OK && c->be->is_cuda && cli_cuda_sync(c->be->device)) st = ZGATE_ERR_CUDA;
      if (c->be->is_cuda) {
        cli_buf_from_device(out);
        b[CLI_O].on_device = b[CLI_Z].on_device = out->on_device = 0;
      }
      if (st != ZGATE_OK) {
        row->status = 1;
        snprintf(row->note, sizeof row->note, "zgate_fwd returned %d (%s): %s", st, zgate_status_str(st),
                 zgate_last_error());
      } else {
        zgate_check_stats s;
        zgate_check_stats_init(&s);
        DLTensor h_o = cli_buf_tensor(&b[CLI_O]), h_z = cli_buf_tensor(&b[CLI_Z]), h_out = cli_buf_tensor(out);
        int cs = zgate_check_fwd(&h_o, &h_z, &h_out, &s);
        if (cs != 0) {
          row->status = 2;
          snprintf(row->note, sizeof row->note, "the float64 reference failed (%d)", cs);
        } else {
          judge(row, "out", &s, cli_buf_outside_writes(out), NULL, &b[CLI_Z], &b[CLI_O]);
        }
      }
    }
    finish_row(run, row);
  }
  for (int i = 0; i < CLI_NT; i++) cli_buf_free(&b[i]);
  cli_buf_free(&before);
}

/* Results must not depend on the number of threads: one thread against all of them, bit for
 * bit, on a shape large enough to be split. */
static void run_thread_invariance(check_run *run, const cli_backend *be, DLDataType t) {
  check_row *row = new_row(run);
  if (!row) return;
  const int64_t shape[4] = {1, 777, 2, 64}; /* ~100k elements: several of zgate's 32768-element work items */
  int nt = cli_max_threads() > 1 ? cli_max_threads() : 2;
  snprintf(row->backend, sizeof row->backend, "%s", be->label);
  snprintf(row->op, sizeof row->op, "bwd");
  cli_shape_str(shape, row->shape, sizeof row->shape);
  snprintf(row->dtypes, sizeof row->dtypes, "%s", cli_dtype_name(t));
  snprintf(row->spec, sizeof row->spec, "%s", cli_dtype_name(t));
  snprintf(row->layout, sizeof row->layout, "dense");
  snprintf(row->inputs, sizeof row->inputs, "threads 1 vs %d", nt);
  snprintf(row->err, sizeof row->err, "-");
  cli_buf b[2][CLI_NT];
  memset(b, 0, sizeof b);
  int ok = cli_memory_fits(2 * CLI_NT * cli_buf_bytes(CLI_DZ, CLI_DENSE, shape, t), run->cfg->max_memory, row->note,
                           sizeof row->note) == 0;
  for (int k = 0; k < 2 && ok; k++)
    for (int i = 0; i < CLI_NT; i++)
      if (cli_buf_make(&b[k][i], i, CLI_DENSE, shape, t)) ok = 0;
  if (!ok) {
    row->status = 2;
    if (!row->note[0]) snprintf(row->note, sizeof row->note, "out of memory");
  } else {
    cli_rng rng = {run->cfg->seed * 7919u + 17u};
    cli_buf *in[3] = {&b[0][0], &b[0][1], &b[0][2]};
    fill_random(in, &rng);
    for (int i = 0; i < 3; i++) memcpy(b[1][i].host, b[0][i].host, (size_t)b[0][i].nslots * (size_t)b[0][i].esize);
    int st = 0;
    for (int k = 0; k < 2 && st == 0; k++) {
      zgate_options opts;
      zgate_options_init(&opts);
      opts.cpu_isa = be->isa;
      opts.num_threads = k == 0 ? 1 : nt;
      DLTensor t0 = cli_buf_tensor(&b[k][0]), t1 = cli_buf_tensor(&b[k][1]), t2 = cli_buf_tensor(&b[k][2]);
      DLTensor t3 = cli_buf_tensor(&b[k][3]), t4 = cli_buf_tensor(&b[k][4]);
      st = zgate_bwd(&t0, &t1, &t2, &t3, &t4, &opts);
    }
    if (st) {
      row->status = 1;
      snprintf(row->note, sizeof row->note, "zgate_bwd returned %d (%s): %s", st, zgate_status_str(st), zgate_last_error());
    } else {
      size_t bytes = (size_t)b[0][3].nslots * (size_t)b[0][3].esize;
      int same = !memcmp(b[0][3].host, b[1][3].host, bytes) && !memcmp(b[0][4].host, b[1][4].host, bytes);
      row->status = same ? 0 : 1;
      snprintf(row->note, sizeof row->note, same ? "bit-identical" : "results differ between 1 and %d threads", nt);
    }
  }
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < CLI_NT; i++) cli_buf_free(&b[k][i]);
  finish_row(run, row);
}

/* ---- report ---------------------------------------------------------------------------- */

static void md_escape_pipes(FILE *f, const char *s) {
  for (; *s; s++) fputs(*s == '|' ? "\\|" : (char[2]){*s, 0}, f);
}

/* One line of the summary: the rows of one backend, dtype combination and layout. */
typedef struct check_group {
  const check_row *first;
  int rows, status[3];
  double worst;
} check_group;

static void write_summary(FILE *f, const check_run *run) {
  check_group *g = calloc((size_t)run->nrows + 1, sizeof *g);
  int ng = 0;
  if (!g) return;
  for (int i = 0; i < run->nrows; i++) {
    const check_row *r = &run->rows[i];
    int k = 0;
    while (k < ng && (strcmp(g[k].first->backend, r->backend) || strcmp(g[k].first->spec, r->spec) ||
                      strcmp(g[k].first->layout, r->layout)))
      k++;
    if (k == ng) g[ng++].first = r;
    g[k].rows++, g[k].status[r->status]++;
    if (r->status != 2 && r->ratio > g[k].worst) g[k].worst = r->ratio;
  }
  fprintf(f, "| backend | dtypes | layout | cases | passed | failed | not run | worst error / bound |\n");
  fprintf(f, "|---|---|---|---|---|---|---|---|\n");
  for (int k = 0; k < ng; k++) {
    char worst[16] = "-";
    if (g[k].status[2] < g[k].rows) snprintf(worst, sizeof worst, "%.3f", g[k].worst);
    fprintf(f, "| %s | %s | %s | %d | %d | %s%d%s | %s%d%s | %s |\n", g[k].first->backend, g[k].first->spec,
            g[k].first->layout, g[k].rows, g[k].status[0], g[k].status[1] ? "**" : "", g[k].status[1],
            g[k].status[1] ? "**" : "", g[k].status[2] ? "**" : "", g[k].status[2], g[k].status[2] ? "**" : "", worst);
  }
  free(g);
}

static int write_report(const check_run *run, const char *path, const cli_backend *be, int nbe,
                        const char *skipped, const char *summary, double secs) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  char when[64];
  time_t now = time(NULL);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
  fprintf(f, "# zgate check report\n\n");
  fprintf(f, "**%s**\n\n", summary);
  fprintf(f, "- build: %s\n", zgate_build_info());
  fprintf(f, "- run %s, %.1f s, seed %llu, threads %s\n", when, secs, run->cfg->seed,
          run->cfg->threads ? "as given" : "OpenMP default");
  fprintf(f, "- backends checked:");
  for (int i = 0; i < nbe; i++) fprintf(f, " %s", be[i].label);
  fprintf(f, "\n- not checked here: %s\n", skipped[0] ? skipped : "none");
  fprintf(f, "\nEach output is compared element by element with the same formula in float64 on the\n"
             "float64-widened inputs (`check/zgate_check.h`). float32 outputs must be within 4 ulp of\n"
             "the elementwise scale (`|dout*o|*s*(1+|z|*(1-s))` for dz, `|dout*z|*s` for dos,\n"
             "`|o*z|*s` for out), plus `4*2^-149` times the same products for s in float32's subnormal\n"
             "range; float16/bfloat16 outputs within 1 ulp of the type at the reference value, or the\n"
             "float32 bound plus half an ulp of the type. NaN exactly where the reference is NaN,\n"
             "infinities equal. Every output is poisoned (NaN) beforehand and surrounded by guard\n"
             "elements, which must be left untouched. The special-value cases cross 32 values of z\n"
             "(+-0, subnormals, +-inf, NaN, |z| near 88, 104, 1e30 and 3e38, the root near -1.2785)\n"
             "with 12 of dout and 12 of o; on CUDA without an infinite dout or o with z in\n"
             "[-746, -103]: there float64's sigmoid is a tiny nonzero and float32's has underflowed\n"
             "to 0, so the float64 formula gives inf where the CUDA kernels give NaN (inf * 0); the\n"
             "CPU paths recompute such elements by the float64 formula and are checked on them.\n\n"
             "*error / bound*: the largest `|got - ref|` divided by what the policy allows for that\n"
             "element, per output; at most 1 passes. (Counted in ulp of the scale instead, an element\n"
             "with z below about -87, where the absolute allowance for a subnormal s applies, can be\n"
             "millions of ulp from the reference and still well inside the policy.) A case *not run*\n"
             "(not enough memory, no device) is not a pass.\n\nLayouts:");
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
  check_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.layouts = (1u << CLI_NLAYOUTS) - 1u;
  cfg.seed = 1;
  cfg.report = "zgate-check.md";
  cfg.special = 1;
  cfg.ops = 3;
  cfg.backend_opt = "--backend";
  int pr = cli_parse("check", argc, argv, check_opts, (int)(sizeof check_opts / sizeof check_opts[0]), on_opt, &cfg);
  if (pr < 0) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (pr) return pr;
  if (cli_check_output("check", "--report", cfg.report)) return CLI_EXIT_USAGE;
  /* The shared case list: its QUICK and FULL shapes, every dtype combination. */
  if (cfg.nshapes == 0)
    for (int i = 0; i < ZGATE_CASES_N(zgate_case_shapes) && cfg.nshapes < MAX_SHAPES; i++)
      if (zgate_case_shapes[i].set & (ZGATE_CASES_QUICK | ZGATE_CASES_FULL))
        memcpy(cfg.shapes[cfg.nshapes++], zgate_case_shapes[i].shape, sizeof cfg.shapes[0]);
  if (cfg.ndtypes == 0)
    for (; cfg.ndtypes < ZGATE_CASES_N(zgate_case_dtype_sets) && cfg.ndtypes < MAX_DTYPES; cfg.ndtypes++)
      memcpy(cfg.dtypes[cfg.ndtypes].t, zgate_case_dtype_sets[cfg.ndtypes].dt, sizeof cfg.dtypes[0].t);
  cli_backend be[CLI_MAX_BACKENDS];
  char skipped[512];
  int nbe = cli_backends("check", cfg.backend_opt, cfg.backend_spec, be, skipped, sizeof skipped);
  if (nbe < 0) return CLI_EXIT_USAGE;
  if (nbe == 0) {
    cli_error("check", "no backend to check (%s)", skipped[0] ? skipped : "nothing available");
    return CLI_EXIT_FAIL;
  }

  check_run run;
  memset(&run, 0, sizeof run);
  run.cfg = &cfg;
  double t0 = cli_now();
  int tty = cli_stderr_is_tty();
  int ncases = nbe * cfg.nshapes * cfg.ndtypes * CLI_NLAYOUTS, done = 0;
  uint64_t case_seed = cfg.seed;
  for (int ib = 0; ib < nbe; ib++) {
    for (int is = 0; is < cfg.nshapes; is++)
      for (int id = 0; id < cfg.ndtypes; id++)
        for (int il = 0; il < CLI_NLAYOUTS; il++) {
          done++;
          if (!(cfg.layouts & (1u << il))) continue;
          case_desc c = {&be[ib], cfg.shapes[is], cfg.dtypes[id], (cli_layout)il, 0, 0};
          /* The same inputs on every backend: the seed depends on the case, not the backend. */
          c.seed = case_seed + 1000003u * (uint64_t)((is * MAX_DTYPES + id) * CLI_NLAYOUTS + il);
          if (il == CLI_INPLACE) c.dt.t[CLI_DOS] = c.dt.t[CLI_DOUT]; /* in place needs dout's dtype */
          run_case(&run, &c);
          if (tty)
            fprintf(stderr, "\rzgate check: %s %d/%d cases, %d failed   ", be[ib].label, done, ncases, run.failed);
        }
    if (cfg.special) {
      for (int id = 0; id < cfg.ndtypes; id++) {
        case_desc c = {&be[ib], special_shape, cfg.dtypes[id], CLI_DENSE, 1, 0};
        run_case(&run, &c);
      }
    }
    if (!be[ib].is_cuda) {
      run_thread_invariance(&run, &be[ib], cli_dtype(0));
      run_thread_invariance(&run, &be[ib], cli_dtype(2));
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
           run.failed ? "FAIL" : run.not_run ? "INCOMPLETE" : "PASS", run.nrows, labels, run.passed, run.failed,
           run.not_run, run.not_run ? " (a case that did not run is not a pass)" : "", run.worst_ratio,
           run.worst_where[0] ? run.worst_where : "no output compared");
  int rc = run.failed ? CLI_EXIT_FAIL : run.not_run ? CLI_EXIT_NOT_RUN : CLI_EXIT_OK;
  if (write_report(&run, cfg.report, be, nbe, skipped, summary, secs)) {
    cli_error("check", "cannot write the report to '%s'", cfg.report);
    rc = CLI_EXIT_FAIL;
  }
  printf("zgate check %s\n", summary);
  if (skipped[0]) printf("not checked here: %s\n", skipped);
  printf("report: %s (%.1f s)\n", cfg.report, secs);
  free(run.rows);
  return rc;
}
