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

#define ZGC_F32 {kDLFloat, 32, 1}
#define ZGC_F16 {kDLFloat, 16, 1}
#define ZGC_BF16 {kDLBfloat, 16, 1}

#define ZG_SHAPE(b, l, h, d, set) {{b, l, h, d}, ZGATE_CASES_##set},
#define ZG_DTYPES(name, a, b, c, d, e)
#define ZG_LAYOUT(name)
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
#undef ZG_LAYOUT
#define ZG_DTYPES(name, a, b, c, d, e)
#define ZG_LAYOUT(name) #name,
static const char *const zgate_case_layouts[] = {
#include "cases.def"
};
#undef ZG_SHAPE
#undef ZG_DTYPES
#undef ZG_LAYOUT

#define ZGATE_CASES_N(a) ((int)(sizeof(a) / sizeof((a)[0])))

#endif /* ZGATE_CASES_H */
