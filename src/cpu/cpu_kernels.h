/* What each CPU instruction-set path provides to the loop driver (cpu_loop.c): kernels
 * compute; what goes where and how it is stored is the driver's. One table per ISA:
 * kernels_scalar.c, and kernels_simd.c compiled once per ISA with its own flags over its
 * mapping header (vec_avx2.h, vec_avx512.h, vec_neon.h); cpu_dispatch.c resolves one per call. */
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

/* Rows for a row kernel: `count` >= 1 rows of `len` >= 1 contiguous elements in every
 * tensor, all of the one dtype the table entry is indexed by; row r of a tensor starts r *
 * step bytes after its first. in[] and out[] follow the public signatures (bwd: dout, z, o ->
 * dz, dout_scaled; fwd: o, z -> out). dout_scaled may be dout (in place): each element is
 * read before it is written. Results must not depend on where rows start or end (tails by
 * the same vector code).
 * Stores, the same cut for every row (the loop driver's, cpu_loop.c): elements [0, head)
 * and [head + body, len) with ordinary stores; [head, head + body), whole 64-byte lines of
 * every output with nt[o] set, non-temporally to those outputs.
 * prefetch > 0: software prefetch of every input that many bytes ahead of the loads, running
 * on into the next row of the call (a jump the hardware prefetchers do not follow). */
typedef struct zg_rows {
  const char *in[3];
  char *out[2];
  int64_t in_step[3], out_step[2];
  int64_t len, count;
  int64_t head, body;
  int nt[2];
  int64_t prefetch;
} zg_rows;
typedef void (*zg_rows_fn)(const zg_rows *r);

/* Elements (of es bytes) from p to its next 64-byte line, at most n. */
static inline int64_t zg_line_head(const void *p, int64_t es, int64_t n) {
  const int64_t h = (int64_t)((64u - ((uintptr_t)p & 63u)) & 63u) / es;
  return h < n ? h : n;
}

typedef struct zg_cpu_kernels {
  const char *name;            /* "scalar", "avx2", "avx512", "neon" */
  zg_load_fn load[3];          /* indexed by ZG_F32, ZG_F16, ZG_BF16 */
  zg_store_fn store[3];
  zg_bwd_fn bwd;
  zg_fwd_fn fwd;
  /* Optional (NULL = use bwd / fwd): the 16-bit recipe of simd_exp.h, accurate enough only
   * when every output of the problem is float16 or bfloat16. */
  zg_bwd_fn bwd_out16;
  zg_fwd_fn fwd_out16;
  /* Optional (NULL = staged): row kernels per dtype, which widen, compute and narrow in
   * registers (simd_exp.h's recipe for the dtype: the accurate one for float32, the 16-bit
   * one for the 16-bit types). */
  zg_rows_fn bwd_rows[3];
  zg_rows_fn fwd_rows[3];
} zg_cpu_kernels;

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

/* cpu_dispatch.c: the row kernels' software prefetch distance in bytes (0 = none), chosen
 * once per process: ZGATE_CPU_PREFETCH where it holds a whole number in [0, 65536], else
 * ZG_CPU_PREFETCH_DEFAULT. The loop driver uses it only where an input's rows jump (z as a
 * projection view); docs/performance.md has the A/B behind the distance. */
#define ZG_CPU_PREFETCH_DEFAULT 1024
int64_t zg_cpu_prefetch(void);

/* cpu_loop.c, for tests: the plan for p with table k. *rows: 1 where it takes row kernels;
 * streaming[o]: output o is written non-temporally; *first: the first batch of rows that
 * work item `item` hands to the row kernel, without running it (count 0 where the plan is
 * staged or there is no such item). */
void zg_cpu_plan_view(const zg_problem *p, const zg_cpu_kernels *k, int64_t item, int *rows, int streaming[2],
                      zg_rows *first);

#endif /* ZGATE_CPU_KERNELS_H */
