/* GPU tests of the CUDA backend through the public API, against the float64 reference
 * (zgate_check_*, the shared numerics policy). Exit 77 (ctest: skipped) without a GPU.
 *
 *   test_cuda_gate            the shared case list (check/cases.def) and this backend's own
 *                             layouts, every dtype combination's kernel, special values,
 *                             ranks 0 .. ZGATE_MAX_NDIM, streams, devices, threads
 *   test_cuda_gate --small    the list's QUICK shapes up to 4096 elements, two dtype
 *                             combinations, fewer and shorter rank cases, for
 *                             compute-sanitizer memcheck / racecheck / initcheck
 *   test_cuda_gate --big      tensors of more than 2^31 (and 2^32 work items), on slices
 *
 * Every device buffer has 256 guard bytes on both sides and is poisoned (0xFF: NaN in
 * every dtype) before the call; afterwards every byte that is not an element of an output
 * must be unchanged, and every element must pass the policy. Inputs are fresh random
 * values each run (seed printed; ZGATE_TEST_SEED reproduces). */
#include <atomic>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mutex>
#include <thread>
#include <time.h>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "zgate.h"
#include "zgate_cases.h"
#include "zgate_check.h"
#include "cuda_check.h"

#define SKIP 77

static std::atomic<int> g_failures{0};
static std::atomic<int> g_cases{0};
static int g_dev = 0;
static std::mutex g_note_lock;

#define EXPECT(cond, ...)               \
  do {                                  \
    if (!(cond)) {                      \
      g_failures++;                     \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);              \
      printf("\n");                     \
    }                                   \
  } while (0)

/* ---- random numbers (splitmix64) ------------------------------------------------------- */
static thread_local uint64_t g_rng; /* per thread: the threads test draws too */
static uint64_t rnd(void) {
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double uni(double lo, double hi) { return lo + (hi - lo) * ((rnd() >> 11) * 0x1p-53); }
static double rand_mag(void) { /* sign * 10^[-3, 2], sometimes 0 */
  if (rnd() % 64 == 0) return 0.0;
  double m = pow(10.0, uni(-3.0, 2.0));
  return (rnd() & 1) ? -m : m;
}
static double rand_z(void) {
  uint64_t k = rnd() % 16;
  if (k == 0) return uni(-150.0, 150.0);
  if (k == 1) return uni(-1.4, -1.15); /* around the root of 1 + z(1-s) */
  return uni(-20.0, 20.0);
}

static const DLDataType F32 = {kDLFloat, 32, 1}, F16 = {kDLFloat, 16, 1}, BF16 = {kDLBfloat, 16, 1};
static const char *dtn(DLDataType t) { return zgate_check_dtype_name(t); }

/* ---- layouts ----------------------------------------------------------------------------- */
/* This backend's layouts; VIEW0 + v is cases.def's view v (zgate_cases.h). */
enum Layout { DENSE, PROJ, PERM, PAD, TRANS, OFFSET, NLAYOUTS, VIEW0 = NLAYOUTS };
static const char *layout_name(int lay) {
  static const char *own[NLAYOUTS] = {"dense", "proj", "perm", "pad", "trans", "offset"};
  return lay >= VIEW0 ? zgate_case_views[lay - VIEW0].name : own[lay];
}

static const size_t G = 256; /* guard bytes each side */

struct Buf { /* one device tensor with its buffer, host copies and element map */
  DLDataType dt;
  int es = 0;
  int nd = 4;                /* rank 0 .. ZGATE_MAX_NDIM */
  bool null_strides = false; /* compact, passed as strides = NULL (strides[] still filled) */
  int64_t shape[ZGATE_MAX_NDIM], strides[ZGATE_MAX_NDIM];
  int64_t off = 0, span = 0;
  size_t bytes = 0;
  unsigned char *dev = nullptr;
  bool owner = true;
  std::vector<unsigned char> before, after;
};

static void buf_layout(Buf &b, const int64_t shape[4], DLDataType dt, Layout lay) {
  int64_t B = shape[0], L = shape[1], H = shape[2], D = shape[3];
  b.dt = dt;
  b.es = dt.bits / 8;
  b.nd = 4;
  b.null_strides = false;
  memcpy(b.shape, shape, 4 * sizeof shape[0]);
  int64_t numel = B * L * H * D;
  b.off = 0;
  if (lay == PROJ) lay = (Layout)(VIEW0 + ZGATE_CASE_VIEW_projection); /* cases.def's */
  if (lay >= VIEW0)
    b.span = zgate_case_strides(&zgate_case_views[lay - VIEW0], shape, b.strides, &b.off);
  else switch (lay) {
    case PERM: { /* heads before sequence in memory: (B, H, L, D) */
      int64_t s[4] = {H * L * D, D, L * D, 1};
      memcpy(b.strides, s, sizeof s);
      b.span = numel;
      break;
    }
    case PAD: { /* rows padded by 3 elements: no row start is aligned */
      int64_t Dp = D + 3;
      int64_t s[4] = {L * H * Dp, H * Dp, Dp, 1};
      memcpy(b.strides, s, sizeof s);
      b.span = B * L * H * Dp;
      break;
    }
    case TRANS: { /* headdim is not the innermost dimension in memory: (B, L, D, H) */
      int64_t s[4] = {L * D * H, D * H, 1, H};
      memcpy(b.strides, s, sizeof s);
      b.span = numel;
      break;
    }
    default: { /* DENSE, OFFSET */
      int64_t s[4] = {L * H * D, H * D, D, 1};
      memcpy(b.strides, s, sizeof s);
      b.off = lay == OFFSET ? 1 : 0;
      b.span = numel + b.off;
    }
  }
  if (numel == 0) b.span = b.off + 1;
  b.bytes = G + (size_t)b.span * b.es + G;
}

static int64_t buf_numel(const Buf &b) {
  int64_t n = 1;
  for (int d = 0; d < b.nd; d++) n *= b.shape[d];
  return n;
}

/* Any rank (the rank test's layouts, as tests/test_validation.c's): 0 compact passed as
 * NULL, 1 compact spelled out, 2 compact over the permutation `perm` of the dims (perm[k]:
 * the dim k-th outermost in memory), 3 every dim padded by 3 elements, 4 inner stride 2,
 * 5 every dim padded by 8 elements (row starts stay 16-byte aligned: the vector kernels). */
enum { ND_NULL, ND_SPELLED, ND_PERM, ND_PAD, ND_INNER2, ND_PAD8, ND_NLAYOUTS };
static const char *nd_layout_name[ND_NLAYOUTS] = {"null", "spelled", "perm", "pad", "inner2", "pad8"};

static void buf_layout_nd(Buf &b, int nd, const int64_t *shape, DLDataType dt, int lay, const int *perm) {
  b.dt = dt;
  b.es = dt.bits / 8;
  b.nd = nd;
  b.null_strides = lay == ND_NULL || nd == 0;
  b.off = 0;
  int64_t acc = 1, last = 0;
  for (int k = nd - 1; k >= 0; k--) {
    const int d = lay == ND_PERM ? perm[k] : k;
    b.shape[d] = shape[d];
    b.strides[d] = lay == ND_INNER2 && k == nd - 1 ? 2 : acc;
    acc = b.strides[d] * (shape[d] > 0 ? shape[d] : 1) + (lay == ND_PAD ? 3 : lay == ND_PAD8 ? 8 : 0);
  }
  for (int d = 0; d < nd; d++) last += (shape[d] > 0 ? shape[d] - 1 : 0) * b.strides[d];
  b.span = last + 1;
  b.bytes = G + (size_t)b.span * b.es + G;
}

static void buf_alloc(Buf &b) {
  CK(cudaMalloc(&b.dev, b.bytes));
  b.before.assign(b.bytes, 0xFF);
}

static void buf_upload(Buf &b) { CK(cudaMemcpy(b.dev, b.before.data(), b.bytes, cudaMemcpyHostToDevice)); }
static void buf_download(Buf &b) {
  b.after.resize(b.bytes);
  CK(cudaMemcpy(b.after.data(), b.dev, b.bytes, cudaMemcpyDeviceToHost));
}
static void buf_free(Buf &b) {
  if (b.owner && b.dev) CK(cudaFree(b.dev));
  b.dev = nullptr;
}

static DLTensor dl_dev(Buf &b, int dev) {
  DLTensor t;
  t.data = b.dev + G;
  t.device.device_type = kDLCUDA;
  t.device.device_id = dev;
  t.ndim = b.nd;
  t.dtype = b.dt;
  t.shape = b.nd > 0 ? (int64_t *)b.shape : NULL; /* rank 0: no shape array at all */
  t.strides = b.null_strides ? NULL : (int64_t *)b.strides;
  t.byte_offset = (uint64_t)b.off * b.es;
  return t;
}

static DLTensor dl_host(Buf &b, std::vector<unsigned char> &mem) {
  DLTensor t = dl_dev(b, 0);
  t.data = mem.data() + G;
  t.device.device_type = kDLCPU;
  return t;
}

/* Visit every element's byte position in the buffer, in row-major order of the indices. */
template <class F>
static void each_elem(const Buf &b, F f) {
  const int64_t n = buf_numel(b);
  int64_t idx[ZGATE_MAX_NDIM] = {0}, pos = b.off; /* pos: element offset of idx */
  for (int64_t i = 0; i < n; i++) {
    f(G + (size_t)pos * b.es);
    for (int d = b.nd - 1; d >= 0; d--) {
      pos += b.strides[d];
      if (++idx[d] < b.shape[d]) break;
      pos -= idx[d] * b.strides[d];
      idx[d] = 0;
    }
  }
}

/* Every byte of an output buffer that is not one of its elements is unchanged. */
static int64_t untouched_violations(const Buf &b) {
  std::vector<unsigned char> mine(b.bytes, 0);
  each_elem(b, [&](size_t p) { memset(&mine[p], 1, b.es); });
  int64_t bad = 0;
  for (size_t k = 0; k < b.bytes; k++)
    if (!mine[k] && b.after[k] != b.before[k]) bad++;
  return bad;
}

static void fill_random(Buf &b, int which) { /* which: 0 dout-like, 1 z */
  for (int64_t k = 0; k < b.span; k++)
    zgate_check_store(b.dt, &b.before[G + (size_t)k * b.es], which == 1 ? rand_z() : rand_mag());
}

/* ---- accuracy bookkeeping ------------------------------------------------------------ */
struct Worst {
  double units[3] = {0, 0, 0}; /* by output dtype: f32, f16, bf16 */
  double ratio = 0;
};
static Worst g_worst;
static int dt_index(DLDataType t) { return t.bits == 32 ? 0 : t.code == kDLBfloat ? 2 : 1; }
static void note(const zgate_check_stats &s, DLDataType t) {
  std::lock_guard<std::mutex> lock(g_note_lock);
  int k = dt_index(t);
  if (s.max_err_units > g_worst.units[k]) g_worst.units[k] = s.max_err_units;
  if (s.max_bound_ratio > g_worst.ratio) g_worst.ratio = s.max_bound_ratio;
}

/* ---- one backward case ------------------------------------------------------------------ */
struct Special {
  const double *dout, *z, *o;
  int64_t n;
};

/* One checked zgate_bwd on laid-out (not yet allocated) buffers; in place: b[4] is b[0]. */
static void bwd_run(const char *what, Buf b[5], bool inplace, const Special *sp = nullptr,
                    cudaStream_t stream = 0) {
  g_cases++;
  if (inplace) b[4] = b[0];
  for (int t = 0; t < 5; t++)
    if (!(inplace && t == 4)) buf_alloc(b[t]);
  if (inplace) { b[4].dev = b[0].dev; b[4].owner = false; }
  if (sp) {
    int64_t k = 0;
    each_elem(b[0], [&](size_t p) { zgate_check_store(b[0].dt, &b[0].before[p], sp->dout[k++]); });
    k = 0;
    each_elem(b[1], [&](size_t p) { zgate_check_store(b[1].dt, &b[1].before[p], sp->z[k++]); });
    k = 0;
    each_elem(b[2], [&](size_t p) { zgate_check_store(b[2].dt, &b[2].before[p], sp->o[k++]); });
  } else {
    fill_random(b[0], 0);
    fill_random(b[1], 1);
    fill_random(b[2], 0);
  }
  for (int t = 0; t < 5; t++)
    if (!(inplace && t == 4)) buf_upload(b[t]);
  DLTensor d[5];
  for (int t = 0; t < 5; t++) d[t] = dl_dev(b[t], g_dev);
  zgate_options opts;
  zgate_options_init(&opts);
  opts.cuda_stream = stream;
  int st = zgate_bwd(&d[0], &d[1], &d[2], &d[3], &d[4], &opts);
  EXPECT(st == ZGATE_OK, "%s: zgate_bwd returned %d (%s)", what, st, zgate_last_error());
  CK(cudaDeviceSynchronize());
  for (int t = 0; t < 5; t++) buf_download(b[t]);
  if (inplace) b[4].before = b[0].before; /* dout_scaled's buffer before the call */
  for (int t = 0; t < 5; t++) {
    if (t < 3 && !(inplace && t == 0)) {
      EXPECT(b[t].after == b[t].before, "%s: input %d was modified", what, t);
    } else if (t >= 3) {
      int64_t bad = untouched_violations(b[t]);
      EXPECT(bad == 0, "%s: %lld bytes outside output %d changed (guards/padding)", what,
             (long long)bad, t);
    }
  }
  if (buf_numel(b[0]) == 0) { /* nothing to compare */
    for (int t = 0; t < 5; t++) buf_free(b[t]);
    return;
  }
  /* inputs as they were before the call; outputs as they are now */
  DLTensor hin[3], hout[2];
  for (int t = 0; t < 3; t++) hin[t] = dl_host(b[t], b[t].before);
  hout[0] = dl_host(b[3], b[3].after);
  hout[1] = dl_host(b[4], b[4].after);
  zgate_check_stats sdz, sdos;
  zgate_check_stats_init(&sdz);
  zgate_check_stats_init(&sdos);
  int cs = zgate_check_bwd(&hin[0], &hin[1], &hin[2], &hout[0], &hout[1], &sdz, &sdos);
  EXPECT(cs == 0, "%s: zgate_check_bwd returned %d (%s)", what, cs, zgate_last_error());
  char l1[256], l2[256];
  zgate_check_stats_format(&sdz, l1, sizeof l1);
  zgate_check_stats_format(&sdos, l2, sizeof l2);
  EXPECT(sdz.failures == 0 && sdos.failures == 0, "%s: dz {%s} dos {%s}", what, l1, l2);
  note(sdz, b[3].dt);
  note(sdos, b[4].dt);
  for (int t = 0; t < 5; t++) buf_free(b[t]);
}

static void bwd_case(const char *what, const int64_t shape[4], const DLDataType dt[5],
                     const Layout lay[5], bool inplace, const Special *sp = nullptr,
                     cudaStream_t stream = 0) {
  Buf b[5];
  for (int t = 0; t < 5; t++) buf_layout(b[t], shape, dt[t], lay[t]);
  bwd_run(what, b, inplace, sp, stream);
}

/* One checked zgate_fwd (o, z, out) on laid-out buffers. */
static void fwd_run(const char *what, Buf b[3]) {
  g_cases++;
  for (int t = 0; t < 3; t++) buf_alloc(b[t]);
  fill_random(b[0], 0);
  fill_random(b[1], 1);
  for (int t = 0; t < 3; t++) buf_upload(b[t]);
  DLTensor d[3];
  for (int t = 0; t < 3; t++) d[t] = dl_dev(b[t], g_dev);
  int st = zgate_fwd(&d[0], &d[1], &d[2], NULL);
  EXPECT(st == ZGATE_OK, "%s: zgate_fwd returned %d (%s)", what, st, zgate_last_error());
  CK(cudaDeviceSynchronize());
  for (int t = 0; t < 3; t++) buf_download(b[t]);
  EXPECT(b[0].after == b[0].before && b[1].after == b[1].before, "%s: an input changed", what);
  int64_t bad = untouched_violations(b[2]);
  EXPECT(bad == 0, "%s: %lld bytes outside out changed", what, (long long)bad);
  DLTensor ho = dl_host(b[0], b[0].before), hz = dl_host(b[1], b[1].before), hout = dl_host(b[2], b[2].after);
  zgate_check_stats s;
  zgate_check_stats_init(&s);
  int cs = zgate_check_fwd(&ho, &hz, &hout, &s);
  char l[256];
  zgate_check_stats_format(&s, l, sizeof l);
  EXPECT(cs == 0 && s.failures == 0, "%s: fwd {%s} (check %d)", what, l, cs);
  note(s, b[2].dt);
  for (int t = 0; t < 3; t++) buf_free(b[t]);
}

static void fwd_case(const char *what, const int64_t shape[4], const DLDataType dt[3],
                     const Layout lay[3]) {
  Buf b[3];
  for (int t = 0; t < 3; t++) buf_layout(b[t], shape, dt[t], lay[t]);
  fwd_run(what, b);
}

/* ---- the matrix ------------------------------------------------------------------------- */
static void name_case(char *buf, size_t n, const char *tag, const int64_t s[4], const DLDataType dt[5],
                      const Layout lay[5], bool inplace) {
  snprintf(buf, n, "%s (%lld,%lld,%lld,%lld) %s/%s/%s->%s/%s layouts %s/%s/%s/%s/%s%s", tag,
           (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3], dtn(dt[0]), dtn(dt[1]),
           dtn(dt[2]), dtn(dt[3]), dtn(dt[4]), layout_name(lay[0]), layout_name(lay[1]),
           layout_name(lay[2]), layout_name(lay[3]), layout_name(lay[4]), inplace ? " in-place" : "");
}

/* Every dtype combination once: each is its own compiled kernel. */
static void all_dtype_combos(void) {
  const DLDataType ts[3] = {F32, F16, BF16};
  const int64_t shape[4] = {2, 7, 3, 17};
  const Layout dense[5] = {DENSE, DENSE, DENSE, DENSE, DENSE};
  char name[256];
  for (int c = 0; c < 243; c++) {
    DLDataType dt[5];
    int k = c;
    for (int t = 0; t < 5; t++) { dt[t] = ts[k % 3]; k /= 3; }
    name_case(name, sizeof name, "dtypes", shape, dt, dense, false);
    bwd_case(name, shape, dt, dense, false);
  }
  for (int c = 0; c < 27; c++) {
    DLDataType dt[3];
    int k = c;
    for (int t = 0; t < 3; t++) { dt[t] = ts[k % 3]; k /= 3; }
    const int64_t s2[4] = {3, 5, 2, 40};
    fwd_case("fwd dtypes", s2, dt, dense);
  }
}

/* The shared case list (check/cases.def): its shapes (QUICK for --small, QUICK and FULL
 * otherwise) x dtype combinations x its four layouts, the backward and the forward; then
 * layouts of this backend's planner: every tensor padded, o with headdim outermost, dout
 * at an offset, dz permuted, dout_scaled a projection view, in place over a padded view. */
static void case_list(bool small) {
  const int sets = ZGATE_CASES_QUICK | (small ? 0 : ZGATE_CASES_FULL);
  struct L { Layout lay; int who; bool inplace; } lays[] = { /* after cases.def's */
      {PAD, -1, false},   {TRANS, 2, false}, {OFFSET, 0, false}, {PERM, 3, false},
      {PROJ, 4, false},   {PAD, 0, true}};
  const int nshared = ZGATE_CASE_NLAYOUTS, nlays = nshared + (int)(sizeof lays / sizeof lays[0]);
  char name[256];
  for (int si = 0; si < ZGATE_CASES_N(zgate_case_shapes); si++) {
    if (!(zgate_case_shapes[si].set & sets)) continue;
    const int64_t *shape = zgate_case_shapes[si].shape;
    if (small && shape[0] * shape[1] * shape[2] * shape[3] > 4096) continue;
    for (int di = 0; di < ZGATE_CASES_N(zgate_case_dtype_sets); di++) {
      if (small && di >= 2) break;
      for (int li = 0; li < (small ? 6 : nlays); li++) {
        Layout lay[5];
        const struct L own = lays[li < nshared ? 0 : li - nshared];
        const bool inplace = li < nshared ? zgate_case_layouts[li].inplace : own.inplace;
        for (int t = 0; t < 5; t++)
          lay[t] = li < nshared ? (Layout)(VIEW0 + zgate_case_layouts[li].view[t])
                   : (own.who < 0 || own.who == t) ? own.lay : DENSE;
        DLDataType dt[5];
        memcpy(dt, zgate_case_dtype_sets[di].dt, sizeof dt);
        if (inplace) { dt[4] = dt[0]; lay[4] = lay[0]; }
        name_case(name, sizeof name, zgate_case_dtype_sets[di].name, shape, dt, lay, inplace);
        bwd_case(name, shape, dt, lay, inplace);
        if (li < nshared && !inplace) { /* the forward: o, z, out */
          const DLDataType fdt[3] = {dt[2], dt[1], dt[3]};
          const Layout flay[3] = {lay[2], lay[1], lay[3]};
          fwd_case(name, shape, fdt, flay);
        }
      }
    }
  }
}

static void special_values(void) {
  const double sv[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0, -1.0, 88.0, -88.0, 87.5, -87.5,
                       89.0, -89.0, 100.0, -100.0, 104.0, -104.0, 1000.0, -1000.0, -1.2785,
                       -1.27846454, 1e-40, -1e-40, 0x1p-149, -0x3p-149, 65504.0, 1e30, -1e30,
                       3.0e38, -3.0e38}; /* 2^-149, 3 x 2^-149: z*s would round before dout scales it */
  const int ns = (int)(sizeof sv / sizeof sv[0]);
  std::vector<double> dout, z, o;
  for (int i = 0; i < ns; i++) /* every special z, with ordinary dout and o */
    for (int r = 0; r < 3; r++) { dout.push_back(uni(-4, 4)); z.push_back(sv[i]); o.push_back(uni(-4, 4)); }
  for (int i = 0; i < ns; i++) { /* special dout or o (not both, up to 1e30) with ordinary z */
    if (fabs(sv[i]) > 1e31 && !isinf(sv[i])) continue;
    for (int r = 0; r < 3; r++) {
      dout.push_back(sv[i]); z.push_back(uni(-6, 6)); o.push_back(uni(-4, 4));
      dout.push_back(uni(-4, 4)); z.push_back(uni(-6, 6)); o.push_back(sv[i]);
    }
  }
  for (int i = 0; i < ns; i++) /* special pairs of z and dout */
    for (int j = 0; j < ns; j++) {
      if (fabs(sv[j]) > 1e31 && !isinf(sv[j])) continue;
      dout.push_back(sv[j]); z.push_back(sv[i]); o.push_back(0.75);
    }
  Special sp = {dout.data(), z.data(), o.data(), (int64_t)z.size()};
  const int64_t shape[4] = {1, 1, 1, (int64_t)z.size()};
  const DLDataType sets[4][5] = {{F32, F32, F32, F32, F32}, {BF16, BF16, BF16, BF16, BF16},
                                 {F16, F16, F16, F16, F16}, {F32, F32, F32, BF16, F16}};
  char name[256];
  for (int si = 0; si < 4; si++)
    for (int vec = 0; vec < 2; vec++) { /* vector path, and the width-1 path (offset dout) */
      Layout lay[5] = {vec ? DENSE : OFFSET, DENSE, DENSE, DENSE, DENSE};
      name_case(name, sizeof name, "special", shape, sets[si], lay, false);
      bwd_case(name, shape, sets[si], lay, false, &sp);
    }
}

/* ---- any rank ----------------------------------------------------------------------------
 * Ranks 0 .. ZGATE_MAX_NDIM with odd sizes (size 0 too), every tensor in its own layout and
 * dtype, in place sometimes, the backward and the forward (as tests/test_validation.c's rank
 * test on the CPU). Tensors whose permutations or paddings differ keep more than four dims
 * after validation's collapse: the CUDA backend's general layout (Args.nx, the loop over the
 * outer dims), counted here with a model of the collapse rule (zgate_internal.h). */

/* Dims the problem keeps after validation's collapse: size-1 dims dropped, the rest ordered
 * by the first output's strides (stable), neighbours merged where every tensor walks them
 * contiguously. For coverage bookkeeping only; the results are judged by the reference. */
static int collapsed_rank(const Buf *b, int nt, int first_out) {
  const Buf &o = b[first_out];
  int dims[ZGATE_MAX_NDIM], k = 0, n = 0;
  int64_t inner[5] = {0}; /* each tensor's stride of the last kept dim */
  for (int d = 0; d < o.nd; d++)
    if (o.shape[d] > 1) dims[k++] = d;
  for (int i = 1; i < k; i++)
    for (int j = i; j > 0 && o.strides[dims[j - 1]] < o.strides[dims[j]]; j--) {
      int tmp = dims[j]; dims[j] = dims[j - 1]; dims[j - 1] = tmp;
    }
  for (int i = 0; i < k; i++) {
    const int d = dims[i];
    bool merge = n > 0;
    for (int t = 0; t < nt && merge; t++) merge = inner[t] == b[t].strides[d] * o.shape[d];
    for (int t = 0; t < nt; t++) inner[t] = b[t].strides[d];
    if (!merge) n++;
  }
  return n > 0 ? n : 1;
}

static void shuffle(int *perm, int nd) {
  for (int d = nd - 1; d > 0; d--) {
    int j = (int)(rnd() % (uint64_t)(d + 1)), tmp = perm[d];
    perm[d] = perm[j];
    perm[j] = tmp;
  }
}

static int g_deep[2]; /* cases with elements keeping more than four dims: bwd, fwd */

/* One case: random dtypes, layouts and permutations per tensor (lay_all >= 0: that layout
 * for every tensor, identity order), in place a quarter of the time (bwd); out_lay >= 0
 * forces the first output's layout. */
static void rank_case(bool bwd, int nd, const int64_t *shape, int lay_all, int out_lay) {
  const DLDataType ts[3] = {F32, F16, BF16};
  const int nt = bwd ? 5 : 3, first_out = bwd ? 3 : 2;
  int perm[ZGATE_MAX_NDIM];
  for (int d = 0; d < nd; d++) perm[d] = d;
  const bool shared_perm = lay_all < 0 && rnd() % 2;
  if (lay_all < 0) shuffle(perm, nd);
  const bool inplace = bwd && rnd() % 4 == 0;
  Buf b[5];
  int lay[5];
  for (int t = 0; t < nt; t++) {
    lay[t] = lay_all >= 0 ? lay_all : t == first_out && out_lay >= 0 ? out_lay : (int)(rnd() % ND_NLAYOUTS);
    if (lay[t] == ND_PERM && !shared_perm) shuffle(perm, nd);
    if (inplace && t == 4) { lay[4] = lay[0]; continue; } /* bwd_run makes b[4] b[0] */
    buf_layout_nd(b[t], nd, shape, ts[rnd() % 3], lay[t], perm);
  }
  if (inplace) b[4] = b[0];
  const int kept = collapsed_rank(b, nt, first_out);
  int64_t numel = 1;
  for (int d = 0; d < nd; d++) numel *= shape[d];
  if (kept > 4 && numel > 0) g_deep[bwd ? 0 : 1]++;
  char name[320];
  int len = snprintf(name, sizeof name, "rank %s %d shape (", bwd ? "bwd" : "fwd", nd);
  for (int d = 0; d < nd; d++) len += snprintf(name + len, sizeof name - len, "%s%lld", d ? "," : "", (long long)shape[d]);
  len += snprintf(name + len, sizeof name - len, ") %d dims kept,", kept);
  for (int t = 0; t < nt; t++)
    len += snprintf(name + len, sizeof name - len, " %s %s", dtn(b[t].dt), nd_layout_name[lay[t]]);
  snprintf(name + len, sizeof name - len, "%s", inplace ? " in place" : "");
  if (bwd) bwd_run(name, b, inplace);
  else fwd_run(name, b);
}

/* Ranks outside 0..ZGATE_MAX_NDIM in any one position: ZGATE_ERR_NDIM, nothing written. */
static void rank_refused(void) {
  static const int64_t shape9[ZGATE_MAX_NDIM + 1] = {1, 1, 1, 1, 1, 1, 1, 3, 5};
  const int64_t shape[2] = {3, 5};
  for (int bad : {ZGATE_MAX_NDIM + 1, -1})
    for (int bwd = 0; bwd < 2; bwd++) {
      const int nt = bwd ? 5 : 3;
      for (int at = 0; at < nt; at++) {
        g_cases++;
        Buf b[5];
        DLTensor d[5];
        for (int t = 0; t < nt; t++) {
          buf_layout_nd(b[t], 2, shape, t % 2 ? BF16 : F32, ND_SPELLED, nullptr);
          buf_alloc(b[t]);
          if (t < (bwd ? 3 : 2)) fill_random(b[t], t == 1);
          buf_upload(b[t]);
          d[t] = dl_dev(b[t], g_dev);
        }
        d[at].ndim = bad;
        d[at].shape = (int64_t *)shape9;
        d[at].strides = NULL;
        int st = bwd ? zgate_bwd(&d[0], &d[1], &d[2], &d[3], &d[4], NULL) : zgate_fwd(&d[0], &d[1], &d[2], NULL);
        EXPECT(st == ZGATE_ERR_NDIM, "rank %d at %s tensor %d: status %d, want ZGATE_ERR_NDIM (%s)", bad,
               bwd ? "bwd" : "fwd", at, st, zgate_last_error());
        CK(cudaDeviceSynchronize());
        for (int t = 0; t < nt; t++) {
          buf_download(b[t]);
          EXPECT(b[t].after == b[t].before, "rank %d at %s tensor %d: tensor %d was written", bad,
                 bwd ? "bwd" : "fwd", at, t);
          buf_free(b[t]);
        }
      }
    }
}

static void ranks(bool small) {
  static const int rank_list[] = {0, 1, 2, 3, 4, 5, 6, ZGATE_MAX_NDIM};
  const int reps = small ? 3 : 8;
  const int cases_before = g_cases, fails_before = g_failures;
  g_deep[0] = g_deep[1] = 0;
  for (int nd : rank_list)
    for (int rep = 0; rep < reps; rep++)
      for (int bwd = 0; bwd < 2; bwd++) {
        int64_t shape[ZGATE_MAX_NDIM];
        /* odd sizes, small enough that rank 8 stays a few thousand elements; one repeat with
         * a long innermost dim (vector widths, tails; shorter under --small, for the
         * sanitizers); one with a size-0 dim */
        const int64_t top = nd >= 5 ? 3 : nd >= 3 ? 9 : 70;
        for (int d = 0; d < nd; d++) shape[d] = 1 + (int64_t)(rnd() % top);
        if (rep == 1 && nd >= 1 && nd <= 5)
          shape[nd - 1] = (small ? 131 : 4099) + (int64_t)nd * 2 * (nd < 3 ? 40 : 1);
        if (rep == 2 && nd >= 1) shape[rnd() % nd] = 0;
        rank_case(bwd, nd, shape, -1, -1);
      }
  /* Sure to keep every dim: no size 1, and the first output padded in the order the
   * collapse takes (its own). Padded by 3, the others random (width 1); padded by 8
   * everywhere with an innermost 8 (the vector kernels on the general layout). */
  for (int nd : {5, 6, ZGATE_MAX_NDIM})
    for (int bwd = 0; bwd < 2; bwd++)
      for (int vec = 0; vec < 2; vec++) {
        int64_t shape[ZGATE_MAX_NDIM];
        for (int d = 0; d < nd; d++) shape[d] = 2 + (int64_t)(rnd() % 2);
        if (vec) shape[nd - 1] = 8;
        rank_case(bwd, nd, shape, vec ? ND_PAD8 : -1, ND_PAD);
      }
  EXPECT(g_deep[0] > 0 && g_deep[1] > 0, "ranks: no case kept more than four dims (bwd %d, fwd %d)",
         g_deep[0], g_deep[1]);
  rank_refused();
  printf("ranks: 0..%d, %d cases (%d bwd and %d fwd keeping more than four dims), %s\n", ZGATE_MAX_NDIM,
         g_cases.load() - cases_before, g_deep[0], g_deep[1], g_failures.load() == fails_before ? "ok" : "FAILED");
}

/* ---- streams, devices, threads ------------------------------------------------------- */
static std::atomic<int> g_gate{0};
static void CUDART_CB hold_stream(void *) {
  while (g_gate.load() == 0) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

static void stream_is_used(void) {
  /* Block a non-blocking stream with a host function, enqueue zgate on it, and check that
   * the output is still poison until the stream is released. */
  g_cases++;
  const int64_t n = 1 << 20;
  int64_t shape[4] = {1, 1, 1, n};
  float *buf[5];
  std::vector<float> h(n);
  for (int64_t k = 0; k < n; k++) h[k] = (float)uni(-4, 4);
  for (int t = 0; t < 5; t++) {
    CK(cudaMalloc(&buf[t], n * 4));
    if (t < 3) CK(cudaMemcpy(buf[t], h.data(), n * 4, cudaMemcpyHostToDevice));
    else CK(cudaMemset(buf[t], 0xFF, n * 4));
  }
  cudaStream_t s, s2;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  g_gate = 0;
  CK(cudaLaunchHostFunc(s, hold_stream, NULL));
  DLTensor d[5];
  for (int t = 0; t < 5; t++) {
    memset(&d[t], 0, sizeof d[t]);
    d[t].data = buf[t];
    d[t].device = {kDLCUDA, g_dev};
    d[t].ndim = 4;
    d[t].dtype = F32;
    d[t].shape = shape;
  }
  zgate_options opts;
  zgate_options_init(&opts);
  opts.cuda_stream = s;
  int st = zgate_bwd(&d[0], &d[1], &d[2], &d[3], &d[4], &opts);
  EXPECT(st == ZGATE_OK, "stream: zgate_bwd %d (%s)", st, zgate_last_error());
  uint32_t first = 0;
  CK(cudaMemcpyAsync(&first, buf[3], 4, cudaMemcpyDeviceToHost, s2));
  CK(cudaStreamSynchronize(s2));
  EXPECT(first == 0xFFFFFFFFu, "stream: the output was written before its stream ran (0x%08x)", first);
  g_gate = 1;
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(&first, buf[3], 4, cudaMemcpyDeviceToHost));
  EXPECT(first != 0xFFFFFFFFu, "stream: the output was not written after its stream ran");
  CK(cudaStreamDestroy(s));
  CK(cudaStreamDestroy(s2));
  for (int t = 0; t < 5; t++) CK(cudaFree(buf[t]));
  /* and a full checked case on a non-default stream */
  cudaStream_t s3;
  CK(cudaStreamCreate(&s3));
  const int64_t sh[4] = {2, 65, 4, 64};
  const DLDataType bf[5] = {BF16, BF16, BF16, BF16, BF16};
  const Layout lay[5] = {DENSE, PROJ, DENSE, DENSE, DENSE};
  bwd_case("stream: checked case on a created stream", sh, bf, lay, false, nullptr, s3);
  CK(cudaStreamDestroy(s3));
}

static void devices(int ndev) {
  /* The device comes from the tensors, whatever is current, and the current device is
   * restored. With one GPU: the current device stays; a missing device is a CUDA error. */
  g_cases++;
  for (int dev = 0; dev < ndev && dev < 2; dev++) {
    int other = ndev > 1 ? 1 - dev : dev;
    CK(cudaSetDevice(other));
    g_dev = dev;
    CK(cudaSetDevice(dev)); /* allocate on dev */
    const int64_t sh[4] = {2, 33, 3, 80};
    const DLDataType bf[5] = {BF16, BF16, BF16, BF16, BF16};
    const Layout lay[5] = {DENSE, PROJ, DENSE, DENSE, DENSE};
    /* bwd_case allocates on the current device, so make dev current for the buffers, then
     * switch away for the call itself through the stream-less API. */
    Buf b[5];
    for (int t = 0; t < 5; t++) { buf_layout(b[t], sh, bf[t], lay[t]); buf_alloc(b[t]); }
    fill_random(b[0], 0); fill_random(b[1], 1); fill_random(b[2], 0);
    for (int t = 0; t < 5; t++) buf_upload(b[t]);
    CK(cudaSetDevice(other));
    DLTensor d[5];
    for (int t = 0; t < 5; t++) d[t] = dl_dev(b[t], dev);
    int st = zgate_bwd(&d[0], &d[1], &d[2], &d[3], &d[4], NULL);
    EXPECT(st == ZGATE_OK, "device %d from current %d: %d (%s)", dev, other, st, zgate_last_error());
    int cur = -1;
    CK(cudaGetDevice(&cur));
    EXPECT(cur == other, "device: current device changed from %d to %d", other, cur);
    CK(cudaSetDevice(dev));
    CK(cudaDeviceSynchronize());
    for (int t = 0; t < 5; t++) buf_download(b[t]);
    DLTensor hin[3], hout[2];
    for (int t = 0; t < 3; t++) hin[t] = dl_host(b[t], b[t].before);
    hout[0] = dl_host(b[3], b[3].after);
    hout[1] = dl_host(b[4], b[4].after);
    zgate_check_stats a, c;
    zgate_check_stats_init(&a);
    zgate_check_stats_init(&c);
    int cs = zgate_check_bwd(&hin[0], &hin[1], &hin[2], &hout[0], &hout[1], &a, &c);
    EXPECT(cs == 0 && a.failures == 0 && c.failures == 0, "device %d: results wrong", dev);
    for (int t = 0; t < 5; t++) buf_free(b[t]);
    printf("device: tensors on GPU %d, current GPU %d: ok\n", dev, other);
  }
  g_dev = 0;
  CK(cudaSetDevice(0));
  /* a device that does not exist */
  float *buf;
  CK(cudaMalloc(&buf, 5 * 64 * 4));
  int64_t shape[4] = {1, 1, 1, 64};
  DLTensor d[5];
  for (int t = 0; t < 5; t++) {
    memset(&d[t], 0, sizeof d[t]);
    d[t].data = buf + 64 * t;
    d[t].device = {kDLCUDA, ndev};
    d[t].ndim = 4;
    d[t].dtype = F32;
    d[t].shape = shape;
  }
  int st = zgate_bwd(&d[0], &d[1], &d[2], &d[3], &d[4], NULL);
  EXPECT(st == ZGATE_ERR_CUDA, "device %d (absent): status %d, want ZGATE_ERR_CUDA", ndev, st);
  printf("device: absent GPU %d -> status %d: %s\n", ndev, st, zgate_last_error());
  int cur = -1;
  CK(cudaGetDevice(&cur));
  EXPECT(cur == 0, "device: current device changed to %d after a failed call", cur);
  /* mixed CPU and CUDA tensors */
  float host[64];
  d[1].data = host;
  d[1].device = {kDLCPU, 0};
  for (int t = 0; t < 5; t++) if (t != 1) d[t].device = {kDLCUDA, 0};
  st = zgate_bwd(&d[0], &d[1], &d[2], &d[3], &d[4], NULL);
  EXPECT(st == ZGATE_ERR_DEVICE_MISMATCH, "mixed CPU/CUDA tensors: status %d", st);
  CK(cudaFree(buf));
  (void)cudaGetLastError();
}

static void threads(void) {
  /* Two host threads calling at once, each with its own stream (the per-thread error text
   * and the cached device attributes must hold up). */
  g_cases++;
  int fails_before = g_failures;
  std::thread th[2];
  uint64_t base = rnd();
  for (int k = 0; k < 2; k++)
    th[k] = std::thread([k, base] {
      g_rng = base + 1000003u * (uint64_t)(k + 1);
      CK(cudaSetDevice(0));
      cudaStream_t s;
      CK(cudaStreamCreate(&s));
      for (int rep = 0; rep < 4; rep++) {
        const int64_t sh[4] = {1, 129, 2, k ? 96 : 64};
        const DLDataType dt[5] = {BF16, k ? F32 : BF16, BF16, BF16, BF16};
        const Layout lay[5] = {DENSE, PROJ, DENSE, DENSE, DENSE};
        bwd_case("threads", sh, dt, lay, false, nullptr, s);
      }
      CK(cudaStreamDestroy(s));
    });
  for (auto &t : th) t.join();
  printf("threads: two host threads, %s\n", g_failures.load() == fails_before ? "ok" : "FAILED");
}

/* ---- more than 2^31 elements, checked on slices --------------------------------------- */
__global__ void fill_bf16(uint16_t *p, int64_t n, int64_t stride, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    uint64_t z = (uint64_t)i * 0x9e3779b97f4a7c15ull + seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    float u = lo + (hi - lo) * (float)(z >> 40) * 0x1p-24f;
    p[i * stride] = __bfloat16_as_ushort(__float2bfloat16_rn(u));
  }
}

static void dfill(uint16_t *p, int64_t n, int64_t stride, float lo, float hi) {
  fill_bf16<<<4096, 256>>>(p, n, stride, rnd(), lo, hi);
  CK(cudaGetLastError());
}

/* Check elements [c0, c0+n) of row `row` (rows of `rowlen` contiguous elements in dout, o, dz;
 * z has its own row stride and element stride). dout_before holds dout's slice before an
 * in-place call (NULL: read dout now). */
static void check_slice(const char *what, uint16_t *dout, uint16_t *z, uint16_t *o, uint16_t *dz,
                        uint16_t *dos, int64_t rowlen, int64_t zrow, int64_t zstep, int64_t row,
                        int64_t c0, int64_t n, const std::vector<uint16_t> *dout_before) {
  std::vector<uint16_t> hd(n), hz((size_t)((n - 1) * zstep + 1)), ho(n), hdz(n), hdos(n);
  int64_t base = row * rowlen + c0;
  cudaError_t ce = cudaSuccess;
  if (dout_before) hd = *dout_before;
  else ce = cudaMemcpy(hd.data(), dout + base, n * 2, cudaMemcpyDeviceToHost);
  if (ce == cudaSuccess) ce = cudaMemcpy(hz.data(), z + row * zrow + c0 * zstep, hz.size() * 2, cudaMemcpyDeviceToHost);
  if (ce == cudaSuccess) ce = cudaMemcpy(ho.data(), o + base, n * 2, cudaMemcpyDeviceToHost);
  if (ce == cudaSuccess) ce = cudaMemcpy(hdz.data(), dz + base, n * 2, cudaMemcpyDeviceToHost);
  if (ce == cudaSuccess) ce = cudaMemcpy(hdos.data(), dos + base, n * 2, cudaMemcpyDeviceToHost);
  if (ce != cudaSuccess) {
    EXPECT(false, "%s row %lld cols [%lld, +%lld): copying the slice back: %s", what, (long long)row,
           (long long)c0, (long long)n, cudaGetErrorString(ce));
    return;
  }
  int64_t shape[4] = {1, 1, 1, n}, zst[4] = {n * zstep, n * zstep, n * zstep, zstep};
  auto mk = [&](void *data, int64_t *strides) {
    DLTensor t;
    memset(&t, 0, sizeof t);
    t.data = data; t.device = {kDLCPU, 0}; t.ndim = 4; t.dtype = BF16; t.shape = shape; t.strides = strides;
    return t;
  };
  DLTensor a = mk(hd.data(), NULL), b = mk(hz.data(), zst), c = mk(ho.data(), NULL),
           e = mk(hdz.data(), NULL), f = mk(hdos.data(), NULL);
  zgate_check_stats s1, s2;
  zgate_check_stats_init(&s1);
  zgate_check_stats_init(&s2);
  int cs = zgate_check_bwd(&a, &b, &c, &e, &f, &s1, &s2);
  char l1[256], l2[256];
  zgate_check_stats_format(&s1, l1, sizeof l1);
  zgate_check_stats_format(&s2, l2, sizeof l2);
  EXPECT(cs == 0 && s1.failures == 0 && s2.failures == 0, "%s row %lld cols [%lld, +%lld): dz {%s} dos {%s}",
         what, (long long)row, (long long)c0, (long long)n, l1, l2);
  printf("  %s row %lld cols [%lld, +%lld): dz {%s}\n", what, (long long)row, (long long)c0, (long long)n, l1);
  note(s1, BF16);
  note(s2, BF16);
}

static bool guard_intact(uint16_t *end) {
  unsigned char g[4096];
  CK(cudaMemcpy(g, end, sizeof g, cudaMemcpyDeviceToHost));
  for (unsigned char c : g) if (c != 0xFF) return false;
  return true;
}

static void big(void) {
  size_t free_b = 0, total_b = 0;
  CK(cudaMemGetInfo(&free_b, &total_b));
  /* 1: (17, 16384, 128, 64) bf16, dense: 2.28e9 elements, 22.8 GB for the five tensors. */
  {
    const int64_t shape[4] = {17, 16384, 128, 64};
    const int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
    size_t bytes = (size_t)n * 2 + 4096;
    if (free_b < 5 * bytes + (1ull << 30)) {
      printf("SKIP big dense: needs %.1f GB, %.1f GB free\n", 5.0 * bytes / 1e9, free_b / 1e9);
    } else {
      g_cases++;
      uint16_t *t[5];
      for (int k = 0; k < 5; k++) CK(cudaMalloc(&t[k], bytes));
      dfill(t[0], n, 1, -4, 4); dfill(t[1], n, 1, -20, 20); dfill(t[2], n, 1, -4, 4);
      CK(cudaMemset(t[3], 0xFF, bytes));
      CK(cudaMemset(t[4], 0xFF, bytes));
      CK(cudaDeviceSynchronize());
      DLTensor d[5];
      for (int k = 0; k < 5; k++) {
        memset(&d[k], 0, sizeof d[k]);
        d[k].data = t[k]; d[k].device = {kDLCUDA, 0}; d[k].ndim = 4; d[k].dtype = BF16;
        d[k].shape = (int64_t *)shape;
      }
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
      CK(cudaEventRecord(e0));
      int st = zgate_bwd(&d[0], &d[1], &d[2], &d[3], &d[4], NULL);
      CK(cudaEventRecord(e1));
      CK(cudaDeviceSynchronize());
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      EXPECT(st == ZGATE_OK, "big dense: %d (%s)", st, zgate_last_error());
      printf("big dense (17,16384,128,64) bf16: %lld elements, %.2f ms, %.0f GB/s\n", (long long)n, ms,
             5.0 * n * 2 / (ms * 1e-3) / 1e9);
      const int64_t m = 1 << 20, two31 = 1ll << 31;
      int64_t starts[4] = {0, two31 - m / 2, n / 2 + 12345, n - m};
      for (int64_t c0 : starts)
        check_slice("big dense", t[0], t[1], t[2], t[3], t[4], 0, 0, 1, 0, c0, m, nullptr);
      EXPECT(guard_intact(t[3] + n) && guard_intact(t[4] + n), "big dense: guard after an output changed");
      for (int k = 0; k < 5; k++) CK(cudaFree(t[k]));
    }
  }
  CK(cudaMemGetInfo(&free_b, &total_b));
  /* 2: 2^32 + 10 work items on the width-1 path (z with element stride 2 and a padded row
   * stride): 64-bit division of item indices. Shape (1, 2, 1, 2^31 + 5). */
  {
    const int64_t M = (1ll << 31) + 5;
    const int64_t shape[4] = {1, 2, 1, M};
    const int64_t zrow = 2 * M + 2;
    int64_t dst[4] = {2 * M, M, M, 1}, zst[4] = {2 * zrow, zrow, zrow, 2};
    size_t dbytes = (size_t)(2 * M) * 2 + 4096, zbytes = (size_t)(2 * zrow) * 2 + 4096;
    if (free_b < 4 * dbytes + zbytes + (1ull << 30)) {
      printf("SKIP big wide: needs %.1f GB, %.1f GB free\n", (4.0 * dbytes + zbytes) / 1e9, free_b / 1e9);
    } else {
      g_cases++;
      uint16_t *dout, *z, *o, *dz, *dos;
      CK(cudaMalloc(&dout, dbytes)); CK(cudaMalloc(&z, zbytes)); CK(cudaMalloc(&o, dbytes));
      CK(cudaMalloc(&dz, dbytes)); CK(cudaMalloc(&dos, dbytes));
      dfill(dout, 2 * M, 1, -4, 4); dfill(o, 2 * M, 1, -4, 4);
      dfill(z, M, 2, -20, 20); dfill(z + zrow, M, 2, -20, 20);
      CK(cudaMemset(dz, 0xFF, dbytes));
      CK(cudaMemset(dos, 0xFF, dbytes));
      CK(cudaDeviceSynchronize());
      DLTensor d[5];
      for (int k = 0; k < 5; k++) {
        memset(&d[k], 0, sizeof d[k]);
        d[k].device = {kDLCUDA, 0}; d[k].ndim = 4; d[k].dtype = BF16; d[k].shape = (int64_t *)shape;
        d[k].strides = k == 1 ? zst : dst;
      }
      d[0].data = dout; d[1].data = z; d[2].data = o; d[3].data = dz; d[4].data = dos;
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
      CK(cudaEventRecord(e0));
      int st = zgate_bwd(&d[0], &d[1], &d[2], &d[3], &d[4], NULL);
      CK(cudaEventRecord(e1));
      CK(cudaDeviceSynchronize());
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      EXPECT(st == ZGATE_OK, "big wide: %d (%s)", st, zgate_last_error());
      printf("big wide (1,2,1,2^31+5) bf16, z strided: %lld work items, %.2f ms\n", (long long)(2 * M), ms);
      const int64_t w = 1 << 16;
      /* row 0's end, row 1's middle, and row 1's end, which holds items 2^32 - 65526 .. 2^32 + 9 */
      const int64_t rows[4] = {0, 0, 1, 1}, cols[4] = {0, M - w, M / 2, M - w};
      for (int k = 0; k < 4; k++)
        check_slice("big wide", dout, z, o, dz, dos, M, zrow, 2, rows[k], cols[k], w, nullptr);
      EXPECT(guard_intact(dz + 2 * M) && guard_intact(dos + 2 * M), "big wide: guard after an output changed");
      CK(cudaFree(dout)); CK(cudaFree(z)); CK(cudaFree(o)); CK(cudaFree(dz)); CK(cudaFree(dos));
    }
  }
}

int main(int argc, char **argv) {
  bool small = argc > 1 && !strcmp(argv[1], "--small");
  bool bigrun = argc > 1 && !strcmp(argv[1], "--big");
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    printf("SKIP: no CUDA device here (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return SKIP;
  }
  if (!zgate_cuda_built()) {
    printf("SKIP: libzgate was built without CUDA\n");
    return SKIP;
  }
  const char *seed_env = getenv("ZGATE_TEST_SEED");
  uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : (uint64_t)time(NULL);
  g_rng = seed;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("seed=%llu device=%s (%d SMs), %d GPU(s), %s\n", (unsigned long long)seed, prop.name,
         prop.multiProcessorCount, ndev, zgate_build_info());
  if (bigrun) {
    big();
  } else if (small) {
    case_list(true);
    ranks(true);
  } else {
    all_dtype_combos();
    case_list(false);
    special_values();
    ranks(false);
    stream_is_used();
    devices(ndev);
    threads();
  }
  printf("worst error: f32 %.2f ulp of scale, f16 %.2f ulp, bf16 %.2f ulp; worst bound ratio %.3f\n",
         g_worst.units[0], g_worst.units[1], g_worst.units[2], g_worst.ratio);
  printf("%d cases, %d failures\n", g_cases.load(), g_failures.load());
  return g_failures.load() ? 1 : 0;
}
