/* Host time of one zgate_bwd on the GPU, taken apart: a measurement program, not a test
 * (scripts/gpu-validate.sh's "hostcost" stage).
 *
 *   cuda_host_cost [CALLS] [REPEATS]
 *
 * Each row is CALLS back-to-back calls timed until the last one returns (the device works
 * behind), divided by CALLS; the median and minimum of REPEATS turns, the rows in turns
 * within each repeat, a device synchronize between turns. The problem is (1, 128, 8, 64)
 * bfloat16, dense: one work item a thread, 64 blocks, a few microseconds of GPU time, so the
 * launch queue never fills. Rows: the CUDA runtime calls zgate_bwd makes, alone; launches of
 * an empty kernel and of zgate's own kernel through the runtime and the driver; zgate_bwd
 * whole, with and without options, and on a size-0 problem (validation only). Linked with
 * the static library, so that it can name the kernel the call launches. */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/cuda_kernels.h"
#include "cuda/cuda_plan.h"
#include "zgate.h"
#include "cuda_check.h"

static double now_us() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

struct Small {
  int *p;
};

__global__ void empty_small(const Small a) {
  if (a.p == nullptr && threadIdx.x == 1024) a.p[0] = 0; /* never true: keeps the parameter */
}

__global__ void empty_args(const zgcu::Args a) {
  if (a.items < 0) a.ptr[0][threadIdx.x] = 0; /* never true */
}

int main(int argc, char **argv) {
  const int calls = argc > 1 ? atoi(argv[1]) : 1000, repeats = argc > 2 ? atoi(argv[2]) : 9;
  if (calls < 1 || repeats < 1) {
    fprintf(stderr, "usage: cuda_host_cost [CALLS >= 1] [REPEATS >= 1]\n");
    return 2;
  }
  CK(cudaFree(0));
  int64_t shape[4] = {1, 128, 8, 64}, zero[4] = {1, 0, 8, 64};
  const size_t n = 1 * 128 * 8 * 64;
  DLTensor t[5], t0[5];
  for (int k = 0; k < 5; k++) {
    void *d = nullptr;
    CK(cudaMalloc(&d, n * 2));
    CK(cudaMemset(d, 0x3c, n * 2)); /* bf16 0x3c3c = 0.0115: finite values */
    memset(&t[k], 0, sizeof t[k]);
    t[k].data = d;
    t[k].device = {kDLCUDA, 0};
    t[k].ndim = 4;
    t[k].dtype = {kDLBfloat, 16, 1};
    t[k].shape = shape;
    t0[k] = t[k];
    t0[k].shape = zero;
  }
  zgate_options opts;
  zgate_options_init(&opts);
  cudaStream_t legacy = 0;
  opts.cuda_stream = (void *)legacy;

  /* The kernel zgate_bwd launches for this problem, with parameters of the same size. */
  const void *kernel = zgcu::kernels_bwd_bf16(8, zgcu::L_FLAT);
  zgcu::Args args = {};
  for (int k = 0; k < 5; k++) args.ptr[k] = (char *)t[k].data, args.dtype[k] = ZG_BF16;
  args.n[0] = args.n[1] = args.n[2] = 1;
  args.n[3] = (int64_t)n;
  args.nv = (int64_t)n / 8;
  args.items = args.nv;
  args.one_row = 1;
  args.div_nv = zgcu::fastdiv_make(args.nv);
  args.div_n2 = args.div_n1 = zgcu::fastdiv_make(1);
  const unsigned blocks = (unsigned)((args.items + zgcu::kThreads - 1) / zgcu::kThreads);
  Small small = {(int *)t[0].data};
  void *p_small[] = {&small}, *p_args[] = {&args};
  cudaFunction_t f_empty, f_gate;
  CK(cudaGetFuncBySymbol(&f_empty, (const void *)empty_args));
  CK(cudaGetFuncBySymbol(&f_gate, kernel));

  auto zg = [&](const DLTensor *u, const zgate_options *o) {
    int st = zgate_bwd(&u[0], &u[1], &u[2], (DLTensor *)&u[3], (DLTensor *)&u[4], o);
    if (st != ZGATE_OK) {
      fprintf(stderr, "zgate_bwd: %s\n", zgate_last_error());
      exit(1);
    }
  };
  int dev = -1;
  std::vector<std::pair<std::string, std::function<void()>>> rows = {
      {"cudaGetDevice", [&] { cudaGetDevice(&dev); }},
      {"cudaGetLastError", [&] { cudaGetLastError(); }},
      {"cudaLaunchKernel, empty kernel, 8 B of parameters",
       [&] { cudaLaunchKernel((const void *)empty_small, dim3(blocks), dim3(zgcu::kThreads), p_small, 0, 0); }},
      {"cudaLaunchKernel, empty kernel, zgate's Args",
       [&] { cudaLaunchKernel((const void *)empty_args, dim3(blocks), dim3(zgcu::kThreads), p_args, 0, 0); }},
      {"cudaLaunchKernel, zgate's kernel",
       [&] { cudaLaunchKernel(kernel, dim3(blocks), dim3(zgcu::kThreads), p_args, 0, 0); }},
      {"cuLaunchKernel (driver), empty kernel, zgate's Args",
       [&] { cuLaunchKernel((CUfunction)f_empty, blocks, 1, 1, zgcu::kThreads, 1, 1, 0, 0, p_args, nullptr); }},
      {"cuLaunchKernel (driver), zgate's kernel",
       [&] { cuLaunchKernel((CUfunction)f_gate, blocks, 1, 1, zgcu::kThreads, 1, 1, 0, 0, p_args, nullptr); }},
      {"cudaGetFuncBySymbol, zgate's kernel", [&] { cudaFunction_t f; cudaGetFuncBySymbol(&f, kernel); }},
      {"cudaGetFuncBySymbol + cuLaunchKernel, zgate's kernel", [&] {
         cudaFunction_t f;
         cudaGetFuncBySymbol(&f, kernel);
         cuLaunchKernel((CUfunction)f, blocks, 1, 1, zgcu::kThreads, 1, 1, 0, 0, p_args, nullptr);
       }},
      {"zgate_bwd, size 0 (validation, no CUDA call)", [&] { zg(t0, &opts); }},
      {"zgate_bwd, options NULL", [&] { zg(t, nullptr); }},
      {"zgate_bwd, options with cuda_stream (as from Python)", [&] { zg(t, &opts); }},
  };
  const size_t nr = rows.size();
  std::vector<std::vector<double>> us(nr);
  for (auto &r : rows)
    for (int i = 0; i < 20; i++) r.second(); /* warm-up: module loading, first launches */
  CK(cudaDeviceSynchronize());
  for (int r = 0; r < repeats; r++)
    for (size_t j = 0; j < nr; j++) {
      auto &row = rows[(j + r) % nr]; /* each repeat starts at another row */
      double a = now_us();
      for (int i = 0; i < calls; i++) row.second();
      double b = now_us();
      CK(cudaDeviceSynchronize());
      CK(cudaGetLastError());
      us[(j + r) % nr].push_back((b - a) / calls);
    }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  printf("Host time a call, %s, runtime %d, driver %d, %d calls x %d repeats, (1, 128, 8, 64) bf16\n",
         prop.name, rt, drv, calls, repeats);
  printf("| call | host us, median | host us, min |\n|---|---|---|\n");
  for (size_t j = 0; j < nr; j++) {
    std::vector<double> v = us[j];
    std::sort(v.begin(), v.end());
    printf("| %s | %.3f | %.3f |\n", rows[j].first.c_str(), v[v.size() / 2], v[0]);
  }
  return 0;
}
