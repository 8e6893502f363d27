/* The CUDA backend's host side (zg_cuda_run): plan the launch (cuda_plan.h), pick the kernel
 * for the operator, dtype kind, vector width and layout (cuda_kernels.h), and launch it. The
 * kernels are cuda_kernel.cuh, compiled ahead of time: no autotuning, no run-time compilation.
 *
 * Device: the tensors' device_id, made current for the call (cudaGetDevice / cudaSetDevice)
 * and restored after, whatever was current. Stream: zgate_options.cuda_stream, else the
 * legacy default stream (0) of that device. Every launch is checked (cudaGetLastError); CUDA
 * errors become ZGATE_ERR_CUDA with the CUDA name and message. */
#include <stdint.h>
#include <stdio.h>

#include <cuda_runtime.h>

#include "cuda_kernels.h"
#include "cuda_plan.h"

extern "C" {
#include "zgate_internal.h"
}

namespace zgcu {
namespace {

/* The widest item (elements) the host picks: one 16-byte access a tensor, 4 elements when
 * all are float32, 8 with any 2-byte tensor. */
constexpr int kMaxVecF32 = 4, kMaxVec16 = 8;

int fail_cuda(const char *what, cudaError_t e) {
  return zg_fail(ZGATE_ERR_CUDA, "CUDA error in %s: %s (%s)", what, cudaGetErrorName(e),
                 cudaGetErrorString(e));
}

/* The kernel table of an operator and dtype kind (mixed: some tensor differs; those have the
 * ANY layout only). */
const void *kernel_of(int op, int nt, const Args &a, int v, int layout) {
  using Table = const void *(*)(int v, int layout);
  constexpr Table tables[ZG_NOPS][4] = {/* by zg_op, then ZG_F32, ZG_F16, ZG_BF16, ZG_KIND_MIXED */
                                  {kernels_bwd_f32, kernels_bwd_f16, kernels_bwd_bf16, kernels_bwd_mixed},
                                  {kernels_fwd_f32, kernels_fwd_f16, kernels_fwd_bf16, kernels_fwd_mixed}};
  int kind = a.dtype[0];
  for (int t = 1; t < nt; t++)
    if (a.dtype[t] != kind) kind = ZG_KIND_MIXED;
  return tables[op][kind](v, kind == ZG_KIND_MIXED ? L_ANY : layout);
}

int launch(const void *kernel, const Args &a, cudaStream_t stream) {
  /* Covering grid: one block per tile (capped at the grid limit; the grid-stride loop does
   * any rest). */
  const int64_t tile = kThreads;
  int64_t blocks = (a.items + tile - 1) / tile;
  if (blocks > 0x7fffffff) blocks = 0x7fffffff;
  if (blocks < 1) blocks = 1; /* the tail alone still needs block 0 */
  void *params[] = {const_cast<Args *>(&a)};
  cudaError_t e = cudaLaunchKernel(kernel, dim3((unsigned)blocks), dim3(kThreads), params, 0, stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess) return fail_cuda("launching the gate kernel", e);
  return ZGATE_OK;
}

int run_on_current_device(const zg_problem *p, cudaStream_t stream) {
  const int nt = p->n_in + p->n_out;
  if (nt > MAX_T || nt != zg_ops[p->op].n_in + zg_ops[p->op].n_out)
    return zg_fail(ZGATE_ERR_INTERNAL, "CUDA backend: unexpected operand count %d", nt);
  Args a = {};
  int esize[MAX_T] = {0};
  const int64_t *strides[MAX_T];
  for (int t = 0; t < nt; t++) {
    const zg_operand &op = p->t[t];
    if (op.dtype != ZG_F32 && op.dtype != ZG_F16 && op.dtype != ZG_BF16)
      return zg_fail(ZGATE_ERR_INTERNAL, "CUDA backend: operand %d has dtype %d", t, (int)op.dtype);
    a.ptr[t] = op.data;
    a.dtype[t] = (int)op.dtype;
    esize[t] = (int)zg_dtype_size(op.dtype);
    strides[t] = op.strides;
  }
  if (p->ndim < 1 || p->ndim > 3 + MAX_X)
    return zg_fail(ZGATE_ERR_INTERNAL, "CUDA backend: %d dims", p->ndim);
  plan_dims(nt, p->ndim, p->shape, strides, a);
  bool all_f32 = true;
  for (int t = 0; t < nt; t++) all_f32 = all_f32 && a.dtype[t] == ZG_F32;
  int v = plan_vector_width(nt, a, esize, all_f32 ? kMaxVecF32 : kMaxVec16);
  const int layout = plan_items(a, v);
  for (int t = p->n_in; t < nt; t++) a.accurate |= a.dtype[t] == ZG_F32;
  const void *kernel = kernel_of(p->op, nt, a, v, layout);
  if (!kernel)
    return zg_fail(ZGATE_ERR_INTERNAL, "CUDA backend: no kernel for vector width %d, layout %d", v, layout);
  return launch(kernel, a, stream);
}

}  // namespace
}  // namespace zgcu

extern "C" int zg_cuda_run(const zg_problem *p, const zg_options *opts) {
  const int dev = p->device.device_id;
  cudaStream_t stream = opts && opts->cuda_stream ? (cudaStream_t)opts->cuda_stream : (cudaStream_t)0;
  int prev = -1;
  cudaError_t e = cudaGetDevice(&prev);
  if (e != cudaSuccess) return zgcu::fail_cuda("cudaGetDevice", e);
  if (prev != dev) {
    e = cudaSetDevice(dev);
    if (e != cudaSuccess) return zgcu::fail_cuda("cudaSetDevice (the tensors' device)", e);
  }
  int st = zgcu::run_on_current_device(p, stream);
  if (prev != dev) {
    e = cudaSetDevice(prev);
    if (e != cudaSuccess && st == ZGATE_OK) st = zgcu::fail_cuda("cudaSetDevice (restoring the caller's device)", e);
  }
  return st;
}

/* The CUDA devices this process sees, for zgate.info(): their count, and in buf their names
 * and compute capabilities, or why there are none (no driver, a driver older than the
 * runtime linked in, no device). */
extern "C" int zg_cuda_devices(char *buf, size_t n) {
  int drv = 0, count = 0;
  buf[0] = '\0';
  if (cudaDriverGetVersion(&drv) != cudaSuccess || !drv) {
    snprintf(buf, n, "no CUDA driver on this machine (libcuda.so.1 not found)");
    return 0;
  }
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || !count) {
    int rt = 0;
    cudaRuntimeGetVersion(&rt);
    snprintf(buf, n, "CUDA driver %d.%d, runtime %d.%d: %s", drv / 1000, drv % 1000 / 10, rt / 1000,
             rt % 1000 / 10, e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device visible");
    cudaGetLastError(); /* not sticky: the next call starts clean */
    return 0;
  }
  size_t len = 0;
  for (int i = 0; i < count && len < n; i++) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
      cudaGetLastError();
      len += (size_t)snprintf(buf + len, n - len, "%scuda:%d (unreadable)", i ? "; " : "", i);
      continue;
    }
    len += (size_t)snprintf(buf + len, n - len, "%scuda:%d %s, sm_%d%d%s", i ? "; " : "", i, p.name,
                            p.major, p.minor, p.major < 8 ? " (older than sm_80: not supported)" : "");
  }
  return count;
}
