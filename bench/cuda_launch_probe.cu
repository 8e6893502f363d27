/* Back-to-back cost of a launch by the size of the kernel's parameters (an H200 diagnostic,
 * 3 December 2026, docs/perf-notes.md): CUDA events around batches of consecutive launches of
 * an empty kernel and of a small streaming kernel (3 reads, 2 writes of 64K floats) taking a
 * parameter block of 16 to 1024 bytes, after a GPU-side spin so that the host has queued the
 * whole batch before the GPU reaches it. Prints the median per-launch time of 9 batches.
 *
 *   nvcc -O3 -arch=sm_90 -o build/launch_probe bench/cuda_launch_probe.cu && build/launch_probe */
#include <algorithm>
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

template <int BYTES>
struct Params {
  float *p[5];
  long long n;
  char pad[BYTES > 48 ? BYTES - 48 : 1];
};

template <int BYTES>
__global__ void empty_kernel(const Params<BYTES> a) {
  if (a.n < 0) a.p[0][threadIdx.x] = 0.f; /* never true: keeps the parameter alive */
}

template <int BYTES>
__global__ void stream_kernel(const Params<BYTES> a) {
  long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 4;
  if (i >= a.n) return;
  float4 x = *(const float4 *)(a.p[0] + i), y = *(const float4 *)(a.p[1] + i),
         z = *(const float4 *)(a.p[2] + i);
  *(float4 *)(a.p[3] + i) = make_float4(x.x * y.x + z.x, x.y * y.y + z.y, x.z * y.z + z.z, x.w * y.w + z.w);
  *(float4 *)(a.p[4] + i) = make_float4(x.x - z.x, x.y - z.y, x.z - z.z, x.w - z.w);
}

__global__ void spin(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

template <int BYTES, bool STREAM>
double per_launch_us(float **buf, long long n, int count) {
  Params<BYTES> a = {};
  for (int t = 0; t < 5; t++) a.p[t] = buf[t];
  a.n = n;
  const int threads = 128, blocks = (int)((n / 4 + threads - 1) / threads);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<double> ts;
  for (int b = 0; b < 10; b++) {
    spin<<<1, 1>>>(20000000LL); /* about 10 ms at 1.98 GHz */
    cudaEventRecord(e0);
    for (int k = 0; k < count; k++) {
      if (STREAM) stream_kernel<BYTES><<<blocks, threads>>>(a);
      else empty_kernel<BYTES><<<blocks, threads>>>(a);
    }
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (b > 0) ts.push_back(1e3 * ms / count); /* the first batch warms up */
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

template <int BYTES>
void row(float **buf, long long n) {
  printf("params %5d B: empty %.3f us, stream (%lld floats) %.3f us\n", (int)sizeof(Params<BYTES>),
         per_launch_us<BYTES, false>(buf, n, 2000), n, per_launch_us<BYTES, true>(buf, n, 2000));
}

int main() {
  const long long n = 1 << 16; /* (1, 128, 8, 64) */
  float *buf[5];
  for (int t = 0; t < 5; t++) {
    if (cudaMalloc(&buf[t], n * sizeof(float)) != cudaSuccess) return 1;
    cudaMemset(buf[t], 0, n * sizeof(float));
  }
  row<48>(buf, n);
  row<128>(buf, n);
  row<256>(buf, n);
  row<352>(buf, n);
  row<512>(buf, n);
  row<1024>(buf, n);
  row<48>(buf, n); /* again: drift */
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    printf("CUDA error: %s\n", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
