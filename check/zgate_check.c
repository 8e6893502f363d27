/* The accuracy oracle: the numerics policy of zgate_check.h, element by element. */
#include "zgate_check.h"
#include "zgate_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- storage types ------------------------------------------------------------------- */

/* The library's storage types (zg_dtype), and one it does not know. */
typedef int ztype;
enum { T_BAD = -1 };

static ztype type_of(DLDataType t) {
  if (t.lanes != 1) return T_BAD;
  if (t.code == kDLFloat && t.bits == 32) return ZG_F32;
  if (t.code == kDLFloat && t.bits == 16) return ZG_F16;
  if (t.code == kDLFloat && t.bits == 64) return ZG_F64;
  if (t.code == kDLBfloat && t.bits == 16) return ZG_BF16;
  return T_BAD;
}

/* Precision p (significand bits with the implicit one), smallest normal exponent, largest
 * exponent. float64 outputs are judged as float32 (the math is float32 anyway). */
typedef struct { int p, emin, emax; } fmt;

static fmt fmt_of(ztype t) {
  switch (t) {
  case ZG_F16: return (fmt){11, -14, 15};
  case ZG_BF16: return (fmt){8, -126, 127};
  case ZG_F64: return (fmt){53, -1022, 1023};
  default: return (fmt){24, -126, 127};
  }
}

/* floor(log2|x|), at least f.emin (below it the spacing is the subnormal one); x finite. */
static int exponent(double x, fmt f) {
  int e;
  frexp(x, &e);
  return x == 0 || e - 1 < f.emin ? f.emin : e - 1;
}

/* Round to nearest even into a format, from double, in one rounding: scale the value so its
 * last kept bit is the units place (exact: powers of two), round to integer, scale back. */
static double round_fmt(double v, fmt f) {
  if (v == 0 || !isfinite(v)) return v;
  int ex = exponent(v, f);
  double q = nearbyint(ldexp(v, f.p - 1 - ex));
  double r = ldexp(q, ex - (f.p - 1));
  if (fabs(r) >= ldexp(1.0, f.emax + 1)) return copysign(INFINITY, v);
  return r;
}

static double ulp_fmt(double x, fmt f) {
  if (!isfinite(x)) return fabs(x);
  return ldexp(1.0, exponent(x, f) - (f.p - 1));
}

static double f16_to_double(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023; /* e = 0: subnormal, scaled as e = 1 without the implicit one */
  double v = e == 31 ? (m ? NAN : INFINITY) : ldexp((double)(e ? m | 1024 : m), (e ? e : 1) - 25);
  return h >> 15 ? -v : v;
}

/* v is already representable in float16 (or +-inf / NaN). Its bits: |v| * 2^(10 - ex) plus
 * (ex + 14) << 10, ex = floor(log2|v|) but at least -14; a normal's implicit one (1024)
 * completes the biased exponent, a subnormal (ex = -14) has none. */
static uint16_t f16_bits(double v) {
  uint16_t sign = signbit(v) ? 0x8000 : 0;
  double a = fabs(v);
  if (isnan(v)) return 0x7E00;
  if (isinf(a)) return sign | 0x7C00;
  int ex = exponent(a, fmt_of(ZG_F16));
  return sign | (uint16_t)(ldexp(a, 10 - ex) + (ex + 14) * 1024);
}

int zgate_check_dtype_known(DLDataType t) { return type_of(t) != T_BAD; }

const char *zgate_check_dtype_name(DLDataType t) {
  static const char *names[] = {[ZG_F32] = "f32", [ZG_F16] = "f16", [ZG_BF16] = "bf16", [ZG_F64] = "f64"};
  const ztype k = type_of(t);
  return k == T_BAD ? "?" : names[k];
}

int zgate_check_dtype_size(DLDataType t) {
  const ztype k = type_of(t);
  return k == T_BAD ? -1 : (int)zg_dtype_size((zg_dtype)k);
}

double zgate_check_load(DLDataType t, const void *p) {
  switch (type_of(t)) {
  case ZG_F32: { float f; memcpy(&f, p, 4); return f; }
  case ZG_F64: { double d; memcpy(&d, p, 8); return d; }
  case ZG_F16: { uint16_t h; memcpy(&h, p, 2); return f16_to_double(h); }
  case ZG_BF16: { uint16_t h; memcpy(&h, p, 2); uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
  default: return NAN;
  }
}

double zgate_check_round(DLDataType t, double v) {
  ztype k = type_of(t);
  return k == T_BAD ? NAN : k == ZG_F64 ? v : round_fmt(v, fmt_of(k));
}

void zgate_check_store(DLDataType t, void *p, double v) {
  ztype k = type_of(t);
  double r = zgate_check_round(t, v);
  switch (k) {
  case ZG_F32: { float f = (float)r; memcpy(p, &f, 4); break; } /* exact: r is a float */
  case ZG_F64: memcpy(p, &v, 8); break;
  case ZG_F16: { uint16_t h = f16_bits(r); memcpy(p, &h, 2); break; }
  case ZG_BF16: {
    /* A bfloat16 value is a float whose low 16 bits are zero. */
    float f = (float)r;
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t h = isnan(r) ? (uint16_t)(signbit(r) ? 0xFFC0 : 0x7FC0) : (uint16_t)(u >> 16);
    memcpy(p, &h, 2);
    break;
  }
  default: break;
  }
}

double zgate_check_ulp(DLDataType t, double x) {
  ztype k = type_of(t);
  return k == T_BAD ? NAN : ulp_fmt(x, fmt_of(k));
}

/* ---- the policy ---------------------------------------------------------------------- */

/* a*z*s as (a*z)*s, and (a*s)*z where a*z is not finite (float64 inputs near its range):
 * the library's float64 reference groups them the same way. */
static double scaled(double a, double z, double s) {
  double p = a * z;
  return isfinite(p) ? p * s : (a * s) * z;
}

double zgate_check_formula(zgate_check_quantity q, double dout, double z, double o) {
  double s = 1.0 / (1.0 + exp(-z));
  switch (q) {
  case ZGATE_CHECK_DZ: return dout * o * s * (1.0 + z * (1.0 - s));
  case ZGATE_CHECK_DOS: return scaled(dout, z, s);
  default: return scaled(o, z, s);
  }
}

/* The policy's elementwise SCALE; *mag gets |dout*o|, |dout*z| or |o*z|, the factor of the
 * absolute allowance. 1 - s is taken as sigmoid(-z): no cancellation, and it stays 1 (not
 * NaN) at z = -inf. */
static double policy_scale(zgate_check_quantity q, double dout, double z, double o, double *mag) {
  double s = 1.0 / (1.0 + exp(-z));
  double m = fabs(q == ZGATE_CHECK_DZ ? dout * o : q == ZGATE_CHECK_DOS ? dout * z : o * z);
  *mag = m;
  return q == ZGATE_CHECK_DZ ? m * s * (1.0 + fabs(z) * (1.0 / (1.0 + exp(z)))) : m * s;
}

/* The float32 bound of the policy. */
static double f32_bound(zgate_check_quantity q, double dout, double z, double o, double *unit) {
  const double tiny = ldexp(1.0, -149);
  double m, scale = policy_scale(q, dout, z, o, &m);
  double a = 4.0 * tiny * m * (q == ZGATE_CHECK_DZ ? 1.0 + fabs(z) : 1.0);
  *unit = ulp_fmt(scale, fmt_of(ZG_F32));
  return 4.0 * *unit + a;
}

zgate_check_verdict zgate_check_element(zgate_check_quantity q, DLDataType out_dtype, double got,
                                        double ref, double dout, double z, double o,
                                        double *err_units, double *bound_ratio) {
  ztype k = type_of(out_dtype);
  fmt f = fmt_of(k == T_BAD ? ZG_F32 : k);
  double overflow = ldexp(1.0, f.emax + 1);
  if (err_units) *err_units = 0;
  if (bound_ratio) *bound_ratio = 0;

  if (isnan(ref) || isnan(got)) return isnan(ref) && isnan(got) ? ZGATE_CHECK_PASS : ZGATE_CHECK_FAIL_NAN;
  if (isinf(ref) || fabs(ref) >= overflow)
    return isinf(got) && signbit(got) == signbit(ref) ? ZGATE_CHECK_PASS : ZGATE_CHECK_FAIL_INF;
  int got_inf = isinf(got) != 0;
  if (got_inf) got = copysign(overflow, got); /* where IEEE rounding puts overflow */

  double err = fabs(got - ref), unit;
  if (err == 0) return ZGATE_CHECK_PASS; /* also where the bound's products overflow float64 */
  double bound32 = f32_bound(q, dout, z, o, &unit), allowed = bound32;
  if (k == ZG_F16 || k == ZG_BF16) {
    unit = ulp_fmt(ref, f);
    allowed = fmax(bound32 + 0.5 * unit, unit);
  }
  if (err_units) *err_units = err / unit;
  if (bound_ratio) *bound_ratio = allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0);
  if (err <= allowed) return ZGATE_CHECK_PASS;
  return got_inf ? ZGATE_CHECK_FAIL_INF : ZGATE_CHECK_FAIL_VALUE;
}

/* ---- tensors ------------------------------------------------------------------------- */

void zgate_check_stats_init(zgate_check_stats *st) {
  *st = (zgate_check_stats){.first_fail = -1, .worst_index = -1};
}

void zgate_check_stats_merge(zgate_check_stats *into, const zgate_check_stats *from) {
  if (into->first_fail < 0 && from->first_fail >= 0) {
    into->first_fail = from->first_fail;
    into->first_got = from->first_got;
    into->first_ref = from->first_ref;
  }
  if (from->worst_index >= 0 && (from->max_bound_ratio > into->max_bound_ratio || into->worst_index < 0)) {
    into->max_bound_ratio = from->max_bound_ratio;
    into->worst_index = from->worst_index;
  }
  into->count += from->count;
  into->failures += from->failures;
  into->nan_mismatches += from->nan_mismatches;
  into->inf_mismatches += from->inf_mismatches;
  if (from->max_err_units > into->max_err_units) into->max_err_units = from->max_err_units;
  if (from->max_rel_err > into->max_rel_err) into->max_rel_err = from->max_rel_err;
  if (from->max_scale_err > into->max_scale_err) into->max_scale_err = from->max_scale_err;
  into->past_request += from->past_request;
}

/* A rank and shape pointer zgate_check.h accepts. */
static int rank_ok(const DLTensor *t) {
  return t && t->ndim >= 0 && t->ndim <= ZGATE_CHECK_MAX_NDIM && (t->ndim == 0 || t->shape);
}

/* A readable view of one tensor: element idx is at base + sum(idx*stride)*size. */
typedef struct {
  const char *base;
  DLDataType dtype;
  int64_t size;
  int64_t strides[ZGATE_CHECK_MAX_NDIM];
} view;

/* t as a view with shape (ndim, shape), or -1 when it is unusable as zgate_check.h says. */
static int make_view(const DLTensor *t, int ndim, const int64_t *shape, view *v) {
  if (!t || t->ndim != ndim || (ndim > 0 && !t->shape)) return -1;
  if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost) return -1;
  if (type_of(t->dtype) == T_BAD) return -1;
  int64_t run = 1; /* the compact stride, and at the end the element count */
  for (int i = ndim - 1; i >= 0; i--) {
    if (t->shape[i] != shape[i] || shape[i] < 0) return -1;
    v->strides[i] = t->strides ? t->strides[i] : run;
    if (v->strides[i] < 0) return -1;
    run *= shape[i];
  }
  if (run > 0 && !t->data) return -1;
  v->base = (const char *)t->data + t->byte_offset;
  v->dtype = t->dtype;
  v->size = zgate_check_dtype_size(t->dtype);
  return 0;
}

static double view_load(const view *v, int ndim, const int64_t *idx) {
  int64_t off = 0;
  for (int i = 0; i < ndim; i++) off += idx[i] * v->strides[i];
  return zgate_check_load(v->dtype, v->base + off * v->size);
}

int zgate_check_tensor(zgate_check_quantity q, const DLTensor *got, const DLTensor *ref,
                       const DLTensor *dout, const DLTensor *z, const DLTensor *o,
                       zgate_check_stats *st) {
  if (!rank_ok(got) || !st) return -1;
  const int nd = got->ndim;
  const int64_t *shape = got->shape;
  view vg, vr, vd = {0}, vz, vo;
  if (make_view(got, nd, shape, &vg) || make_view(ref, nd, shape, &vr) || make_view(z, nd, shape, &vz) ||
      make_view(o, nd, shape, &vo))
    return -1;
  if (q != ZGATE_CHECK_OUT && make_view(dout, nd, shape, &vd)) return -1;

  zgate_check_stats s;
  zgate_check_stats_init(&s);
  const double smallest_normal = ldexp(1.0, fmt_of(type_of(got->dtype)).emin);
  int64_t numel = 1, idx[ZGATE_CHECK_MAX_NDIM] = {0};
  for (int i = 0; i < nd; i++) numel *= shape[i];
  for (int64_t linear = 0; linear < numel; linear++) {
    double g = view_load(&vg, nd, idx), r = view_load(&vr, nd, idx);
    double dv = q == ZGATE_CHECK_OUT ? 1.0 : view_load(&vd, nd, idx);
    double zv = view_load(&vz, nd, idx), ov = view_load(&vo, nd, idx);
    double eu, ratio;
    zgate_check_verdict verdict = zgate_check_element(q, got->dtype, g, r, dv, zv, ov, &eu, &ratio);
    for (int i = nd - 1; i >= 0 && ++idx[i] == shape[i]; i--) idx[i] = 0; /* row-major order */
    s.count++;
    if (isfinite(g) && isfinite(r)) {
      s.max_err_units = fmax(s.max_err_units, eu);
      if (ratio > s.max_bound_ratio || s.worst_index < 0) {
        s.max_bound_ratio = ratio;
        s.worst_index = linear;
      }
      if (r != 0) s.max_rel_err = fmax(s.max_rel_err, fabs(g - r) / fabs(r));
      double m, scale = g != r ? policy_scale(q, dv, zv, ov, &m) : NAN;
      if (isfinite(scale)) { /* the request's measure (an error of 0 adds nothing) */
        double e = fabs(g - r) / fmax(scale, smallest_normal);
        s.max_scale_err = fmax(s.max_scale_err, e);
        s.past_request += e > ZGATE_CHECK_REQUEST_REL;
      }
    }
    if (verdict == ZGATE_CHECK_PASS) continue;
    s.failures++;
    if (verdict == ZGATE_CHECK_FAIL_NAN) s.nan_mismatches++;
    if (verdict == ZGATE_CHECK_FAIL_INF) s.inf_mismatches++;
    if (s.first_fail < 0) {
      s.first_fail = linear;
      s.first_got = g;
      s.first_ref = r;
    }
  }
  zgate_check_stats_merge(st, &s);
  return 0;
}

/* A compact float64 tensor shaped like `like` over fresh memory (NULL data when empty). */
static int make_f64(const DLTensor *like, DLTensor *t, double **mem) {
  if (!rank_ok(like)) return -1;
  int64_t n = 1;
  for (int i = 0; i < like->ndim; i++) {
    if (like->shape[i] < 0) return -1;
    if (like->shape[i] && n > INT64_MAX / 8 / like->shape[i]) return -1;
    n *= like->shape[i];
  }
  *mem = NULL;
  if (n > 0 && !(*mem = malloc((size_t)n * sizeof(double)))) return -1;
  /* host memory either way; the reference wants one device */
  DLDevice dev = {like->device.device_type == kDLCUDAHost ? kDLCUDAHost : kDLCPU, like->device.device_id};
  *t = (DLTensor){.data = *mem, .device = dev, .ndim = like->ndim, .dtype = {kDLFloat, 64, 1}, .shape = like->shape};
  return 0;
}

int zgate_check_bwd(const DLTensor *dout, const DLTensor *z, const DLTensor *o, const DLTensor *dz,
                    const DLTensor *dout_scaled, zgate_check_stats *st_dz, zgate_check_stats *st_dos) {
  DLTensor rdz, rdos;
  double *mdz = NULL, *mdos = NULL;
  int rc = make_f64(dz, &rdz, &mdz) || make_f64(dz, &rdos, &mdos) ? -1 : zgate_bwd_reference(dout, z, o, &rdz, &rdos);
  if (rc == ZGATE_OK && (zgate_check_tensor(ZGATE_CHECK_DZ, dz, &rdz, dout, z, o, st_dz) ||
                         zgate_check_tensor(ZGATE_CHECK_DOS, dout_scaled, &rdos, dout, z, o, st_dos)))
    rc = -1;
  free(mdz);
  free(mdos);
  return rc;
}

int zgate_check_fwd(const DLTensor *o, const DLTensor *z, const DLTensor *out, zgate_check_stats *st) {
  DLTensor rout;
  double *mout = NULL;
  int rc = make_f64(out, &rout, &mout) ? -1 : zgate_fwd_reference(o, z, &rout);
  if (rc == ZGATE_OK && zgate_check_tensor(ZGATE_CHECK_OUT, out, &rout, NULL, z, o, st)) rc = -1;
  free(mout);
  return rc;
}

void zgate_check_stats_format(const zgate_check_stats *st, char *buf, int bufsize) {
  if (!buf || bufsize <= 0) return;
  int n = snprintf(buf, (size_t)bufsize, "n=%lld fail=%lld (nan %lld, inf %lld) max=%.3g ulp ratio=%.3g rel=%.3g",
                   (long long)st->count, (long long)st->failures, (long long)st->nan_mismatches,
                   (long long)st->inf_mismatches, st->max_err_units, st->max_bound_ratio, st->max_rel_err);
  if (st->first_fail >= 0 && n > 0 && n < bufsize)
    snprintf(buf + n, (size_t)(bufsize - n), " first fail at %lld: got %.9g ref %.17g",
             (long long)st->first_fail, st->first_got, st->first_ref);
}
