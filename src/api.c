/* Public entry points: resolve options, validate, route to a backend. */
#include <stdio.h>

#include "cpu/cpu_kernels.h"
#include "zgate_internal.h"

void zgate_options_init(zgate_options *opts) {
  if (!opts) return;
  zgate_options d = ZGATE_OPTIONS_INIT;
  *opts = d;
}

static int zg_is_host(const zg_problem *p) {
  return p->device.device_type == kDLCPU || p->device.device_type == kDLCUDAHost;
}

static int zg_dispatch(const zg_problem *p, zg_options *o) {
  if (zg_is_host(p)) {
    /* a forced, unusable ZGATE_CPU_ISA fails every call, size 0 too */
    int st = o->cpu_kernels ? ZGATE_OK : zg_cpu_resolve(NULL, &o->cpu_kernels);
    if (st) return st;
    if (p->numel == 0) return ZGATE_OK;
    return zg_cpu_run(p, o);
  }
#ifdef ZGATE_WITH_CUDA
  if (p->numel == 0) return ZGATE_OK;
  return zg_cuda_run(p, o);
#else
  return zg_fail(ZGATE_ERR_INTERNAL, "device type %d passed validation", (int)p->device.device_type);
#endif
}

static int zg_call(zg_op op, const DLTensor *const *t, const zgate_options *opts) {
  zg_options ro;
  zg_problem p;
  zg_clear_error();
  int st = zg_resolve_options(opts, &ro);
  /* a forced cpu_isa is checked before the tensors, whatever device they are on */
  if (!st && ro.cpu_isa) st = zg_cpu_resolve(ro.cpu_isa, &ro.cpu_kernels);
  if (!st) st = zg_validate(op, t, 0, &p);
  if (!st) st = zg_dispatch(&p, &ro);
  return st;
}

int zgate_bwd(const DLTensor *dout, const DLTensor *z, const DLTensor *o, DLTensor *dz,
              DLTensor *dout_scaled, const zgate_options *opts) {
  const DLTensor *t[5] = {dout, z, o, dz, dout_scaled};
  return zg_call(ZG_OP_BWD, t, opts);
}

int zgate_fwd(const DLTensor *o, const DLTensor *z, DLTensor *out, const zgate_options *opts) {
  const DLTensor *t[3] = {o, z, out};
  return zg_call(ZG_OP_FWD, t, opts);
}

static int zg_reference(zg_op op, const DLTensor *const *t) {
  zg_problem p;
  zg_clear_error();
  int st = zg_validate(op, t, 1, &p);
  if (st) return st;
  if (!zg_is_host(&p))
    return zg_fail(ZGATE_ERR_DEVICE_UNSUPPORTED,
                   "reference: runs on host tensors only (device type %d)",
                   (int)p.device.device_type);
  return p.numel == 0 ? ZGATE_OK : zg_reference_run(&p);
}

int zgate_bwd_reference(const DLTensor *dout, const DLTensor *z, const DLTensor *o, DLTensor *dz,
                        DLTensor *dout_scaled) {
  const DLTensor *t[5] = {dout, z, o, dz, dout_scaled};
  return zg_reference(ZG_OP_BWD, t);
}

int zgate_fwd_reference(const DLTensor *o, const DLTensor *z, DLTensor *out) {
  const DLTensor *t[3] = {o, z, out};
  return zg_reference(ZG_OP_FWD, t);
}

const char *zgate_version(void) { return ZGATE_VERSION_STRING; }

int zgate_cuda_built(void) {
#ifdef ZGATE_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}

const char *zgate_build_info(void) {
  static _Thread_local char buf[256];
  snprintf(buf, sizeof buf, "zgate %s; cpu paths built: %s; cpu path chosen: %s; cuda: %s",
           zgate_version(), zgate_cpu_isas_built(), zgate_cpu_isa_chosen(),
           zgate_cuda_built() ? "built" : "not built");
  return buf;
}
