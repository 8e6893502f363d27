/* Argument parsing for the zgate command: options, shapes, dtypes, layouts. Every error is
 * said in the user's terms (which option, what was expected, what was given). */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char *const cli_tensor_names[CLI_NT] = {"dout", "z", "o", "dz", "dos"};
const char *const cli_layout_names[CLI_NLAYOUTS] = {"dense", "zview", "permuted", "inplace"};
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

int cli_parse(const char *cmd, int argc, char **argv, const cli_opt *opts, int nopts,
              cli_opt_fn fn, void *ctx) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) return -1;
    if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
      cli_error(cmd, "unexpected argument '%s' (options start with --; see 'zgate %s --help')", a, cmd);
      return CLI_EXIT_USAGE;
    }
    const char *name = a + 2;
    const char *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    int which = -1;
    for (int k = 0; k < nopts; k++)
      if (strlen(opts[k].name) == len && !strncmp(opts[k].name, name, len)) which = k;
    if (which < 0) {
      cli_error(cmd, "unknown option '--%.*s' (see 'zgate %s --help')", (int)len, name, cmd);
      return CLI_EXIT_USAGE;
    }
    const char *value = NULL;
    if (opts[which].has_value) {
      if (eq) {
        value = eq + 1;
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        cli_error(cmd, "option '--%s' needs a value", opts[which].name);
        return CLI_EXIT_USAGE;
      }
    } else if (eq) {
      cli_error(cmd, "option '--%s' takes no value", opts[which].name);
      return CLI_EXIT_USAGE;
    }
    if (fn(ctx, which, value) != 0) return CLI_EXIT_USAGE;
  }
  return 0;
}

int cli_parse_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi,
                  long long *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  while (end && isspace((unsigned char)*end)) end++;
  if (!*s || errno || !end || *end || v < lo || v > hi) {
    cli_error(cmd, "%s wants a whole number from %lld to %lld; got '%s'", opt, lo, hi, s);
    return -1;
  }
  *out = v;
  return 0;
}

int cli_parse_shape(const char *cmd, const char *s, int64_t shape[4]) {
  const char *p = s;
  int n = 0;
  while (*p) {
    while (*p == ' ' || *p == '(' || *p == '[') p++;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0 || n >= 4) goto bad;
    shape[n++] = v;
    p = end;
    while (*p == ' ' || *p == ')' || *p == ']') p++;
    if (*p == ',' || *p == 'x') p++;
    else if (*p) goto bad;
  }
  if (n != 4) goto bad;
  /* Refuse element counts that cannot be allocated; zgate itself takes any size. */
  double numel = (double)shape[0] * (double)shape[1] * (double)shape[2] * (double)shape[3];
  if (numel > 9.0e15) {
    cli_error(cmd, "--shape %s has %.3g elements, too many to allocate", s, numel);
    return -1;
  }
  return 0;
bad:
  cli_error(cmd, "--shape wants four sizes >= 0, batch,seqlen,nheads,headdim (e.g. 2,2048,24,64); got '%s'", s);
  return -1;
}

DLDataType cli_dtype(int code) {
  DLDataType t = {kDLFloat, 32, 1};
  if (code == 1) t.bits = 16;
  if (code == 2) t.code = kDLBfloat, t.bits = 16;
  if (code == 3) t.bits = 64;
  return t;
}

const char *cli_dtype_name(DLDataType t) {
  if (t.code == kDLFloat && t.bits == 32) return "f32";
  if (t.code == kDLFloat && t.bits == 16) return "f16";
  if (t.code == kDLBfloat && t.bits == 16) return "bf16";
  if (t.code == kDLFloat && t.bits == 64) return "f64";
  return "?";
}

int cli_dtype_size(DLDataType t) { return t.bits / 8; }

static int dtype_from_name(const char *s, size_t n, DLDataType *t) {
  static const struct { const char *name; int code; } names[] = {
      {"f32", 0}, {"float32", 0}, {"fp32", 0}, {"float", 0}, {"f16", 1}, {"float16", 1},
      {"fp16", 1}, {"half", 1}, {"bf16", 2}, {"bfloat16", 2}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strlen(names[i].name) == n && !strncmp(names[i].name, s, n)) {
      *t = cli_dtype(names[i].code);
      return 0;
    }
  return -1;
}

int cli_parse_dtypes(const char *cmd, const char *s, cli_dtypes *out) {
  cli_dtypes d;
  for (int i = 0; i < CLI_NT; i++) d.t[i] = cli_dtype(0);
  const char *p = s;
  if (!*p) goto bad;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    const char *eq = memchr(p, '=', n);
    DLDataType t;
    if (!eq) {
      if (dtype_from_name(p, n, &t)) goto bad_type;
      for (int i = 0; i < CLI_NT; i++) d.t[i] = t;
    } else {
      size_t kn = (size_t)(eq - p);
      int which = -1;
      for (int i = 0; i < CLI_NT; i++)
        if (strlen(cli_tensor_names[i]) == kn && !strncmp(cli_tensor_names[i], p, kn)) which = i;
      if (kn == 11 && !strncmp(p, "dout_scaled", 11)) which = CLI_DOS;
      if (kn == 3 && !strncmp(p, "out", 3)) which = CLI_DZ; /* the forward's output */
      if (which < 0) {
        cli_error(cmd, "--dtype: unknown tensor '%.*s' (tensors: dout, z, o, dz, dos; 'out' is the forward's output)",
                  (int)kn, p);
        return -1;
      }
      if (dtype_from_name(eq + 1, n - kn - 1, &t)) {
        p = eq + 1;
        goto bad_type;
      }
      d.t[which] = t;
    }
    p = end ? end + 1 : p + n;
    if (end && !*p) goto bad;
  }
  *out = d;
  return 0;
bad_type: {
  const char *e = strchr(p, ',');
  cli_error(cmd, "--dtype: unknown type '%.*s' (types: f32, f16, bf16)", (int)(e ? e - p : (long)strlen(p)), p);
  return -1;
}
bad:
  cli_error(cmd, "--dtype wants a type (f32, f16, bf16) or tensor=type pairs such as "
                 "dout=bf16,z=f32,o=bf16,dz=f32,dos=bf16; got '%s'", s);
  return -1;
}

void cli_dtypes_str(const cli_dtypes *d, char *buf, size_t n) {
  int same = 1;
  for (int i = 1; i < CLI_NT; i++)
    if (d->t[i].code != d->t[0].code || d->t[i].bits != d->t[0].bits) same = 0;
  if (same) {
    snprintf(buf, n, "%s", cli_dtype_name(d->t[0]));
    return;
  }
  snprintf(buf, n, "dout=%s z=%s o=%s dz=%s dos=%s", cli_dtype_name(d->t[0]), cli_dtype_name(d->t[1]),
           cli_dtype_name(d->t[2]), cli_dtype_name(d->t[3]), cli_dtype_name(d->t[4]));
}

void cli_op_dtypes_str(const cli_dtypes *d, int fwd, char *buf, size_t n) {
  const char *o = cli_dtype_name(d->t[CLI_O]), *z = cli_dtype_name(d->t[CLI_Z]), *out = cli_dtype_name(d->t[CLI_DZ]);
  if (!fwd) cli_dtypes_str(d, buf, n);
  else if (!strcmp(o, z) && !strcmp(o, out)) snprintf(buf, n, "%s", o);
  else snprintf(buf, n, "o=%s z=%s out=%s", o, z, out);
}

int cli_parse_op(const char *cmd, const char *s, int *ops) {
  if (!strcmp(s, "bwd")) *ops = 1;
  else if (!strcmp(s, "fwd")) *ops = 2;
  else if (!strcmp(s, "both")) *ops = 3;
  else return cli_error(cmd, "--op wants bwd, fwd or both; got '%s'", s), -1;
  return 0;
}

int cli_parse_layouts(const char *cmd, const char *s, unsigned *mask) {
  unsigned m = 0;
  const char *p = s;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    int which = -1;
    for (int i = 0; i < CLI_NLAYOUTS; i++)
      if (strlen(cli_layout_names[i]) == n && !strncmp(cli_layout_names[i], p, n)) which = i;
    if (n == 3 && !strncmp(p, "all", 3)) m |= (1u << CLI_NLAYOUTS) - 1u, which = -2;
    if (which == -1) {
      cli_error(cmd, "--layout: unknown layout '%.*s' (layouts: dense, zview, permuted, inplace, all)", (int)n, p);
      return -1;
    }
    if (which >= 0) m |= 1u << which;
    p = end ? end + 1 : p + n;
  }
  if (!m) {
    cli_error(cmd, "--layout wants one or more of dense, zview, permuted, inplace (comma-separated)");
    return -1;
  }
  *mask = m;
  return 0;
}

void cli_shape_str(const int64_t shape[4], char *buf, size_t n) {
  snprintf(buf, n, "(%lld, %lld, %lld, %lld)", (long long)shape[0], (long long)shape[1],
           (long long)shape[2], (long long)shape[3]);
}
