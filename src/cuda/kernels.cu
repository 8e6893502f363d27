/* The kernels of one operator and dtype kind: CMake compiles this file once per pair, each
 * object one module of its own (cuda_kernels.h says why), with ZG_CUDA_TABLE (the lookup's
 * name, kernels_<op>_<kind>), ZG_CUDA_OP (GateBwd or GateFwd) and ZG_CUDA_KIND (a zg_dtype, or ZG_KIND_MIXED)
 * defined. */
#include "cuda_kernel.cuh"

ZG_CUDA_DEFINE_TABLE(ZG_CUDA_TABLE, ZG_CUDA_OP, ZG_CUDA_KIND)
