/* The portable CPU path: plain C over gate_math.h, any stride, every dtype. It is the
 * baseline every machine can run and the path the SIMD tables are checked against. */
#include "../gate_math.h"
#include "cpu_kernels.h"

/* The staged loads and stores of one dtype T: WIDEN a stored element to float, NARROW a
 * float to it. Scalar stores ignore `streaming`: plain stores are always correct. */
#define ZG_SCALAR_DTYPE(sfx, T, WIDEN, NARROW)                                                  \
  static void zg_load_##sfx##_scalar(float *dst, const void *src, int64_t n, int64_t stride) { \
    const T *s = (const T *)src;                                                                \
    for (int64_t i = 0; i < n; i++) dst[i] = WIDEN(s[i * stride]);                              \
  }                                                                                             \
  static void zg_store_##sfx##_scalar(void *dst, const float *src, int64_t n, int64_t stride,  \
                                      int streaming) {                                          \
    (void)streaming;                                                                            \
    T *d = (T *)dst;                                                                            \
    for (int64_t i = 0; i < n; i++) d[i * stride] = NARROW(src[i]);                             \
  }
#define ZG_AS_IS(x) (x)
ZG_SCALAR_DTYPE(f32, float, ZG_AS_IS, ZG_AS_IS)
ZG_SCALAR_DTYPE(f16, uint16_t, zg_f16_to_f32, zg_f32_to_f16)
ZG_SCALAR_DTYPE(bf16, uint16_t, zg_bf16_to_f32, zg_f32_to_bf16)

static void zg_bwd_scalar(float *dz, float *dos, const float *dout, const float *z,
                          const float *o, int64_t n) {
  for (int64_t i = 0; i < n; i++) zg_gate_bwd_f32(dout[i], z[i], o[i], &dz[i], &dos[i]);
}
static void zg_fwd_scalar(float *out, const float *o, const float *z, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = zg_gate_fwd_f32(o[i], z[i]);
}

/* No bwd_out16/fwd_out16 (the float kernels serve 16-bit outputs too), no row kernels: staged. */
static const zg_cpu_kernels zg_kernels_scalar_table = {
    .name = "scalar",
    .load = {zg_load_f32_scalar, zg_load_f16_scalar, zg_load_bf16_scalar},
    .store = {zg_store_f32_scalar, zg_store_f16_scalar, zg_store_bf16_scalar},
    .bwd = zg_bwd_scalar,
    .fwd = zg_fwd_scalar,
};

const zg_cpu_kernels *zg_cpu_kernels_scalar(void) { return &zg_kernels_scalar_table; }
