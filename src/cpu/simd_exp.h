/* The exp recipe of the SIMD paths (kernels_simd.c, compiled once per ISA) and of CUDA's
 * float32 outputs. ISA-agnostic: constants and the recipe only; simd_recipe.h and
 * kernels_simd.c write it once over the mapping headers (vec_avx2.h, vec_avx512.h,
 * vec_neon.h; cuda_gate_math.cuh maps it to one float).
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
 * and give the same bits; avx512 gets r from rcp14 instead of a division, refined by the
 * res step below, so its bits may differ, within the same bound). Every step below exists because float32
 * arithmetic that rounds each product separately was measured at up to 4.5 ulp of the
 * scale for dz (the bar is 4); with them: dz 2.75, dout_scaled 1.91, out 1.98 ulp of scale
 * (4M random points over z in [-120, 120] and near the root).
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
 *   lanes whose dz, dout_scaled or out come out inf or NaN are recomputed by gate_math.h's
 *   float64 formula on their inputs (a float32 intermediate can overflow where float64 does
 *   not, e.g. dout*z = inf times s = 0, and float32's s is 0 below z ~ -103.97 where
 *   float64's is not; inf/NaN inputs then follow the float64 formula exactly, NaN as the
 *   default quiet NaN).
 */
#ifndef ZGATE_SIMD_EXP_H
#define ZGATE_SIMD_EXP_H

/* IEEE semantics needed: gate_math.h, included beside this, refuses fast-math builds. */
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

/* ---- the 16-bit recipe: only for problems whose outputs are all float16/bfloat16 ----------
 *
 * A 16-bit output passes the policy when the float32 value f it is rounded from is within
 * half an ulp of the type of the float64 reference (|f - ref| <= 2^-9 |ref| for bfloat16,
 * 2^-12 |ref| for float16), or, near the root of t = 1 + z(1-s) (z ~ -1.2785), within the
 * float32 bound of the scale (4 ulp_f32(scale)); the rounding to the type then adds at most
 * the other half ulp. That is ~1000x looser than the float32 bar away from the root, so:
 *
 *   E  = exp(-|z|), within ~2.2e-7 relative where |z| < ~20 (the root included):
 *        AVX2: steps 1-3 above without c (x = max(-|z|, ZG_EXP_LO), k by the shifter,
 *        r = x - k ln2 in two fmas), p = 1 + r(F1 + r(F2 + r(F3 + r(F4 + r F5)))) by Horner
 *        (our fit: weighted least squares on the relative error at Chebyshev nodes of
 *        [-ln2/2, ln2/2], |p/exp(r) - 1| <= 9.3e-8 with the float coefficients), then 2^k
 *        as in step 5. Error <= 9.3e-8 + 2^-24 (p) + r's rounding < 1.7e-7.
 *        AVX-512: y = -|z| log2(e) (rounded: ulp(y)/2 ln2 relative, 4e-8 at the root, 5e-6 at
 *        |z| = 100 where 2^-9 is all that is needed), f = y - round(y) by VREDUCEPS (exact),
 *        p = 1 + f(G1 + ... f G5) (|p/2^f - 1| <= 1.07e-7), E = scalef(p, round(y)): one
 *        rounding, subnormal results too; y = -inf (|z| = inf) gives f = 0 and E = 0.
 *        Subnormal E (z < -87) adds <= 2^-150 absolute.
 *   d  = 1 + E; r = 1/d: AVX-512 rcp14 (2^-14) and one Newton step (~2^-28 before
 *        rounding); AVX2 a division (correctly rounded: 1/2 exactly at z = 0, where
 *        test_special wants dz = dout*o*s exact). er = E * r.
 *        rel. error: r <= 2^-24 (d) + E/(1+E) * 2.2e-7 + 2^-24 + 2^-28 <= 2.3e-7,
 *        er <= 2.2e-7 + 2.3e-7 + 2^-24 <= 5.1e-7.
 *   z >= 0: s = r, 1-s = er;  z < 0 (sign bit): s = er, 1-s = r   (no cancellation)
 *   t  AVX-512: fma(z, 1-s, 1).  AVX2 and the bfloat16 variant below: (d + z w) r with
 *        w = 1 for z < 0 and w = E for z >= 0 (the same value, (1 + E + z(1-s)(1+E))/(1+E));
 *        at the root d + z is exact (Sterbenz), so only d's rounding and E's error reach t
 *        in absolute terms and r's error only scales it.
 *   dz = (dout*o) * (s*t);  dos = (dout*z) * s;  out = (o*z) * s
 *        The products of two inputs come first: if one underflows, the result is at most
 *        ~1.1x it (|s t| <= 1.1, s <= 1), so its absolute error (<= 2^-150) stays inside the
 *        policy's floor (ulp_f32 of the scale is at least 2^-149). dout*(z*s) would not be
 *        safe (z*s for a subnormal z loses z's low bits and dout may be huge), nor would
 *        (dout*s)*o*t (dout*s underflows, then o multiplies its error).
 *   Cold lanes: a vector with an inf or NaN in dz + dos (or out) sends those lanes to
 *        gate_math.h's float64 formula on their inputs (dout*o can overflow where float64
 *        does not; no grouping of three float32 factors avoids every such overflow), and
 *        so do lanes with |t| < 2^-6, except in bfloat16 row kernels: a float32 z can sit
 *        ~1e-8 from the root, where t itself is smaller than its error (~1e-7) and dz's sign
 *        and size are noise, while the policy wants the reference's float16 infinity once
 *        |dout*o| passes ~1e12 (test_special: o = 1e18). A bfloat16 z is at least 2.8e-3
 *        from the root (|t| >= 2.7e-3, t within 4e-5 relative) and a bfloat16 output cannot
 *        overflow from finite float32 products, so those runs skip the test.
 * Error away from the root: s, 1-s, t each <= ~5e-7 relative, so dz and dos are within
 *   ~1.5e-6 relative: 2^-9 / 1.5e-6 ~ 1300x inside for bfloat16, 160x for float16.
 * At the root (z < 0 there, so 1-s = r; lanes with |t| >= 2^-6 only, the rest are float64):
 *   t's absolute error is at most ~|z|(1-s) * 2.3e-7 ~ 2.3e-7 (AVX-512 fma form) or
 *   0.78 * 1.3e-7 (the (d + z w) r form), so dz is off by at most ~2.3e-7 |dout*o| s,
 *   against 4 ulp_f32(scale) >= 4 * 2^-24 * 2 s |dout*o| = 4.8e-7 s |dout*o| (1 + |z|(1-s) =
 *   2 there): half the float32 clause alone, before the half ulp of the type.
 * Subnormal s (z < -87): s is off by at most ~2^-149 absolute, so dz by |dout*o| |t| 2^-149
 *   and dos by |dout*z| 2^-149: a quarter of the absolute allowance A of the policy.
 * bfloat16 variant (AVX-512's bfloat16 row kernels, so z is a bfloat16 too; bfloat16 keeps 8
 *   bits, so 2^-9 relative is the whole budget): the exp's polynomial of degree 4 (H1..H4,
 *   |p/2^f - 1| <= 2.9e-6), no Newton step, r = rcp14(d) (|error| <= 2^-14), and the
 *   (d + z w) r form of t, whose absolute error is then ~0.78 * (0.28 * 3e-6 + 2^-24) ~ 7e-7.
 *   A bfloat16 z is at least 2.8e-3 from the root, where |t| >= 2.7e-3: t stays within
 *   2.5e-4 relative, and rcp14's error only scales it. Everywhere dz, dos and out are within
 *   ~3.5e-4 = 2^-11.5 relative, under a fifth of the half ulp of bfloat16. (With a float32 z
 *   this variant would not do: t can be ~1e-8.)
 * Measured: tests/simd/test_simd_fast.c (both forms vs the policy oracle, and dz's float32
 *   value near the root) and the policy checks of test_accuracy / test_special / `zgate
 *   check` (its bound_ratio column). */
/* 2^f on [-1/2, 1/2]: 1 + f(G1 + f(G2 + f(G3 + f(G4 + f G5)))), our fit as above,
 * |p/2^f - 1| <= 1.07e-7 with the float coefficients (AVX-512's VREDUCEPS form). */
#define ZG_EXP2_G1 0x1.62e42ap-1f
#define ZG_EXP2_G2 0x1.ebf9bap-3f
#define ZG_EXP2_G3 0x1.c6b75ap-5f
#define ZG_EXP2_G4 0x1.3ceb6cp-7f
#define ZG_EXP2_G5 0x1.5bb92ap-10f
/* Degree 4, the bfloat16 variant's (bfloat16 z only): |p/2^f - 1| <= 2.9e-6. */
#define ZG_EXP2_H1 0x1.62e12ap-1f
#define ZG_EXP2_H2 0x1.ec0380p-3f
#define ZG_EXP2_H3 0x1.c9fdeep-5f
#define ZG_EXP2_H4 0x1.3a022ap-7f
#define ZG_EXP_F1 0x1.fffff6p-1f
#define ZG_EXP_F2 0x1.fffdc0p-2f
#define ZG_EXP_F3 0x1.555a76p-3f
#define ZG_EXP_F4 0x1.573c44p-5f
#define ZG_EXP_F5 0x1.0fa6c4p-7f

#endif /* ZGATE_SIMD_EXP_H */
