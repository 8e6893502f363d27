/* Where the first CUDA call of zgate spends its time: a measurement program, not a test, run
 * by hand, one fresh process a measurement. Linked with the static library, so that it can
 * name the library's kernel tables.
 *
 *   cuda_first_call DTYPE [--attr] [--then DTYPE2]
 *
 * In one fresh process: create the context (cudaFree(0), as PyTorch has done before any
 * zgate call in a training process), allocate and fill the tensors of a (2, 128, 8, 64)
 * dense problem; then, with --attr, time cudaFuncGetAttributes of the kernel that the call
 * will launch (this loads its module and function under lazy loading); then time the first
 * zgate_bwd and a second one, each up to the end of a device synchronize; with --then, the
 * first call in another dtype (another module). One line of key=value figures in ms. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "cuda/cuda_kernels.h"
#include "cuda/cuda_plan.h"
#include "zgate.h"
#include "cuda_check.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

struct Problem {
  DLDataType dt;
  int64_t shape[4] = {2, 128, 8, 64};
  void *dev[5] = {};
  DLTensor t[5];
};

static bool dtype_of(const char *name, DLDataType &dt) {
  if (!strcmp(name, "fp32")) dt = {kDLFloat, 32, 1};
  else if (!strcmp(name, "fp16")) dt = {kDLFloat, 16, 1};
  else if (!strcmp(name, "bf16")) dt = {kDLBfloat, 16, 1};
  else return false;
  return true;
}

static void setup(Problem &p) {
  size_t n = 2 * 128 * 8 * 64, bytes = n * (p.dt.bits / 8);
  unsigned char *host = (unsigned char *)malloc(bytes);
  for (size_t i = 0; i < bytes; i++) host[i] = (unsigned char)(i * 2654435761u >> 13); /* timing only */
  for (int k = 0; k < 5; k++) {
    CK(cudaMalloc(&p.dev[k], bytes));
    CK(cudaMemcpy(p.dev[k], host, bytes, cudaMemcpyHostToDevice));
    memset(&p.t[k], 0, sizeof p.t[k]);
    p.t[k].data = p.dev[k];
    p.t[k].device = {kDLCUDA, 0};
    p.t[k].ndim = 4;
    p.t[k].dtype = p.dt;
    p.t[k].shape = p.shape;
  }
  free(host);
  CK(cudaDeviceSynchronize());
}

static double timed_call(Problem &p) {
  double t0 = now_ms();
  int st = zgate_bwd(&p.t[0], &p.t[1], &p.t[2], &p.t[3], &p.t[4], NULL);
  CK(cudaDeviceSynchronize());
  double t = now_ms() - t0;
  if (st != ZGATE_OK) {
    fprintf(stderr, "zgate_bwd: %s\n", zgate_last_error());
    exit(1);
  }
  return t;
}

int main(int argc, char **argv) {
  Problem p, q;
  if (argc < 2 || !dtype_of(argv[1], p.dt)) {
    fprintf(stderr, "usage: cuda_first_call fp32|fp16|bf16 [--attr] [--then DTYPE]\n");
    return 2;
  }
  bool attr = false, then = false;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--attr")) attr = true;
    else if (!strcmp(argv[i], "--then") && i + 1 < argc && dtype_of(argv[i + 1], q.dt)) then = true, i++;
  }
  const char *loading = getenv("CUDA_MODULE_LOADING");
  double t0 = now_ms();
  CK(cudaFree(0));
  double ctx = now_ms() - t0;
  setup(p);
  if (then) setup(q);
  printf("dtype=%s loading=%s ctx_ms=%.3f", argv[1], loading ? loading : "default", ctx);
  if (attr) { /* the kernel a dense problem takes: FLAT layout, 16-byte vectors */
    const void *k = p.dt.bits == 32 ? zgcu::kernels_bwd_f32(4, zgcu::L_FLAT)
                    : p.dt.code == kDLBfloat ? zgcu::kernels_bwd_bf16(8, zgcu::L_FLAT)
                                             : zgcu::kernels_bwd_f16(8, zgcu::L_FLAT);
    cudaFuncAttributes fa;
    double a0 = now_ms();
    CK(cudaFuncGetAttributes(&fa, k));
    double a1 = now_ms();
    CK(cudaFuncGetAttributes(&fa, k));
    printf(" attr_ms=%.3f attr2_ms=%.3f regs=%d", a1 - a0, now_ms() - a1, fa.numRegs);
  }
  double first = timed_call(p), second = timed_call(p);
  printf(" first_ms=%.3f second_ms=%.3f", first, second);
  if (then) {
    double t1 = timed_call(q), t2 = timed_call(q); /* in this order (argument order is unspecified) */
    printf(" then_first_ms=%.3f then_second_ms=%.3f", t1, t2);
  }
  printf("\n");
  return 0;
}
