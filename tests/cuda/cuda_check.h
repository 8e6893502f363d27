/* CK(call): a CUDA runtime call that must succeed in the GPU tests and measurement programs;
 * otherwise the file, line, call and CUDA's message are printed and the program exits 1. */
#ifndef ZGATE_TESTS_CUDA_CHECK_H
#define ZGATE_TESTS_CUDA_CHECK_H

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CK(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

#endif /* ZGATE_TESTS_CUDA_CHECK_H */
