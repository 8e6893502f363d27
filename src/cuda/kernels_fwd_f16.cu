/* Kernels of the forward gate, float16: one module of its own (cuda_kernels.h). */
#include "cuda_kernel.cuh"

ZG_CUDA_DEFINE_TABLE(kernels_fwd_f16, GateFwd, DT_F16)
