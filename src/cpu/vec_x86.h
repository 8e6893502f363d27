/* What the x86 mappings share, written once over the register width VEC_W (256 for
 * vec_avx2.h, 512 for vec_avx512.h; V is __m256 or __m512): the float arithmetic, whole
 * vector loads and stores, and F16C's single-element float16 conversions (round to nearest
 * even in the immediate; exact widening) for strided tensors. */
#ifndef ZGATE_VEC_X86_H
#define ZGATE_VEC_X86_H

#include <immintrin.h>

#define ZG_MM2(w, op) _mm##w##_##op
#define ZG_MM(w, op) ZG_MM2(w, op)
#define ZG_PS(op) ZG_MM(VEC_W, op##_ps)

static inline V v_set1(float x) { return ZG_PS(set1)(x); }
static inline V v_zero(void) { return ZG_PS(setzero)(); }
static inline V v_add(V a, V b) { return ZG_PS(add)(a, b); }
static inline V v_sub(V a, V b) { return ZG_PS(sub)(a, b); }
static inline V v_mul(V a, V b) { return ZG_PS(mul)(a, b); }
static inline V v_div(V a, V b) { return ZG_PS(div)(a, b); }
static inline V v_max(V a, V b) { return ZG_PS(max)(a, b); } /* b when either is NaN */
/* a*b + c, c - a*b, a*b - c: each one rounding */
static inline V v_fma(V a, V b, V c) { return ZG_PS(fmadd)(a, b, c); }
static inline V v_fnma(V a, V b, V c) { return ZG_PS(fnmadd)(a, b, c); }
static inline V v_fms(V a, V b, V c) { return ZG_PS(fmsub)(a, b, c); }
static inline V v_ld(const float *p) { return ZG_PS(loadu)(p); }
static inline void v_st(float *p, V a) { ZG_PS(storeu)(p, a); }
static inline void v_stream(float *p, V a) { ZG_PS(stream)(p, a); }

static inline float v_h2f_1(uint16_t h) { return _cvtsh_ss(h); }
static inline uint16_t v_f2h_1(float f) { return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

#endif /* ZGATE_VEC_X86_H */
