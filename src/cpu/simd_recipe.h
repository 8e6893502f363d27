/* The accurate recipe's steps (simd_exp.h), written once over a mapping that the includer
 * defines first: ZG_INLINE, a type V and its operations v_set1, v_add, v_sub, v_mul,
 * v_fma (a*b + c), v_fnma (c - a*b), v_fms (a*b - c), each rounded once, and v_recip (1/d,
 * or an estimate that the res step below refines). kernels_simd.c maps them to an ISA's
 * vectors (vec_<isa>.h), cuda_gate_math.cuh to one float of a CUDA thread: the CPU paths and
 * the CUDA kernels do the same operations in the same order. */
#ifndef ZGATE_SIMD_RECIPE_H
#define ZGATE_SIMD_RECIPE_H

/* p + plo = exp(r) for |r| <= ln2/2, given k: steps 3-4. plo is p's rounding error. */
ZG_INLINE V exp_core(V x, V k, V *plo) {
  V r1 = v_fnma(k, v_set1(ZG_EXP_LN2_HI), x); /* exact */
  V r = v_fnma(k, v_set1(ZG_EXP_LN2_LO), r1);
  V c = v_fnma(k, v_set1(ZG_EXP_LN2_LO), v_sub(r1, r)); /* r's rounding */
  /* Q by Estrin: a short dependency chain (the out-of-order window limits these loops) */
  V r2 = v_mul(r, r);
  V q01 = v_fma(v_set1(ZG_EXP_Q1), r, v_set1(ZG_EXP_Q0));
  V q23 = v_fma(v_set1(ZG_EXP_Q3), r, v_set1(ZG_EXP_Q2));
  V q45 = v_fma(v_set1(ZG_EXP_Q5), r, v_set1(ZG_EXP_Q4));
  V q = v_fma(v_mul(r2, r2), q45, v_fma(r2, q23, q01));
  /* p = (1 + r) + (r^2 q + c), with 1 + r split exactly (Fast2Sum) so p rounds once */
  const V one = v_set1(1.0f);
  V hi = v_add(one, r);
  V lo = v_add(v_sub(one, hi), r);
  V u = v_add(v_fma(r2, q, c), lo);
  V p = v_add(hi, u);
  *plo = v_add(v_sub(hi, p), u);
  return p;
}

/* r = 1/(1 + E) and er = E*r from e + elo = E = exp(-|z|), each rounded once, without
 * cancellation: a rounded leading term plus an fma-computed correction. From an estimate
 * (AVX-512's rcp14, within 2^-14) res is the estimate's error, and r(1 + res) misses
 * 1/(1+E) by about res^2 <= 2^-28 before its own rounding. */
ZG_INLINE void sigmoid_parts_acc(V e, V elo, V *r_out, V *er_out) {
  const V one = v_set1(1.0f);
  V d = v_add(one, e);
  V dlo = v_add(v_sub(e, v_sub(d, one)), elo); /* 1 + E = d + dlo */
  V r = v_recip(d);
  V res = v_fnma(r, dlo, v_fnma(r, d, one)); /* 1 - r(d + dlo) */
  V er = v_mul(e, r);
  V erlo = v_fma(elo, r, v_fms(e, r, er)); /* E*r - er */
  *r_out = v_fma(r, res, r);
  *er_out = v_add(er, v_fma(er, res, erlo));
}

/* dz = (dout*o) * h, h = s*(1 + z*(1-s)) as fma(s*z, 1-s, s) (one rounding), with dout*o
 * carried as a + alo (alo = fma(dout, o, -a)): fma(a, h, alo*h). a and h are handed back:
 * where a is infinite the fused form is NaN and a*h is the result. */
ZG_INLINE V dz_acc(V dout, V z, V o, V s, V oms, V *a_out, V *h_out) {
  V h = v_fma(v_mul(s, z), oms, s);
  V a = v_mul(dout, o);
  V alo = v_fms(dout, o, a);
  *a_out = a;
  *h_out = h;
  return v_fma(a, h, v_mul(alo, h));
}

#endif /* ZGATE_SIMD_RECIPE_H */
