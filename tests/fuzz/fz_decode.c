/* Fuzz input bytes -> tensor descriptions (layout in fz_case.h). Nothing here judges
 * the descriptions; fz_analyze.c does. Shape and stride arrays are exactly ndim entries
 * long on the heap, so a library that reads past ndim is caught by ASan. */
#include <stdlib.h>
#include <string.h>

#include "fz_case.h"

typedef struct fz_reader {
  const uint8_t *p;
  size_t n, i;
} fz_reader;

/* A missing byte reads as 0, the ordinary choice. */
static uint8_t rd(fz_reader *r) { return r->i < r->n ? r->p[r->i++] : 0; }

static const int64_t k_sizes[32] = {
    0, 0, 0, 0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 80,
    -1, -2, INT64_MIN, INT64_MAX, (int64_t)1 << 31, ((int64_t)1 << 31) + 1, (int64_t)1 << 32,
    ((int64_t)1 << 32) + 1, (int64_t)1 << 40, (int64_t)1 << 62, -((int64_t)1 << 31), (int64_t)1 << 20};

/* Small sizes most of the time (the last dim, headdim in Mamba, up to 40 so SIMD bodies and
 * tails both run), edge and hostile sizes from a table otherwise. */
static int64_t fz_size(uint8_t b, int last) {
  if (b < 224) return last ? 1 + b % 40 : 1 + b % 4;
  return k_sizes[b - 224];
}

static const int64_t k_strides[16] = {
    -1, 0, INT64_MIN, INT64_MAX, (int64_t)1 << 31, (int64_t)1 << 32, (int64_t)1 << 40,
    (int64_t)1 << 62, -((int64_t)1 << 31), (int64_t)1 << 20, 3, -2, (int64_t)1 << 61,
    INT64_MAX / 4 + 1, 1, (int64_t)1 << 33};

static const uint64_t k_offsets[16] = {
    1, 2, 3, 6, (uint64_t)1 << 31, (uint64_t)1 << 32, (uint64_t)1 << 62, (uint64_t)INT64_MAX,
    (uint64_t)1 << 63, UINT64_MAX, UINT64_MAX - 3, (uint64_t)1 << 40, 4096,
    ((uint64_t)1 << 63) + 4, UINT64_MAX - 0xffffffffu, 8};

/* A tensor's rank other than the call's (FZ_R_NDIM >= 224): every rank the API takes, then
 * ranks past ZGATE_MAX_NDIM and negative ones, which it must refuse with ZGATE_ERR_NDIM. */
static const int32_t k_bad_ndims[7] = {ZGATE_MAX_NDIM + 1, ZGATE_MAX_NDIM + 2, 64, INT32_MAX,
                                       -1, -2, INT32_MIN};
static int32_t other_ndim(uint8_t b) {
  int v = (b - 224) % (ZGATE_MAX_NDIM + 1 + 7);
  return v <= ZGATE_MAX_NDIM ? v : k_bad_ndims[v - ZGATE_MAX_NDIM - 1];
}

static const struct { int type, id; } k_devices[16] = {
    {kDLCPU, 1}, {kDLCUDA, 0}, {kDLCUDA, 1}, {kDLCUDAHost, 0}, {kDLOpenCL, 0}, {kDLExtDev, 0},
    {0, 0}, {255, 0}, {kDLCUDAManaged, 0}, {kDLROCM, 0}, {kDLCPU, -1}, {kDLCUDA, -1},
    {kDLVulkan, 0}, {kDLMetal, 0}, {kDLCPU, 0}, {kDLCUDA, 7}};

static DLDataType mk_dtype(uint8_t code, uint8_t bits) {
  DLDataType t;
  t.code = code;
  t.bits = bits;
  t.lanes = 1;
  return t;
}

static DLDataType decode_dtype(uint8_t b, uint8_t b2, int allow_f64) {
  static const DLDataType ok[4] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1},
                                   {kDLFloat, 64, 1}};
  if (b < 208) return ok[b % (allow_f64 ? 4 : 3)];
  static const uint8_t bits[8] = {8, 16, 32, 64, 0, 24, 128, 255};
  static const uint16_t lanes[4] = {1, 2, 0, 65535};
  DLDataType t = mk_dtype((uint8_t)((b2 & 7) % 6), bits[(b2 >> 3) & 7]);
  t.lanes = lanes[b2 >> 6];
  return t;
}

static int64_t sat64(__int128 v) {
  if (v > INT64_MAX) return INT64_MAX;
  if (v < INT64_MIN) return INT64_MIN;
  return (int64_t)v;
}

/* a * b for a, b >= 0, saturating at 2^100 (no real extent comes near it). */
static __int128 mulsat(__int128 a, int64_t b) {
  const __int128 lim = (__int128)1 << 100;
  if (b <= 0 || a == 0) return 0;
  return a > lim / b ? lim : a * b;
}

/* Strides for an n-dim shape in layout `kind` (fz_case.h) with parameter sp, saturated to
 * int64 where the shape is hostile (the analysis recomputes everything exactly). */
static void layout(int n, const int64_t *sh, int kind, uint64_t sp, int64_t *s) {
  int order[FZ_MAX_NDIM]; /* dims from outermost to innermost in memory */
  for (int d = 0; d < n; d++) order[d] = d;
  if (kind == FZ_L_PERMUTED) { /* permutation number sp % n!: pick from the dims left */
    uint64_t f = 1;
    for (int k = 2; k <= n; k++) f *= (uint64_t)k;
    sp %= f;
    for (int i = 0; i < n; i++) {
      f /= (uint64_t)(n - i);
      int j = i + (int)(sp / f), pick = order[j];
      sp %= f;
      memmove(&order[i + 1], &order[i], (size_t)(j - i) * sizeof order[0]);
      order[i] = pick;
    }
  }
  __int128 acc = 1;
  for (int k = n - 1; k >= 0; k--) {
    int d = order[k];
    int64_t pad = kind == FZ_L_PADDED ? (int64_t)(sp >> (2 * d)) & 3 : 0;
    if (k == n - 1) acc += pad; /* innermost stride 1..4 when padded */
    s[d] = sat64(acc);
    if (kind == FZ_L_BROADCAST && ((sp >> d) & 1)) s[d] = 0;
    if (kind == FZ_L_RANDOM) s[d] = (int64_t)(sp >> (4 * d)) & 15;
    acc = mulsat(acc, sh[d] > 0 ? sh[d] : 1) + (k < n - 1 ? pad : 0);
    if (kind == FZ_L_PROJ && k == n - 2) acc += (int64_t)(sp % 64);
  }
}

static int64_t *heap_copy(const int64_t *v, int n) {
  int64_t *p = malloc((size_t)n * sizeof *p + (n == 0)); /* exactly n entries */
  if (n > 0) memcpy(p, v, (size_t)n * sizeof *p);
  return p;
}

int fz_array_len(int32_t ndim) { return ndim < 0 ? 0 : ndim < FZ_MAX_NDIM ? ndim : FZ_MAX_NDIM; }

static void decode_tensor(fz_case *c, int ti, fz_reader *r) {
  uint8_t b[FZ_REC_BYTES];
  for (int k = 0; k < FZ_REC_BYTES; k++) b[k] = rd(r);
  fz_tensor *t = &c->t[ti];
  int allow_f64 = c->op == FZ_BWD_REF || c->op == FZ_FWD_REF;
  int kind = b[FZ_R_LAYOUT] % 8;
  uint64_t sp = 0;
  for (int k = 3; k >= 0; k--) sp = sp << 8 | b[FZ_R_SP + k];
  memset(t, 0, sizeof *t);
  t->present = 1;
  t->clone_of = -1;
  t->owns_arrays = 1;

  uint8_t place = b[FZ_R_PLACE];
  if (place >= 208 && place < 240 && ti > 0) {
    /* A copy of an earlier tensor's memory description; DOFF's bits say what differs:
     * bit0 own shape/stride arrays, bit1 own dtype, bit2 own strides, bit3 +delta;
     * bit4 alone: pass the earlier tensor's very DLTensor pointer. */
    int src = (place - 208) % ti;
    fz_tensor *s = &c->t[src];
    if (s->present) {
      uint8_t f = b[FZ_R_DOFF];
      int n = fz_array_len(s->dl.ndim);
      *t = *s;
      t->clone_of = src;
      t->owns_arrays = 0;
      t->same_ptr = (f & 31) == 16;
      if (f & 1) {
        if (t->dl.shape) t->dl.shape = heap_copy(s->dl.shape, n);
        if (t->dl.strides) t->dl.strides = heap_copy(s->dl.strides, n);
        t->owns_arrays = 1;
      }
      if (f & 2) t->dl.dtype = decode_dtype(b[FZ_R_DTYPE], b[FZ_R_DTYPE2], allow_f64);
      if ((f & 4) && fz_rank_ok(t->dl.ndim) && (t->dl.shape || n == 0)) {
        int64_t st[FZ_MAX_NDIM];
        layout(n, s->dl.shape, kind, sp, st);
        if (t->owns_arrays) {
          free(t->dl.shape);
          free(t->dl.strides);
        }
        t->dl.shape = s->dl.shape ? heap_copy(s->dl.shape, n) : NULL;
        t->dl.strides = heap_copy(st, n);
        t->owns_arrays = 1;
      }
      if (f & 8) t->dl.byte_offset += (uint64_t)(b[FZ_R_BOFF] % 16);
      return;
    }
  }

  t->dl.dtype = decode_dtype(b[FZ_R_DTYPE], b[FZ_R_DTYPE2], allow_f64);
  if (b[FZ_R_NDIM] == 255) {
    t->present = 0;
    return;
  }
  int32_t ndim = b[FZ_R_NDIM] < 224 ? c->ndim : other_ndim(b[FZ_R_NDIM]);
  t->dl.ndim = ndim;
  t->dl.device.device_type = kDLCPU;
  t->dl.device.device_id = 0;
  if (b[FZ_R_DEVICE] >= 224) {
    t->dl.device.device_type = (DLDeviceType)k_devices[(b[FZ_R_DEVICE] - 224) % 16].type;
    t->dl.device.device_id = k_devices[(b[FZ_R_DEVICE] - 224) % 16].id;
  }

  int n = fz_array_len(ndim);
  int64_t shape[FZ_MAX_NDIM];
  memcpy(shape, c->shape, sizeof shape);
  if (b[FZ_R_SHAPE] >= 224 && b[FZ_R_SHAPE] < 255 && n > 0) {
    int d = (b[FZ_R_SHAPE] % 8) % n;
    shape[d] = fz_size(b[FZ_R_SHAPEV], d == n - 1);
  }
  t->dl.shape = b[FZ_R_SHAPE] == 255 ? NULL : heap_copy(shape, n);

  if (kind != FZ_L_NULL && kind != FZ_L_NULL2) {
    int64_t st[FZ_MAX_NDIM];
    layout(n, shape, kind, sp, st);
    uint8_t at = b[FZ_R_SPECIAL_AT];
    if (b[FZ_R_SPECIAL] >= 224 && n > 0) st[(at % 8) % n] = k_strides[at >> 4];
    t->dl.strides = heap_copy(st, n);
  }

  uint8_t doff = b[FZ_R_DOFF], boff = b[FZ_R_BOFF];
  t->data_off = doff < 192 ? (doff % 48) * 4 : doff - 192;
  t->dl.byte_offset = boff < 192 ? (uint64_t)(boff % 16) * 4 : k_offsets[(boff - 192) % 16];
  t->buf = place >= 240 ? -1 : place % c->n_buf;
}

static void decode_opts(fz_case *c, uint8_t o1, uint8_t o2) {
  static const int threads[8] = {1, 0, 1, 2, -1, 3, 1, INT32_MIN};
  static const char *isas[8] = {NULL, "scalar", "avx2", "avx512", "neon", "bogus", "", "AVX2"};
  c->opts_null = o1 == 0;
  zgate_options_init(&c->opts);
  c->opts.num_threads = threads[o1 & 7];
  c->opts.cpu_isa = isas[(o1 >> 3) & 7];
  static const size_t sizes[4] = {0, 1, sizeof(zgate_options) - 1, 4096};
  switch (o2 & 3) {
    case 1: c->opts.struct_size = sizeof(zgate_options) + 16; break;
    case 2: c->opts.struct_size = offsetof(zgate_options, cpu_isa); break;
    case 3: c->opts.struct_size = sizes[(o2 >> 2) & 3]; break;
    default: break;
  }
  if ((o2 >> 4) & 1) c->opts.cuda_stream = (void *)(uintptr_t)0x1000;
  /* Room for the declared size, up to 16 bytes past the struct (zeroed). */
  c->opts_mem = calloc(1, sizeof(zgate_options) + 16);
  memcpy(c->opts_mem, &c->opts, sizeof c->opts);
  if (c->opts_null) return;
  if (c->opts.struct_size != sizeof(zgate_options) || c->opts.cuda_stream ||
      (c->opts.cpu_isa && !strcmp(c->opts.cpu_isa, "AVX2"))) {
    c->opts_odd = 1;
    return;
  }
  if (c->opts.num_threads < 0) c->opts_bad = ZGATE_ERR_OPTIONS;
  else if (c->opts.cpu_isa && !zgate_cpu_isa_available(c->opts.cpu_isa))
    c->opts_bad = ((o1 >> 3) & 7) <= 4 ? ZGATE_ERR_ISA_UNAVAILABLE /* a name zgate knows */
                                       : ZGATE_ERR_OPTIONS;
}

void fz_decode(fz_case *c, const uint8_t *data, size_t size) {
  fz_reader r = {data, size, 0};
  memset(c, 0, sizeof *c);
  uint8_t h[FZ_HDR_BYTES];
  for (int k = 0; k < FZ_HDR_BYTES; k++) h[k] = rd(&r);
  c->op = (fz_op)(h[FZ_H_OP] % 4);
  c->n_t = c->op == FZ_BWD || c->op == FZ_BWD_REF ? 5 : 3;
  c->n_in = c->n_t == 5 ? 3 : 2;
  c->n_buf = 1 + h[FZ_H_NBUF] % FZ_MAX_BUF;
  c->ndim = (4 + h[FZ_H_NDIM]) % (ZGATE_MAX_NDIM + 1);
  for (int d = 0; d < FZ_MAX_NDIM; d++)
    c->shape[d] = d < c->ndim ? fz_size(h[FZ_H_SHAPE0 + d], d == c->ndim - 1) : 1;
  c->inject = h[FZ_H_INJECT];
  decode_opts(c, h[FZ_H_OPTS], h[FZ_H_OPTS2]);
  for (int ti = 0; ti < c->n_t; ti++) decode_tensor(c, ti, &r);
  for (int k = 0; k < c->n_buf; k++) {
    uint8_t s = rd(&r);
    c->buf_slack[k] = s < 192 ? 0 : (s - 192) % 16;
  }
  for (int k = 0; k < 8; k++) c->seed = c->seed << 8 | rd(&r);
  for (int k = 0; k < 4; k++) c->status_probe = (int32_t)((uint32_t)c->status_probe << 8 | rd(&r));
}

void fz_free(fz_case *c) {
  for (int ti = 0; ti < c->n_t; ti++) {
    fz_tensor *t = &c->t[ti];
    if (t->owns_arrays) {
      free(t->dl.shape);
      free(t->dl.strides);
    }
  }
  for (int k = 0; k < FZ_MAX_BUF; k++) free(c->buf[k]);
  free(c->opts_mem);
}
