/* Kernels of the backward gate, mixed dtypes (read per tensor at run time): one module of
 * its own (cuda_kernels.h). */
#include "cuda_kernel.cuh"

ZG_CUDA_DEFINE_TABLE(kernels_bwd_mixed, GateBwd, DT_MIXED)
