/* Kernels of the forward gate, float32: one module of its own (cuda_kernels.h). */
#include "cuda_kernel.cuh"

#if !ZG_CUDA_UNITY || defined(ZG_CUDA_UNITY_INCLUDE)
ZG_CUDA_DEFINE_TABLE(kernels_fwd_f32, ZG_OP_FWD, DT_F32)
#endif
