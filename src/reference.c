/* The float64 reference: gate_math.h's formula in double on the widened inputs, one
 * element at a time over the collapsed dims (zg_problem), any strides, single-threaded. It is the oracle of the tests and of
 * `zgate check`, so it is deliberately plain. Outputs are rounded once from double into
 * their dtype (float16/bfloat16 via round-to-odd, so there is no double rounding). */
#include "gate_math.h"
#include "zgate_internal.h"

static double zg_ref_load(const zg_operand *t, int64_t off) {
  const char *p = t->data + off * zg_dtype_size(t->dtype);
  switch (t->dtype) {
    case ZG_F32: { float v; memcpy(&v, p, 4); return v; }
    case ZG_F16: { uint16_t v; memcpy(&v, p, 2); return zg_f16_to_f32(v); }
    case ZG_BF16: { uint16_t v; memcpy(&v, p, 2); return zg_bf16_to_f32(v); }
    default: { double v; memcpy(&v, p, 8); return v; }
  }
}

static void zg_ref_store(const zg_operand *t, int64_t off, double v) {
  char *p = t->data + off * zg_dtype_size(t->dtype);
  switch (t->dtype) {
    case ZG_F32: { float f = (float)v; memcpy(p, &f, 4); break; }
    case ZG_F16: { uint16_t h = zg_f64_to_f16(v); memcpy(p, &h, 2); break; }
    case ZG_BF16: { uint16_t h = zg_f64_to_bf16(v); memcpy(p, &h, 2); break; }
    default: memcpy(p, &v, 8); break;
  }
}

static int64_t zg_ref_off(const zg_problem *p, const zg_operand *t, const int64_t *i) {
  int64_t off = 0;
  for (int d = 0; d < p->ndim; d++) off += i[d] * t->strides[d];
  return off;
}

int zg_reference_run(const zg_problem *p) {
  int64_t i[ZG_MAX_DIMS] = {0};
  for (int64_t n = 0; n < p->numel; n++) {
    if (p->op == ZG_OP_BWD) {
      /* all inputs are read before any output is written: in place is safe */
      double dout = zg_ref_load(&p->t[ZG_BWD_DOUT], zg_ref_off(p, &p->t[ZG_BWD_DOUT], i));
      double z = zg_ref_load(&p->t[ZG_BWD_Z], zg_ref_off(p, &p->t[ZG_BWD_Z], i));
      double o = zg_ref_load(&p->t[ZG_BWD_O], zg_ref_off(p, &p->t[ZG_BWD_O], i));
      double dz, dos;
      zg_gate_bwd_f64(dout, z, o, &dz, &dos);
      zg_ref_store(&p->t[ZG_BWD_DZ], zg_ref_off(p, &p->t[ZG_BWD_DZ], i), dz);
      zg_ref_store(&p->t[ZG_BWD_DOS], zg_ref_off(p, &p->t[ZG_BWD_DOS], i), dos);
    } else {
      double o = zg_ref_load(&p->t[ZG_FWD_O], zg_ref_off(p, &p->t[ZG_FWD_O], i));
      double z = zg_ref_load(&p->t[ZG_FWD_Z], zg_ref_off(p, &p->t[ZG_FWD_Z], i));
      zg_ref_store(&p->t[ZG_FWD_OUT], zg_ref_off(p, &p->t[ZG_FWD_OUT], i), zg_gate_fwd_f64(o, z));
    }
    for (int d = p->ndim - 1; d >= 0 && ++i[d] == p->shape[d]; d--) i[d] = 0; /* odometer */
  }
  return ZGATE_OK;
}
