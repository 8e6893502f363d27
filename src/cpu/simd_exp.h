/* The exp recipe shared by the SIMD paths (kernels_avx2.c, kernels_avx512.c, kernels_neon.c).
 * ISA-agnostic: constants and the recipe only; each ISA writes it once with its intrinsics.
 *
 * zg_exp_neg(x) = exp(x) for x <= 0 (the sigmoid only ever needs exp(-|z|)), NaN for NaN.
 *   1. x = max(x, ZG_EXP_LO): below -104.5 exp(x) < 2^-150 rounds to 0 anyway, and the clamp
 *      keeps k in range. The max is written so that a NaN x passes through.
 *   2. k = round_to_nearest(x * log2(e)), k in [-151, 0], via j = fma(x, log2e, 1.5*2^23):
 *      j holds 2^22 + k in its low mantissa bits, and k = j - 1.5*2^23 exactly.
 *   3. r = x - k*ln2 by Cody-Waite: k*ZG_LN2_HI is exact (ZG_LN2_HI has 9 significant
 *      bits, |k| < 2^8) and r1 = x - k*ZG_LN2_HI is exact (Sterbenz); r = r1 - k*ZG_LN2_LO
 *      by one fma, and c = (r1 - r) - k*ZG_LN2_LO recovers r's rounding (|c| <= 2^-26).
 *   4. p = (1 + r) + (r^2 * Q(r) + c), Q of degree 5 by Estrin with fma (short dependency chain); 1 + r is split
 *      exactly into hi + lo (Fast2Sum, |r| < 1) so that p is rounded once at the end.
 *      Q is our own Chebyshev fit (mpmath chebyfit of (exp(r)-1-r)/r^2 on [-ln2/2, ln2/2],
 *      coefficients rounded to float): |p/exp(r) - 1| < 7e-10 (0.012 ulp) before rounding.
 *   5. 2^k applied as two multiplies, 2^k1 * 2^k2 with k1 = floor(k/2), k2 = k - k1: both
 *      scales are normal floats (k1, k2 >= -76), the first product is exact, and the second
 *      rounds once, so results in the subnormal range (x down to about -103.97) are a single
 *      rounding of p * 2^k, and results below 2^-150 are 0.
 * Error, measured on every float x in [-104.5, 0] against double exp (1.12e9 points):
 *   max 0.6895 ulp for normal results, max 0.7791 ulp for subnormal results (p's own
 *   relative error shows at the top of the subnormal range); 0.125% not correctly rounded.
 *   exp(NaN) = NaN, exp(-inf) = 0, exp(-0) = 1.
 *   (tests/simd/test_simd_exp.c re-checks every 61st float, and e + elo, on every test run;
 *   ZGATE_TEST_EXHAUSTIVE=1 in its environment checks every float.)
 *
 * The sigmoid and gate built on it (avx2 and NEON use the same operations in the same order
 * and give the same bits; avx512 gets r from rcp14 + one Newton step instead of a division,
 * so its bits may differ, within the same bound). Every step below exists because float32
 * arithmetic that rounds each product separately was measured at up to 4.5 ulp of the
 * scale for dz (the bar is 4); with them: dz 2.75, dout_scaled 1.91, out 1.98 ulp of scale
 * (4M random points over z in [-120, 120] and near the root, docs/perf-notes.md).
 *   e + elo = exp(-|z|): elo is p's final rounding error (Fast2Sum at the end of step 4)
 *                        scaled by 2^k; e + elo is within 2^-25 relative (measured max
 *                        1.55e-8) where e >= 2^-99, below which elo underflows;
 *   d = 1 + e, dlo = (e - (d - 1)) + elo          (1 + E = d + dlo, the parenthesis exact)
 *   r = 1/d; res = (1 - r*d) - r*dlo               (two fmas: r*(1 + res) = 1/(1 + E))
 *   er = e*r; erlo = (e*r - er) + elo*r            (fma residual: E*r = er + erlo)
 *   R = r + r*res; ER = er + (er*res + erlo)       (each rounded once, ~0.5 ulp)
 *   z >= 0: s = R, 1 - s = ER      z < 0 (or NaN): s = ER, 1 - s = R
 *   (1 - s is never formed by subtraction: no cancellation for large z)
 *   h = s*(1 + z*(1-s)) as fma(s*z, 1-s, s)        (one rounding where 1 + z*(1-s) then *s
 *                                                   would round twice, a full ulp near z = 0)
 *   dz = (dout*o) * h with dout*o carried as a + alo (alo = fma(dout, o, -a)):
 *        dz = fma(a, h, alo*h)
 *   dout_scaled = (dout*z)*s, out = (o*z)*s        (the grouping of gate_math.h)
 *   lanes whose dz, dout_scaled or out come out inf or NaN are redone in double from the
 *   same s and 1 - s (a float32 intermediate can overflow where float64 does not, e.g.
 *   dout*z = inf times s = 0; inf/NaN inputs then follow the float64 formula exactly).
 */
#ifndef ZGATE_SIMD_EXP_H
#define ZGATE_SIMD_EXP_H

#if defined(__FAST_MATH__) || defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "zgate's exp needs IEEE semantics: do not build with -ffast-math"
#endif

#define ZG_EXP_LO (-104.5f)
#define ZG_EXP_LOG2E 0x1.715476p+0f
#define ZG_EXP_LN2_HI 0x1.630000p-1f  /* 0.693359375 */
#define ZG_EXP_LN2_LO -0x1.bd0106p-13f /* ln2 - ZG_EXP_LN2_HI */
/* Q(r) = ZG_EXP_Q0 + r*(ZG_EXP_Q1 + r*(... + r*ZG_EXP_Q5)) */
#define ZG_EXP_Q0 0x1.000000p-1f
#define ZG_EXP_Q1 0x1.555556p-3f
#define ZG_EXP_Q2 0x1.5554eap-5f
#define ZG_EXP_Q3 0x1.1110e0p-7f
#define ZG_EXP_Q4 0x1.6d4324p-10f
#define ZG_EXP_Q5 0x1.a124f2p-13f

/* ---- the fast recipe: only for problems whose outputs are all float16/bfloat16 ----------
 *
 * A 16-bit output passes the policy when the float32 value f it is rounded from is within
 * half an ulp of the type of the float64 reference (|f - ref| <= 2^-9 |ref| for bfloat16,
 * 2^-12 |ref| for float16), or, near the root of t = 1 + z(1-s) (z ~ -1.2785), within the
 * float32 bound of the scale (4 ulp_f32(scale)); the rounding to the type then adds at most
 * the other half ulp. That is ~1000x looser than the float32 bar away from the root, so:
 *
 *   E  = exp(-|z|) by steps 1-3 above without c (x = max(-|z|, ZG_EXP_LO), k by the
 *        shifter, r = x - k ln2 in two fmas), p = 1 + r(F1 + r(F2 + r(F3 + r(F4 + r F5))))
 *        by Horner (5 fmas; our own fit, weighted least squares on the relative error at
 *        Chebyshev nodes of [-ln2/2, ln2/2]: |p/exp(r) - 1| <= 9.3e-8 with the float
 *        coefficients), then 2^k (AVX-512: scalef, one rounding also for subnormal
 *        results; AVX2: the two-multiply scale of step 5).  |E/exp(-|z|) - 1| <= 9.3e-8 +
 *        rounding of p (2^-24) + r's Cody-Waite rounding (|k ln2lo| rounding, <= 2^-26 of r)
 *        < 1.7e-7 for normal E; subnormal E (z < -87) adds <= 2^-150 absolute.
 *   d  = 1 + E; r = 1/d by a reciprocal estimate and one Newton step (AVX-512 rcp14:
 *        2^-14 -> ~2^-28 before rounding; AVX2 rcp: 1.5*2^-12 -> ~2^-23.2, so AVX2 takes
 *        two steps); er = E * r.
 *        rel. error: r <= 2^-24 (d) + E/(1+E) * 1.7e-7 + 2^-24 (r) + 2^-28 <= 2.1e-7,
 *        er <= 1.7e-7 + 2.1e-7 + 2^-24 <= 4.4e-7.
 *   z >= 0: s = r, 1-s = er;  z < 0 (sign bit): s = er, 1-s = r   (no cancellation)
 *   t  = fma(z, 1-s, 1);  h = s * t
 *   dz = (dout*o) * h;  dos = (dout*z) * s;  out = (o*z) * s
 *        The products of two inputs come first: if one underflows, the result is at most
 *        ~1.1x it (|h| <= 1.1, s <= 1), so its absolute error (<= 2^-150) stays inside the
 *        policy's floor (ulp_f32 of the scale is at least 2^-149). dout*(z*s) would not be
 *        safe: z*s for a subnormal z loses z's low bits and dout may be huge.
 *        Overflow: dout*o can overflow where float64 does not (dout = o = 1e30, z = -90):
 *        as in the accurate recipe, every vector whose dz + dos is inf or NaN is redone in
 *        double from the same s and 1-s, lane by lane, in a cold function (no grouping of
 *        three float32 factors avoids every such overflow).
 * Error away from the root: s, 1-s, t, h each <= ~7e-7 relative, so dz and dos are within
 *   ~1.2e-6 relative: 2^-9 / 1.2e-6 ~ 1600x inside for bfloat16, 200x for float16.
 * At the root (z < 0 there, so 1-s = r): t's absolute error is |z|(1-s) * 2.1e-7 * (the
 *   E/(1+E) ~ 0.22 weight of E's error, plus d's and r's roundings) ~ 1.6e-7 plus half an ulp
 *   of t, so dz is off by ~1.6e-7 |dout*o| s, against 4 ulp_f32(scale) >= 4 * 2^-24 * 2 s
 *   |dout*o| = 4.8e-7 s |dout*o| (1 + |z|(1-s) = 2 there): about a third of the float32
 *   clause alone, before the half ulp of the type that the policy adds.
 * Subnormal s (z < -87): s is off by at most ~2^-149 absolute, so dz by |dout*o| |t| 2^-149
 *   and dos by |dout*z| 2^-149: a quarter of the absolute allowance A of the policy.
 * bfloat16 variant (fused runs whose outputs are bfloat16; bfloat16 keeps 8 bits, so 2^-9
 *   relative is the whole budget): AVX-512 drops the Newton step, r = rcp14(d) (|error| <=
 *   2^-14; AVX2's estimate, 1.5 * 2^-12, would leave too little margin, so AVX2 keeps the
 *   step and the variant is AVX-512's only), and t = (d + z w) r with w = 1 for z < 0, w = E for z >= 0
 *   (= (1 + E + z(1-s)(1+E)) / (1+E), the same value): at the root d + z is exact (Sterbenz,
 *   d ~ -z ~ 1.28), so t's absolute error there is r (d's rounding + E's error) ~ 0.78 *
 *   9e-8, a seventh of the float32 clause, while r's own error only scales t (relative).
 *   Everywhere dz, dos and out are within ~3 * 2^-14 relative, a 20th of the half ulp of
 *   bfloat16 (2^-9) that covers it.
 * Measured: tests/simd/test_simd_fast.c (both forms vs the policy oracle, and dz's float32
 *   value near the root) and the policy checks of test_accuracy / test_special / `zgate
 *   check` (bound_ratio in docs/perf-notes.md). */
/* 2^f on [-1/2, 1/2]: 1 + f(G1 + f(G2 + f(G3 + f(G4 + f G5)))), our fit as above,
 * |p/2^f - 1| <= 1.07e-7 with the float coefficients (AVX-512's VREDUCEPS form). */
#define ZG_EXP2_G1 0x1.62e42ap-1f
#define ZG_EXP2_G2 0x1.ebf9bap-3f
#define ZG_EXP2_G3 0x1.c6b75ap-5f
#define ZG_EXP2_G4 0x1.3ceb6cp-7f
#define ZG_EXP2_G5 0x1.5bb92ap-10f
#define ZG_EXP_F1 0x1.fffff6p-1f
#define ZG_EXP_F2 0x1.fffdc0p-2f
#define ZG_EXP_F3 0x1.555a76p-3f
#define ZG_EXP_F4 0x1.573c44p-5f
#define ZG_EXP_F5 0x1.0fa6c4p-7f

#endif /* ZGATE_SIMD_EXP_H */
