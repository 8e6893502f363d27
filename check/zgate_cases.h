/* The shared case list (cases.def) as C arrays, for C and CUDA C++ tests and `zgate check`. */
#ifndef ZGATE_CASES_H
#define ZGATE_CASES_H

#include <stdint.h>

#include <dlpack/dlpack.h>

/* Shape sets: a run takes the sets it names, e.g. QUICK | FULL. */
enum { ZGATE_CASES_QUICK = 1, ZGATE_CASES_FULL = 2, ZGATE_CASES_REAL = 4 };

typedef struct zgate_case_shape {
  int64_t shape[4];
  int set;
} zgate_case_shape;

/* dt: dout, z, o, dz, dout_scaled; the forward takes o = dt[2], z = dt[1], out = dt[3]. */
typedef struct zgate_case_dtypes {
  const char *name;
  DLDataType dt[5];
} zgate_case_dtypes;

/* cases.def gives dtypes and views per backward tensor (dout, z, o, dz, dout_scaled); the
 * forward's o, z and out take those of the backward's tensor named here. */
static const int zgate_case_fwd_slot[3] = {2, 1, 3};

/* cases.def's ZG_VIEW (how one tensor lies in its buffer) and ZG_LAYOUT (the view of each
 * backward tensor, an index into zgate_case_views). */
typedef struct zgate_case_view {
  const char *name;
  int order[4], inner, scale, extra, offset;
} zgate_case_view;

typedef struct zgate_case_layout {
  const char *name;
  int inplace, view[5];
} zgate_case_layout;

#define ZGC_F32 {kDLFloat, 32, 1}
#define ZGC_F16 {kDLFloat, 16, 1}
#define ZGC_BF16 {kDLBfloat, 16, 1}

#define ZG_SHAPE(b, l, h, d, set) {{b, l, h, d}, ZGATE_CASES_##set},
#define ZG_DTYPES(name, a, b, c, d, e)
#define ZG_VIEW(name, d0, d1, d2, d3, inner, scale, extra, offset)
#define ZG_LAYOUT(name, inplace, a, b, c, d, e)
static const zgate_case_shape zgate_case_shapes[] = {
#include "cases.def"
};
#undef ZG_SHAPE
#undef ZG_DTYPES
#define ZG_SHAPE(b, l, h, d, set)
#define ZG_DTYPES(name, a, b, c, d, e) {#name, {ZGC_##a, ZGC_##b, ZGC_##c, ZGC_##d, ZGC_##e}},
static const zgate_case_dtypes zgate_case_dtype_sets[] = {
#include "cases.def"
};
#undef ZG_DTYPES
#define ZG_DTYPES(name, a, b, c, d, e)
#undef ZG_VIEW
#define ZG_VIEW(name, d0, d1, d2, d3, inner, scale, extra, offset) ZGATE_CASE_VIEW_##name,
enum {
#include "cases.def"
  ZGATE_CASE_NVIEWS
};
#undef ZG_VIEW
#define ZG_VIEW(name, d0, d1, d2, d3, inner, scale, extra, offset) \
  {#name, {d0, d1, d2, d3}, inner, scale, extra, offset},
static const zgate_case_view zgate_case_views[] = {
#include "cases.def"
};
#undef ZG_VIEW
#define ZG_VIEW(name, d0, d1, d2, d3, inner, scale, extra, offset)
#undef ZG_LAYOUT
#define ZG_LAYOUT(name, inplace, a, b, c, d, e) ZGATE_CASE_LAYOUT_##name,
enum {
#include "cases.def"
  ZGATE_CASE_NLAYOUTS
};
#undef ZG_LAYOUT
#define ZG_LAYOUT(name, inplace, a, b, c, d, e)                                       \
  {#name, inplace, {ZGATE_CASE_VIEW_##a, ZGATE_CASE_VIEW_##b, ZGATE_CASE_VIEW_##c, \
                    ZGATE_CASE_VIEW_##d, ZGATE_CASE_VIEW_##e}},
static const zgate_case_layout zgate_case_layouts[] = {
#include "cases.def"
};
#undef ZG_LAYOUT
#define ZG_LAYOUT(name, inplace, a, b, c, d, e) #name,
static const char *const zgate_case_layout_names[] = {
#include "cases.def"
};
#undef ZG_SHAPE
#undef ZG_DTYPES
#undef ZG_VIEW
#undef ZG_LAYOUT

/* The element strides of view v over `shape` and its first element's offset; returns the
 * elements its buffer holds (offset, the view's span and the padding after its last row;
 * 0 for an empty shape). The one rule of cases.def, as zgate.cases.view_strides. */
static inline int64_t zgate_case_strides(const zgate_case_view *v, const int64_t shape[4],
                                         int64_t strides[4], int64_t *offset) {
  int64_t step = 1, block = 1, numel = 1;
  for (int k = 3; k >= 0; k--) {
    const int d = v->order[k];
    strides[d] = step;
    step *= shape[d];
    numel *= shape[d];
    if (4 - k == v->inner) block = step, step = v->scale * step + v->extra;
  }
  *offset = v->offset * block;
  return numel ? *offset + step : 0;
}

#define ZGATE_CASES_N(a) ((int)(sizeof(a) / sizeof((a)[0])))

#endif /* ZGATE_CASES_H */
