/* Turns the caller's DLTensors into a zg_problem, refusing anything a backend could not
 * handle safely. Everything is checked before any output is touched; all size arithmetic
 * is 64-bit with explicit overflow checks, because a hostile or buggy caller can put any
 * value in any field. The first failing check decides the status, in this order:
 *
 *   per tensor, in signature order   NULL tensor -> NULL_ARGUMENT; ndim outside
 *                                    0..ZGATE_MAX_NDIM -> NDIM; NULL shape (ndim > 0) ->
 *                                    NULL_ARGUMENT; size < 0 -> NEGATIVE_SIZE;
 *                                    lanes != 1 -> LANES; dtype not f32/f16/bf16 (f64 in the
 *                                    *_reference calls only) -> DTYPE
 *   shapes differ from the first     SHAPE_MISMATCH (ndim or a size); element count > 2^63
 *                                    -> OVERFLOW
 *   devices                          type or id differs -> DEVICE_MISMATCH; CUDA types
 *                                    without the CUDA backend -> NO_CUDA; types other than
 *                                    CPU, CUDAHost (host memory, runs on the CPU), CUDA,
 *                                    CUDAManaged -> DEVICE_UNSUPPORTED
 *   strides                          any negative -> NEGATIVE_STRIDE (even on size-1 dims)
 *   -- no elements: done, OK (data may be NULL, nothing is read or written) --
 *   per tensor                       NULL data -> NULL_DATA; data + byte_offset or the byte
 *                                    extent past 2^63 / the address space -> OVERFLOW;
 *                                    address not a multiple of the element size -> MISALIGNED
 *   each output                      two indices on one element (zero stride, or a stride
 *                                    inside the span of the smaller ones) -> OUTPUT_SELF_OVERLAP
 *   each output vs every tensor      byte ranges intersect -> ALIAS, except dout_scaled at
 *                                    dout's very address: same dtype and strides (size-1
 *                                    dims ignored) -> in place, else INPLACE_MISMATCH
 *
 * Overlap is judged on byte ranges [first, last element + 1): exact for everything a
 * framework hands over, conservative for two views interleaved in one buffer (refused).
 * Messages name the caller's dims; the checks passed, the dims are collapsed once into the
 * zg_problem that every backend reads (zg_collapse). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "zgate_internal.h"

const zg_op_desc zg_ops[ZG_NOPS] = {
    [ZG_OP_BWD] = {"bwd", 3, 2, {"dout", "z", "o", "dz", "dout_scaled"}},
    [ZG_OP_FWD] = {"fwd", 2, 1, {"o", "z", "out"}},
};

/* The refusal's data: tensor i of the call (names[i]) and the caller's dim d (-1: none). */
#define AT(i, d) ((zg_refusal){names[i], (d), {0, 0, 0}})

static int zg_parse_dtype(const char *name, DLDataType dt, int allow_f64, zg_dtype *out) {
  if (dt.lanes != 1)
    return zg_refuse(ZGATE_ERR_LANES, (zg_refusal){name, -1, dt},
                     "%s: dtype lanes is %u, only 1 is supported", name, (unsigned)dt.lanes);
  if (dt.code == kDLFloat && dt.bits == 32) { *out = ZG_F32; return ZGATE_OK; }
  if (dt.code == kDLFloat && dt.bits == 16) { *out = ZG_F16; return ZGATE_OK; }
  if (dt.code == kDLBfloat && dt.bits == 16) { *out = ZG_BF16; return ZGATE_OK; }
  if (allow_f64 && dt.code == kDLFloat && dt.bits == 64) { *out = ZG_F64; return ZGATE_OK; }
  return zg_refuse(ZGATE_ERR_DTYPE, (zg_refusal){name, -1, dt},
                 "%s: dtype (code %u, bits %u) is not float32, float16 or bfloat16%s", name,
                 (unsigned)dt.code, (unsigned)dt.bits, allow_f64 ? " or float64" : "");
}

/* The dims of size > 1, by stride ascending (stable: equal strides keep the caller's
 * order); returns how many. */
static int zg_dims_by_stride(int nd, const int64_t *shape, const int64_t *strides, int *dims) {
  int n = 0;
  for (int d = 0; d < nd; d++)
    if (shape[d] > 1) dims[n++] = d;
  for (int i = 1; i < n; i++) /* insertion sort: at most ZGATE_MAX_NDIM dims */
    for (int j = i; j > 0 && strides[dims[j - 1]] > strides[dims[j]]; j--) {
      int t = dims[j]; dims[j] = dims[j - 1]; dims[j - 1] = t;
    }
  return n;
}

/* The one description of the iteration that every backend reads (zgate_internal.h).
 * Rule: drop size-1 dims; order the rest by the first output's strides, largest first;
 * merge each dim into the one outside it
 * where every tensor walks the pair contiguously (stride[outer] == stride[inner] *
 * size[inner]). Why the output's order: a permutation shared by all tensors (transposed or
 * channels-last views of dense memory) then collapses to the same single dense run as the
 * unpermuted call, where the caller's order would leave a strided innermost dim; the output
 * is the stream written, so its unit stride lands innermost (the CPU's non-temporal stores,
 * the GPU's vector stores need it); an output's strides are distinct on dims of size > 1
 * (the self-overlap check), so the order is total. Z as a view into the input projection,
 * strides (L*P, P, D, 1) beside dense outputs, stays rows of D contiguous elements. */
static void zg_collapse(int nd, const int64_t *shape, int64_t (*strides)[ZGATE_MAX_NDIM],
                        zg_problem *p) {
  const int nt = p->n_in + p->n_out;
  int dims[ZGATE_MAX_NDIM], n = 0;
  /* no elements: nothing to walk, and the other sizes' product may overflow */
  const int k = zg_dims_by_stride(p->numel ? nd : 0, shape, strides[p->n_in], dims);
  for (int i = k - 1; i >= 0; i--) {
    const int d = dims[i];
    int merge = n > 0;
    for (int t = 0; t < nt && merge; t++) {
      int64_t span; /* within the checked extents: numel > 0 here */
      merge = !__builtin_mul_overflow(strides[t][d], shape[d], &span) &&
              p->t[t].strides[n - 1] == span;
    }
    if (merge) p->shape[n - 1] *= shape[d];
    else p->shape[n++] = shape[d];
    for (int t = 0; t < nt; t++) p->t[t].strides[n - 1] = strides[t][d]; /* the inner one's */
  }
  if (n == 0) p->shape[n++] = p->numel; /* one element, or none (strides stay 0) */
  p->ndim = n;
}

int zg_validate(zg_op op, const DLTensor *const *tensors, int allow_f64, zg_problem *p) {
  const zg_op_desc *desc = &zg_ops[op];
  const int bwd = op == ZG_OP_BWD, n = desc->n_in + desc->n_out;
  const char *const *names = desc->tensors;
  uintptr_t lo[ZG_MAX_TENSORS], hi[ZG_MAX_TENSORS]; /* the byte range [lo, hi) each tensor can touch */
  int64_t shape[ZGATE_MAX_NDIM];
  int64_t strides[ZG_MAX_TENSORS][ZGATE_MAX_NDIM];
  int nd;

  memset(p, 0, sizeof *p);
  p->op = op;
  p->n_in = desc->n_in;
  p->n_out = desc->n_out;

  /* 1. pointers, ndim, shapes, dtypes */
  for (int i = 0; i < n; i++) {
    const DLTensor *t = tensors[i];
    if (!t) return zg_refuse(ZGATE_ERR_NULL_ARGUMENT, AT(i, -1), "%s: tensor pointer is NULL", names[i]);
    if (t->ndim < 0 || t->ndim > ZGATE_MAX_NDIM)
      return zg_refuse(ZGATE_ERR_NDIM, AT(i, -1), "%s: ndim is %d, outside 0..%d", names[i], (int)t->ndim,
                     ZGATE_MAX_NDIM);
    if (!t->shape && t->ndim > 0) return zg_refuse(ZGATE_ERR_NULL_ARGUMENT, AT(i, -1), "%s: shape is NULL", names[i]);
    for (int d = 0; d < t->ndim; d++)
      if (t->shape[d] < 0)
        return zg_refuse(ZGATE_ERR_NEGATIVE_SIZE, AT(i, d), "%s: dim %d has negative size %lld", names[i],
                       d, (long long)t->shape[d]);
    int st = zg_parse_dtype(names[i], t->dtype, allow_f64, &p->t[i].dtype);
    if (st) return st;
  }
  nd = tensors[0]->ndim;
  for (int i = 1; i < n; i++) {
    if (tensors[i]->ndim != nd)
      return zg_refuse(ZGATE_ERR_SHAPE_MISMATCH, AT(i, -1),
                     "%s: ndim is %d but %s has %d (shapes must be equal)", names[i],
                     (int)tensors[i]->ndim, names[0], nd);
    for (int d = 0; d < nd; d++)
      if (tensors[i]->shape[d] != tensors[0]->shape[d])
        return zg_refuse(ZGATE_ERR_SHAPE_MISMATCH, AT(i, d),
                       "%s: dim %d has size %lld but %s has %lld (shapes must be equal)",
                       names[i], d, (long long)tensors[i]->shape[d], names[0],
                       (long long)tensors[0]->shape[d]);
  }
  if (nd > 0) memcpy(shape, tensors[0]->shape, (size_t)nd * sizeof shape[0]);
  int64_t numel = 1;
  for (int d = 0; d < nd; d++)
    if (shape[d] == 0) numel = 0;
  for (int d = 0; d < nd && numel != 0; d++)
    if (__builtin_mul_overflow(numel, shape[d], &numel))
      return zg_refuse(ZGATE_ERR_OVERFLOW, AT(0, d), "%s: the element count overflows 64 bits at dim %d",
                     names[0], d);
  p->numel = numel;

  /* 2. devices: one device for all, and one this build can serve */
  p->device = tensors[0]->device;
  for (int i = 1; i < n; i++) {
    DLDevice dv = tensors[i]->device;
    if (dv.device_type != p->device.device_type || dv.device_id != p->device.device_id)
      return zg_refuse(ZGATE_ERR_DEVICE_MISMATCH, AT(i, -1),
                     "%s: device (type %d, id %d) differs from %s's (type %d, id %d)", names[i],
                     (int)dv.device_type, (int)dv.device_id, names[0],
                     (int)p->device.device_type, (int)p->device.device_id);
  }
  /* kDLCUDAHost (pinned host memory) is ordinary host memory: the CPU backend runs it.
   * kDLCUDAManaged memory is reachable from both, but belongs with the GPU that manages it. */
  switch (p->device.device_type) {
    case kDLCPU:
    case kDLCUDAHost: break;
    case kDLCUDA:
    case kDLCUDAManaged:
#ifndef ZGATE_WITH_CUDA
      return zg_refuse(ZGATE_ERR_NO_CUDA, AT(0, -1),
                     "%s: CUDA tensor (device type %d), but this zgate was built without CUDA",
                     names[0], (int)p->device.device_type);
#else
      break;
#endif
    default:
      return zg_refuse(ZGATE_ERR_DEVICE_UNSUPPORTED, AT(0, -1),
                     "%s: device type %d is not supported (kDLCPU, kDLCUDAHost, kDLCUDA, "
                     "kDLCUDAManaged are)",
                     names[0], (int)p->device.device_type);
  }

  /* 3. strides: given ones must be non-negative; NULL means compact row-major. Strides of
   * size-1 dims are set to 0: they never move, so they never decide a check. */
  for (int i = 0; i < n; i++) {
    const DLTensor *t = tensors[i];
    int64_t *s = strides[i];
    if (t->strides) {
      for (int d = 0; d < nd; d++) {
        if (t->strides[d] < 0)
          return zg_refuse(ZGATE_ERR_NEGATIVE_STRIDE, AT(i, d), "%s: dim %d has negative stride %lld",
                         names[i], d, (long long)t->strides[d]);
        s[d] = t->strides[d];
      }
    } else { /* products of trailing sizes: they fit when there are elements (numel did);
              * without elements they may wrap, and are never used */
      int64_t acc = 1;
      for (int d = nd - 1; d >= 0; d--) {
        s[d] = acc;
        (void)__builtin_mul_overflow(acc, shape[d], &acc);
      }
    }
    for (int d = 0; d < nd; d++)
      if (shape[d] <= 1) s[d] = 0;
  }

  /* Nothing to read or write: data may be NULL, and there is no memory to check. */
  if (numel == 0) { /* p->t[i].data stay NULL */
    zg_collapse(nd, shape, strides, p);
    return ZGATE_OK;
  }

  /* 4. data pointers, byte_offset, alignment, byte extents */
  for (int i = 0; i < n; i++) {
    const DLTensor *t = tensors[i];
    int64_t esize = zg_dtype_size(p->t[i].dtype);
    if (!t->data)
      return zg_refuse(ZGATE_ERR_NULL_DATA, AT(i, -1), "%s: data is NULL but the tensor has %lld elements",
                     names[i], (long long)numel);
    uintptr_t base;
    if (t->byte_offset > (uint64_t)INTPTR_MAX ||
        __builtin_add_overflow((uintptr_t)t->data, (uintptr_t)t->byte_offset, &base))
      return zg_refuse(ZGATE_ERR_OVERFLOW, AT(i, -1), "%s: data + byte_offset (%llu) overflows the address space",
                     names[i], (unsigned long long)t->byte_offset);
    if (base % (uintptr_t)esize != 0)
      return zg_refuse(ZGATE_ERR_MISALIGNED, AT(i, -1),
                     "%s: data + byte_offset (%p + %llu) is not aligned to the %lld-byte element",
                     names[i], t->data, (unsigned long long)t->byte_offset, (long long)esize);
    int64_t maxoff = 0, bytes = 0; /* the largest element offset reached */
    for (int d = 0; d < nd; d++) {
      int64_t step;
      if (shape[d] > 1 && (__builtin_mul_overflow(shape[d] - 1, strides[i][d], &step) ||
                           __builtin_add_overflow(maxoff, step, &maxoff)))
        return zg_refuse(ZGATE_ERR_OVERFLOW, AT(i, d),
                       "%s: the extent of dim %d (size %lld, stride %lld) overflows 64 bits",
                       names[i], d, (long long)shape[d], (long long)strides[i][d]);
    }
    if (__builtin_add_overflow(maxoff, 1, &bytes) ||
        __builtin_mul_overflow(bytes, esize, &bytes) ||
        __builtin_add_overflow(base, (uintptr_t)bytes, &hi[i]))
      return zg_refuse(ZGATE_ERR_OVERFLOW, AT(i, -1),
                     "%s: the byte extent (%lld elements of %lld bytes from %p) overflows",
                     names[i], (long long)maxoff, (long long)esize, (void *)base);
    lo[i] = base;
    p->t[i].data = (char *)base;
  }

  /* 5. outputs: no element written twice, no overlap with anything else except the one
   * allowed in-place case (dout_scaled is exactly dout). Self-overlap, a sufficient test:
   * with the dims of size > 1 sorted by stride, each stride must step over everything the
   * inner dims span. This refuses zero strides and every overlap; it also refuses some
   * exotic interleaved layouts that happen not to overlap, which no framework produces for
   * an output. */
  for (int i = p->n_in; i < n; i++) {
    const int64_t *s = strides[i];
    int dims[ZGATE_MAX_NDIM], k = zg_dims_by_stride(nd, shape, s, dims);
    int64_t span = 1; /* elements covered by the inner dims, as an exclusive bound */
    for (int m = 0; m < k; m++) {
      const int d = dims[m];
      if (s[d] < span)
        return zg_refuse(ZGATE_ERR_OUTPUT_SELF_OVERLAP, AT(i, d),
                       "%s: dim %d (size %lld, stride %lld) overlaps the inner dims (span %lld "
                       "elements): two elements would share memory",
                       names[i], d, (long long)shape[d], (long long)s[d], (long long)span);
      span += s[d] * (shape[d] - 1); /* fits: the extents were checked in step 4 */
    }
  }
  for (int i = p->n_in; i < n; i++) {
    for (int j = 0; j < n; j++) {
      if (j == i || hi[i] <= lo[j] || hi[j] <= lo[i]) continue;
      if (bwd && i == ZG_BWD_DOS && j == ZG_BWD_DOUT && lo[i] == lo[j]) {
        /* the very tensor dout: same dtype, same strides (those of size-1 dims are 0) */
        if (p->t[i].dtype != p->t[j].dtype || memcmp(strides[i], strides[j], (size_t)nd * sizeof shape[0]))
          return zg_refuse(ZGATE_ERR_INPLACE_MISMATCH, AT(i, -1),
                         "dout_scaled: shares dout's memory but not its dtype and strides "
                         "(in place needs the very same tensor)");
        continue;
      }
      return zg_refuse(ZGATE_ERR_ALIAS, AT(i, -1),
                     "%s: its memory [%p, %p) overlaps %s's [%p, %p)%s", names[i],
                     (void *)lo[i], (void *)hi[i], names[j], (void *)lo[j], (void *)hi[j],
                     bwd && i == ZG_BWD_DOS && j == ZG_BWD_DOUT
                         ? " (in place needs the same data + byte_offset)"
                         : "");
    }
  }
  zg_collapse(nd, shape, strides, p);
  return ZGATE_OK;
}

/* Upper bound for struct_size: a caller from the far future is fine, garbage is not. */
#define ZG_OPTIONS_MAX_SIZE 4096
/* More threads than this is a corrupted field, not a request. */
#define ZG_MAX_THREADS 65536

#define ZG_HAS_FIELD(opts, field) \
  ((opts)->struct_size >= offsetof(zgate_options, field) + sizeof((opts)->field))

int zg_resolve_options(const zgate_options *opts, zg_options *out) {
  *out = (zg_options){0};
  if (!opts) return ZGATE_OK;
  if (opts->struct_size < sizeof(size_t) || opts->struct_size > ZG_OPTIONS_MAX_SIZE)
    return zg_fail(ZGATE_ERR_OPTIONS,
                   "options: struct_size is %zu (initialise with zgate_options_init)",
                   opts->struct_size);
  if (ZG_HAS_FIELD(opts, num_threads)) {
    if (opts->num_threads < 0 || opts->num_threads > ZG_MAX_THREADS)
      return zg_fail(ZGATE_ERR_OPTIONS, "options: num_threads is %d (0 = default, or 1..%d)",
                     opts->num_threads, ZG_MAX_THREADS);
    out->num_threads = opts->num_threads;
  }
  if (ZG_HAS_FIELD(opts, cpu_isa)) out->cpu_isa = opts->cpu_isa; /* the CPU backend checks it */
  if (ZG_HAS_FIELD(opts, cuda_stream)) out->cuda_stream = opts->cuda_stream;
  return ZGATE_OK;
}
