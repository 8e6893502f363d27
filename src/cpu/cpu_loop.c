/* The CPU loop driver: one stride-aware walk over the problem for every ISA.
 *
 * 1. The dims are validation's collapsed ones (zg_problem, validate.c's zg_collapse): dense
 *    tensors are one long run; Z as a view into the input projection, strides (L*8672,
 *    8672, D, 1), is rows of D contiguous elements.
 * 2. Split the flat index space into work items of ZG_ITEM elements. The split depends on
 *    the problem only, never on the thread count, and every element is computed by the
 *    same code whichever thread runs its item: results are bit-identical for any
 *    num_threads. Items go to OpenMP threads with a static schedule (contiguous ranges of
 *    memory per thread, which streaming stores and prefetchers like).
 * 3. Per item, blocks of up to ZG_CPU_BLOCK elements gathered from one or more row pieces:
 *    widen each input into float staging (a float32 input contiguous over the whole block
 *    is used in place, no copy), run the ISA's float kernel, narrow into each output.
 *    In place (dout_scaled is dout) is safe: a block is read entirely before it is written.
 *    When every output is float16/bfloat16 the float kernel is the ISA's cheaper bwd16/fwd16
 *    (simd_exp.h), if it has one.
 * 4. Fused instead of 3, when the ISA has a run kernel for the dtype, all tensors share
 *    that dtype, every tensor's innermost normalized dim is contiguous and rows are at
 *    least ZG_FUSED_MIN_ROW long (dense tensors; Z as an input-projection view): each row
 *    piece of an item goes straight to the run kernel, which widens, computes and narrows
 *    in registers. The choice depends on the problem only (step 2's rule holds).
 * 5. Shared output lines, in step 4, for outputs written non-temporally: where a row piece
 *    does not start on a cache line (Z as a projection view, dz and dout_scaled dense but
 *    not 64-byte aligned), the line it shares with the previous piece is assembled on the
 *    thread and streamed whole (zg_carry), instead of written by ordinary stores twice.
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
#define ZG_FUSED_MIN_ROW ((int64_t)32)

typedef struct zg_plan {
  int nt, n_in;            /* tensors, of which inputs */
  int ndim;                /* the problem's collapsed dims, >= 1; dim ndim-1 innermost */
  int64_t size[ZG_MAX_DIMS];
  int64_t stride[5][ZG_MAX_DIMS]; /* elements, per tensor and dim */
  char *base[5];
  int64_t esize[5];
  int dtype[5];
  int streaming[5];
  int64_t numel;
  int fused;               /* dtype of all tensors when step 4 applies, else -1 */
  int any_streaming;       /* some output is written non-temporally (a fence at the end) */
  int carry;               /* step 5 applies: fused, a streaming output, the ISA streams */
  int64_t prefetch;        /* the fused runs' software prefetch distance (zg_cpu_prefetch) */
  zg_bwd_fn bwd;           /* float kernels for staged blocks (bwd or bwd16, ...) */
  zg_fwd_fn fwd;
} zg_plan;

/* One row piece of a block: where it starts in each tensor, its length, and where it
 * sits in the staging buffers. */
typedef struct zg_seg {
  int64_t off[5];
  int32_t len, dst;
} zg_seg;

static void zg_plan_build(const zg_problem *p, const zg_cpu_kernels *kt, zg_plan *pl) {
  memset(pl, 0, sizeof *pl);
  pl->nt = p->n_in + p->n_out;
  pl->n_in = p->n_in;
  pl->numel = p->numel;
  const int n = pl->ndim = p->ndim;
  for (int d = 0; d < n; d++) pl->size[d] = p->shape[d];
  for (int t = 0; t < pl->nt; t++) {
    pl->base[t] = p->t[t].data;
    pl->dtype[t] = (int)p->t[t].dtype;
    pl->esize[t] = zg_dtype_size(p->t[t].dtype);
    for (int d = 0; d < n; d++) pl->stride[t][d] = p->t[t].strides[d];
  }

  /* streaming: the output covers exactly numel elements (dense in its own layout) with a
   * unit inner stride, and is large enough that caching it would only evict the inputs */
  for (int t = pl->n_in; t < pl->nt; t++) {
    int64_t extent = 1;
    for (int d = 0; d < n; d++) extent += (pl->size[d] - 1) * pl->stride[t][d];
    pl->streaming[t] = extent == pl->numel && pl->stride[t][n - 1] == 1 &&
                       pl->numel * pl->esize[t] >= ZG_STREAM_BYTES;
  }

  /* kernels: the cheap recipe when no output is float32; fused runs when step 4 applies */
  int out16 = 1, same = 1, contiguous = 1;
  for (int t = 0; t < pl->nt; t++) {
    if (t >= pl->n_in && pl->dtype[t] == ZG_F32) out16 = 0;
    if (pl->dtype[t] != pl->dtype[0]) same = 0;
    if (pl->stride[t][n - 1] != 1) contiguous = 0;
  }
  pl->bwd = out16 && kt->bwd16 ? kt->bwd16 : kt->bwd;
  pl->fwd = out16 && kt->fwd16 ? kt->fwd16 : kt->fwd;
  int has_run = pl->n_in == 3 ? kt->bwd_run[pl->dtype[0]] != NULL : kt->fwd_run[pl->dtype[0]] != NULL;
  pl->fused = same && contiguous && has_run && pl->size[n - 1] >= ZG_FUSED_MIN_ROW ? pl->dtype[0] : -1;
  for (int t = pl->n_in; t < pl->nt; t++) pl->any_streaming |= pl->streaming[t];
  pl->carry = pl->fused >= 0 && pl->any_streaming && kt->stream_line != NULL;
  pl->prefetch = pl->fused >= 0 ? zg_cpu_prefetch(pl->size[n - 1] * pl->esize[0]) : 0;
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
  const int inner = pl->ndim - 1;
  const float *in[3];
  for (int t = 0; t < pl->n_in; t++) {
    const int64_t st = pl->stride[t][inner];
    int direct = pl->dtype[t] == ZG_F32 && st == 1;
    for (int s = 1; s < nseg && direct; s++)
      direct = seg[s].off[t] == seg[s - 1].off[t] + seg[s - 1].len;
    if (direct) { /* float32, contiguous over the whole block: read it in place */
      in[t] = (const float *)(pl->base[t] + seg[0].off[t] * 4);
      continue;
    }
    ZG_FOR_RUNS(seg, nseg, t, st, {
      k->load[pl->dtype[t]](stage[t] + run_dst, pl->base[t] + run_off * pl->esize[t], run_len, st);
    })
    in[t] = stage[t];
  }
  if (pl->n_in == 3)
    pl->bwd(stage[3], stage[4], in[ZG_BWD_DOUT], in[ZG_BWD_Z], in[ZG_BWD_O], bn);
  else
    pl->fwd(stage[2], in[ZG_FWD_O], in[ZG_FWD_Z], bn);
  for (int t = pl->n_in; t < pl->nt; t++) {
    const int64_t st = pl->stride[t][inner];
    ZG_FOR_RUNS(seg, nseg, t, st, {
      k->store[pl->dtype[t]](pl->base[t] + run_off * pl->esize[t], stage[t] + run_dst, run_len, st,
                             pl->streaming[t]);
    })
  }
}

/* Step 4: one run kernel call over n elements: inputs in[], outputs out[] (bwd: dout, z,
 * o -> dz, dout_scaled; fwd: o, z -> out). */
static void zg_call_run(const zg_plan *pl, const zg_cpu_kernels *k, const char *const *in, char *const *out,
                        int64_t n, int streaming, const zg_run_next *next) {
  if (pl->n_in == 3)
    k->bwd_run[pl->fused](out[0], out[1], in[0], in[1], in[2], n, streaming, next);
  else
    k->fwd_run[pl->fused](out[0], in[0], in[1], n, streaming, next);
}

/* Step 5: the output line that a thread's row piece leaves unfinished, kept for the piece
 * that continues it. Written piecewise, each such line cost ordinary stores (a read of the
 * line first) and two partial vector steps per row, which left the rows of Z as a view with
 * outputs 16 bytes off a line (numpy's large arrays) 8-10 points below aligned ones
 * (docs/perf-notes.md, 3 December 2026). Here the inputs of the line are gathered from the two
 * pieces, computed by one whole vector step and streamed. A line the thread does not finish
 * (its items end, the next piece does not continue it) is computed from what was gathered
 * and written with ordinary stores, only those elements. Results do not depend on it: the
 * same run kernel computes every element, wherever the pieces are cut (cpu_kernels.h). */
typedef struct zg_carry {
  _Alignas(64) unsigned char in[3][64];  /* the line's inputs gathered so far */
  _Alignas(64) unsigned char out[2][64]; /* its outputs, before they are streamed */
  char *dst[2];                          /* where the line is in each output */
  int64_t fill;                          /* elements gathered (0 = no line pending) */
} zg_carry;

/* Computes the pending line's `fill` elements; streams it when whole, else stores them. */
static void zg_carry_flush(const zg_plan *pl, const zg_cpu_kernels *k, zg_carry *cr) {
  if (cr->fill == 0) return;
  const int64_t es = pl->esize[0];
  const char *in[3] = {(char *)cr->in[0], (char *)cr->in[1], (char *)cr->in[2]};
  const int no = pl->nt - pl->n_in;
  char *out[2];
  for (int o = 0; o < no; o++) out[o] = pl->streaming[pl->n_in + o] ? (char *)cr->out[o] : cr->dst[o];
  zg_call_run(pl, k, in, out, cr->fill, 0, NULL);
  for (int o = 0; o < no; o++) {
    if (!pl->streaming[pl->n_in + o]) continue;
    if (cr->fill * es == 64)
      k->stream_line(cr->dst[o], cr->out[o]);
    else
      memcpy(cr->dst[o], cr->out[o], (size_t)(cr->fill * es));
  }
  cr->fill = 0;
}

/* Appends n elements of the inputs at in[] to the pending line. */
static void zg_carry_gather(const zg_plan *pl, zg_carry *cr, const char *const *in, int64_t n) {
  const int64_t es = pl->esize[0];
  for (int t = 0; t < pl->n_in; t++) memcpy(cr->in[t] + cr->fill * es, in[t], (size_t)(n * es));
  cr->fill += n;
}

/* One row piece of `len` elements at offsets `off` (step 4), with step 5 when cr is not
 * NULL and every streaming output is at the same place within a line. */
static void zg_run_piece(const zg_plan *pl, const zg_cpu_kernels *k, zg_carry *cr, const int64_t *off,
                         int64_t len, const zg_run_next *next) {
  const int no = pl->nt - pl->n_in;
  const int64_t es = pl->esize[0], per_line = 64 / es;
  const char *in[3];
  char *at[2], *to[2];
  int streaming = 0, phase = -1, same_phase = 1;
  for (int t = 0; t < pl->n_in; t++) in[t] = pl->base[t] + off[t] * es;
  for (int o = 0; o < no; o++) {
    const int t = pl->n_in + o;
    at[o] = pl->base[t] + off[t] * es;
    if (!pl->streaming[t]) continue;
    streaming |= 1 << o;
    const int ph = (int)((uintptr_t)at[o] & 63u);
    if (ph % es != 0 || (phase >= 0 && ph != phase)) same_phase = 0;
    phase = ph;
  }
  if (!cr || !same_phase) {
    if (cr) zg_carry_flush(pl, k, cr);
    zg_call_run(pl, k, in, at, len, streaming, next);
    return;
  }
  for (int o = 0; o < no && cr->fill > 0; o++)
    if (at[o] != cr->dst[o] + cr->fill * es) zg_carry_flush(pl, k, cr);

  int64_t i = 0;
  if (cr->fill > 0) { /* finish the line the previous piece left */
    i = per_line - cr->fill < len ? per_line - cr->fill : len;
    zg_carry_gather(pl, cr, in, i);
    if (cr->fill == per_line) zg_carry_flush(pl, k, cr);
  } else if (phase != 0) { /* nothing of this thread before it: ordinary stores up to the line */
    i = (64 - phase) / es < len ? (64 - phase) / es : len;
    zg_call_run(pl, k, in, at, i, 0, NULL);
  }
  const int64_t body = (len - i) / per_line * per_line; /* whole lines, streamed by the run */
  const char *rest[3];
  for (int t = 0; t < pl->n_in; t++) rest[t] = in[t] + i * es;
  if (body > 0) {
    /* Its prefetch runs on over the rest of the row, then into the next piece from the line
     * of that piece's first element: the next piece's head is gathered, not run, so no step
     * would fetch that line otherwise, and a row of Z starts a new stream the hardware
     * prefetchers do not see coming (docs/perf-notes.md, 3 December 2026). */
    zg_run_next on = *next;
    on.run_on = (len - i - body) * es;
    if (on.bytes > 0) { /* each input from its line's start, none past the piece's end */
      int64_t back = 63;
      for (int t = 0; t < pl->n_in; t++) {
        const int64_t ph = (int64_t)((uintptr_t)next->in[t] & 63u);
        on.in[t] = (const char *)((uintptr_t)next->in[t] - (uintptr_t)ph);
        back = ph < back ? ph : back;
      }
      on.bytes += back;
    }
    for (int o = 0; o < no; o++) to[o] = at[o] + i * es;
    zg_call_run(pl, k, rest, to, body, streaming, &on);
    i += body;
    for (int t = 0; t < pl->n_in; t++) rest[t] += body * es;
  }
  if (i < len) { /* the start of a line: gathered for the next piece */
    for (int o = 0; o < no; o++) cr->dst[o] = at[o] + i * es;
    zg_carry_gather(pl, cr, rest, len - i);
  }
}

/* From the start of one row (odometer c over the outer dims, offsets off) to the next. */
static void zg_next_row(const zg_plan *pl, int64_t *c, int64_t *off) {
  for (int d = pl->ndim - 2; d >= 0; d--) {
    c[d]++;
    for (int t = 0; t < pl->nt; t++) off[t] += pl->stride[t][d];
    if (c[d] < pl->size[d]) return;
    c[d] = 0;
    for (int t = 0; t < pl->nt; t++) off[t] -= pl->size[d] * pl->stride[t][d];
  }
}

/* Elements [start, end) of the flat index space, in blocks (or fused row pieces). */
static void zg_run_item(const zg_plan *pl, const zg_cpu_kernels *k, int64_t start, int64_t end,
                        float (*stage)[ZG_CPU_BLOCK], zg_seg *seg, zg_carry *cr) {
  const int nd = pl->ndim, inner = nd - 1, nt = pl->nt;
  const int64_t row_len = pl->size[inner];
  int64_t c[ZG_MAX_DIMS] = {0};
  int64_t off[5];
  int64_t j = start % row_len, r = start / row_len;
  for (int d = inner - 1; d >= 0; d--) {
    c[d] = r % pl->size[d];
    r /= pl->size[d];
  }
  for (int t = 0; t < nt; t++) {
    off[t] = j * pl->stride[t][inner];
    for (int d = 0; d < inner; d++) off[t] += c[d] * pl->stride[t][d];
  }

  int64_t idx = start;
  while (idx < end) {
    int nseg = 0, bn = 0;
    const int64_t cap = pl->fused >= 0 ? INT64_MAX : ZG_CPU_BLOCK;
    while (bn < cap && idx < end) {
      int64_t len = row_len - j;
      if (len > cap - bn) len = cap - bn;
      if (len > end - idx) len = end - idx;
      /* where the piece after this one starts: on in this row, or at the next row's start */
      int64_t after[5] = {0}, after_len = row_len - j - len;
      for (int t = 0; t < nt; t++) after[t] = off[t] + len * pl->stride[t][inner];
      const int row_done = after_len == 0;
      if (row_done && idx + len < pl->numel) {
        for (int t = 0; t < nt; t++) after[t] -= row_len * pl->stride[t][inner];
        zg_next_row(pl, c, after);
        after_len = row_len;
      }
      if (pl->fused >= 0) {
        zg_run_next next = {{0, 0, 0}, after_len * pl->esize[0], 0, pl->prefetch};
        for (int t = 0; t < pl->n_in; t++) next.in[t] = pl->base[t] + after[t] * pl->esize[0];
        zg_run_piece(pl, k, cr, off, len, &next);
      } else {
        zg_seg *sg = &seg[nseg++];
        memcpy(sg->off, off, sizeof off);
        sg->len = (int32_t)len;
        sg->dst = bn;
        bn += (int)len;
      }
      idx += len;
      j = row_done ? 0 : j + len;
      memcpy(off, after, sizeof off);
    }
    if (nseg > 0) zg_run_block(pl, k, seg, nseg, bn, stage);
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
  const int64_t nitems = (pl.numel + ZG_ITEM - 1) / ZG_ITEM;

  int nthreads = 1;
#ifdef _OPENMP
  nthreads = opts->num_threads > 0 ? opts->num_threads : omp_get_max_threads();
  if (pl.numel < ZG_PARALLEL_MIN) nthreads = 1;
  if ((int64_t)nthreads > nitems) nthreads = (int)nitems;
  if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
#endif
  {
    _Alignas(64) float stage[5][ZG_CPU_BLOCK];
    zg_seg seg[ZG_CPU_BLOCK];
    zg_carry carry; /* step 5: per thread, across its items (consecutive ones continue) */
    carry.fill = 0;
#ifdef _OPENMP
#pragma omp for schedule(static) nowait
#endif
    for (int64_t it = 0; it < nitems; it++) {
      int64_t start = it * ZG_ITEM;
      int64_t end = start + ZG_ITEM < pl.numel ? start + ZG_ITEM : pl.numel;
      zg_run_item(&pl, k, start, end, stage, seg, pl.carry ? &carry : NULL);
    }
    if (pl.carry) zg_carry_flush(&pl, k, &carry);
    if (pl.any_streaming) zg_store_fence();
  }
  (void)nthreads;
  return ZGATE_OK;
}
