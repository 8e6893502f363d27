/* The CPU loop driver: one stride-aware walk over the problem for every ISA.
 *
 * 1. The dims are validation's collapsed ones (zg_problem): dense tensors are one long run.
 * 2. Split the flat index space into work items of ZG_ITEM elements. The split depends on
 *    the problem only, never on the thread count, and every element is computed by the
 *    same code whichever thread runs its item: results are bit-identical for any
 *    num_threads. Items go to OpenMP threads with a static schedule (contiguous ranges of
 *    memory per thread, which streaming stores and prefetchers like).
 * 3. Rows, when the ISA has a row kernel for the dtype, all tensors share that dtype, every
 *    tensor's innermost dim is contiguous and rows are at least ZG_ROW_MIN long (dense
 *    tensors; Z as an input-projection view): the item's rows go to the row kernel in
 *    batches (cpu_kernels.h, zg_rows), which widens, computes and narrows in registers.
 * 4. Else staged: per item, blocks of up to ZG_CPU_BLOCK elements gathered from one or more
 *    row pieces: widen each input into float staging (a float32 input contiguous over the
 *    whole block is used in place, no copy), run the ISA's float kernel, narrow into each
 *    output. When every output is float16/bfloat16 the float kernel is the ISA's cheaper
 *    bwd16/fwd16 (simd_exp.h), if it has one.
 * In place (dout_scaled is dout) is safe in both: an element is read before it is written.
 * Outputs that are dense and large are written non-temporally (ZG_STREAM_BYTES); in step 3
 * only where their rows start on 64-byte lines (no repair of misaligned outputs: they take
 * ordinary stores).
 */
#include <string.h>

#include "cpu_kernels.h"

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

/* Elements per work item: big enough to amortize the item setup, small enough to balance
 * a few threads on modest problems. Fixed: see step 2 above. */
#define ZG_ITEM ((int64_t)32768)
/* Below this many elements one thread does it all (thread start-up costs more). */
#define ZG_PARALLEL_MIN ((int64_t)65536)
/* Non-temporal stores only for dense outputs bigger than a typical L2/L3 share. */
#define ZG_STREAM_BYTES ((int64_t)4 << 20)
/* Shorter rows go through staging, which packs several rows into one block. */
#define ZG_ROW_MIN ((int64_t)32)

typedef struct zg_plan {
  const zg_problem *p;
  int nt, n_in;            /* tensors, of which inputs */
  int streaming[5];        /* step 4: this output is written non-temporally */
  int any_streaming;       /* some output is (a fence at the end) */
  zg_rows_fn rows;         /* step 3's kernel, or NULL: staged */
  int rows_nt;             /* step 3: every output streams and its rows start on lines */
  zg_bwd_fn bwd;           /* float kernels for staged blocks (bwd or bwd16, ...) */
  zg_fwd_fn fwd;
} zg_plan;

/* One row piece of a block: where it starts in each tensor, its length, and where it
 * sits in the staging buffers. */
typedef struct zg_seg {
  int64_t off[5];
  int32_t len, dst;
} zg_seg;

static int64_t zg_esize(const zg_plan *pl, int t) { return zg_dtype_size(pl->p->t[t].dtype); }

static void zg_plan_build(const zg_problem *p, const zg_cpu_kernels *kt, zg_plan *pl) {
  memset(pl, 0, sizeof *pl);
  pl->p = p;
  pl->nt = p->n_in + p->n_out;
  pl->n_in = p->n_in;
  const int inner = p->ndim - 1;

  /* streaming: the output covers exactly numel elements (dense in its own layout) with a
   * unit inner stride, and is large enough that caching it would only evict the inputs */
  for (int t = pl->n_in; t < pl->nt; t++) {
    int64_t extent = 1;
    for (int d = 0; d < p->ndim; d++) extent += (p->shape[d] - 1) * p->t[t].strides[d];
    pl->streaming[t] = extent == p->numel && p->t[t].strides[inner] == 1 &&
                       p->numel * zg_esize(pl, t) >= ZG_STREAM_BYTES;
    pl->any_streaming |= pl->streaming[t];
  }

  /* kernels: the cheap recipe when no output is float32; rows when step 3 applies */
  int out16 = 1, same = 1, contiguous = 1;
  const int dt = (int)p->t[0].dtype;
  for (int t = 0; t < pl->nt; t++) {
    if (t >= pl->n_in && p->t[t].dtype == ZG_F32) out16 = 0;
    if ((int)p->t[t].dtype != dt) same = 0;
    if (p->t[t].strides[inner] != 1) contiguous = 0;
  }
  pl->bwd = out16 && kt->bwd16 ? kt->bwd16 : kt->bwd;
  pl->fwd = out16 && kt->fwd16 ? kt->fwd16 : kt->fwd;
  zg_rows_fn rows = pl->n_in == 3 ? kt->bwd_rows[dt] : kt->fwd_rows[dt];
  if (!(same && contiguous && rows && p->shape[inner] >= ZG_ROW_MIN)) return;
  pl->rows = rows;
  pl->rows_nt = 1;
  for (int t = pl->n_in; t < pl->nt; t++) {
    int ok = pl->streaming[t] && ((uintptr_t)p->t[t].data & 63u) == 0;
    for (int d = 0; d < inner; d++) ok &= (p->t[t].strides[d] * zg_esize(pl, t)) % 64 == 0;
    pl->rows_nt &= ok;
  }
}

/* Calls fn once per maximal run of segments that continue each other in tensor t (the
 * next piece starts where the previous one ended, `st` elements apart): a tensor that is
 * dense across rows gets one call per block even when another tensor splits the rows. */
#define ZG_FOR_RUNS(seg, nseg, t, st, BODY)                                             \
  for (int s0 = 0, s1; s0 < (nseg); s0 = s1) {                                          \
    int64_t run_len = (seg)[s0].len;                                                    \
    for (s1 = s0 + 1; s1 < (nseg) &&                                                    \
                      (seg)[s1].off[t] == (seg)[s1 - 1].off[t] + (seg)[s1 - 1].len * (st); \
         s1++)                                                                          \
      run_len += (seg)[s1].len;                                                         \
    const int64_t run_off = (seg)[s0].off[t];                                           \
    const int32_t run_dst = (seg)[s0].dst;                                              \
    BODY                                                                                \
  }

static void zg_run_block(const zg_plan *pl, const zg_cpu_kernels *k, const zg_seg *seg,
                         int nseg, int bn, float (*stage)[ZG_CPU_BLOCK]) {
  const int inner = pl->p->ndim - 1;
  const float *in[3];
  for (int t = 0; t < pl->n_in; t++) {
    const int64_t st = pl->p->t[t].strides[inner];
    int direct = pl->p->t[t].dtype == ZG_F32 && st == 1;
    for (int s = 1; s < nseg && direct; s++)
      direct = seg[s].off[t] == seg[s - 1].off[t] + seg[s - 1].len;
    if (direct) { /* float32, contiguous over the whole block: read it in place */
      in[t] = (const float *)(pl->p->t[t].data + seg[0].off[t] * 4);
      continue;
    }
    ZG_FOR_RUNS(seg, nseg, t, st, {
      k->load[pl->p->t[t].dtype](stage[t] + run_dst, pl->p->t[t].data + run_off * zg_esize(pl, t), run_len, st);
    })
    in[t] = stage[t];
  }
  if (pl->n_in == 3)
    pl->bwd(stage[3], stage[4], in[ZG_BWD_DOUT], in[ZG_BWD_Z], in[ZG_BWD_O], bn);
  else
    pl->fwd(stage[2], in[ZG_FWD_O], in[ZG_FWD_Z], bn);
  for (int t = pl->n_in; t < pl->nt; t++) {
    const int64_t st = pl->p->t[t].strides[inner];
    ZG_FOR_RUNS(seg, nseg, t, st, {
      k->store[pl->p->t[t].dtype](pl->p->t[t].data + run_off * zg_esize(pl, t), stage[t] + run_dst, run_len, st,
                             pl->streaming[t]);
    })
  }
}

/* A position in the flat index space: the outer dims' odometer c, the position j in its
 * row, and each tensor's offset (elements). */
typedef struct zg_pos {
  int64_t c[ZGATE_MAX_NDIM], off[5], j;
} zg_pos;

static void zg_locate(const zg_plan *pl, int64_t start, zg_pos *at) {
  const zg_problem *p = pl->p;
  const int inner = p->ndim - 1;
  int64_t r = start / p->shape[inner];
  at->j = start % p->shape[inner];
  for (int d = inner - 1; d >= 0; d--) {
    at->c[d] = r % p->shape[d];
    r /= p->shape[d];
  }
  for (int t = 0; t < pl->nt; t++) {
    at->off[t] = at->j * p->t[t].strides[inner];
    for (int d = 0; d < inner; d++) at->off[t] += at->c[d] * p->t[t].strides[d];
  }
}

/* From the start of a row to the start of the row `count` rows on (count never passes the
 * end of dim inner-1). Out of line: inlined, it slows the staged loop over short rows. */
__attribute__((noinline)) static void zg_next_rows(const zg_plan *pl, zg_pos *at, int64_t count) {
  const zg_problem *p = pl->p;
  int d = p->ndim - 2;
  if (d < 0) return;
  at->c[d] += count;
  for (int t = 0; t < pl->nt; t++) at->off[t] += count * p->t[t].strides[d];
  while (d >= 0 && at->c[d] == p->shape[d]) {
    at->c[d] = 0;
    for (int t = 0; t < pl->nt; t++) at->off[t] -= p->shape[d] * p->t[t].strides[d];
    if (--d < 0) break;
    at->c[d]++;
    for (int t = 0; t < pl->nt; t++) at->off[t] += p->t[t].strides[d];
  }
}

/* Past a piece of `count` rows of len elements starting at *at (count > 1 only for whole
 * rows along dim inner-1); idx is the flat index after the piece. */
static inline void zg_advance(const zg_plan *pl, zg_pos *at, int64_t len, int64_t count,
                              int64_t idx) {
  const zg_problem *p = pl->p;
  const int inner = p->ndim - 1;
  if (at->j + len < p->shape[inner]) { /* the piece ends inside its row */
    at->j += len;
    for (int t = 0; t < pl->nt; t++) at->off[t] += len * p->t[t].strides[inner];
    return;
  }
  for (int t = 0; t < pl->nt; t++) at->off[t] -= at->j * p->t[t].strides[inner];
  at->j = 0;
  if (idx < p->numel) zg_next_rows(pl, at, count);
}

/* Step 3: elements [start, end) as batches of rows for the row kernel. */
static void zg_rows_item(const zg_plan *pl, int64_t start, int64_t end) {
  const zg_problem *p = pl->p;
  const int inner = p->ndim - 1;
  const int64_t row_len = p->shape[inner];
  zg_pos at;
  zg_locate(pl, start, &at);
  for (int64_t idx = start; idx < end;) {
    int64_t count = 1, len = row_len - at.j;
    if (len > end - idx) len = end - idx;
    if (at.j == 0 && len == row_len && inner > 0) { /* whole rows along dim inner-1 */
      count = (end - idx) / row_len;
      if (count > p->shape[inner - 1] - at.c[inner - 1]) count = p->shape[inner - 1] - at.c[inner - 1];
    }
    zg_rows r = {.len = len, .count = count, .nt = pl->rows_nt}; /* fwd: in[2], out[1] NULL */
    for (int t = 0; t < pl->nt; t++) {
      const int64_t es = zg_esize(pl, t), step = inner > 0 ? p->t[t].strides[inner - 1] * es : 0;
      char *ptr = p->t[t].data + at.off[t] * es;
      if (t < pl->n_in) {
        r.in[t] = ptr;
        r.in_step[t] = step;
      } else {
        r.out[t - pl->n_in] = ptr;
        r.out_step[t - pl->n_in] = step;
        r.nt &= ((uintptr_t)ptr & 63u) == 0; /* an item may start inside a line */
      }
    }
    pl->rows(&r);
    idx += count * len;
    zg_advance(pl, &at, len, count, idx);
  }
}

/* Step 4: elements [start, end) in blocks of staged row pieces. */
static void zg_staged_item(const zg_plan *pl, const zg_cpu_kernels *k, int64_t start, int64_t end,
                           float (*stage)[ZG_CPU_BLOCK], zg_seg *seg) {
  const int64_t row_len = pl->p->shape[pl->p->ndim - 1];
  zg_pos at;
  zg_locate(pl, start, &at);
  for (int64_t idx = start; idx < end;) {
    int nseg = 0, bn = 0;
    while (bn < ZG_CPU_BLOCK && idx < end) {
      int64_t len = row_len - at.j;
      if (len > ZG_CPU_BLOCK - bn) len = ZG_CPU_BLOCK - bn;
      if (len > end - idx) len = end - idx;
      zg_seg *sg = &seg[nseg++];
      memcpy(sg->off, at.off, sizeof at.off);
      sg->len = (int32_t)len;
      sg->dst = bn;
      bn += (int)len;
      idx += len;
      zg_advance(pl, &at, len, 1, idx);
    }
    zg_run_block(pl, k, seg, nseg, bn, stage);
  }
}

/* Order this thread's non-temporal stores before anything that follows the call. */
static void zg_store_fence(void) {
#if defined(__x86_64__) || defined(__i386__)
  _mm_sfence();
#elif defined(__aarch64__)
  __asm__ volatile("dmb ishst" ::: "memory");
#endif
}

int zg_cpu_run(const zg_problem *p, const zg_options *opts) {
  const zg_cpu_kernels *k = opts->cpu_kernels;
  if (!k) return zg_fail(ZGATE_ERR_INTERNAL, "cpu: no kernel table");
  for (int t = 0; t < p->n_in + p->n_out; t++)
    if (p->t[t].dtype > ZG_BF16)
      return zg_fail(ZGATE_ERR_INTERNAL, "cpu: dtype %d reached the CPU backend", (int)p->t[t].dtype);

  zg_plan pl;
  zg_plan_build(p, k, &pl);
  const int64_t nitems = (p->numel + ZG_ITEM - 1) / ZG_ITEM;
  const int streams = pl.rows ? pl.rows_nt : pl.any_streaming;

  int nthreads = 1;
#ifdef _OPENMP
  nthreads = opts->num_threads > 0 ? opts->num_threads : omp_get_max_threads();
  if (p->numel < ZG_PARALLEL_MIN) nthreads = 1;
  if ((int64_t)nthreads > nitems) nthreads = (int)nitems; /* nitems >= 1: numel > 0 */
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
#endif
  {
    _Alignas(64) float stage[5][ZG_CPU_BLOCK];
    zg_seg seg[ZG_CPU_BLOCK];
#ifdef _OPENMP
#pragma omp for schedule(static) nowait
#endif
    for (int64_t it = 0; it < nitems; it++) {
      const int64_t start = it * ZG_ITEM;
      const int64_t end = start + ZG_ITEM < p->numel ? start + ZG_ITEM : p->numel;
      if (pl.rows) zg_rows_item(&pl, start, end);
      else zg_staged_item(&pl, k, start, end, stage, seg);
    }
    if (streams) zg_store_fence();
  }
  (void)nthreads;
  return ZGATE_OK;
}
