/* Public entry points: resolve options, validate, route to a backend. */
#include <stdio.h>

#include "cpu/cpu_kernels.h"
#include "zgate_internal.h"

void zgate_options_init(zgate_options *opts) {
  if (opts) *opts = (zgate_options)ZGATE_OPTIONS_INIT;
}

/* reference: the float64 oracle (float64 tensors admitted, host only, no options) */
static int zg_call(zg_op op, const DLTensor *const *t, const zgate_options *opts, int reference) {
  zg_options ro;
  zg_problem p;
  zg_clear_error();
  int st = zg_resolve_options(opts, &ro);
  /* a forced cpu_isa is checked before the tensors, whatever device they are on */
  if (!st && ro.cpu_isa) st = zg_cpu_resolve(ro.cpu_isa, &ro.cpu_kernels);
  if (!st) st = zg_validate(op, t, reference, &p);
  if (st) return st;
  const int host = p.device.device_type == kDLCPU || p.device.device_type == kDLCUDAHost;
  if (reference && !host)
    return zg_fail(ZGATE_ERR_DEVICE_UNSUPPORTED,
                   "reference: runs on host tensors only (device type %d)",
                   (int)p.device.device_type);
  if (reference) return p.numel ? zg_reference_run(&p) : ZGATE_OK;
  if (host) {
    /* a forced, unusable ZGATE_CPU_ISA fails every call, size 0 too */
    if (!ro.cpu_kernels && (st = zg_cpu_resolve(NULL, &ro.cpu_kernels))) return st;
    return p.numel ? zg_cpu_run(&p, &ro) : ZGATE_OK;
  }
#ifdef ZGATE_WITH_CUDA
  return p.numel ? zg_cuda_run(&p, &ro) : ZGATE_OK;
#else
  return zg_fail(ZGATE_ERR_INTERNAL, "device type %d passed validation", (int)p.device.device_type);
#endif
}

int zgate_bwd(const DLTensor *dout, const DLTensor *z, const DLTensor *o, DLTensor *dz,
              DLTensor *dout_scaled, const zgate_options *opts) {
  const DLTensor *t[5] = {dout, z, o, dz, dout_scaled};
  return zg_call(ZG_OP_BWD, t, opts, 0);
}

int zgate_fwd(const DLTensor *o, const DLTensor *z, DLTensor *out, const zgate_options *opts) {
  const DLTensor *t[3] = {o, z, out};
  return zg_call(ZG_OP_FWD, t, opts, 0);
}

int zgate_bwd_reference(const DLTensor *dout, const DLTensor *z, const DLTensor *o, DLTensor *dz,
                        DLTensor *dout_scaled) {
  const DLTensor *t[5] = {dout, z, o, dz, dout_scaled};
  return zg_call(ZG_OP_BWD, t, NULL, 1);
}

int zgate_fwd_reference(const DLTensor *o, const DLTensor *z, DLTensor *out) {
  const DLTensor *t[3] = {o, z, out};
  return zg_call(ZG_OP_FWD, t, NULL, 1);
}

const char *zgate_version(void) { return ZGATE_VERSION_STRING; }

int zgate_cuda_built(void) {
#ifdef ZGATE_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}

#ifndef ZGATE_WITH_CUDA
int zg_cuda_devices(char *buf, size_t n) {
  snprintf(buf, n, "libzgate was built without CUDA");
  return 0;
}
#endif

const char *zgate_build_info(void) {
  static _Thread_local char buf[256];
  snprintf(buf, sizeof buf, "zgate %s; cpu paths built: %s; cpu path chosen: %s; cpu prefetch: %lld B; cuda: %s",
           zgate_version(), zgate_cpu_isas_built(), zgate_cpu_isa_chosen(), (long long)zg_cpu_prefetch(),
           zgate_cuda_built() ? "built" : "not built");
  return buf;
}
