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
 *    output. When every output is float16/bfloat16 the float kernel is the ISA's 16-bit
 *    bwd_out16/fwd_out16 (simd_exp.h), if it has one.
 * In place (dout_scaled is dout) is safe in both: an element is read before it is written.
 * Outputs that are dense and large (ZG_STREAM_BYTES) are written non-temporally wherever
 * they start: each row (step 3) or run (step 4) streams its whole 64-byte lines and stores
 * the partial lines at its ends ordinarily. Work items start on the first streamed output's
 * lines (zg_items), so no line of a dense output has two writers. Streaming, line ownership
 * and prefetch serve memory bandwidth alone: judge a change to them as docs/performance.md
 * says ("What serves memory bandwidth"), never on a machine where the kernel is
 * arithmetic-bound.
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
  int ntensors, n_in;      /* tensors, of which inputs */
  int streaming[5];        /* this output is written non-temporally */
  int any_streaming;       /* some output is (a fence at the end) */
  int64_t lead;            /* elements before the first streamed output's first line */
  zg_rows_fn rows;         /* step 3's kernel, or NULL: staged */
  int64_t prefetch;        /* step 3's software prefetch distance, bytes (0: rows never jump) */
  zg_bwd_fn bwd;           /* float kernels for staged blocks (bwd or bwd_out16, ...) */
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
  pl->ntensors = p->n_in + p->n_out;
  pl->n_in = p->n_in;
  const int inner = p->ndim - 1;

  /* streaming: the output covers exactly numel elements (dense in its own layout) with a
   * unit inner stride, and is large enough that caching it would only evict the inputs */
  for (int t = pl->ntensors - 1; t >= pl->n_in; t--) { /* backwards: lead is the first's */
    int64_t extent = 1;
    for (int d = 0; d < p->ndim; d++) extent += (p->shape[d] - 1) * p->t[t].strides[d];
    pl->streaming[t] = extent == p->numel && p->t[t].strides[inner] == 1 &&
                       p->numel * zg_esize(pl, t) >= ZG_STREAM_BYTES;
    if (!pl->streaming[t]) continue;
    pl->any_streaming = 1;
    pl->lead = zg_line_head(p->t[t].data, zg_esize(pl, t), INT64_MAX);
  }

  /* kernels: the 16-bit recipe when no output is float32; rows when step 3 applies */
  int out16 = 1, same = 1, contiguous = 1;
  const int dt = (int)p->t[0].dtype;
  for (int t = 0; t < pl->ntensors; t++) {
    if (t >= pl->n_in && p->t[t].dtype == ZG_F32) out16 = 0;
    if ((int)p->t[t].dtype != dt) same = 0;
    if (p->t[t].strides[inner] != 1) contiguous = 0;
  }
  pl->bwd = out16 && kt->bwd_out16 ? kt->bwd_out16 : kt->bwd;
  pl->fwd = out16 && kt->fwd_out16 ? kt->fwd_out16 : kt->fwd;
  zg_rows_fn rows = p->op == ZG_OP_BWD ? kt->bwd_rows[dt] : kt->fwd_rows[dt];
  if (!(same && contiguous && rows && p->shape[inner] >= ZG_ROW_MIN)) return;
  pl->rows = rows;
  /* software prefetch where an input's rows jump (z as a projection view): the hardware
   * prefetchers follow a contiguous stream, not the jump to the next row */
  for (int t = 0; t < pl->n_in && inner > 0; t++)
    if (p->t[t].strides[inner - 1] != p->shape[inner]) pl->prefetch = zg_cpu_prefetch();
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
  if (pl->p->op == ZG_OP_BWD)
    pl->bwd(stage[3], stage[4], in[ZG_BWD_DOUT], in[ZG_BWD_Z], in[ZG_BWD_O], bn);
  else
    pl->fwd(stage[2], in[ZG_FWD_O], in[ZG_FWD_Z], bn);
  for (int t = pl->n_in; t < pl->ntensors; t++) {
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
  for (int t = 0; t < pl->ntensors; t++) {
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
  for (int t = 0; t < pl->ntensors; t++) at->off[t] += count * p->t[t].strides[d];
  while (d >= 0 && at->c[d] == p->shape[d]) {
    at->c[d] = 0;
    for (int t = 0; t < pl->ntensors; t++) at->off[t] -= p->shape[d] * p->t[t].strides[d];
    if (--d < 0) break;
    at->c[d]++;
    for (int t = 0; t < pl->ntensors; t++) at->off[t] += p->t[t].strides[d];
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
    for (int t = 0; t < pl->ntensors; t++) at->off[t] += len * p->t[t].strides[inner];
    return;
  }
  for (int t = 0; t < pl->ntensors; t++) at->off[t] -= at->j * p->t[t].strides[inner];
  at->j = 0;
  if (idx < p->numel) zg_next_rows(pl, at, count);
}

/* The batch of rows that starts at `at` (flat index idx, item end `end`), with its stores'
 * cut (cpu_kernels.h, zg_rows): at the first streamed output's first line; rows share one
 * cut only where that output's rows are whole lines apart, else the batch is one row. */
static void zg_rows_batch(const zg_plan *pl, const zg_pos *at, int64_t idx, int64_t end, zg_rows *r) {
  const zg_problem *p = pl->p;
  const int inner = p->ndim - 1, no = pl->ntensors - pl->n_in;
  const int64_t row_len = p->shape[inner], es = zg_esize(pl, 0); /* one dtype (step 3) */
  memset(r, 0, sizeof *r); /* fwd: in[2], out[1] NULL */
  r->len = row_len - at->j < end - idx ? row_len - at->j : end - idx;
  r->count = 1;
  if (at->j == 0 && r->len == row_len && inner > 0) { /* whole rows along dim inner-1 */
    r->count = (end - idx) / row_len;
    if (r->count > p->shape[inner - 1] - at->c[inner - 1]) r->count = p->shape[inner - 1] - at->c[inner - 1];
  }
  for (int t = 0; t < pl->ntensors; t++) {
    const int64_t step = inner > 0 ? p->t[t].strides[inner - 1] * es : 0;
    char *ptr = p->t[t].data + at->off[t] * es;
    if (t < pl->n_in) r->in[t] = ptr, r->in_step[t] = step;
    else r->out[t - pl->n_in] = ptr, r->out_step[t - pl->n_in] = step;
  }
  r->prefetch = pl->prefetch;
  r->body = r->len;
  int anchor = 0;
  while (anchor < no && !pl->streaming[pl->n_in + anchor]) anchor++;
  if (anchor == no) return;
  if (r->out_step[anchor] % 64) r->count = 1;
  r->head = zg_line_head(r->out[anchor], es, r->len);
  r->body = (r->len - r->head) / (64 / es) * (64 / es);
  for (int o = 0; o < no; o++)
    r->nt[o] = pl->streaming[pl->n_in + o] && ((uintptr_t)r->out[o] - (uintptr_t)r->out[anchor]) % 64 == 0 &&
               (r->count == 1 || r->out_step[o] % 64 == 0);
}

/* Step 3: elements [start, end) as batches of rows for the row kernel. */
static void zg_rows_item(const zg_plan *pl, int64_t start, int64_t end) {
  zg_pos at;
  zg_locate(pl, start, &at);
  for (int64_t idx = start; idx < end;) {
    zg_rows r;
    zg_rows_batch(pl, &at, idx, end, &r);
    pl->rows(&r);
    idx += r.count * r.len;
    zg_advance(pl, &at, r.len, r.count, idx);
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

/* Work items: item it covers [lead + it * ZG_ITEM, lead + (it + 1) * ZG_ITEM), the first
 * from 0 and the last to numel, so that every item after the first starts on a line of the
 * first streamed output when it is dense (ZG_ITEM * element size is whole lines). >= 1. */
static int64_t zg_items(const zg_plan *pl) {
  const int64_t n = pl->p->numel - pl->lead;
  return n > ZG_ITEM ? (n + ZG_ITEM - 1) / ZG_ITEM : 1;
}

/* Where item it of nitems starts (it == nitems: numel, the end of the last). */
static int64_t zg_item_start(const zg_plan *pl, int64_t it, int64_t nitems) {
  return it == 0 ? 0 : it >= nitems ? pl->p->numel : pl->lead + it * ZG_ITEM;
}

/* Order this thread's non-temporal stores before anything that follows the call. */
static void zg_store_fence(void) {
#if defined(__x86_64__) || defined(__i386__)
  _mm_sfence();
#elif defined(__aarch64__)
  __asm__ volatile("dmb ishst" ::: "memory");
#endif
}

void zg_cpu_plan_view(const zg_problem *p, const zg_cpu_kernels *k, int64_t item, int *rows, int streaming[2],
                      zg_rows *first) {
  zg_plan pl;
  zg_plan_build(p, k, &pl);
  *rows = pl.rows != NULL;
  for (int o = 0; o < 2; o++) streaming[o] = o < p->n_out && pl.streaming[p->n_in + o];
  memset(first, 0, sizeof *first);
  const int64_t nitems = zg_items(&pl);
  if (!pl.rows || item < 0 || item >= nitems) return;
  const int64_t start = zg_item_start(&pl, item, nitems);
  zg_pos at;
  zg_locate(&pl, start, &at);
  zg_rows_batch(&pl, &at, start, zg_item_start(&pl, item + 1, nitems), first);
}

int zg_cpu_run(const zg_problem *p, const zg_options *opts) {
  const zg_cpu_kernels *k = opts->cpu_kernels;
  if (!k) return zg_fail(ZGATE_ERR_INTERNAL, "cpu: no kernel table");
  for (int t = 0; t < p->n_in + p->n_out; t++)
    if (p->t[t].dtype > ZG_BF16)
      return zg_fail(ZGATE_ERR_INTERNAL, "cpu: dtype %d reached the CPU backend", (int)p->t[t].dtype);

  zg_plan pl;
  zg_plan_build(p, k, &pl);
  const int64_t nitems = zg_items(&pl);

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
      const int64_t start = zg_item_start(&pl, it, nitems), end = zg_item_start(&pl, it + 1, nitems);
      if (pl.rows) zg_rows_item(&pl, start, end);
      else zg_staged_item(&pl, k, start, end, stage, seg);
    }
    if (pl.any_streaming) zg_store_fence();
  }
  (void)nthreads;
  return ZGATE_OK;
}
