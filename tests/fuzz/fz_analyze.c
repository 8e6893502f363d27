/* What the contract says about a decoded call of any rank, worked out independently of zgate:
 *   definite  the call must be refused (the first reason is kept for the crash report);
 *   odd       zgate may refuse it although nothing is wrong (conservative checks, device
 *             ids on the CPU, options from other versions); either answer is accepted;
 *   otherwise the call must succeed.
 * Each reason carries the statuses docs/reliability.md gives it; a refusal must carry one
 * of the reasons' statuses.
 * Buffers are sized here so that every tensor the library may accept lies inside a real
 * heap allocation, ending exactly at its last element's last byte unless the input asks
 * for slack: ASan's redzone sits right after it. A description that cannot fit (huge
 * shapes, strides or offsets) is only handed out after adding a defect the contract says
 * must be refused: the library cannot know buffer sizes, so it must reject such a call on
 * the defect, before touching any memory. All arithmetic is exact in __int128. */
#define _POSIX_C_SOURCE 200809L /* posix_memalign, strnlen */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz_case.h"

typedef __int128 i128;
#define BIG ((i128)1 << 100) /* clamp: larger than any real extent, small enough to add */

/* a * b for any signs, saturating at +-BIG (operands within int64 or already clamped). */
static i128 mulclamp(i128 a, i128 b) {
  i128 ua = a < 0 ? -a : a, ub = b < 0 ? -b : b;
  if (ua == 0 || ub == 0) return 0;
  i128 m = ua > BIG / ub ? BIG : ua * ub;
  return (a < 0) != (b < 0) ? -m : m;
}
/* a * b for a, b >= 0, saturating at BIG. */
static i128 mulsat(i128 a, int64_t b) { return b <= 0 || a == 0 ? 0 : a > BIG / b ? BIG : a * b; }

static fz_dt dtype_of(DLDataType t) {
  if (t.lanes != 1) return FZ_DT_OTHER;
  if (t.code == kDLFloat && t.bits == 32) return FZ_DT_F32;
  if (t.code == kDLFloat && t.bits == 16) return FZ_DT_F16;
  if (t.code == kDLBfloat && t.bits == 16) return FZ_DT_BF16;
  if (t.code == kDLFloat && t.bits == 64) return FZ_DT_F64;
  return FZ_DT_OTHER;
}

int64_t fz_elsize(fz_dt dt) { return dt == FZ_DT_F64 ? 8 : dt == FZ_DT_F32 ? 4 : 2; }

FZ_NO_COVERAGE int fz_index_first(int nd, const int64_t *n, int64_t *idx) {
  int any = 1;
  for (int d = 0; d < nd; d++) {
    idx[d] = 0;
    if (n[d] <= 0) any = 0;
  }
  return any;
}

FZ_NO_COVERAGE int fz_index_next(int nd, const int64_t *n, int64_t *idx) {
  for (int d = nd - 1; d >= 0; d--) {
    if (++idx[d] < n[d]) return 1;
    idx[d] = 0;
  }
  return 0;
}

FZ_NO_COVERAGE int64_t fz_elem_off(const fz_info *in, int nd, const int64_t *idx) {
  i128 off = 0;
  for (int d = 0; d < nd; d++) off += (i128)idx[d] * in->stride[d];
  return (int64_t)(in->rel + off * in->elsize);
}

static int is_out(const fz_case *c, int ti) { return ti >= c->n_in; }
static int dos_of(const fz_case *c) { return c->n_t == 5 ? 4 : -1; }
static void info_of(fz_case *c, int ti) {
  const fz_tensor *t = &c->t[ti];
  fz_info *in = &c->info[ti];
  memset(in, 0, sizeof *in);
  in->dt = t->present ? dtype_of(t->dl.dtype) : FZ_DT_OTHER;
  in->elsize = fz_elsize(in->dt);
  in->rel = (i128)t->data_off + (i128)t->dl.byte_offset;
  if (!t->present || !fz_rank_ok(t->dl.ndim) || (!t->dl.shape && t->dl.ndim > 0)) return;
  const int nd = t->dl.ndim;
  const int64_t *n = t->dl.shape;
  for (int d = 0; d < nd; d++)
    if (n[d] < 0) return;
  in->shape_ok = 1;
  in->numel = 1;
  for (int d = 0; d < nd; d++) in->numel = mulsat(in->numel, n[d]);
  i128 acc = 1;
  for (int d = nd - 1; d >= 0; d--) {
    in->stride[d] = t->dl.strides ? (i128)t->dl.strides[d] : acc;
    acc = mulsat(acc, n[d] > 0 ? n[d] : 1);
  }
  i128 maxoff = 0;
  for (int d = 0; d < nd; d++)
    if (n[d] > 1) maxoff += mulclamp(n[d] - 1, in->stride[d]);
  in->end = in->rel + (maxoff + 1) * in->elsize;
}

#define ST(status) (1u << (status))

/* A reason the call must be refused, with the statuses that the contract gives it. */
static void mark(fz_case *c, uint32_t statuses, const char *why) {
  if (!c->definite) c->why = why;
  c->definite = 1;
  c->statuses |= statuses;
}
/* A reason zgate may refuse the call for (either answer is right), and with what. */
static void mark_odd(fz_case *c, uint32_t statuses, const char *why) {
  if (!c->odd) c->odd_why = why;
  c->odd = 1;
  c->statuses |= statuses;
}

/* Everything decidable from the descriptions alone (no buffer placement), in the order
 * zgate checks (docs/reliability.md): once a step finds a definite reason, zgate reports
 * one of that step's (or an earlier step's) reasons, so the later steps are not needed. */
static void classify_static(fz_case *c) {
  const int ref = c->op == FZ_BWD_REF || c->op == FZ_FWD_REF;
  c->definite = c->odd = 0;
  c->why = c->odd_why = NULL;
  c->statuses = 0;
  if (!ref && !c->opts_null) {
    if (c->opts_bad) mark(c, ST(c->opts_bad), "bad options");
    if (c->opts_odd)
      mark_odd(c, ST(ZGATE_ERR_OPTIONS) | ST(ZGATE_ERR_ISA_UNAVAILABLE), "unusual options");
  }
  for (int ti = 0; ti < c->n_t; ti++) {
    const fz_tensor *t = &c->t[ti];
    const fz_info *in = &c->info[ti];
    if (!t->present) {
      mark(c, ST(ZGATE_ERR_NULL_ARGUMENT), "NULL tensor pointer");
    } else if (!fz_rank_ok(t->dl.ndim)) {
      mark(c, ST(ZGATE_ERR_NDIM), "ndim outside 0..ZGATE_MAX_NDIM");
    } else if (!t->dl.shape && t->dl.ndim > 0) {
      mark(c, ST(ZGATE_ERR_NULL_ARGUMENT), "shape NULL");
    } else {
      if (!in->shape_ok) mark(c, ST(ZGATE_ERR_NEGATIVE_SIZE), "negative size");
      if (t->dl.dtype.lanes != 1) mark(c, ST(ZGATE_ERR_LANES), "dtype lanes not 1");
      else if (in->dt == FZ_DT_OTHER || (in->dt == FZ_DT_F64 && !ref))
        mark(c, ST(ZGATE_ERR_DTYPE), "dtype not accepted");
    }
  }
  if (c->definite) return;

  const DLTensor *t0 = &c->t[0].dl;
  c->ndim = t0->ndim; /* the call's rank and shape from here on */
  for (int d = 0; d < FZ_MAX_NDIM; d++) c->shape[d] = d < c->ndim ? t0->shape[d] : 1;
  const int nd = c->ndim;
  for (int ti = 1; ti < c->n_t; ti++) {
    const DLTensor *t = &c->t[ti].dl;
    if (t->ndim != nd) { mark(c, ST(ZGATE_ERR_SHAPE_MISMATCH), "ranks differ"); continue; }
    for (int d = 0; d < nd; d++)
      if (t->shape[d] != t0->shape[d]) mark(c, ST(ZGATE_ERR_SHAPE_MISMATCH), "shapes differ");
  }
  const i128 numel = c->info[0].numel;
  if (numel > INT64_MAX) mark(c, ST(ZGATE_ERR_OVERFLOW), "element count overflows");
  DLDevice dev = t0->device;
  for (int ti = 0; ti < c->n_t; ti++) {
    DLDevice dv = c->t[ti].dl.device;
    if (dv.device_type != dev.device_type || dv.device_id != dev.device_id)
      mark(c, ST(ZGATE_ERR_DEVICE_MISMATCH), "devices differ");
  }
  if (dev.device_type == kDLCUDA || dev.device_type == kDLCUDAManaged)
    mark(c, ST(ZGATE_ERR_NO_CUDA), "CUDA tensors, CUDA not built");
  else if (dev.device_type == kDLCUDAHost)
    mark_odd(c, ST(ZGATE_ERR_DEVICE_UNSUPPORTED), "pinned host memory (may run on the CPU)");
  else if (dev.device_type != kDLCPU)
    mark(c, ST(ZGATE_ERR_DEVICE_UNSUPPORTED), "unsupported device type");
  if (dev.device_id != 0) mark_odd(c, ST(ZGATE_ERR_DEVICE_UNSUPPORTED), "CPU device id != 0");
  if (c->definite) return;

  for (int ti = 0; ti < c->n_t; ti++)
    for (int d = 0; d < nd; d++)
      if (c->info[ti].stride[d] < 0) mark(c, ST(ZGATE_ERR_NEGATIVE_STRIDE), "negative stride");
  if (c->definite || numel == 0) return;

  for (int ti = 0; ti < c->n_t; ti++) {
    const fz_tensor *t = &c->t[ti];
    const fz_info *in = &c->info[ti];
    if (t->buf < 0) { mark(c, ST(ZGATE_ERR_NULL_DATA), "NULL data with elements"); continue; }
    if (t->dl.byte_offset > (uint64_t)INT64_MAX) {
      mark(c, ST(ZGATE_ERR_OVERFLOW), "byte_offset past INT64_MAX");
      continue;
    }
    if (in->rel % in->elsize != 0) mark(c, ST(ZGATE_ERR_MISALIGNED), "misaligned");
    /* The extent from the first element; past INT64_MAX nothing can address it. A start
     * plus extent past INT64_MAX may pass the end of the address space (no such memory
     * exists, but zgate cannot know: fz_analyze hands it out only with a defect added). */
    if (in->end - in->rel > INT64_MAX) mark(c, ST(ZGATE_ERR_OVERFLOW), "byte extent overflows");
    else if (in->end > INT64_MAX)
      mark_odd(c, ST(ZGATE_ERR_OVERFLOW), "start + extent past INT64_MAX");
  }
  for (int o = c->n_in; o < c->n_t; o++)
    for (int d = 0; d < nd; d++)
      if (c->info[o].stride[d] == 0 && c->shape[d] > 1)
        mark(c, ST(ZGATE_ERR_OUTPUT_SELF_OVERLAP),
             "two elements of an output share memory (zero stride)");
}

/* Give tensor ti its own copies of shape and strides so a defect can be written in. */
static void own_arrays(fz_tensor *t) {
  if (t->owns_arrays) return;
  size_t bytes = (size_t)fz_array_len(t->dl.ndim) * sizeof(int64_t);
  int64_t *sh = NULL, *st = NULL;
  if (t->dl.shape) { sh = malloc(bytes + (bytes == 0)); memcpy(sh, t->dl.shape, bytes); }
  if (t->dl.strides) { st = malloc(bytes + (bytes == 0)); memcpy(st, t->dl.strides, bytes); }
  t->dl.shape = sh;
  t->dl.strides = st;
  t->owns_arrays = 1;
}

static int first_dim_over_1(const fz_tensor *t) {
  for (int d = 0; d < t->dl.ndim; d++)
    if (t->dl.shape[d] > 1) return d;
  return -1;
}

/* A defect the contract says must be refused, kind (inject & 15) % 12 on tensor
 * (inject >> 4) % n. Only applied to calls that were otherwise acceptable, so every
 * tensor is present with the call's rank; where the kind does not apply (rank 0, no dim
 * of size > 1), the defect is an ndim outside the API's ranks. */
static void inject(fz_case *c) {
  int ti = (c->inject >> 4) % c->n_t;
  fz_tensor *t = &c->t[ti];
  const int nd = t->dl.ndim;
  t->same_ptr = 0; /* the defect must reach the library through this tensor's own struct */
  int d, kind = (c->inject & 15) % 12;
  switch (kind) {
    case 1: t->dl.dtype.code = kDLInt; return;
    case 2: t->dl.dtype.lanes = 2; return;
    case 3: t->dl.device.device_type = kDLCUDA; return;
    case 4: t->present = 0; return;
    case 5:
      if (nd == 0) break;
      own_arrays(t);
      t->dl.shape[ti % nd] += 1;
      return;
    case 6: t->buf = -1; return;
    case 7: t->dl.byte_offset ^= 1; return;
    case 8:
      if (nd == 0) break;
      own_arrays(t);
      t->dl.shape[c->inject % nd] = -1;
      return;
    case 9:
    case 11:
      d = first_dim_over_1(t);
      if (d < 0) break;
      if (kind == 9 && ti < c->n_in) break; /* zero strides are fine in inputs */
      own_arrays(t);
      if (!t->dl.strides) {
        t->dl.strides = malloc((size_t)nd * sizeof(int64_t));
        for (int k = 0; k < nd; k++) t->dl.strides[k] = (int64_t)c->info[ti].stride[k];
      }
      t->dl.strides[d] = kind == 9 ? 0 : -1;
      return;
    case 10:
      if (c->op == FZ_BWD_REF || c->op == FZ_FWD_REF) break;
      c->opts_null = 0;
      c->opts_odd = 0;
      c->opts.struct_size = sizeof(zgate_options);
      c->opts.num_threads = -1;
      memcpy(c->opts_mem, &c->opts, sizeof c->opts);
      c->opts_bad = ZGATE_ERR_OPTIONS;
      return;
    default: break;
  }
  t->dl.ndim = -1; /* outside every rank the API takes */
}

static int has_negative_stride(const fz_info *in, int nd) {
  for (int d = 0; d < nd; d++)
    if (in->stride[d] < 0) return 1;
  return 0;
}

/* Buffer sizes: every tensor that could be accepted ends inside its buffer. */
static void plan_buffers(fz_case *c, int64_t need[FZ_MAX_BUF]) {
  for (int k = 0; k < c->n_buf; k++) need[k] = 0;
  for (int ti = 0; ti < c->n_t; ti++) {
    const fz_tensor *t = &c->t[ti];
    const fz_info *in = &c->info[ti];
    if (!t->present || t->buf < 0) continue;
    if (t->data_off > need[t->buf]) need[t->buf] = t->data_off;
    if (!in->shape_ok || in->numel == 0 || in->end > FZ_CAP) continue;
    if (!has_negative_stride(in, t->dl.ndim) && in->end > need[t->buf])
      need[t->buf] = (int64_t)in->end;
  }
  for (int k = 0; k < c->n_buf; k++) need[k] += c->buf_slack[k];
}

static int fits(const fz_case *c, const int64_t size[FZ_MAX_BUF]) {
  for (int ti = 0; ti < c->n_t; ti++) {
    const fz_info *in = &c->info[ti];
    if (c->t[ti].buf < 0 || in->numel == 0) continue;
    if (in->end > size[c->t[ti].buf]) return 0;
  }
  return 1;
}

/* Sufficient no-self-overlap test (dims of size > 1 sorted by stride, each stride at least
 * the span of the inner ones): what a careful library may use instead of the exact one. */
static int strides_nest(const fz_case *c, int ti) {
  const fz_info *in = &c->info[ti];
  int dims[ZGATE_MAX_NDIM], n = 0;
  for (int d = 0; d < c->ndim; d++)
    if (c->shape[d] > 1) dims[n++] = d;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && in->stride[dims[j - 1]] > in->stride[dims[j]]; j--) {
      int tmp = dims[j]; dims[j] = dims[j - 1]; dims[j - 1] = tmp;
    }
  i128 span = 1;
  for (int i = 0; i < n; i++) {
    if (in->stride[dims[i]] < span) return 0;
    span += in->stride[dims[i]] * (c->shape[dims[i]] - 1);
  }
  return 1;
}

/* The status for output o sharing memory with tensor j: dout_scaled starting at dout's
 * first byte is an in-place call with the wrong dtype or strides, anything else an alias. */
static uint32_t overlap_status(const fz_case *c, int o, int j) {
  int same_start = c->t[o].buf == c->t[j].buf && c->info[o].rel == c->info[j].rel;
  int inplace = o == dos_of(c) && j == 0 && same_start;
  return inplace ? ST(ZGATE_ERR_INPLACE_MISMATCH) : ST(ZGATE_ERR_ALIAS);
}

/* Exact memory relations, byte by byte (every tensor fits, numel small enough). */
FZ_NO_COVERAGE static void classify_memory(fz_case *c) {
  const int dos = dos_of(c), nd = c->ndim;
  const int64_t *n = c->shape;
  uint8_t *maskv[FZ_MAX_BUF] = {0};
  for (int k = 0; k < c->n_buf; k++) maskv[k] = calloc(1, (size_t)c->buf_size[k] + 1);
  if (dos >= 0) {
    const fz_info *a = &c->info[dos], *b = &c->info[0];
    c->inplace_sem = c->t[dos].buf == c->t[0].buf && a->dt == b->dt && a->rel == b->rel;
    for (int d = 0; d < nd; d++)
      if (n[d] > 1 && a->stride[d] != b->stride[d]) c->inplace_sem = 0;
  }
  int64_t idx[ZGATE_MAX_NDIM];
  for (int ti = 0; ti < c->n_t; ti++) {
    const fz_info *in = &c->info[ti];
    uint8_t *m = maskv[c->t[ti].buf], bit = (uint8_t)(1u << ti);
    for (int more = fz_index_first(nd, n, idx); more; more = fz_index_next(nd, n, idx)) {
      int64_t off = fz_elem_off(in, nd, idx);
      if (is_out(c, ti) && (m[off] & bit))
        mark(c, ST(ZGATE_ERR_OUTPUT_SELF_OVERLAP), "two elements of an output share memory");
      for (int64_t b = 0; b < in->elsize; b++) m[off + b] |= bit;
    }
  }
  uint8_t shares[FZ_MAX_T] = {0}; /* per output: the tensors it shares a byte with */
  for (int k = 0; k < c->n_buf; k++)
    for (int64_t i = 0; i < c->buf_size[k]; i++)
      for (int o = c->n_in; o < c->n_t; o++)
        if (maskv[k][i] & (1u << o)) shares[o] |= maskv[k][i] & (uint8_t)~(1u << o);
  for (int k = 0; k < c->n_buf; k++) free(maskv[k]);
  if (dos >= 0 && c->inplace_sem) shares[dos] &= (uint8_t)~1u;
  for (int o = c->n_in; o < c->n_t; o++)
    for (int j = 0; j < c->n_t; j++)
      if (shares[o] & (1u << j))
        mark(c, overlap_status(c, o, j), "an output shares memory with another tensor");
  /* What a conservative (interval-based) check may refuse: also with a reason above, as
   * zgate may find one of these first. */
  for (int o = c->n_in; o < c->n_t; o++) {
    if (!strides_nest(c, o))
      mark_odd(c, ST(ZGATE_ERR_OUTPUT_SELF_OVERLAP), "output strides interleave (no overlap)");
    for (int j = 0; j < c->n_t; j++) {
      if (j == o || c->t[j].buf != c->t[o].buf) continue;
      const fz_info *a = &c->info[o], *b = &c->info[j];
      if (a->end <= b->rel || b->end <= a->rel) continue;
      if (o == dos && j == 0 && c->inplace_sem) continue;
      mark_odd(c, overlap_status(c, o, j), "byte ranges overlap (elements do not)");
    }
  }
  if (dos >= 0 && c->inplace_sem) {
    const DLTensor *a = &c->t[dos].dl, *b = &c->t[0].dl;
    int same = a->data == b->data && a->byte_offset == b->byte_offset;
    if (!a->strides != !b->strides) same = 0;
    for (int d = 0; d < nd && a->strides && b->strides; d++)
      if (a->strides[d] != b->strides[d]) same = 0;
    if (!same)
      mark_odd(c, ST(ZGATE_ERR_INPLACE_MISMATCH) | ST(ZGATE_ERR_ALIAS),
               "in place by address, not by identical fields");
  }
}

void fz_analyze(fz_case *c) {
  int64_t size[FZ_MAX_BUF];
  for (int round = 0; round < 2; round++) {
    for (int ti = 0; ti < c->n_t; ti++) info_of(c, ti);
    classify_static(c);
    plan_buffers(c, size);
    if (c->definite || c->info[0].numel == 0 || fits(c, size)) break;
    if (round == 0) inject(c); /* cannot be placed: make the call one that must fail */
  }
  if (!c->definite && c->info[0].numel > 0 && !fits(c, size)) {
    /* the injected defect did not apply: fall back to one that always does */
    c->t[0].present = 1;
    c->t[0].dl.ndim = -1;
    for (int ti = 0; ti < c->n_t; ti++) info_of(c, ti);
    classify_static(c);
    plan_buffers(c, size);
  }
  for (int k = 0; k < c->n_buf; k++) {
    c->buf_size[k] = size[k];
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)(size[k] ? size[k] : 1))) abort(); /* 64-aligned: rel % elsize is alignment */
    c->buf[k] = p;
  }
  for (int ti = 0; ti < c->n_t; ti++) {
    fz_tensor *t = &c->t[ti];
    t->dl.data = t->buf < 0 ? NULL : c->buf[t->buf] + t->data_off;
  }
  if (c->definite || c->info[0].numel == 0) return;
  /* An output cannot hold more elements than its buffer has room for without two of them
   * sharing memory (this also keeps the byte walk below small). */
  for (int o = c->n_in; o < c->n_t; o++)
    if (c->info[o].numel * c->info[o].elsize > c->buf_size[c->t[o].buf]) {
      mark(c, ST(ZGATE_ERR_OUTPUT_SELF_OVERLAP),
           "two elements of an output share memory (pigeonhole)");
      return;
    }
  classify_memory(c);
}

static void dump_array(const char *what, const int64_t *v, int32_t ndim) {
  if (!v) { fprintf(stderr, " %s NULL", what); return; }
  if (!fz_rank_ok(ndim)) return;
  fprintf(stderr, " %s (", what);
  for (int d = 0; d < ndim; d++) fprintf(stderr, "%s%lld", d ? "," : "", (long long)v[d]);
  fprintf(stderr, ")");
}

static void dump_tensor(const fz_case *c, int ti) {
  const fz_tensor *t = &c->t[ti];
  const fz_info *in = &c->info[ti];
  fprintf(stderr, "  t%d%s", ti, is_out(c, ti) ? " (out)" : "");
  if (!t->present) { fprintf(stderr, ": NULL\n"); return; }
  fprintf(stderr, ": ndim %d dtype (%u,%u,%u) dev (%d,%d) buf %d data_off %lld byte_offset %llu clone_of %d%s",
          (int)t->dl.ndim, t->dl.dtype.code, t->dl.dtype.bits, t->dl.dtype.lanes,
          (int)t->dl.device.device_type, t->dl.device.device_id, t->buf, (long long)t->data_off,
          (unsigned long long)t->dl.byte_offset, t->clone_of, t->same_ptr ? " (same pointer)" : "");
  dump_array("shape", t->dl.shape, t->dl.ndim);
  dump_array("strides", t->dl.strides, t->dl.ndim);
  if (in->shape_ok) fprintf(stderr, " bytes [%lld, %lld)", (long long)in->rel, (long long)in->end);
  fprintf(stderr, "\n");
}

/* The call's rank: every present tensor's ndim when they agree, else "mixed". */
static void dump_rank(const fz_case *c, char *out, size_t n) {
  int32_t r = INT32_MIN;
  int mixed = 0;
  for (int ti = 0; ti < c->n_t; ti++) {
    if (!c->t[ti].present) continue;
    if (r != INT32_MIN && c->t[ti].dl.ndim != r) mixed = 1;
    r = c->t[ti].dl.ndim;
  }
  if (mixed || r == INT32_MIN) snprintf(out, n, "mixed");
  else snprintf(out, n, "%d", (int)r);
}

void fz_dump(const fz_case *c, int status) {
  static const char *ops[4] = {"zgate_bwd", "zgate_fwd", "zgate_bwd_reference", "zgate_fwd_reference"};
  char rank[16];
  dump_rank(c, rank, sizeof rank);
  fprintf(stderr, "fuzz case: %s rank %s -> %d (%s), last_error \"%s\"\n", ops[c->op], rank,
          status, zgate_status_str(status), zgate_last_error());
  fprintf(stderr, "  harness: %s%s; statuses",
          c->definite ? "must fail: " : c->odd ? "may fail: " : "must succeed",
          c->definite ? c->why : c->odd ? c->odd_why : "");
  for (int s = 0; s <= ZGATE_ERR_INTERNAL; s++)
    if (c->statuses & ST(s)) fprintf(stderr, " %d", s);
  fprintf(stderr, "; inplace_sem %d\n", c->inplace_sem);
  fprintf(stderr, "  options: %s threads %d isa %s struct_size %zu\n", c->opts_null ? "NULL" : "set",
          c->opts.num_threads, c->opts.cpu_isa ? c->opts.cpu_isa : "(null)", c->opts.struct_size);
  for (int k = 0; k < c->n_buf; k++)
    fprintf(stderr, "  buffer %d: %lld bytes at %p\n", k, (long long)c->buf_size[k], (void *)c->buf[k]);
  for (int ti = 0; ti < c->n_t; ti++) dump_tensor(c, ti);
}
