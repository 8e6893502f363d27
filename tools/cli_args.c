/* The options of the zgate command (getopt_long), and their values: numbers, sizes, shapes,
 * dtypes, layouts. Every error is said in the user's terms (which option, what was expected,
 * what was given). */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <zgate_check.h>

#include "cli.h"

const char *const cli_layout_about[CLI_NLAYOUTS] = {
    "every tensor compact row-major",
    "z a strided view into the input projection (rows of 2*H*D+32 elements, z at offset H*D)",
    "every tensor in another memory order, some rows padded, z's headdim strided",
    "dense, dout_scaled written over dout"};

void cli_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "zgate %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static int parse_int(const cli_cfg *c, const char *opt, const char *s, long long lo, long long hi, int *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*s || errno || *end || v < lo || v > hi) {
    cli_error(c->cmd, "%s wants a whole number from %lld to %lld; got '%s'", opt, lo, hi, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

/* A size in bytes: "8G", "512M", "1.5T", "4096" (K, M, G, T: powers of 1024; a trailing B or
 * iB is allowed). */
static int parse_size(const cli_cfg *c, const char *s, double *bytes) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end), unit = 1.0;
  const char *u = *end ? strchr("KMGT", toupper((unsigned char)*end)) : NULL;
  if (u) {
    for (const char *p = "KMGT"; p <= u; p++) unit *= 1024.0;
    end += 1 + (end[1] == 'B' ? 1 : end[1] == 'i' && end[2] == 'B' ? 2 : 0);
  }
  if (end == s || errno || *end || !(v > 0) || v * unit > 1e18) {
    cli_error(c->cmd, "--max-memory wants a size such as 8G, 512M or 1.5T (K, M, G, T: powers of 1024); got '%s'", s);
    return -1;
  }
  *bytes = v * unit;
  return 0;
}

/* "2,2048,24,64" or "2x2048x24x64". */
static int parse_shape(const cli_cfg *c, const char *s, int64_t shape[4]) {
  char *end = NULL;
  int n = 0;
  for (const char *p = s; n < 4; p = end + 1) {
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0 || (*end && *end != ',' && *end != 'x')) break;
    shape[n++] = v;
    if (!*end) break;
  }
  if (n != 4 || *end) {
    cli_error(c->cmd, "--shape wants four sizes >= 0, batch,seqlen,nheads,headdim (e.g. 2,2048,24,64); got '%s'", s);
    return -1;
  }
  /* Refuse element counts that cannot be allocated; zgate itself takes any size. */
  double numel = (double)shape[0] * (double)shape[1] * (double)shape[2] * (double)shape[3];
  if (numel > 9.0e15) {
    cli_error(c->cmd, "--shape %s has %.3g elements, too many to allocate", s, numel);
    return -1;
  }
  return 0;
}

/* A dtype by its short or long name (f32, float32, ...); 0 when none. */
static int dtype_named(const char *s, DLDataType *t) {
  static const DLDataType types[3] = {ZGC_F32, ZGC_F16, ZGC_BF16};
  static const char *const names[6] = {"f32", "f16", "bf16", "float32", "float16", "bfloat16"};
  for (int i = 0; i < 6; i++)
    if (!strcmp(names[i], s)) return *t = types[i % 3], 1;
  return 0;
}

/* The slot of the operand named `name` in any operator's signature (zg_ops), or -1. */
static int slot_named(const char *name) {
  for (int op = 0; op < ZG_NOPS; op++)
    for (int i = 0; i < cli_nargs((zg_op)op); i++)
      if (!strcmp(zg_ops[op].tensors[i], name)) return cli_slot((zg_op)op, i);
  return -1;
}

/* A comma-separated list: a bare type sets every tensor, "name=type" one of them by its name in
 * a signature (the forward's out is dz's slot), later items win: "bf16", "f32,dz=bf16",
 * "dout=bf16,z=f32,o=f16,dz=f32,dout_scaled=bf16". */
static int parse_dtypes(const cli_cfg *c, const char *s, cli_dtypes *out) {
  char list[256];
  int n = 0;
  for (int i = 0; i < CLI_NSLOTS; i++) out->t[i] = CLI_F32;
  if (snprintf(list, sizeof list, "%s", s) >= (int)sizeof list) list[0] = '\0';
  for (char *item = strtok(list, ","); item; item = strtok(NULL, ","), n++) {
    char *eq = strchr(item, '='), *type = eq ? eq + 1 : item;
    DLDataType t;
    int which = -1;
    if (eq) {
      *eq = '\0';
      if ((which = slot_named(item)) < 0) {
        cli_error(c->cmd, "--dtype: unknown tensor '%s' (tensors: dout, z, o, dz, dout_scaled; the forward's out)",
                  item);
        return -1;
      }
    }
    if (!dtype_named(type, &t)) {
      cli_error(c->cmd, "--dtype: unknown type '%s' (types: f32, f16, bf16)", type);
      return -1;
    }
    for (int i = 0; i < CLI_NSLOTS; i++)
      if (which < 0 || which == i) out->t[i] = t;
  }
  if (n == 0) {
    cli_error(c->cmd, "--dtype wants a type (f32, f16, bf16) or tensor=type pairs such as "
                      "dout=bf16,z=f32,o=bf16,dz=f32,dout_scaled=bf16; got '%s'", s);
    return -1;
  }
  return 0;
}

int cli_nargs(zg_op op) { return zg_ops[op].n_in + zg_ops[op].n_out; }

int cli_uses(zg_op op, int slot) {
  for (int i = 0; i < cli_nargs(op); i++)
    if (cli_slot(op, i) == slot) return 1;
  return 0;
}

void cli_dtypes_str(const cli_dtypes *d, zg_op op, char *buf, size_t n) {
  DLDataType t[CLI_NSLOTS];
  int same = 1;
  for (int i = 0; i < cli_nargs(op); i++) {
    t[i] = d->t[cli_slot(op, i)];
    same &= t[i].code == t[0].code && t[i].bits == t[0].bits;
  }
  size_t len = (size_t)snprintf(buf, n, "%s", same ? zgate_check_dtype_name(t[0]) : "");
  for (int i = 0; i < cli_nargs(op) && !same && len < n; i++)
    len += (size_t)snprintf(buf + len, n - len, "%s%s=%s", i ? " " : "", zg_ops[op].tensors[i], zgate_check_dtype_name(t[i]));
}

static int parse_layouts(const cli_cfg *c, const char *s, unsigned *mask) {
  char list[256];
  *mask = 0;
  if (snprintf(list, sizeof list, "%s", s) >= (int)sizeof list) list[0] = '\0';
  for (char *item = strtok(list, ","); item; item = strtok(NULL, ",")) {
    int which = -1;
    for (int i = 0; i < CLI_NLAYOUTS; i++)
      if (!strcmp(cli_layout_names[i], item)) which = i;
    if (which < 0 && strcmp(item, "all")) {
      cli_error(c->cmd, "--layout: unknown layout '%s' (layouts: dense, zview, permuted, inplace, all)", item);
      return -1;
    }
    *mask |= which < 0 ? (1u << CLI_NLAYOUTS) - 1u : 1u << which;
  }
  if (!*mask) {
    cli_error(c->cmd, "--layout wants one or more of dense, zview, permuted, inplace (comma-separated)");
    return -1;
  }
  return 0;
}

static int parse_opt(cli_cfg *c, int which, const char *v) {
  switch (which) {
  case 's':
    if (c->nshapes >= CLI_MAX_SHAPES) return cli_error(c->cmd, "at most %d --shape options", CLI_MAX_SHAPES), -1;
    return parse_shape(c, v, c->shapes[c->nshapes++]);
  case 'd':
    if (c->ndtypes >= CLI_MAX_DTYPES) return cli_error(c->cmd, "at most %d --dtype options", CLI_MAX_DTYPES), -1;
    return parse_dtypes(c, v, &c->dtypes[c->ndtypes++]);
  case 'l': return parse_layouts(c, v, &c->layouts);
  case 'i': /* the CPU paths only, the same names as --backend */
    if (strstr(v, "cuda"))
      return cli_error(c->cmd, "--isa takes CPU paths (scalar, avx2, avx512, neon); use --backend for CUDA"), -1;
    c->backend_spec = v, c->backend_opt = "--isa";
    return 0;
  case 'b': c->backend_spec = v, c->backend_opt = "--backend"; return 0;
  case 'o':
    c->ops = !strcmp(v, "both") ? (1u << ZG_NOPS) - 1u : 0;
    for (int op = 0; op < ZG_NOPS; op++)
      if (!strcmp(v, zg_ops[op].name)) c->ops = 1u << op;
    if (!c->ops) cli_error(c->cmd, "--op wants bwd, fwd or both; got '%s'", v);
    return c->ops ? 0 : -1;
  case 't': return parse_int(c, "--threads", v, 0, 4096, &c->threads);
  case 'm': return parse_size(c, v, &c->max_memory);
  case 'r': c->report = v; return 0;
  case 'S': c->special = 0; return 0;
  case 'n': return parse_int(c, "--repeats", v, 1, 100000, &c->repeats);
  case 'w': return parse_int(c, "--warmup", v, 0, 100000, &c->warmup);
  case 'q': return parse_int(c, "--settle", v, 0, 3600, &c->settle);
  case 'j': c->json = v; return 0;
  case 'p': c->png = v; return 0;
  case 'P': c->plot = 0; return 0;
  case 'A': c->placement = CLI_PLACE_LINE; return 0;
  }
  return -1;
}

int cli_parse(cli_cfg *c, int argc, char **argv, const struct option *opts) {
  int which, at = optind = 1;
  opterr = 0; /* the messages below say it in the command's words */
  /* '+': options only, no reordering; ':': a missing value is told apart from an unknown option. */
  while ((which = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
    const char *arg = argv[optind - 1];
    const int named = optind > at && !strncmp(arg, "--", 2); /* else a letter of -xyz was read */
    at = optind;
    if (which == 'h') return -1;
    if (which == ':') return cli_error(c->cmd, "option '%s' needs a value", arg), CLI_EXIT_USAGE;
    if (which == '?' && named && optopt) /* a known --name given a value */
      return cli_error(c->cmd, "option '%s' takes no value", arg), CLI_EXIT_USAGE;
    if (which == '?' && !named)
      return cli_error(c->cmd, "unknown option '-%c' (see 'zgate %s --help')", optopt, c->cmd), CLI_EXIT_USAGE;
    if (which == '?')
      return cli_error(c->cmd, "unknown option '%s' (see 'zgate %s --help')", arg, c->cmd), CLI_EXIT_USAGE;
    if (parse_opt(c, which, optarg)) return CLI_EXIT_USAGE;
  }
  if (optind < argc) {
    cli_error(c->cmd, "unexpected argument '%s' (options start with --; see 'zgate %s --help')", argv[optind], c->cmd);
    return CLI_EXIT_USAGE;
  }
  return 0;
}
