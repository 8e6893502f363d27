/* Kernels of the backward gate, bfloat16: one module of its own (cuda_kernels.h). */
#include "cuda_kernel.cuh"

ZG_CUDA_DEFINE_TABLE(kernels_bwd_bf16, GateBwd, DT_BF16)
