/* The gate's backward on dense float32 CPU tensors, checked against the float64 reference. */
#include <math.h>
#include <stdio.h>
#include <zgate.h>

enum { N = 2 * 64 * 4 * 80 };
static float dout[N], z[N], o[N], dz[N], dos[N];
static double dz64[N], dos64[N];

static DLTensor tensor(void *data, int64_t *shape, uint8_t bits) {
  DLTensor t = {.data = data, .device = {kDLCPU, 0}, .ndim = 4, .shape = shape};
  t.dtype.code = kDLFloat, t.dtype.bits = bits, t.dtype.lanes = 1;
  return t; /* strides NULL: compact row-major */
}

int main(void) {
  int64_t shape[4] = {2, 64, 4, 80}; /* (batch, seqlen, nheads, headdim) */
  for (int i = 0; i < N; i++)
    dout[i] = (float)sin(0.37 * i), z[i] = (float)(8.0 * cos(0.11 * i)), o[i] = (float)cos(0.53 * i);
  DLTensor t_dout = tensor(dout, shape, 32), t_z = tensor(z, shape, 32), t_o = tensor(o, shape, 32);
  DLTensor t_dz = tensor(dz, shape, 32), t_dos = tensor(dos, shape, 32);
  int st = zgate_bwd(&t_dout, &t_z, &t_o, &t_dz, &t_dos, NULL); /* NULL: default options */
  if (st != ZGATE_OK) {
    fprintf(stderr, "zgate_bwd: %s: %s\n", zgate_status_str(st), zgate_last_error());
    return 1;
  }
  DLTensor r_dz = tensor(dz64, shape, 64), r_dos = tensor(dos64, shape, 64);
  if (zgate_bwd_reference(&t_dout, &t_z, &t_o, &r_dz, &r_dos) != ZGATE_OK) return 1;
  double worst = 0.0;
  for (int i = 0; i < N; i++) {
    double e = fabs(dz[i] - dz64[i]) + fabs(dos[i] - dos64[i]);
    if (e > worst) worst = e;
  }
  printf("zgate %s, CPU path %s: max abs error vs float64 %.3g\n", zgate_version(),
         zgate_cpu_isa_chosen(), worst);
  return worst < 1e-5 ? 0 : 1;
}
