/* The float64 reference: gate_math.h's formula in double on the widened inputs, one
 * element at a time over the collapsed dims (zg_problem), any strides, single-threaded. It is the oracle of the tests and of
 * `zgate check`, so it is deliberately plain. Outputs are rounded once from double into
 * their dtype (float16/bfloat16 via round-to-odd, so there is no double rounding). */
#include "gate_math.h"
#include "zgate_internal.h"

/* Element i (the odometer over the collapsed dims) of operand t. */
static char *zg_ref_at(const zg_problem *p, int t, const int64_t *i) {
  int64_t off = 0;
  for (int d = 0; d < p->ndim; d++) off += i[d] * p->t[t].strides[d];
  return p->t[t].data + off * zg_dtype_size(p->t[t].dtype);
}

static double zg_ref_load(const zg_problem *p, int t, const int64_t *i) {
  const char *at = zg_ref_at(p, t, i);
  switch (p->t[t].dtype) {
    case ZG_F32: { float v; memcpy(&v, at, 4); return v; }
    case ZG_F16: { uint16_t v; memcpy(&v, at, 2); return zg_f16_to_f32(v); }
    case ZG_BF16: { uint16_t v; memcpy(&v, at, 2); return zg_bf16_to_f32(v); }
    default: { double v; memcpy(&v, at, 8); return v; }
  }
}

static void zg_ref_store(const zg_problem *p, int t, const int64_t *i, double v) {
  char *at = zg_ref_at(p, t, i);
  switch (p->t[t].dtype) {
    case ZG_F32: { float f = (float)v; memcpy(at, &f, 4); break; }
    case ZG_F16: { uint16_t h = zg_f64_to_f16(v); memcpy(at, &h, 2); break; }
    case ZG_BF16: { uint16_t h = zg_f64_to_bf16(v); memcpy(at, &h, 2); break; }
    default: memcpy(at, &v, 8); break;
  }
}

int zg_reference_run(const zg_problem *p) {
  int64_t i[ZGATE_MAX_NDIM] = {0};
  for (int64_t n = 0; n < p->numel; n++) {
    double x[3], y[2];
    /* all inputs are read before any output is written: in place is safe */
    for (int t = 0; t < p->n_in; t++) x[t] = zg_ref_load(p, t, i);
    if (p->op == ZG_OP_BWD)
      zg_gate_bwd_f64(x[ZG_BWD_DOUT], x[ZG_BWD_Z], x[ZG_BWD_O], &y[0], &y[1]);
    else
      y[0] = zg_gate_fwd_f64(x[ZG_FWD_O], x[ZG_FWD_Z]);
    for (int t = 0; t < p->n_out; t++) zg_ref_store(p, p->n_in + t, i, y[t]);
    for (int d = p->ndim - 1; d >= 0 && ++i[d] == p->shape[d]; d--) i[d] = 0; /* odometer */
  }
  return ZGATE_OK;
}
