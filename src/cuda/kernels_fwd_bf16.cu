/* Kernels of the forward gate, bfloat16: one module of its own (cuda_kernels.h). */
#include "cuda_kernel.cuh"

ZG_CUDA_DEFINE_TABLE(kernels_fwd_bf16, GateFwd, DT_BF16)
