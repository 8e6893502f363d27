/* Kernels of the forward gate, float16: one module of its own (cuda_kernels.h). */
#include "cuda_kernel.cuh"

#if !ZG_CUDA_UNITY || defined(ZG_CUDA_UNITY_INCLUDE)
ZG_CUDA_DEFINE_TABLE(kernels_fwd_f16, ZG_OP_FWD, DT_F16)
#endif
