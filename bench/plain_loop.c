/* The baseline zgate is compared with: the formula written the plain way, one element at a
 * time, compiled at -O2 with no -march (bench/CMakeLists.txt), one thread. It is what a
 * straightforward C port of the operator gives: libm expf, 1 - s by subtraction, and for
 * bfloat16 an exact round-to-nearest-even done per element. Not used for accuracy. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "plain_loop.h"

static inline float bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

static inline void gate_bwd(float dout, float z, float o, float *dz, float *dos) {
  float s = 1.0f / (1.0f + expf(-z));
  *dz = dout * o * s * (1.0f + z * (1.0f - s));
  *dos = dout * s * z;
}

void plain_bwd_f32(const float *dout, const float *z, const float *o, float *dz, float *dos,
                   int64_t n) {
  for (int64_t i = 0; i < n; i++) gate_bwd(dout[i], z[i], o[i], &dz[i], &dos[i]);
}

void plain_bwd_bf16(const uint16_t *dout, const uint16_t *z, const uint16_t *o, uint16_t *dz,
                    uint16_t *dos, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float a, b;
    gate_bwd(bf16_to_f32(dout[i]), bf16_to_f32(z[i]), bf16_to_f32(o[i]), &a, &b);
    dz[i] = f32_to_bf16(a);
    dos[i] = f32_to_bf16(b);
  }
}

void plain_fwd_f32(const float *o, const float *z, float *out, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = o[i] * z[i] / (1.0f + expf(-z[i]));
}

void plain_fwd_bf16(const uint16_t *o, const uint16_t *z, uint16_t *out, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float zz = bf16_to_f32(z[i]);
    out[i] = f32_to_bf16(bf16_to_f32(o[i]) * zz / (1.0f + expf(-zz)));
  }
}
