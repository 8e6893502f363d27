/* Kernels of the backward gate, float32: one module of its own (cuda_kernels.h). */
#include "cuda_kernel.cuh"

ZG_CUDA_DEFINE_TABLE(kernels_bwd_f32, GateBwd, DT_F32)
