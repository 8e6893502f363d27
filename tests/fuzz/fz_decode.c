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

/* Small sizes most of the time (headdim up to 40 so SIMD bodies and tails both run),
 * edge and hostile sizes from a table otherwise. */
int64_t fz_size(uint8_t b, int dim) {
  if (b < 224) return dim == 3 ? 1 + b % 40 : 1 + b % 4;
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

/* Ranks other than 4, each one the API refuses: every rank but 4 where the API takes rank 4
 * only, and outside 0..ZGATE_MAX_NDIM where it takes any rank up to that (valid ranks other
 * than 4 are checked by tests/test_validation.c; this harness models rank 4). */
#ifdef ZGATE_MAX_NDIM
_Static_assert(ZGATE_MAX_NDIM + 1 <= FZ_MAX_NDIM, "FZ_MAX_NDIM holds one rank past the API's");
static const int32_t k_ndims[8] = {-1, ZGATE_MAX_NDIM + 1, INT32_MIN, ZGATE_MAX_NDIM + 1, -2, -1, INT32_MIN, -1};
#else
static const int32_t k_ndims[8] = {0, 1, 2, 3, 5, 8, -1, INT32_MIN};
#endif

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

/* Strides for a 4-D shape in layout `kind` (fz_case.h), saturated to int64 where the
 * shape is hostile (the analysis recomputes everything exactly). */
static void layout4(const int64_t n[4], int kind, uint8_t sp1, uint8_t sp2, int64_t s[4]) {
  __int128 acc = 1;
  switch (kind) {
    case FZ_L_PERMUTED: {
      static const int perms[24][4] = {
          {0, 1, 2, 3}, {0, 1, 3, 2}, {0, 2, 1, 3}, {0, 2, 3, 1}, {0, 3, 1, 2}, {0, 3, 2, 1},
          {1, 0, 2, 3}, {1, 0, 3, 2}, {1, 2, 0, 3}, {1, 2, 3, 0}, {1, 3, 0, 2}, {1, 3, 2, 0},
          {2, 0, 1, 3}, {2, 0, 3, 1}, {2, 1, 0, 3}, {2, 1, 3, 0}, {2, 3, 0, 1}, {2, 3, 1, 0},
          {3, 0, 1, 2}, {3, 0, 2, 1}, {3, 1, 0, 2}, {3, 1, 2, 0}, {3, 2, 0, 1}, {3, 2, 1, 0}};
      const int *p = perms[sp1 % 24]; /* p[0] outermost ... p[3] innermost */
      for (int k = 3; k >= 0; k--) {
        s[p[k]] = sat64(acc);
        acc = mulsat(acc, n[p[k]] > 0 ? n[p[k]] : 1);
      }
      return;
    }
    case FZ_L_RANDOM:
      s[0] = sp1 & 15;
      s[1] = sp1 >> 4;
      s[2] = sp2 & 15;
      s[3] = sp2 >> 4;
      return;
    case FZ_L_PROJ: /* (L * d_in_proj, d_in_proj, headdim, 1) with d_in_proj > H * headdim */
      s[3] = 1;
      s[2] = n[3];
      s[1] = sat64((__int128)n[2] * n[3] + sp1 % 64);
      s[0] = sat64((__int128)s[1] * n[1]);
      return;
    default:
      break;
  }
  for (int d = 3; d >= 0; d--) {
    int64_t pad = kind == FZ_L_PADDED ? (sp1 >> (2 * d)) & 3 : 0;
    if (d == 3 && kind == FZ_L_PADDED) acc += pad; /* innermost stride 1..4 */
    s[d] = sat64(acc);
    if (kind == FZ_L_BROADCAST && ((sp1 >> d) & 1)) s[d] = 0;
    acc = mulsat(acc, n[d] > 0 ? n[d] : 1) + (d < 3 ? pad : 0);
  }
}

static int64_t *heap_copy(const int64_t *v, int n) {
  int64_t *p = malloc((size_t)n * sizeof *p + (n == 0)); /* exactly n entries */
  if (n > 0) memcpy(p, v, (size_t)n * sizeof *p);
  return p;
}

static void decode_tensor(fz_case *c, int ti, fz_reader *r) {
  uint8_t b[FZ_REC_BYTES];
  for (int k = 0; k < FZ_REC_BYTES; k++) b[k] = rd(r);
  fz_tensor *t = &c->t[ti];
  int allow_f64 = c->op == FZ_BWD_REF || c->op == FZ_FWD_REF;
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
      *t = *s;
      t->clone_of = src;
      t->owns_arrays = 0;
      t->same_ptr = (f & 31) == 16;
      if (f & 1) {
        if (t->dl.shape) t->dl.shape = heap_copy(s->dl.shape, t->dl.ndim > 0 ? t->dl.ndim : 0);
        if (t->dl.strides) t->dl.strides = heap_copy(s->dl.strides, t->dl.ndim > 0 ? t->dl.ndim : 0);
        t->owns_arrays = 1;
      }
      if (f & 2) t->dl.dtype = decode_dtype(b[FZ_R_DTYPE], b[FZ_R_DTYPE2], allow_f64);
      if ((f & 4) && t->dl.ndim == 4 && t->dl.shape) {
        int64_t st[4];
        layout4(t->dl.shape, b[FZ_R_STRIDES] % 8, b[FZ_R_SP1], b[FZ_R_SP2], st);
        if (t->owns_arrays) {
          free(t->dl.shape);
          free(t->dl.strides);
        }
        t->dl.shape = heap_copy(s->dl.shape, 4);
        t->dl.strides = heap_copy(st, 4);
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
  int ndim = b[FZ_R_NDIM] < 224 ? 4 : k_ndims[(b[FZ_R_NDIM] - 224) % 8];
  t->dl.ndim = ndim;
  t->dl.device.device_type = kDLCPU;
  t->dl.device.device_id = 0;
  if (b[FZ_R_DEVICE] >= 224) {
    t->dl.device.device_type = (DLDeviceType)k_devices[(b[FZ_R_DEVICE] - 224) % 16].type;
    t->dl.device.device_id = k_devices[(b[FZ_R_DEVICE] - 224) % 16].id;
  }

  int64_t shape[FZ_MAX_NDIM];
  for (int d = 0; d < FZ_MAX_NDIM; d++) shape[d] = d < 4 ? c->shape[d] : 1;
  if (b[FZ_R_SHAPE] >= 224 && b[FZ_R_SHAPE] < 255) {
    int d = b[FZ_R_SHAPE] & 3;
    shape[d] = fz_size(b[FZ_R_SHAPEV], d);
  }
  int n = ndim > 0 ? ndim : 0; /* at most FZ_MAX_NDIM: k_ndims */
  t->dl.shape = b[FZ_R_SHAPE] == 255 ? NULL : heap_copy(shape, n);

  int kind = b[FZ_R_STRIDES] % 8;
  if (kind != FZ_L_NULL && kind != FZ_L_NULL2) {
    int64_t st[FZ_MAX_NDIM];
    if (ndim == 4) {
      layout4(shape, kind, b[FZ_R_SP1], b[FZ_R_SP2], st);
    } else {
      __int128 acc = 1;
      for (int d = n - 1; d >= 0; d--) {
        st[d] = sat64(acc);
        acc = mulsat(acc, shape[d] > 0 ? shape[d] : 1);
      }
    }
    if (b[FZ_R_STRIDES] >= 224 && n > 0) st[(b[FZ_R_SP2] & 3) % n] = k_strides[(b[FZ_R_SP2] >> 2) % 16];
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
  if (c->opts.num_threads < 0) c->opts_known_bad = 1;
  if (c->opts.cpu_isa && !zgate_cpu_isa_available(c->opts.cpu_isa)) c->opts_known_bad = 1;
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
  for (int d = 0; d < 4; d++) c->shape[d] = fz_size(h[FZ_H_SHAPE0 + d], d);
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
