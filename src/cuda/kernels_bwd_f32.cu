/* Kernels of the backward gate, float32: one module of its own (cuda_kernels.h). */
#include "cuda_kernel.cuh"

#if !ZG_CUDA_UNITY || defined(ZG_CUDA_UNITY_INCLUDE)
ZG_CUDA_DEFINE_TABLE(kernels_bwd_f32, ZG_OP_BWD, DT_F32)
#endif
