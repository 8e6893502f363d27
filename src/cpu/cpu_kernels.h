/* What each CPU instruction-set path provides. The loop driver (cpu_loop.c) splits a
 * problem into chunks of contiguous-or-strided runs and, per block of at most
 * ZG_CPU_BLOCK elements, widens the inputs to float, runs the float kernel and narrows the
 * results into the outputs; where the path has a fused run kernel for the problem's one
 * dtype and rows are contiguous, it hands whole row pieces to that instead. One table per
 * ISA: kernels_scalar.c, and kernels_simd.c compiled once per ISA with its own flags over
 * its mapping header (vec_avx2.h, vec_avx512.h, vec_neon.h); dispatch (cpu_dispatch.c)
 * resolves one per call. */
#ifndef ZGATE_CPU_KERNELS_H
#define ZGATE_CPU_KERNELS_H

#include <stdint.h>

#include "../zgate_internal.h"

/* Elements per staging block: 5 float buffers of this size stay in L1. */
#define ZG_CPU_BLOCK 512

/* Widen n elements of one dtype, `stride` elements apart, into dst[0..n). */
typedef void (*zg_load_fn)(float *dst, const void *src, int64_t n, int64_t stride);
/* Round n floats to nearest even into the dtype, `stride` elements apart. `streaming`
 * asks for non-temporal stores (only ever set when stride == 1 and the output is large and
 * dense). dst may have any alignment of the element size: the store handles a head with
 * ordinary stores itself. It need not fence: the loop driver (cpu_loop.c) issues an sfence
 * on every thread after that thread's last store of the call. */
typedef void (*zg_store_fn)(void *dst, const float *src, int64_t n, int64_t stride, int streaming);
/* The math on float arrays of n elements (1 <= n <= ZG_CPU_BLOCK; no alignment promised:
 * an input may point straight into the caller's float32 tensor). Outputs never alias inputs
 * here. The loop driver splits the work the same way for any thread count, so results are
 * bit-identical across thread counts even where a vector body and a tail round differently
 * (both must meet the accuracy bounds of gate_math.h's formula). */
typedef void (*zg_bwd_fn)(float *dz, float *dos, const float *dout, const float *z,
                          const float *o, int64_t n);
typedef void (*zg_fwd_fn)(float *out, const float *o, const float *z, int64_t n);

/* Fused runs: n >= 1 consecutive elements of five (bwd) or three (fwd) tensors that all
 * have the dtype the entry is indexed by, read and written in place, no float staging.
 * `streaming` bit 0 asks for non-temporal stores of the first output (dz or out), bit 1 of
 * dout_scaled (same rule as zg_store_fn). dout_scaled may be dout (in place): each element
 * must be read before it is written. Results must not depend on where a run starts or ends
 * (tails by the same vector code).
 *
 * `next` (NULL = nothing) says where the inputs go on after the run, so that prefetching can
 * run on into the piece the loop driver hands out next: the rest of a dense problem, or the
 * next row of Z as a projection view, which is not where the run ends. in[] is in the order
 * of the run's input parameters (bwd: dout, z, o; fwd: o, z). Prefetch never changes a
 * result; it must never fetch more than `run_on` bytes past the run's end, nor more than
 * `bytes` past in[]. */
typedef struct zg_run_next {
  const char *in[3];
  int64_t bytes;  /* of each input that follow there (0 = none) */
  int64_t run_on; /* bytes that continue each input right after the run's end, before in[]
                   * (a piece the loop driver handles itself: step 5 of cpu_loop.c) */
  int64_t prefetch; /* software prefetch distance of the run, bytes (0 = none): zg_cpu_prefetch */
} zg_run_next;
typedef void (*zg_bwd_run_fn)(void *dz, void *dos, const void *dout, const void *z,
                              const void *o, int64_t n, int streaming, const zg_run_next *next);
typedef void (*zg_fwd_run_fn)(void *out, const void *o, const void *z, int64_t n, int streaming,
                              const zg_run_next *next);

typedef struct zg_cpu_kernels {
  const char *name;            /* "scalar", "avx2", "avx512", "neon" */
  zg_load_fn load[3];          /* indexed by ZG_F32, ZG_F16, ZG_BF16 */
  zg_store_fn store[3];
  zg_bwd_fn bwd;
  zg_fwd_fn fwd;
  /* Optional (NULL = use bwd / fwd): the cheaper recipe of simd_exp.h, accurate enough only
   * when every output of the problem is float16 or bfloat16. */
  zg_bwd_fn bwd16;
  zg_fwd_fn fwd16;
  /* Optional (NULL = staged): fused runs per dtype (simd_exp.h's recipe for the dtype: the
   * accurate one for float32, the cheap one for the 16-bit types). */
  zg_bwd_run_fn bwd_run[3];
  zg_fwd_run_fn fwd_run[3];
  /* Optional (NULL = this path never stores non-temporally): one 64-byte line from a
   * 64-byte-aligned buffer to a 64-byte-aligned destination by non-temporal stores. The
   * loop driver writes with it the output lines that two row pieces share (cpu_loop.c,
   * step 5). */
  void (*stream_line)(void *dst, const void *src);
} zg_cpu_kernels;

/* Software prefetch distance of the fused runs over rows of row_bytes bytes (of dout's
 * dtype), in bytes (0 = none), chosen once per process by cpu_dispatch.c:
 * ZGATE_CPU_PREFETCH when it holds a whole number in [0, 1048576], for every row; else 4096
 * on Intel CPUs for every row; on AMD family 0x1A (Zen 5) 4096 for rows under
 * ZG_PREFETCH_SHORT_ROW bytes only; 0 elsewhere. Measured (docs/perf-notes.md): on an Intel
 * Xeon with AVX-512, 4 KB ahead took two threads from about 80% to 95-96% of the streaming
 * ceiling (float32) and from 70-74% to 93-96% (bfloat16) (CPU entries 40-46); on Zen 3 and
 * Zen 4 prefetching was equal or worse on dense rows (entries 20, 36, 38); on Zen 5 it took
 * Z as a projection view (rows of 4-8 KB) from 48-72% to 81-91% and dense problems from
 * 93-98% down to 89-93% (entry 58): the hardware prefetchers follow one long stream but not
 * the jump to the next row. */
#define ZG_PREFETCH_SHORT_ROW (64 * 1024)
int64_t zg_cpu_prefetch(int64_t row_bytes);

/* The fused runs' prefetch: for each input (c may be NULL), the `len` bytes (whole lines)
 * starting `at` bytes into the run's input stream, where `at` is the current offset plus the
 * distance. While at < end (the run's bytes, plus next->run_on) that is in the run itself
 * and what continues it, then in `next` for as many bytes as follow there, then nothing.
 * One compare a step in the common case.
 * always_inline: gcc 12 finds a function that only prefetches "const" and deletes the calls
 * to it when it is not inlined early (it dropped every prefetch of the float32 runs). */
#define ZG_PREFETCH_INLINE static inline __attribute__((always_inline))
ZG_PREFETCH_INLINE void zg_prefetch_lines3(const char *a, const char *b, const char *c, int64_t len) {
  for (int64_t q = 0; q < len; q += 64) {
    __builtin_prefetch(a + q, 0, 3);
    __builtin_prefetch(b + q, 0, 3);
    if (c) __builtin_prefetch(c + q, 0, 3);
  }
}
ZG_PREFETCH_INLINE void zg_prefetch_ahead(const zg_run_next *next, const char *a, const char *b, const char *c,
                                     int64_t at, int64_t end, int64_t len) {
  end += next->run_on;
  if (at < end)
    zg_prefetch_lines3(a + at, b + at, c ? c + at : 0, len);
  else if (at - end < next->bytes)
    zg_prefetch_lines3(next->in[0] + (at - end), next->in[1] + (at - end),
                       c ? next->in[2] + (at - end) : 0, len);
}
#undef ZG_PREFETCH_INLINE
/* What a run without a `next` uses (nothing follows). */
static const zg_run_next zg_run_next_none = {{0, 0, 0}, 0, 0, 0};

/* One per built ISA; dispatch knows what was built from the ZGATE_HAVE_* macros. The
 * _bf16 table is avx512's with the AVX512_BF16 bfloat16 runs (same results). */
const zg_cpu_kernels *zg_cpu_kernels_scalar(void);
const zg_cpu_kernels *zg_cpu_kernels_avx2(void);
const zg_cpu_kernels *zg_cpu_kernels_avx512(void);
const zg_cpu_kernels *zg_cpu_kernels_avx512_bf16(void);
const zg_cpu_kernels *zg_cpu_kernels_neon(void);

/* cpu_dispatch.c: the table for an ISA name (NULL = the process-wide choice, made once from
 * CPUID/XGETBV or ZGATE_CPU_ISA), resolved once per call. ZGATE_OK and *out set, or
 * ZGATE_ERR_OPTIONS for an unknown name, ZGATE_ERR_ISA_UNAVAILABLE for a path not built or
 * not supported here (message set, *out NULL). */
int zg_cpu_resolve(const char *isa, const zg_cpu_kernels **out);

#endif /* ZGATE_CPU_KERNELS_H */
