/* What the host side (cuda_backend.cu) and the kernel objects (kernels.cu, one per operator
 * and dtype kind) agree on: the block size, and one lookup function per (operator, dtype
 * kind) that returns the kernel for a vector width and layout.
 *
 * Why one translation unit per (operator, dtype kind): each .cu object carries its own
 * fatbin, which the CUDA runtime registers as its own module, and with lazy loading (the
 * default, CUDA_MODULE_LOADING=LAZY) a module is only loaded when one of its kernels is
 * first used, and then as a whole (loading one kernel of it loads them all). A first call in
 * bfloat16 then loads the bf16 backward module (10 kernels) rather than all 62
 * (tests/cuda/cuda_first_call.cu measures the first call; docs/performance.md). */
#ifndef ZGATE_CUDA_KERNELS_H
#define ZGATE_CUDA_KERNELS_H

namespace zgcu {

/* Threads a block, each taking one work item at a time (docs/performance.md compares block
 * sizes and items a thread). */
constexpr int kThreads = 128;

/* The kernel (a __global__ function's address, for cudaLaunchKernel / cudaFuncGetAttributes)
 * for vector width v in {8, 4, 2, 1} and layout L_FLAT / L_ROWS / L_ANY (cuda_plan.h), or
 * NULL where none is built. Where no kernel of that layout exists, the ANY kernel of the
 * width is returned: it handles every problem the others do. Every kernel takes one
 * `const Args` by value. */
#define ZG_CUDA_DECLARE_TABLE(name) const void *name(int v, int layout)
ZG_CUDA_DECLARE_TABLE(kernels_bwd_f32);
ZG_CUDA_DECLARE_TABLE(kernels_bwd_f16);
ZG_CUDA_DECLARE_TABLE(kernels_bwd_bf16);
ZG_CUDA_DECLARE_TABLE(kernels_bwd_mixed);
ZG_CUDA_DECLARE_TABLE(kernels_fwd_f32);
ZG_CUDA_DECLARE_TABLE(kernels_fwd_f16);
ZG_CUDA_DECLARE_TABLE(kernels_fwd_bf16);
ZG_CUDA_DECLARE_TABLE(kernels_fwd_mixed);

}  // namespace zgcu

#endif /* ZGATE_CUDA_KERNELS_H */
