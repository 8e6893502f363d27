/* Kernels of the backward gate, mixed dtypes (read per tensor at run time): one module of
 * its own (cuda_kernels.h). */
#include "cuda_kernel.cuh"

#if !ZG_CUDA_UNITY || defined(ZG_CUDA_UNITY_INCLUDE)
ZG_CUDA_DEFINE_TABLE(kernels_bwd_mixed, ZG_OP_BWD, DT_MIXED)
#endif
