/*
 * zgate_check: the accuracy oracle shared by the C tests and `zgate check`.
 *
 * It compares an output tensor computed by zgate (any dtype, any strides) against the float64
 * reference (zgate_bwd_reference / zgate_fwd_reference into float64 tensors) and the inputs
 * the output was computed from, element by element, under the team's numerics policy:
 *
 *   s = sigmoid(z) in float64. Per output, an elementwise SCALE and an ABSOLUTE allowance A:
 *     dz          scale = |dout*o| * s * (1 + |z|*(1-s))   A = 4 * 2^-149 * |dout*o| * (1+|z|)
 *     dout_scaled scale = |dout*z| * s                      A = 4 * 2^-149 * |dout*z|
 *     fwd out     scale = |o*z| * s                         A = 4 * 2^-149 * |o*z|
 *   (A covers s carried through float32's subnormal range, z < about -87; elsewhere it is far
 *   below an ulp of the scale.)
 *
 *   float32 output:  |got - ref| <= 4 * ulp_f32(scale) + A                        ("f32 bound")
 *   float16/bfloat16 output: |got - ref| <= ulp_T(ref)                            (1 ulp of T)
 *                     OR     |got - ref| <= f32 bound + ulp_T(ref) / 2
 *   ulp_T(x) is the spacing of type T at |x| (2^(floor(log2|x|) - p + 1), p the precision,
 *   floored at the subnormal spacing, so ulp_T(0) is T's smallest subnormal).
 *
 * Special values, checked before any distance:
 *   - NaN where the reference is NaN and nowhere else ("NaN mismatch").
 *   - A reference infinity needs the same infinity (sign too). A finite reference whose
 *     magnitude is at least 2^(emax+1) of the output type (it cannot round to a finite
 *     value) also needs the infinity of its sign ("inf mismatch" otherwise).
 *   - Otherwise a got infinity counts as +-2^(emax+1) of its type (where IEEE rounding puts
 *     overflow), so a reference just under the overflow threshold may round either way
 *     within the tolerance; a failure involving an infinity is also an inf mismatch.
 *   - Signed zeros compare equal.
 *   - NaN bits are not compared here. zgate's CPU paths return the default quiet NaN of the
 *     output type (0x7fc00000, 0x7e00, 0x7fc0); tests/test_special.c checks the bits.
 *   There is no exception for special inputs: an infinite dout or o with z below about -103
 *   (float32's sigmoid 0, float64's a tiny nonzero) needs the formula's infinity like any
 *   other element, on every backend.
 *
 * Reported error units: for float32 outputs |got-ref| / ulp_f32(scale) ("ulp of the scale"),
 * for float16/bfloat16 |got-ref| / ulp_T(ref) ("ulp of the type at the reference").
 * bound_ratio is |got-ref| / (the larger allowed distance): <= 1 passes. It is the measure
 * to read: where the absolute allowance A dominates (z < about -87) err_units can be large
 * while the element is well inside the policy.
 *
 * The request's criterion (an error under 0.1% of the elementwise scale, ZGATE_CHECK_REQUEST_REL)
 * is reported beside the policy, not judged: |got-ref| / SCALE, SCALE at least the output
 * type's smallest normal (below it the type cannot hold 0.1% of the scale), over the finite
 * pairs whose scale is finite; its largest value and the elements past the criterion.
 *
 * All functions read CPU memory only and never write to the tensors they compare.
 */
#ifndef ZGATE_CHECK_H
#define ZGATE_CHECK_H

#include <stdint.h>

#include <dlpack/dlpack.h>

#include "zgate.h"

#define ZGATE_CHECK_MAX_NDIM ZGATE_MAX_NDIM /* the highest rank compared: the API's */
#define ZGATE_CHECK_REQUEST_REL 1e-3        /* the request's criterion, relative to SCALE */

#ifdef __cplusplus
extern "C" {
#endif

/* Which output a value is: it chooses the scale and absolute allowance above. */
typedef enum zgate_check_quantity {
  ZGATE_CHECK_DZ = 0,  /* backward dz */
  ZGATE_CHECK_DOS = 1, /* backward dout_scaled */
  ZGATE_CHECK_OUT = 2  /* forward out */
} zgate_check_quantity;

typedef enum zgate_check_verdict {
  ZGATE_CHECK_PASS = 0,
  ZGATE_CHECK_FAIL_VALUE = 1, /* finite, outside the bound */
  ZGATE_CHECK_FAIL_NAN = 2,   /* NaN on one side only */
  ZGATE_CHECK_FAIL_INF = 3    /* an infinity expected and not got, or got and not allowed */
} zgate_check_verdict;

/* Statistics of one compared tensor; zgate_check_stats_init sets it up. */
typedef struct zgate_check_stats {
  int64_t count;          /* elements compared */
  int64_t failures;       /* elements that failed, NaN and inf mismatches included */
  int64_t nan_mismatches; /* NaN in got xor NaN in the reference */
  int64_t inf_mismatches; /* see the policy above */
  int64_t first_fail;     /* row-major index (e.g. ((b*L+l)*H+h)*D+d) of the first failure, -1 if none */
  double first_got, first_ref; /* the values at first_fail */
  double max_err_units;   /* largest |got-ref| in the units above (finite pairs only) */
  double max_bound_ratio; /* largest |got-ref| / allowed (finite pairs only); <= 1 passes */
  double max_rel_err;     /* largest |got-ref| / |ref| over finite nonzero references */
  int64_t worst_index;    /* row-major index of max_bound_ratio, -1 if none */
  double max_scale_err;   /* largest |got-ref| / SCALE (the request's measure, see above) */
  int64_t past_request;   /* elements whose |got-ref| / SCALE exceeds ZGATE_CHECK_REQUEST_REL */
} zgate_check_stats;

void zgate_check_stats_init(zgate_check_stats *st);
/* Fold `from` into `into` (counts add, maxima combine, first failure kept from `into` when
 * it has one). Indices then refer to the tensor each came from. */
void zgate_check_stats_merge(zgate_check_stats *into, const zgate_check_stats *from);

/* Judge one element. `out_dtype` is the output's type (float32, float16 or bfloat16; a
 * float64 output gets the float32 bound with float64's range, for comparing two float64
 * evaluations). `dout` is ignored for ZGATE_CHECK_OUT. err_units and bound_ratio, where not
 * NULL, get the reported measures (0 for special-value verdicts). */
zgate_check_verdict zgate_check_element(zgate_check_quantity q, DLDataType out_dtype, double got,
                                        double ref, double dout, double z, double o,
                                        double *err_units, double *bound_ratio);

/* Compare every element of `got` against `ref` (normally float64), with the inputs it was
 * computed from (`dout` is NULL for ZGATE_CHECK_OUT). All tensors: host memory (kDLCPU or
 * kDLCUDAHost), one shape of any rank 0..ZGATE_CHECK_MAX_NDIM (8; rank 0 is one element, shape
 * may be NULL), dtype float32/float16/bfloat16/float64, lanes 1, strides NULL or non-negative.
 * Adds into *st (so several calls can accumulate). Returns 0, or -1 when the tensors are
 * unusable as described (then *st is unchanged).
 * For an in-place run (dout_scaled is dout) pass a copy of dout as it was before the call. */
int zgate_check_tensor(zgate_check_quantity q, const DLTensor *got, const DLTensor *ref,
                       const DLTensor *dout, const DLTensor *z, const DLTensor *o,
                       zgate_check_stats *st);

/* Compute the float64 reference with zgate_bwd_reference (resp. fwd) into scratch memory and
 * compare dz and dout_scaled (resp. out) with it. The inputs must hold the values the outputs
 * were computed from. Returns ZGATE_OK, the reference's status code, or -1 (unusable tensors
 * or out of memory). */
int zgate_check_bwd(const DLTensor *dout, const DLTensor *z, const DLTensor *o, const DLTensor *dz,
                    const DLTensor *dout_scaled, zgate_check_stats *st_dz, zgate_check_stats *st_dos);
int zgate_check_fwd(const DLTensor *o, const DLTensor *z, const DLTensor *out, zgate_check_stats *st);

/* The float64 formula itself (so special values land where the formula puts them):
 * s = 1/(1+exp(-z)); dz = dout*o*s*(1+z*(1-s)) left to right; dout_scaled = (dout*z)*s and
 * out = (o*z)*s, each as (a*s)*z where a*z is not finite (float64 inputs near its range).
 * `dout` is ignored for ZGATE_CHECK_OUT. */
double zgate_check_formula(zgate_check_quantity q, double dout, double z, double o);

/* Value helpers for the three storage types and float64 (unknown types: NaN / -1 / 0). */
int zgate_check_dtype_known(DLDataType t);          /* 1 for f32, f16, bf16, f64 (lanes 1) */
const char *zgate_check_dtype_name(DLDataType t);   /* "f32", "f16", "bf16", "f64" or "?" */
int zgate_check_dtype_size(DLDataType t);           /* bytes per element, or -1 */
double zgate_check_load(DLDataType t, const void *p);   /* widen one element, exactly */
/* Round v to nearest even in t (one rounding, straight from double) and store it. */
void zgate_check_store(DLDataType t, void *p, double v);
double zgate_check_round(DLDataType t, double v);   /* the value zgate_check_store stores */
double zgate_check_ulp(DLDataType t, double x);     /* ulp_T(x) as defined above */

/* One line describing *st, e.g. for reports: "n=.. fail=.. max=..ulp ratio=.. rel=..". */
void zgate_check_stats_format(const zgate_check_stats *st, char *buf, int bufsize);

#ifdef __cplusplus
}
#endif

#endif /* ZGATE_CHECK_H */
