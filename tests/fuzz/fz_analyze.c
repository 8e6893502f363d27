/* What the contract says about a decoded call, worked out independently of zgate:
 *   definite  the call must be refused (the first reason is kept for the crash report);
 *   odd       zgate may refuse it although nothing is wrong (conservative checks, device
 *             ids on the CPU, options from other versions); either answer is accepted;
 *   otherwise the call must succeed.
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

fz_dt fz_dtype_of(DLDataType t) {
  if (t.lanes != 1) return FZ_DT_OTHER;
  if (t.code == kDLFloat && t.bits == 32) return FZ_DT_F32;
  if (t.code == kDLFloat && t.bits == 16) return FZ_DT_F16;
  if (t.code == kDLBfloat && t.bits == 16) return FZ_DT_BF16;
  if (t.code == kDLFloat && t.bits == 64) return FZ_DT_F64;
  return FZ_DT_OTHER;
}

int64_t fz_elsize(fz_dt dt) { return dt == FZ_DT_F64 ? 8 : dt == FZ_DT_F32 ? 4 : 2; }

int64_t fz_elem_off(const fz_info *in, const int64_t idx[4]) {
  i128 off = 0;
  for (int d = 0; d < 4; d++) off += (i128)idx[d] * in->stride[d];
  return (int64_t)(in->rel + off * in->elsize);
}

static int is_out(const fz_case *c, int ti) { return ti >= c->n_in; }
static int dos_of(const fz_case *c) { return c->n_t == 5 ? 4 : -1; }

static void info_of(fz_case *c, int ti) {
  const fz_tensor *t = &c->t[ti];
  fz_info *in = &c->info[ti];
  memset(in, 0, sizeof *in);
  in->dt = t->present ? fz_dtype_of(t->dl.dtype) : FZ_DT_OTHER;
  in->elsize = fz_elsize(in->dt);
  in->rel = (i128)t->data_off + (i128)t->dl.byte_offset;
  if (!t->present || t->dl.ndim != 4 || !t->dl.shape) return;
  const int64_t *n = t->dl.shape;
  for (int d = 0; d < 4; d++)
    if (n[d] < 0) return;
  in->shape_ok = 1;
  in->numel = 1;
  for (int d = 0; d < 4; d++) in->numel = mulsat(in->numel, n[d]);
  i128 acc = 1;
  for (int d = 3; d >= 0; d--) {
    in->stride[d] = t->dl.strides ? (i128)t->dl.strides[d] : acc;
    acc = mulsat(acc, n[d] > 0 ? n[d] : 1);
  }
  i128 maxoff = 0;
  for (int d = 0; d < 4; d++)
    if (n[d] > 1) maxoff += mulclamp(n[d] - 1, in->stride[d]);
  in->end = in->rel + (maxoff + 1) * in->elsize;
}

static void mark(fz_case *c, const char *why) {
  if (!c->definite) c->why = why;
  c->definite = 1;
}
static void mark_odd(fz_case *c, const char *why) {
  if (!c->odd) c->odd_why = why;
  c->odd = 1;
}

/* Everything decidable from the descriptions alone (no buffer placement). */
static void classify_static(fz_case *c) {
  int ref = c->op == FZ_BWD_REF || c->op == FZ_FWD_REF;
  c->definite = c->odd = 0;
  c->why = c->odd_why = NULL;
  for (int ti = 0; ti < c->n_t; ti++) {
    const fz_tensor *t = &c->t[ti];
    const fz_info *in = &c->info[ti];
    if (!t->present) { mark(c, "NULL tensor pointer"); continue; }
    if (t->dl.ndim != 4) { mark(c, "ndim outside the API's ranks"); continue; } /* fz_decode.c */
    if (!t->dl.shape) { mark(c, "shape NULL"); continue; }
    if (!in->shape_ok) mark(c, "negative size");
    if (in->dt == FZ_DT_OTHER || (in->dt == FZ_DT_F64 && !ref)) mark(c, "dtype/lanes not accepted");
  }
  if (c->definite) return;
  const DLTensor *t0 = &c->t[0].dl;
  for (int ti = 1; ti < c->n_t; ti++)
    for (int d = 0; d < 4; d++)
      if (c->t[ti].dl.shape[d] != t0->shape[d]) mark(c, "shapes differ");
  memcpy(c->shape, t0->shape, sizeof c->shape); /* the call's shape from here on */
  DLDeviceType dev = t0->device.device_type;
  for (int ti = 0; ti < c->n_t; ti++) {
    DLDevice dv = c->t[ti].dl.device;
    if (dv.device_type != dev) mark(c, "device types differ");
    else if (dv.device_id != t0->device.device_id) mark_odd(c, "device ids differ");
  }
  if (dev == kDLCUDA || dev == kDLCUDAManaged) mark(c, "CUDA tensors, CUDA not built");
  else if (dev == kDLCUDAHost) mark_odd(c, "pinned host memory (may run on the CPU)");
  else if (dev != kDLCPU) mark(c, "unsupported device type");
  if (t0->device.device_id != 0) mark_odd(c, "CPU device id != 0");
  if (!ref && !c->opts_null) {
    if (c->opts_known_bad) mark(c, "bad options");
    if (c->opts_odd) mark_odd(c, "unusual options");
  }
  if (c->definite) return;

  i128 numel = c->info[0].numel;
  for (int ti = 0; ti < c->n_t; ti++) {
    const fz_tensor *t = &c->t[ti];
    const fz_info *in = &c->info[ti];
    for (int d = 0; d < 4; d++) {
      if (in->stride[d] == 0 && numel > 0 && t->dl.shape[d] > 1 && is_out(c, ti))
        mark(c, "two elements of an output share memory (zero stride)");
      if (in->stride[d] >= 0) continue;
      if (numel > 0 && t->dl.shape[d] > 1) mark(c, "negative stride");
      else mark_odd(c, "negative stride where it is never used");
    }
    if (numel == 0) continue;
    if (numel > INT64_MAX) { mark(c, "element count overflows"); continue; }
    if (t->buf < 0) { mark(c, "NULL data with elements"); continue; }
    if (t->dl.byte_offset > (uint64_t)INT64_MAX) { mark(c, "byte_offset past INT64_MAX"); continue; }
    if (in->rel % in->elsize != 0) mark(c, "misaligned");
    /* The extent from the first element; past INT64_MAX nothing can address it. A start
     * plus extent past INT64_MAX is odd rather than wrong (no such memory exists, but the
     * library cannot know): fz_analyze only hands it out together with a defect. */
    if (in->end - in->rel > INT64_MAX) mark(c, "byte extent overflows");
  }
}

/* Give tensor ti its own copies of shape and strides so a defect can be written in. */
static void own_arrays(fz_tensor *t) {
  if (t->owns_arrays) return;
  int n = t->dl.ndim > 0 ? t->dl.ndim : 0;
  int64_t *sh = NULL, *st = NULL;
  if (t->dl.shape) { sh = malloc((size_t)n * 8 + (n == 0)); if (n) memcpy(sh, t->dl.shape, (size_t)n * 8); }
  if (t->dl.strides) { st = malloc((size_t)n * 8 + (n == 0)); if (n) memcpy(st, t->dl.strides, (size_t)n * 8); }
  t->dl.shape = sh;
  t->dl.strides = st;
  t->owns_arrays = 1;
}

static int first_dim_over_1(const fz_tensor *t) {
  for (int d = 0; d < 4; d++)
    if (t->dl.shape[d] > 1) return d;
  return -1;
}

/* A defect the contract says must be refused, kind (inject & 15) % 12 on tensor
 * (inject >> 4) % n. Only applied
 * to calls that were otherwise acceptable, so every tensor is present with ndim 4. */
static void inject(fz_case *c) {
  int ti = (c->inject >> 4) % c->n_t;
  fz_tensor *t = &c->t[ti];
  t->same_ptr = 0; /* the defect must reach the library through this tensor's own struct */
  int d, kind = (c->inject & 15) % 12;
  switch (kind) {
    case 1: t->dl.dtype.code = kDLInt; return;
    case 2: t->dl.dtype.lanes = 2; return;
    case 3: t->dl.device.device_type = kDLCUDA; return;
    case 4: t->present = 0; return;
    case 5: own_arrays(t); t->dl.shape[ti % 4] += 1; return;
    case 6: t->buf = -1; return;
    case 7: t->dl.byte_offset ^= 1; return;
    case 8: own_arrays(t); t->dl.shape[c->inject % 4] = -1; return;
    case 9:
    case 11:
      d = first_dim_over_1(t);
      if (d < 0) break;
      if (kind == 9 && ti < c->n_in) break; /* zero strides are fine in inputs */
      own_arrays(t);
      if (!t->dl.strides) {
        t->dl.strides = malloc(4 * sizeof(int64_t));
        for (int k = 0; k < 4; k++) t->dl.strides[k] = (int64_t)c->info[ti].stride[k];
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
      c->opts_known_bad = 1;
      return;
    default: break;
  }
  t->dl.ndim = -1; /* outside every rank the API takes */
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
    int neg = 0;
    for (int d = 0; d < 4; d++) neg |= in->stride[d] < 0;
    if (!neg && in->end > need[t->buf]) need[t->buf] = (int64_t)in->end;
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
  int dims[4], n = 0;
  for (int d = 0; d < 4; d++)
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

/* Exact memory relations, byte by byte (every tensor fits, numel small enough). */
static void classify_memory(fz_case *c) {
  int dos = dos_of(c);
  uint8_t *maskv[FZ_MAX_BUF] = {0};
  for (int k = 0; k < c->n_buf; k++) maskv[k] = calloc(1, (size_t)c->buf_size[k] + 1);
  const int64_t *n = c->shape;
  if (dos >= 0) {
    const fz_info *a = &c->info[dos], *b = &c->info[0];
    c->inplace_sem = c->t[dos].buf == c->t[0].buf && a->dt == b->dt && a->rel == b->rel;
    for (int d = 0; d < 4; d++)
      if (n[d] > 1 && a->stride[d] != b->stride[d]) c->inplace_sem = 0;
  }
  for (int ti = 0; ti < c->n_t; ti++) {
    const fz_info *in = &c->info[ti];
    uint8_t *m = maskv[c->t[ti].buf], bit = (uint8_t)(1u << ti);
    int64_t idx[4];
    for (idx[0] = 0; idx[0] < n[0]; idx[0]++)
      for (idx[1] = 0; idx[1] < n[1]; idx[1]++)
        for (idx[2] = 0; idx[2] < n[2]; idx[2]++)
          for (idx[3] = 0; idx[3] < n[3]; idx[3]++) {
            int64_t off = fz_elem_off(in, idx);
            if (is_out(c, ti) && (m[off] & bit)) mark(c, "two elements of an output share memory");
            for (int64_t b = 0; b < in->elsize; b++) m[off + b] |= bit;
          }
  }
  for (int k = 0; k < c->n_buf; k++)
    for (int64_t i = 0; i < c->buf_size[k]; i++) {
      uint8_t m = maskv[k][i];
      for (int o = c->n_in; o < c->n_t; o++) {
        if (!(m & (1u << o))) continue;
        uint8_t others = m & (uint8_t)~(1u << o);
        if (o == dos && c->inplace_sem) others &= (uint8_t)~1u;
        if (others) mark(c, "an output shares memory with another tensor");
      }
    }
  for (int k = 0; k < c->n_buf; k++) free(maskv[k]);
  if (c->definite) return;
  /* What a conservative (interval-based) check may refuse. */
  for (int o = c->n_in; o < c->n_t; o++) {
    if (!strides_nest(c, o)) mark_odd(c, "output strides interleave (no overlap)");
    for (int j = 0; j < c->n_t; j++) {
      if (j == o || c->t[j].buf != c->t[o].buf) continue;
      const fz_info *a = &c->info[o], *b = &c->info[j];
      if (a->end <= b->rel || b->end <= a->rel) continue;
      if (o == dos && j == 0 && c->inplace_sem) continue;
      mark_odd(c, "byte ranges overlap (elements do not)");
    }
  }
  if (dos >= 0 && c->inplace_sem) {
    const DLTensor *a = &c->t[dos].dl, *b = &c->t[0].dl;
    int same = a->data == b->data && a->byte_offset == b->byte_offset;
    if (!a->strides != !b->strides) same = 0;
    for (int d = 0; d < 4 && a->strides && b->strides; d++)
      if (a->strides[d] != b->strides[d]) same = 0;
    if (!same) mark_odd(c, "in place by address, not by identical fields");
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
      mark(c, "two elements of an output share memory (pigeonhole)");
      return;
    }
  classify_memory(c);
}

static void dump_tensor(const fz_case *c, int ti) {
  const fz_tensor *t = &c->t[ti];
  const fz_info *in = &c->info[ti];
  fprintf(stderr, "  t%d%s", ti, is_out(c, ti) ? " (out)" : "");
  if (!t->present) { fprintf(stderr, ": NULL\n"); return; }
  fprintf(stderr, ": ndim %d dtype (%u,%u,%u) dev (%d,%d) buf %d data_off %lld byte_offset %llu clone_of %d%s",
          t->dl.ndim, t->dl.dtype.code, t->dl.dtype.bits, t->dl.dtype.lanes,
          (int)t->dl.device.device_type, t->dl.device.device_id, t->buf, (long long)t->data_off,
          (unsigned long long)t->dl.byte_offset, t->clone_of, t->same_ptr ? " (same pointer)" : "");
  if (t->dl.shape && t->dl.ndim == 4)
    fprintf(stderr, " shape (%lld,%lld,%lld,%lld)", (long long)t->dl.shape[0],
            (long long)t->dl.shape[1], (long long)t->dl.shape[2], (long long)t->dl.shape[3]);
  if (t->dl.strides && t->dl.ndim == 4)
    fprintf(stderr, " strides (%lld,%lld,%lld,%lld)", (long long)t->dl.strides[0],
            (long long)t->dl.strides[1], (long long)t->dl.strides[2], (long long)t->dl.strides[3]);
  else if (!t->dl.strides)
    fprintf(stderr, " strides NULL");
  if (in->shape_ok) fprintf(stderr, " bytes [%lld, %lld)", (long long)in->rel, (long long)in->end);
  fprintf(stderr, "\n");
}

void fz_dump(const fz_case *c, int status) {
  static const char *ops[4] = {"zgate_bwd", "zgate_fwd", "zgate_bwd_reference", "zgate_fwd_reference"};
  fprintf(stderr, "fuzz case: %s -> %d (%s), last_error \"%s\"\n", ops[c->op], status,
          zgate_status_str(status), zgate_last_error());
  fprintf(stderr, "  harness: %s%s%s%s; inplace_sem %d\n",
          c->definite ? "must fail: " : c->odd ? "may fail: " : "must succeed",
          c->definite ? c->why : "", c->odd && !c->definite ? c->odd_why : "", "",
          c->inplace_sem);
  fprintf(stderr, "  options: %s threads %d isa %s struct_size %zu\n", c->opts_null ? "NULL" : "set",
          c->opts.num_threads, c->opts.cpu_isa ? c->opts.cpu_isa : "(null)", c->opts.struct_size);
  for (int k = 0; k < c->n_buf; k++)
    fprintf(stderr, "  buffer %d: %lld bytes at %p\n", k, (long long)c->buf_size[k], (void *)c->buf[k]);
  for (int ti = 0; ti < c->n_t; ti++) dump_tensor(c, ti);
}
