/* Kernels of the backward gate, bfloat16: one module of its own (cuda_kernels.h). */
#include "cuda_kernel.cuh"

#if !ZG_CUDA_UNITY || defined(ZG_CUDA_UNITY_INCLUDE)
ZG_CUDA_DEFINE_TABLE(kernels_bwd_bf16, ZG_OP_BWD, DT_BF16)
#endif
