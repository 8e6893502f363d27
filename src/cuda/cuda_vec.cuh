/* Storage of the CUDA backend: the three dtypes to and from float, and V consecutive
 * elements as one vector access, for the kernel body (cuda_kernel.cuh). Conversions round
 * to nearest even (cvt.rn); NaN stays NaN, overflow becomes inf. */
#ifndef ZGATE_CUDA_VEC_CUH
#define ZGATE_CUDA_VEC_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda_plan.h"

namespace zgcu {

__device__ __forceinline__ float bits_to_f32(uint16_t h, int dt) {
  if (dt == ZG_BF16) return __uint_as_float((uint32_t)h << 16);
  return __half2float(__ushort_as_half(h));
}

__device__ __forceinline__ uint16_t f32_to_bits(float f, int dt) {
  if (dt == ZG_BF16) return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  return __half_as_ushort(__float2half_rn(f));
}

/* Two 16-bit values (low half first) to floats, and back with one packed conversion. */
__device__ __forceinline__ float2 unpack2(uint32_t w, int dt) {
  if (dt == ZG_BF16) return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  __half2 h = *reinterpret_cast<__half2 *>(&w);
  return __half22float2(h);
}
__device__ __forceinline__ uint32_t pack2(float a, float b, int dt) {
  if (dt == ZG_BF16) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
  }
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t *>(&h);
}

/* ---- V consecutive elements at p (aligned to min(V * size, 16) bytes) ---------------------- */

/* The 8- and 16-byte vector types of a 4-byte element type. */
template <class T>
struct Vec;
template <>
struct Vec<float> { using x2 = float2; using x4 = float4; };
template <>
struct Vec<uint32_t> { using x2 = uint2; using x4 = uint4; };

/* N 4-byte values at p, as they are stored (N = 1, 2, 4: one 4-, 8- or 16-byte access;
 * N = 8: two 16-byte accesses). T is float (float32 elements) or uint32_t (two 16-bit
 * elements a word). */
template <int N, class T>
__device__ __forceinline__ void load_words(const char *p, T (&w)[N]) {
  using X2 = typename Vec<T>::x2;
  using X4 = typename Vec<T>::x4;
  if constexpr (N == 8) {
    const X4 a = reinterpret_cast<const X4 *>(p)[0], b = reinterpret_cast<const X4 *>(p)[1];
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
  } else if constexpr (N == 4) {
    const X4 q = *reinterpret_cast<const X4 *>(p);
    w[0] = q.x; w[1] = q.y; w[2] = q.z; w[3] = q.w;
  } else if constexpr (N == 2) {
    const X2 q = *reinterpret_cast<const X2 *>(p);
    w[0] = q.x; w[1] = q.y;
  } else {
    w[0] = *reinterpret_cast<const T *>(p);
  }
}
template <int N, class T>
__device__ __forceinline__ void store_words(char *p, const T (&w)[N]) {
  using X2 = typename Vec<T>::x2;
  using X4 = typename Vec<T>::x4;
  if constexpr (N == 8) {
    reinterpret_cast<X4 *>(p)[0] = X4{w[0], w[1], w[2], w[3]};
    reinterpret_cast<X4 *>(p)[1] = X4{w[4], w[5], w[6], w[7]};
  } else if constexpr (N == 4) {
    *reinterpret_cast<X4 *>(p) = X4{w[0], w[1], w[2], w[3]};
  } else if constexpr (N == 2) {
    *reinterpret_cast<X2 *>(p) = X2{w[0], w[1]};
  } else {
    *reinterpret_cast<T *>(p) = w[0];
  }
}

/* V values of dtype dt at p to floats, and back (V = 8, 4, 2, 1): float32 as they are,
 * 16-bit types as V / 2 words of two values each (low half first), or one 2-byte access. */
template <int V>
__device__ __forceinline__ void load_vec(const char *p, int dt, float (&v)[V]) {
  if (dt == ZG_F32) {
    load_words<V>(p, v);
  } else if constexpr (V == 1) {
    v[0] = bits_to_f32(*reinterpret_cast<const unsigned short *>(p), dt);
  } else {
    uint32_t w[V / 2];
    load_words<V / 2>(p, w);
#pragma unroll
    for (int k = 0; k < V / 2; k++) {
      const float2 f = unpack2(w[k], dt);
      v[2 * k] = f.x;
      v[2 * k + 1] = f.y;
    }
  }
}

template <int V>
__device__ __forceinline__ void store_vec(char *p, int dt, const float (&v)[V]) {
  if (dt == ZG_F32) {
    store_words<V>(p, v);
  } else if constexpr (V == 1) {
    *reinterpret_cast<unsigned short *>(p) = f32_to_bits(v[0], dt);
  } else {
    uint32_t w[V / 2];
#pragma unroll
    for (int k = 0; k < V / 2; k++) w[k] = pack2(v[2 * k], v[2 * k + 1], dt);
    store_words<V / 2>(p, w);
  }
}

}  // namespace zgcu

#endif /* ZGATE_CUDA_VEC_CUH */
