/* Per-element math and storage conversions of the CUDA backend: the device twin of the
 * CPU SIMD paths (src/cpu/simd_exp.h for the recipe and its measured error,
 * src/cpu/kernels_avx2.c for the same operations in the same order), with gate_math.h's
 * formula and grouping:
 *
 *   e = exp(-|z|), r = 1/(1+e); z >= 0: s = r, 1-s = e*r; z < 0: s = e*r, 1-s = r
 *   dz = (dout*o) * (s*(1 + z*(1-s)));  dos = dout * (z*s);  out = o * (z*s)
 *
 * dos and out group z*s first (gate_math.h writes (dout*z)*s): with |z| near FLT_MAX and
 * s = 0 the other grouping overflows to inf * 0 = NaN where the float64 reference is 0.
 * z*s is subnormal only for z < -87, where the absolute allowance (4 * 2^-149 * |dout*z|)
 * covers its rounding.
 *
 * Two versions, chosen by the output types:
 *  - float32 outputs (accurate path): CUDA's expf is good to 2 ulp, and the five roundings
 *    of the plain formula on top of it reach about 4.8 ulp of the scale (measured on the CPU
 *    with an exact exp), over the policy's 4. Here exp carries its rounding error (e + elo),
 *    r and e*r are each corrected to about half an ulp, and dout*o keeps its rounding error
 *    through an fma, as on the CPU. About 60 instructions an element: affordable at float32's
 *    element rate (20 bytes an element), not at bfloat16's (10).
 *  - float16/bfloat16 outputs (fast path): the plain formula with CUDA's expf. Its error,
 *    at most about 13 units of 2^-24 relative to the scale, is far below half an ulp of a
 *    16-bit type; near the root of 1 + z(1-s) the error is dominated by 1-s's (about 3 units
 *    of 2^-24 of the scale), within the policy's float32 bound plus half an ulp of the type. Every fma is written out (fmaf); the other operations are
 * plain float adds and multiplies, which nvcc only contracts when a product feeds an add,
 * and no such pair is left unwritten here. Subnormals are kept (no -ftz); the build never
 * passes --use_fast_math. Conversions round to nearest even (cvt.rn); NaN stays NaN,
 * overflow becomes inf. */
#ifndef ZGATE_CUDA_GATE_MATH_CUH
#define ZGATE_CUDA_GATE_MATH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cpu/simd_exp.h"

#if defined(__USE_FAST_MATH__)
#error "zgate's CUDA backend must not be built with --use_fast_math: NaN, inf and exp accuracy matter"
#endif

#ifndef ZG_CUDA_STREAMING /* 1: ld.global.cs / st.global.cs (evict-first) for every access */
#define ZG_CUDA_STREAMING 0
#endif
#ifndef ZG_CUDA_LDG /* 1: inputs through the read-only path (ld.global.nc); a benchmark variant */
#define ZG_CUDA_LDG 0
#endif

namespace zgcu {

/* Below this z, exp(-|z|) underflows to 0 in float64 too (the reference's s is 0, and
 * dout = inf gives NaN there); above it the true s is positive, so s is kept at least the
 * smallest subnormal: an infinite dout or o then gives the reference's infinity instead of
 * inf * 0 = NaN, and finite results move by at most 2^-149 * |dout*o| * |1 + z(1-s)|, inside
 * the policy's absolute allowance for s in the subnormal range. */
#define ZG_S_UNDERFLOW_Z (-745.133219f)

__device__ __forceinline__ float s_floor(float z, float s) {
  return z >= ZG_S_UNDERFLOW_Z ? fmaxf(s, 0x1p-149f) : s; /* NaN z: unchanged */
}

/* Storage codes, equal to zg_dtype's (ZG_F32, ZG_F16, ZG_BF16); MIXED = read per tensor. */
enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2, DT_MIXED = 3 };

/* e + elo = exp(x) for x <= 0 (or NaN): simd_exp.h steps 1-5. */
__device__ __forceinline__ float exp_neg(float x, float &elo) {
  const float shifter = 0x1.8p23f;
  x = x < ZG_EXP_LO ? ZG_EXP_LO : x; /* a NaN x passes through */
  float j = fmaf(x, ZG_EXP_LOG2E, shifter);
  float k = __fsub_rn(j, shifter);
  float r1 = fmaf(-k, ZG_EXP_LN2_HI, x); /* exact */
  float r = fmaf(-k, ZG_EXP_LN2_LO, r1);
  float c = fmaf(-k, ZG_EXP_LN2_LO, __fsub_rn(r1, r)); /* r's rounding */
  float r2 = __fmul_rn(r, r);
  float q01 = fmaf(ZG_EXP_Q1, r, ZG_EXP_Q0);
  float q23 = fmaf(ZG_EXP_Q3, r, ZG_EXP_Q2);
  float q45 = fmaf(ZG_EXP_Q5, r, ZG_EXP_Q4);
  float q = fmaf(__fmul_rn(r2, r2), q45, fmaf(r2, q23, q01));
  float hi = __fadd_rn(1.0f, r);
  float lo = __fadd_rn(__fsub_rn(1.0f, hi), r);
  float u = __fadd_rn(fmaf(r2, q, c), lo);
  float p = __fadd_rn(hi, u);
  float plo = __fadd_rn(__fsub_rn(hi, p), u);
  int ki = __float_as_int(j) - __float_as_int(shifter);
  if (x >= -87.0f) { /* normal result: one scale */
    float sc = __int_as_float((ki + 127) << 23);
    elo = __fmul_rn(plo, sc);
    return __fmul_rn(p, sc);
  }
  int k1 = ki >> 1, k2 = ki - k1; /* NaN also lands here: p is NaN, any scale keeps it */
  float sc1 = __int_as_float((k1 + 127) << 23), sc2 = __int_as_float((k2 + 127) << 23);
  elo = __fmul_rn(__fmul_rn(plo, sc1), sc2);
  return __fmul_rn(__fmul_rn(p, sc1), sc2);
}

/* s = sigmoid(z) and oms = 1 - s, each within about half an ulp, without cancellation. */
__device__ __forceinline__ void sigmoid_pair(float z, float &s, float &oms) {
  float elo;
  float e = exp_neg(-fabsf(z), elo);
  float d = __fadd_rn(1.0f, e);
  float dlo = __fadd_rn(__fsub_rn(e, __fsub_rn(d, 1.0f)), elo); /* 1 + E = d + dlo */
  float r = __frcp_rn(d);
  float res = fmaf(-r, dlo, fmaf(-r, d, 1.0f)); /* 1 - r*(d + dlo) */
  float er = __fmul_rn(e, r);
  float erlo = fmaf(elo, r, fmaf(e, r, -er)); /* E*r - er */
  float r_c = fmaf(r, res, r);
  float er_c = __fadd_rn(er, fmaf(er, res, erlo));
  bool pos = z >= 0.0f;
  s = s_floor(z, pos ? r_c : er_c);
  oms = pos ? er_c : r_c;
}

__device__ __forceinline__ void gate_bwd(float dout, float z, float o, float &dz, float &dos) {
  float s, oms;
  sigmoid_pair(z, s, oms);
  /* h = s*(1 + z*oms) = s + (s*z)*oms, rounded once */
  float h = fmaf(__fmul_rn(s, z), oms, s);
  float a = __fmul_rn(dout, o);
  float alo = fmaf(dout, o, -a);
  float fused = fmaf(a, h, __fmul_rn(alo, h));
  dz = isnan(fused) ? __fmul_rn(a, h) : fused; /* a = inf: keep the plain product */
  dos = __fmul_rn(dout, __fmul_rn(z, s));
}

__device__ __forceinline__ float gate_fwd(float o, float z) {
  float s, oms;
  sigmoid_pair(z, s, oms);
  return __fmul_rn(o, __fmul_rn(z, s));
}

/* Fast path (16-bit outputs): gate_math.h's formula as written, CUDA's expf. */
__device__ __forceinline__ void sigmoid_pair_fast(float z, float &s, float &oms) {
  float e = expf(-fabsf(z));
  float r = __frcp_rn(__fadd_rn(1.0f, e));
  float er = __fmul_rn(e, r);
  bool pos = z >= 0.0f;
  s = s_floor(z, pos ? r : er);
  oms = pos ? er : r;
}

__device__ __forceinline__ void gate_bwd_fast(float dout, float z, float o, float &dz, float &dos) {
  float s, oms;
  sigmoid_pair_fast(z, s, oms);
  dz = __fmul_rn(__fmul_rn(dout, o), __fmul_rn(s, fmaf(z, oms, 1.0f)));
  dos = __fmul_rn(dout, __fmul_rn(z, s));
}

__device__ __forceinline__ float gate_fwd_fast(float o, float z) {
  float s, oms;
  sigmoid_pair_fast(z, s, oms);
  return __fmul_rn(o, __fmul_rn(z, s));
}

__device__ __forceinline__ float bits_to_f32(uint16_t h, int dt) {
  if (dt == DT_BF16) return __uint_as_float((uint32_t)h << 16);
  return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ uint16_t f32_to_bits(float f, int dt) {
  if (dt == DT_BF16) return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  return __half_as_ushort(__float2half_rn(f));
}

/* ---- V consecutive elements at p (aligned to min(V * size, 16) bytes) ------------------- */

template <class T>
__device__ __forceinline__ T ld(const T *p) {
  if constexpr (ZG_CUDA_STREAMING) return __ldcs(p);
  /* In place (dout_scaled is dout) the non-coherent path is still safe: a thread reads each
   * element before it writes it, and no thread reads an element another one writes. */
  if constexpr (ZG_CUDA_LDG) return __ldg(p);
  return *p;
}
template <class T>
__device__ __forceinline__ void st(T *p, T v) {
  if constexpr (ZG_CUDA_STREAMING) __stcs(p, v);
  else *p = v;
}

/* Two 16-bit values (low half first) to floats, and back with one packed conversion. */
__device__ __forceinline__ float2 unpack2(uint32_t w, int dt) {
  if (dt == DT_BF16) return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  __half2 h = *reinterpret_cast<__half2 *>(&w);
  return __half22float2(h);
}
__device__ __forceinline__ uint32_t pack2(float a, float b, int dt) {
  if (dt == DT_BF16) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
  }
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t *>(&h);
}

/* V 16-bit values at p as V / 2 packed words (V = 2, 4, 8), unconverted. */
template <int V>
__device__ __forceinline__ void load_words(const char *p, uint32_t (&w)[V / 2]) {
  if constexpr (V == 8) {
    uint4 q = ld(reinterpret_cast<const uint4 *>(p));
    w[0] = q.x; w[1] = q.y; w[2] = q.z; w[3] = q.w;
  } else if constexpr (V == 4) {
    uint2 q = ld(reinterpret_cast<const uint2 *>(p));
    w[0] = q.x; w[1] = q.y;
  } else {
    w[0] = ld(reinterpret_cast<const uint32_t *>(p));
  }
}
template <int V>
__device__ __forceinline__ void store_words(char *p, const uint32_t (&w)[V / 2]) {
  if constexpr (V == 8)
    st(reinterpret_cast<uint4 *>(p), make_uint4(w[0], w[1], w[2], w[3]));
  else if constexpr (V == 4)
    st(reinterpret_cast<uint2 *>(p), make_uint2(w[0], w[1]));
  else
    st(reinterpret_cast<uint32_t *>(p), w[0]);
}

template <int V>
__device__ __forceinline__ void load_vec(const char *p, int dt, float (&v)[V]) {
  if (dt == DT_F32) {
    const float *f = reinterpret_cast<const float *>(p);
    if constexpr (V == 8) {
      float4 a = ld(reinterpret_cast<const float4 *>(f)), b = ld(reinterpret_cast<const float4 *>(f) + 1);
      v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else if constexpr (V == 4) {
      float4 a = ld(reinterpret_cast<const float4 *>(f));
      v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    } else if constexpr (V == 2) {
      float2 a = ld(reinterpret_cast<const float2 *>(f));
      v[0] = a.x; v[1] = a.y;
    } else {
      v[0] = ld(f);
    }
  } else if constexpr (V == 1) {
    v[0] = bits_to_f32(ld(reinterpret_cast<const unsigned short *>(p)), dt);
  } else {
    uint32_t w[V / 2];
    load_words<V>(p, w);
#pragma unroll
    for (int k = 0; k < V / 2; k++) {
      float2 f = unpack2(w[k], dt);
      v[2 * k] = f.x;
      v[2 * k + 1] = f.y;
    }
  }
}

template <int V>
__device__ __forceinline__ void store_vec(char *p, int dt, const float (&v)[V]) {
  if (dt == DT_F32) {
    float *f = reinterpret_cast<float *>(p);
    if constexpr (V == 8) {
      st(reinterpret_cast<float4 *>(f), make_float4(v[0], v[1], v[2], v[3]));
      st(reinterpret_cast<float4 *>(f) + 1, make_float4(v[4], v[5], v[6], v[7]));
    } else if constexpr (V == 4) {
      st(reinterpret_cast<float4 *>(f), make_float4(v[0], v[1], v[2], v[3]));
    } else if constexpr (V == 2) {
      st(reinterpret_cast<float2 *>(f), make_float2(v[0], v[1]));
    } else {
      st(f, v[0]);
    }
  } else {
    if constexpr (V == 1) {
      st(reinterpret_cast<unsigned short *>(p), (unsigned short)f32_to_bits(v[0], dt));
    } else {
      uint32_t w[V / 2];
#pragma unroll
      for (int k = 0; k < V / 2; k++)
        w[k] = pack2(v[2 * k], v[2 * k + 1], dt);
      store_words<V>(p, w);
    }
  }
}

}  // namespace zgcu

#endif /* ZGATE_CUDA_GATE_MATH_CUH */
