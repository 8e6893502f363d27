/* What the host side (cuda_backend.cu) and the kernel translation units (kernels_*.cu) agree
 * on: the block size, the build-time variants, and one lookup function per (operator, dtype
 * kind) that returns the kernel for a vector width and layout.
 *
 * Why one translation unit per (operator, dtype kind): each .cu object carries its own
 * fatbin, which the CUDA runtime registers as its own module, and with lazy loading (the
 * default, CUDA_MODULE_LOADING=LAZY) a module is only loaded when one of its kernels is
 * first used, and then as a whole (loading one kernel of it loads them all). A first call in
 * bfloat16 then loads the bf16 backward module (10 kernels) rather than all 62: 0.15-0.32 ms
 * instead of 1.4-1.7 ms after the context exists, 0.33-0.56 ms instead of 1.4-1.6 ms in a
 * PyTorch process (H200, 2 December 2026, commits d35b1ff and a7db833: docs/perf-notes.md). */
#ifndef ZGATE_CUDA_KERNELS_H
#define ZGATE_CUDA_KERNELS_H

/* Build-time variants, for the benchmark's comparisons only (scripts/gpu-run.sh,
 * docs/perf-notes.md); the defaults are the shipped kernel.
 *   ZG_CUDA_THREADS   block size.
 *   ZG_CUDA_UNROLL    items per thread, loads of all issued before the math.
 *   ZG_CUDA_MINB      blocks per SM the register budget must allow (mixed dtypes);
 *   ZG_CUDA_MINB32    the same for the all-float32 kind;
 *   ZG_CUDA_MINB16    the same for the all-float16 and all-bfloat16 kinds.
 *   ZG_CUDA_PACKED16  0 (cuda_kernel.cuh): 16-bit inputs widened at the load (before f6a9e70).
 *   ZG_CUDA_MAXV_F32, ZG_CUDA_MAXV_16  the widest item (elements) the host picks.
 *   ZG_CUDA_LAYOUTS   0: the general index math for every problem (as before 3ad1b25).
 *   ZG_CUDA_LEAN      1: FLAT/ROWS kernels only for the widest vector of a kind (16-bit V = 8,
 *                     float32 V = 4); narrower vectors take the ANY layout (fewer kernels).
 *   ZG_CUDA_UNITY     1: every kernel in one translation unit (one module, as before d35b1ff).
 *   ZG_CUDA_LDG       1 (cuda_gate_math.cuh): read-only loads.
 * Shipped: 128-thread blocks, one item a thread, index math by layout (commit 5bec1c0); 16-bit
 * items packed until the math and float32 kernels at 12 blocks a SM (40 registers, commit
 * 1d5ae91), the best of the variants measured side by side on the H200 (docs/perf-notes.md,
 * 2 December 2026). Variants measured before (one wave of resident blocks looping, software
 * prefetch of the next item, evict-first accesses, 8-wide float32 items, 16-bit items stored
 * in two 8-byte halves with 10 blocks a SM) were slower and are gone (docs/perf-notes.md). */
#ifndef ZG_CUDA_THREADS
#define ZG_CUDA_THREADS 128
#endif
#ifndef ZG_CUDA_UNROLL
#define ZG_CUDA_UNROLL 1
#endif
#ifndef ZG_CUDA_MINB
#define ZG_CUDA_MINB 8
#endif
#ifndef ZG_CUDA_MINB32
#define ZG_CUDA_MINB32 12
#endif
#ifndef ZG_CUDA_MINB16
#define ZG_CUDA_MINB16 8
#endif
#ifndef ZG_CUDA_MAXV_F32 /* all-float32 problems (4: 16-byte accesses) */
#define ZG_CUDA_MAXV_F32 4
#endif
#ifndef ZG_CUDA_MAXV_16 /* problems with a 16-bit tensor (8: 16-byte accesses) */
#define ZG_CUDA_MAXV_16 8
#endif
#ifndef ZG_CUDA_LAYOUTS
#define ZG_CUDA_LAYOUTS 1
#endif
#ifndef ZG_CUDA_LEAN
#define ZG_CUDA_LEAN 0
#endif
#ifndef ZG_CUDA_UNITY
#define ZG_CUDA_UNITY 0
#endif


namespace zgcu {

constexpr int kThreads = ZG_CUDA_THREADS;
constexpr int kUnroll = ZG_CUDA_UNROLL;

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
