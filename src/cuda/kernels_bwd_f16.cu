/* Kernels of the backward gate, float16: one module of its own (cuda_kernels.h). */
#include "cuda_kernel.cuh"

ZG_CUDA_DEFINE_TABLE(kernels_bwd_f16, GateBwd, DT_F16)
