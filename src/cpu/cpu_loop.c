/* The CPU loop driver: one stride-aware walk over the 4-D problem for every ISA.
 *
 * 1. Normalize: drop size-1 dims, order the rest by the first output's strides (outermost
 *    first), merge neighbours that are contiguous in ALL tensors. Dense tensors become one
 *    long run; Z as a view into the input projection, strides (L*8672, 8672, D, 1), becomes
 *    rows of D contiguous elements.
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
  int ndim;                /* normalized dims, >= 1; dim ndim-1 is the innermost */
  int64_t size[4];
  int64_t stride[5][4];    /* elements, per tensor and normalized dim */
  char *base[5];
  int64_t esize[5];
  int dtype[5];
  int streaming[5];
  int64_t numel;
  int fused;               /* dtype of all tensors when step 4 applies, else -1 */
  zg_bwd_fn bwd;           /* float kernels for staged blocks (bwd or bwd16, ...) */
  zg_fwd_fn fwd;
} zg_plan;

/* One row piece of a block: where it starts in each tensor, its length, and where it
 * sits in the staging buffers. */
typedef struct zg_seg {
  int64_t off[5];
  int32_t len, dst;
} zg_seg;

static int zg_mergeable(const zg_plan *pl, int outer, int inner) {
  for (int t = 0; t < pl->nt; t++)
    if (pl->stride[t][outer] != pl->stride[t][inner] * pl->size[inner]) return 0;
  return 1;
}

static void zg_plan_build(const zg_problem *p, const zg_cpu_kernels *kt, zg_plan *pl) {
  memset(pl, 0, sizeof *pl);
  pl->nt = p->n_in + p->n_out;
  pl->n_in = p->n_in;
  pl->numel = p->numel;
  for (int t = 0; t < pl->nt; t++) {
    pl->base[t] = p->t[t].data;
    pl->dtype[t] = (int)p->t[t].dtype;
    pl->esize[t] = zg_dtype_size(p->t[t].dtype);
  }

  /* dims of size > 1, outermost first by the first output's strides (stable) */
  int dims[4], k = 0;
  const int64_t *os = p->t[p->n_in].strides;
  for (int d = 0; d < 4; d++)
    if (p->shape[d] > 1) dims[k++] = d;
  for (int i = 1; i < k; i++)
    for (int j = i; j > 0 && os[dims[j - 1]] < os[dims[j]]; j--) {
      int tmp = dims[j]; dims[j] = dims[j - 1]; dims[j - 1] = tmp;
    }

  /* merge from the outside in */
  int n = 0;
  for (int i = 0; i < k; i++) {
    int d = dims[i];
    pl->size[n] = p->shape[d];
    for (int t = 0; t < pl->nt; t++) pl->stride[t][n] = p->t[t].strides[d];
    if (n > 0 && zg_mergeable(pl, n - 1, n)) {
      pl->size[n - 1] *= pl->size[n];
      for (int t = 0; t < pl->nt; t++) pl->stride[t][n - 1] = pl->stride[t][n];
    } else {
      n++;
    }
  }
  if (n == 0) { /* a single element */
    pl->size[0] = 1;
    for (int t = 0; t < pl->nt; t++) pl->stride[t][0] = 0;
    n = 1;
  }
  pl->ndim = n;

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

/* Step 4: one run kernel call per row piece (all tensors contiguous along the row). `nx` is
 * where the inputs go on after the piece and `nx_len` how many elements follow there (0 =
 * none), for the run's prefetching (cpu_kernels.h). */
static void zg_run_fused(const zg_plan *pl, const zg_cpu_kernels *k, const int64_t *off, int64_t len,
                         const int64_t *nx, int64_t nx_len) {
  const int64_t es = pl->esize[0];
  zg_run_next next = {{0, 0, 0}, nx_len * es};
  for (int t = 0; t < pl->n_in; t++) next.in[t] = pl->base[t] + nx[t] * es;
  if (pl->n_in == 3) {
    int streaming = pl->streaming[3] | pl->streaming[4] << 1;
    k->bwd_run[pl->fused](pl->base[3] + off[3] * es, pl->base[4] + off[4] * es, pl->base[0] + off[0] * es,
                          pl->base[1] + off[1] * es, pl->base[2] + off[2] * es, len, streaming, &next);
  } else {
    k->fwd_run[pl->fused](pl->base[2] + off[2] * es, pl->base[0] + off[0] * es, pl->base[1] + off[1] * es,
                          len, pl->streaming[2], &next);
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
                        float (*stage)[ZG_CPU_BLOCK], zg_seg *seg) {
  const int nd = pl->ndim, inner = nd - 1, nt = pl->nt;
  const int64_t row_len = pl->size[inner];
  int64_t c[4] = {0, 0, 0, 0};
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
        zg_run_fused(pl, k, off, len, after, after_len);
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
  const zg_cpu_kernels *k = zg_cpu_select(opts->cpu_isa);
  if (!k) {
    int st = zg_cpu_check(opts->cpu_isa);
    return st ? st : zg_fail(ZGATE_ERR_INTERNAL, "cpu: no kernel table");
  }
  for (int t = 0; t < p->n_in + p->n_out; t++)
    if (p->t[t].dtype > ZG_BF16)
      return zg_fail(ZGATE_ERR_INTERNAL, "cpu: dtype %d reached the CPU backend", (int)p->t[t].dtype);

  zg_plan pl;
  zg_plan_build(p, k, &pl);
  const int64_t nitems = (pl.numel + ZG_ITEM - 1) / ZG_ITEM;
  int any_streaming = 0;
  for (int t = pl.n_in; t < pl.nt; t++) any_streaming |= pl.streaming[t];

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
#ifdef _OPENMP
#pragma omp for schedule(static) nowait
#endif
    for (int64_t it = 0; it < nitems; it++) {
      int64_t start = it * ZG_ITEM;
      int64_t end = start + ZG_ITEM < pl.numel ? start + ZG_ITEM : pl.numel;
      zg_run_item(&pl, k, start, end, stage, seg);
    }
    if (any_streaming) zg_store_fence();
  }
  (void)nthreads;
  return ZGATE_OK;
}
