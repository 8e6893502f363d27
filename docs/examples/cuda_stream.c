/* The backward on a CUDA device, queued on the caller's stream: the device comes from the
 * tensors, the stream from the options, and the call returns without waiting.
 * Exits 77 (skipped) where there is no GPU or zgate was built without CUDA. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <zgate.h>

static DLTensor tensor(void *data, int64_t *shape, DLDeviceType where, uint8_t bits) {
  DLTensor t = {0};
  t.data = data;
  t.device.device_type = where;
  t.device.device_id = 0;
  t.ndim = 4;
  t.dtype.code = kDLFloat;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

int main(void) {
  int ndev = 0;
  if (!zgate_cuda_built() || cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device (or zgate built without CUDA): skipped\n");
    return 77;
  }
  int64_t shape[4] = {2, 128, 4, 80};
  size_t n = 2 * 128 * 4 * 80, bytes = n * sizeof(float);
  float *h[5];
  void *d[5];
  for (int i = 0; i < 5; i++) {
    h[i] = malloc(bytes);
    if (!h[i] || cudaMalloc(&d[i], bytes) != cudaSuccess) return 1;
  }
  for (size_t i = 0; i < n; i++) {
    h[0][i] = (float)sin(0.37 * (double)i);        /* dout */
    h[1][i] = (float)(6.0 * cos(0.11 * (double)i)); /* z */
    h[2][i] = (float)cos(0.53 * (double)i);        /* o */
  }
  cudaStream_t stream;
  if (cudaStreamCreate(&stream) != cudaSuccess) return 1;
  for (int i = 0; i < 3; i++) cudaMemcpyAsync(d[i], h[i], bytes, cudaMemcpyHostToDevice, stream);

  DLTensor dout = tensor(d[0], shape, kDLCUDA, 32), z = tensor(d[1], shape, kDLCUDA, 32);
  DLTensor o = tensor(d[2], shape, kDLCUDA, 32), dz = tensor(d[3], shape, kDLCUDA, 32);
  DLTensor dos = tensor(d[4], shape, kDLCUDA, 32);
  zgate_options opts = ZGATE_OPTIONS_INIT;
  opts.cuda_stream = stream; /* ordered after the copies above, before the ones below */
  int st = zgate_bwd(&dout, &z, &o, &dz, &dos, &opts);
  if (st != ZGATE_OK) {
    fprintf(stderr, "zgate_bwd: %s: %s\n", zgate_status_str(st), zgate_last_error());
    return 1;
  }
  cudaMemcpyAsync(h[3], d[3], bytes, cudaMemcpyDeviceToHost, stream);
  cudaMemcpyAsync(h[4], d[4], bytes, cudaMemcpyDeviceToHost, stream);
  if (cudaStreamSynchronize(stream) != cudaSuccess) return 1;

  /* Compare dz with the float64 reference computed on the host copies. */
  double *ref = malloc(n * sizeof *ref), *ref_dos = malloc(n * sizeof *ref_dos), worst = 0.0;
  if (!ref || !ref_dos) return 1;
  DLTensor hd = tensor(h[0], shape, kDLCPU, 32), hz = tensor(h[1], shape, kDLCPU, 32);
  DLTensor ho = tensor(h[2], shape, kDLCPU, 32), rdz = tensor(ref, shape, kDLCPU, 64);
  DLTensor rdos = tensor(ref_dos, shape, kDLCPU, 64);
  if (zgate_bwd_reference(&hd, &hz, &ho, &rdz, &rdos) != ZGATE_OK) return 1;
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(h[3][i] - ref[i]) + fabs(h[4][i] - ref_dos[i]));
  printf("CUDA backward on a stream: max abs error vs float64 %.3g\n", worst);
  cudaStreamDestroy(stream);
  for (int i = 0; i < 5; i++) free(h[i]), cudaFree(d[i]);
  free(ref), free(ref_dos);
  return worst < 1e-5 ? 0 : 1;
}
