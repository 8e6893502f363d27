/* Test support: see zt.h. */
#define _POSIX_C_SOURCE 200809L
#include "zt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const DLDataType zt_f32 = {kDLFloat, 32, 1};
const DLDataType zt_f16 = {kDLFloat, 16, 1};
const DLDataType zt_bf16 = {kDLBfloat, 16, 1};
const DLDataType zt_f64 = {kDLFloat, 64, 1};
const DLDataType zt_dtypes[3] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};

static void zt_die(const char *what) {
  fprintf(stderr, "test support: %s\n", what);
  exit(1);
}

/* ---- random numbers ---------------------------------------------------------------------- */

uint64_t zt_seed(const char *test_name) {
  const char *env = getenv("ZGATE_TEST_SEED");
  uint64_t seed;
  if (env && *env) {
    seed = strtoull(env, NULL, 0);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
  }
  printf("%s: seed=%llu (set ZGATE_TEST_SEED to repeat)\n", test_name, (unsigned long long)seed);
  fflush(stdout);
  return seed;
}

uint64_t zt_next(zt_rng *r) {
  uint64_t x = (r->s += 0x9E3779B97F4A7C15ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double zt_uniform(zt_rng *r, double lo, double hi) {
  return lo + (hi - lo) * ((double)(zt_next(r) >> 11) * 0x1.0p-53);
}

int64_t zt_int(zt_rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(zt_next(r) % (uint64_t)(hi - lo + 1));
}

double zt_rand_mag(zt_rng *r) {
  uint64_t k = zt_next(r);
  if (k % 128 == 0) return (k & 256) ? -0.0 : 0.0;
  double m = pow(10.0, zt_uniform(r, -3.0, 2.0));
  return (k & 512) ? -m : m;
}

double zt_rand_z(zt_rng *r) {
  uint64_t k = zt_next(r);
  if (k % 10 != 0) return zt_uniform(r, -20.0, 20.0);
  double m = pow(10.0, zt_uniform(r, log10(20.0), log10(150.0)));
  return (k & 1024) ? -m : m;
}

/* ---- quick mode and ISA ------------------------------------------------------------------ */

int zt_quick(void) {
  const char *q = getenv("ZGATE_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

const char *zt_isa(int *skip) {
  const char *isa = getenv("ZGATE_CPU_ISA");
  *skip = 0;
  if (!isa || !*isa || strcmp(isa, "auto") == 0) return NULL;
  if (!zgate_cpu_isa_available(isa)) {
    printf("SKIP: ZGATE_CPU_ISA=%s is not available here (built: %s; this CPU/OS cannot run it "
           "or it was not built)\n",
           isa, zgate_cpu_isas_built());
    fflush(stdout);
    *skip = ZT_SKIP;
  }
  return isa;
}

/* ---- buffers ----------------------------------------------------------------------------- */

zt_buf *zt_buf_new(size_t size) {
  zt_buf *b = calloc(1, sizeof *b);
  if (!b) zt_die("out of memory");
  size_t alloc = (size + 63) / 64 * 64;
  if (alloc == 0) alloc = 64;
  b->mem = aligned_alloc(64, alloc);
  if (!b->mem) zt_die("out of memory");
  memset(b->mem, ZT_POISON, alloc);
  b->size = size;
  return b;
}

void zt_buf_free(zt_buf *b) {
  if (!b) return;
  free(b->mem);
  free(b->snap);
  free(b);
}

void zt_buf_snapshot(zt_buf *b) {
  if (!b->snap) b->snap = malloc(b->size ? b->size : 1);
  if (!b->snap) zt_die("out of memory");
  memcpy(b->snap, b->mem, b->size);
}

void zt_buf_restore(zt_buf *b) {
  if (b->snap) memcpy(b->mem, b->snap, b->size);
}

/* ---- tensors ----------------------------------------------------------------------------- */

int64_t zt_numel(const int64_t shape[4]) { return shape[0] * shape[1] * shape[2] * shape[3]; }

void zt_compact_strides(const int64_t shape[4], int64_t strides[4]) {
  int64_t acc = 1;
  for (int d = 3; d >= 0; d--) {
    strides[d] = acc;
    acc *= shape[d] > 0 ? shape[d] : 1;
  }
}

size_t zt_span_bytes(DLDataType dt, const int64_t shape[4], const int64_t strides[4]) {
  if (zt_numel(shape) == 0) return 0;
  int64_t last = 0;
  for (int d = 0; d < 4; d++) last += (shape[d] - 1) * strides[d];
  return (size_t)(last + 1) * (size_t)zgate_check_dtype_size(dt);
}

void zt_tensor_init(zt_tensor *x, DLDataType dt, const int64_t shape[4], const int64_t *strides,
                    zt_buf *buf, size_t byte_pos, int use_byte_offset, int compact_as_null) {
  memset(x, 0, sizeof *x);
  memcpy(x->shape, shape, sizeof x->shape);
  if (strides) memcpy(x->strides, strides, sizeof x->strides);
  else zt_compact_strides(shape, x->strides);
  x->buf = buf;
  x->t.device.device_type = kDLCPU;
  x->t.ndim = 4;
  x->t.dtype = dt;
  x->t.shape = x->shape;
  x->t.strides = (!strides && compact_as_null) ? NULL : x->strides;
  if (!buf) return;
  if (use_byte_offset) {
    x->t.data = buf->mem;
    x->t.byte_offset = byte_pos;
  } else {
    x->t.data = buf->mem + byte_pos;
  }
}

static const int64_t *zt_strides_of(const DLTensor *t, int64_t tmp[4]) {
  if (t->strides) return t->strides;
  zt_compact_strides(t->shape, tmp);
  return tmp;
}

void *zt_elem(const DLTensor *t, const int64_t idx[4]) {
  int64_t tmp[4], off = 0;
  const int64_t *st = zt_strides_of(t, tmp);
  for (int d = 0; d < 4; d++) off += idx[d] * st[d];
  return (char *)t->data + t->byte_offset + off * zgate_check_dtype_size(t->dtype);
}

double zt_get(const DLTensor *t, const int64_t idx[4]) {
  return zgate_check_load(t->dtype, zt_elem(t, idx));
}

void zt_set(const DLTensor *t, const int64_t idx[4], double v) {
  zgate_check_store(t->dtype, zt_elem(t, idx), v);
}

#define ZT_FOR_EACH(t, idx)                                    \
  for (idx[0] = 0; idx[0] < (t)->shape[0]; idx[0]++)          \
    for (idx[1] = 0; idx[1] < (t)->shape[1]; idx[1]++)        \
      for (idx[2] = 0; idx[2] < (t)->shape[2]; idx[2]++)      \
        for (idx[3] = 0; idx[3] < (t)->shape[3]; idx[3]++)

void zt_fill(const DLTensor *t, zt_rng *r, double (*gen)(zt_rng *)) {
  int64_t idx[4];
  ZT_FOR_EACH(t, idx) zt_set(t, idx, gen(r));
}

void zt_make_f64(zt_tensor *x, const int64_t shape[4]) {
  int64_t n = zt_numel(shape);
  zt_buf *b = zt_buf_new((size_t)n * 8);
  zt_tensor_init(x, zt_f64, shape, NULL, b, 0, 0, 1);
}

void zt_free_f64(zt_tensor *x) {
  zt_buf_free(x->buf);
  x->buf = NULL;
}

void zt_copy_compact(zt_tensor *dst, const DLTensor *src) {
  int64_t n = zt_numel(src->shape);
  zt_buf *b = zt_buf_new((size_t)n * (size_t)zgate_check_dtype_size(src->dtype));
  zt_tensor_init(dst, src->dtype, src->shape, NULL, b, 0, 0, 1);
  dst->t.device = src->device;
  int64_t idx[4];
  int size = zgate_check_dtype_size(src->dtype);
  ZT_FOR_EACH(src, idx) memcpy(zt_elem(&dst->t, idx), zt_elem(src, idx), (size_t)size);
}

int64_t zt_buf_changed_outside(const zt_buf *b, const DLTensor *const *writable, int n,
                               const char *what) {
  unsigned char *mask = calloc(b->size ? b->size : 1, 1);
  if (!mask) zt_die("out of memory");
  for (int k = 0; k < n; k++) {
    const DLTensor *t = writable[k];
    if (!t || !t->data || zt_numel(t->shape) == 0) continue;
    int size = zgate_check_dtype_size(t->dtype);
    int64_t idx[4];
    ZT_FOR_EACH(t, idx) {
      unsigned char *p = zt_elem(t, idx);
      if (p < b->mem || p + size > b->mem + b->size) continue; /* another buffer */
      memset(mask + (p - b->mem), 1, (size_t)size);
    }
  }
  int64_t changed = 0;
  for (size_t i = 0; i < b->size; i++) {
    if (mask[i] || b->mem[i] == b->snap[i]) continue;
    if (changed < 4)
      printf("  %s: byte %zu of %zu outside the outputs changed: 0x%02x -> 0x%02x\n", what, i,
             b->size, b->snap[i], b->mem[i]);
    changed++;
  }
  free(mask);
  return changed;
}

int zt_names(const char *msg, const char *word) {
  size_t n = strlen(word);
  for (const char *p = msg; (p = strstr(p, word)) != NULL; p++) {
    int before = p == msg || !(p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') ||
                               (p[-1] >= 'A' && p[-1] <= 'Z') || (p[-1] >= '0' && p[-1] <= '9'));
    char c = p[n];
    int after = !(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'));
    if (before && after) return 1;
  }
  return 0;
}

const char *zt_shape_str(const int64_t shape[4]) {
  static _Thread_local char buf[96];
  snprintf(buf, sizeof buf, "(%lld,%lld,%lld,%lld)", (long long)shape[0], (long long)shape[1],
           (long long)shape[2], (long long)shape[3]);
  return buf;
}
