/* Host-side planning of one CUDA launch, kept apart from the kernels so it can be read (and
 * tested) on its own: lay validation's collapsed dims (zg_problem) into Args, pick the widest
 * vector every pointer, stride and row length allows, and precompute the divisions that
 * turn a work-item index back into coordinates. C++ (host only); no CUDA calls. */
#ifndef ZGATE_CUDA_PLAN_H
#define ZGATE_CUDA_PLAN_H

#include <stdint.h>

extern "C" {
#include "zgate_internal.h" /* zg_dtype */
}

namespace zgcu {

/* Unsigned division by a run-time constant d >= 1 for dividends below 2^32:
 * q = (umulhi(x, m) + x) >> s with s = ceil(log2 d), m = floor(2^32 (2^s - d) / d) + 1
 * (Granlund and Montgomery, 1994); the sum is formed in 64 bits so it cannot wrap. */
struct FastDiv {
  uint32_t d, m, s;
};

static inline FastDiv fastdiv_make(uint64_t d) {
  FastDiv f;
  if (d == 0 || d > 0xffffffffull) d = 1; /* never used for division then (wide path) */
  uint32_t s = 0;
  while ((1ull << s) < d) s++;
  f.d = (uint32_t)d;
  f.s = s;
  f.m = (uint32_t)(((1ull << 32) * ((1ull << s) - d)) / d + 1);
  return f;
}

enum { MAX_T = 5 };
/* Dims outside the innermost three, when a problem keeps more than four after validation's
 * collapse (ZGATE_MAX_NDIM - 3). */
enum { MAX_X = 5 };

/* A kernel's kind: the zg_dtype of all its tensors (ZG_F32, ZG_F16, ZG_BF16), or MIXED,
 * each tensor's read from Args.dtype at run time. */
constexpr int ZG_KIND_MIXED = 3;
static_assert(ZG_KIND_MIXED != ZG_F32 && ZG_KIND_MIXED != ZG_F16 && ZG_KIND_MIXED != ZG_BF16,
              "a kind is a dtype or MIXED");

/* Index math of a launch (cuda_kernel.cuh's locate): FLAT, one row, item i at element i*V of
 * every tensor; ROWS, rows along the third collapsed dimension only and fewer than 2^32 items,
 * one 32-bit division; ANY, everything else. */
enum { L_FLAT = 0, L_ROWS = 1, L_ANY = 2 };

/* Everything a kernel needs, passed by value (a few hundred bytes of kernel parameters). */
struct Args {
  char *ptr[MAX_T];       /* byte address of element (0,0,0,0) of each tensor */
  int dtype[MAX_T];       /* a zg_dtype: ZG_F32 / ZG_F16 / ZG_BF16 */
  int64_t n[4];           /* the problem's dims, right-aligned; n[3] is the innermost */
  int64_t st[MAX_T][4];   /* strides in elements of those dims */
  int nx;                 /* > 0: the problem has 3 + nx dims; n[0] is the product of the outer
                             nx, described by xn / xst innermost first (st[t][0] unused) */
  int64_t xn[MAX_X];
  int64_t xst[MAX_T][MAX_X];
  int64_t nv;             /* whole vectors per row: n[3] / V */
  int64_t items;          /* work items: rows * nv */
  int tail;               /* elements after the last whole vector (only when rows == 1) */
  int one_row;            /* n[0] = n[1] = n[2] = 1: item index is the vector index (plan_dims) */
  int wide;               /* items >= 2^32: 64-bit division instead of FastDiv */
  int accurate;           /* some output is float32: the accurate math (mixed dtypes) */
  FastDiv div_nv, div_n2, div_n1;
};

/* Lay the problem's ndim >= 1 dims (already collapsed by validation, outermost first) into
 * a: right-aligned in n / st when they are at most 4, else the innermost three there and the
 * outer ones in xn / xst. */
static inline void plan_dims(int nt, int ndim, const int64_t *shape, const int64_t *const *strides,
                             Args &a) {
  const int nx = ndim > 4 ? ndim - 3 : 0; /* outer dims folded into n[0] */
  const int pad = ndim < 4 ? 4 - ndim : 0;
  a.nx = nx;
  for (int d = 0; d < 4; d++) {
    const int s = nx > 0 ? (d == 0 ? -1 : nx + d - 1) : d - pad; /* -1: a dim of size 1 */
    a.n[d] = s < 0 ? 1 : shape[s];
    for (int t = 0; t < nt; t++) a.st[t][d] = s < 0 ? 0 : strides[t][s];
  }
  for (int k = 0; k < nx; k++) {
    const int s = nx - 1 - k;
    a.xn[k] = shape[s];
    a.n[0] *= shape[s];
    for (int t = 0; t < nt; t++) a.xst[t][k] = strides[t][s];
  }
  a.one_row = a.n[0] == 1 && a.n[1] == 1 && a.n[2] == 1;
}

/* Widest V in {8, 4, 2} (at most max_v) such that each vector of every tensor starts on a multiple of
 * min(V * element size, 16) bytes and rows hold whole vectors (or there is one row, whose
 * remainder becomes the tail); else 1 (any strides). */
static inline int plan_vector_width(int nt, const Args &a, const int elem_size[MAX_T], int max_v) {
  for (int t = 0; t < nt; t++)
    if (a.st[t][3] != 1) return 1;
  for (int v = max_v; v >= 2; v /= 2) {
    if (!a.one_row && a.n[3] % v != 0) continue;
    bool ok = true;
    for (int t = 0; t < nt && ok; t++) {
      int64_t align = (int64_t)v * elem_size[t] < 16 ? (int64_t)v * elem_size[t] : 16;
      if ((uint64_t)(uintptr_t)a.ptr[t] % (uint64_t)align != 0) ok = false;
      for (int d = 0; d < 3 && ok; d++)
        if (a.n[d] > 1 && (a.st[t][d] * elem_size[t]) % align != 0) ok = false;
      for (int k = 0; k < a.nx && ok; k++)
        if ((a.xst[t][k] * elem_size[t]) % align != 0) ok = false;
    }
    if (ok) return v;
  }
  return 1;
}

/* Fill the item count, tail and dividers for vector width v; returns the layout. FLAT and
 * ROWS rely on unit innermost strides, which plan_vector_width guarantees for v > 1. */
static inline int plan_items(Args &a, int v) {
  a.nv = a.n[3] / v;
  a.tail = a.one_row ? (int)(a.n[3] - a.nv * v) : 0;
  a.items = a.n[0] * a.n[1] * a.n[2] * a.nv;
  a.wide = (uint64_t)a.items >= (1ull << 32);
  a.div_nv = fastdiv_make((uint64_t)a.nv);
  a.div_n2 = fastdiv_make((uint64_t)a.n[2]);
  a.div_n1 = fastdiv_make((uint64_t)a.n[1]);
  if (v <= 1) return L_ANY;
  if (a.one_row) return L_FLAT;
  return a.n[0] == 1 && a.n[1] == 1 && !a.wide ? L_ROWS : L_ANY;
}

}  // namespace zgcu

#endif /* ZGATE_CUDA_PLAN_H */
