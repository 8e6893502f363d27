/* The common training case: bfloat16 tensors, z a strided view into the input projection
 * (no copy), dout_scaled written in place over dout, two threads, and the forward gate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zgate.h>

/* bfloat16 is the top half of a float32 (round to nearest even). */
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static DLTensor bf16_tensor(void *data, int64_t *shape, int64_t *strides) {
  DLTensor t = {0};
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = 4;
  t.dtype.code = kDLBfloat;
  t.dtype.bits = 16;
  t.dtype.lanes = 1;
  t.shape = shape;
  t.strides = strides;
  return t;
}

int main(void) {
  enum { B = 2, L = 128, H = 4, D = 64, D_IN_PROJ = 3 * H * D + 32 };
  int64_t shape[4] = {B, L, H, D};
  size_t n = (size_t)B * L * H * D;
  /* The input projection holds several streams per position; z is the one at column
   * offset H * D. Its strides are in elements, DLPack style. */
  uint16_t *proj = malloc((size_t)B * L * D_IN_PROJ * sizeof *proj);
  uint16_t *dout = malloc(n * sizeof *dout), *o = malloc(n * sizeof *o);
  uint16_t *dz = malloc(n * sizeof *dz), *out = malloc(n * sizeof *out);
  if (!proj || !dout || !o || !dz || !out) return 1;
  for (size_t i = 0; i < (size_t)B * L * D_IN_PROJ; i++) proj[i] = to_bf16((float)(i % 97) / 12.0f - 4.0f);
  for (size_t i = 0; i < n; i++) {
    dout[i] = to_bf16((float)(i % 13) / 6.0f - 1.0f);
    o[i] = to_bf16((float)(i % 7) / 3.0f - 1.0f);
  }

  int64_t z_strides[4] = {(int64_t)L * D_IN_PROJ, D_IN_PROJ, D, 1};
  DLTensor t_z = bf16_tensor(proj, shape, z_strides);
  t_z.byte_offset = (uint64_t)H * D * sizeof(uint16_t); /* z starts after the first stream */
  DLTensor t_dout = bf16_tensor(dout, shape, NULL), t_o = bf16_tensor(o, shape, NULL);
  DLTensor t_dz = bf16_tensor(dz, shape, NULL), t_out = bf16_tensor(out, shape, NULL);

  zgate_options opts;
  zgate_options_init(&opts);
  opts.num_threads = 2;

  /* Forward first (it reads o and z), then the backward with dout_scaled == dout. */
  int st = zgate_fwd(&t_o, &t_z, &t_out, &opts);
  if (st == ZGATE_OK) st = zgate_bwd(&t_dout, &t_z, &t_o, &t_dz, &t_dout, &opts);
  if (st != ZGATE_OK) {
    fprintf(stderr, "zgate: %s: %s\n", zgate_status_str(st), zgate_last_error());
    return 1;
  }
  printf("bf16, z as a projection view, in place: ok (%s)\n", zgate_build_info());
  free(proj), free(dout), free(o), free(dz), free(out);
  return 0;
}
