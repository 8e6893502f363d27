/* The backward of the gate on dense float32 CPU tensors, checked against the float64
 * reference that the library also provides. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <zgate.h>

static DLTensor tensor(void *data, int64_t *shape, uint8_t bits) {
  DLTensor t = {0};
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = 4;
  t.dtype.code = kDLFloat;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  t.strides = NULL; /* compact row-major */
  return t;
}

int main(void) {
  int64_t shape[4] = {2, 64, 4, 80}; /* (batch, seqlen, nheads, headdim) */
  size_t n = 2 * 64 * 4 * 80;
  float *dout = malloc(n * sizeof *dout), *z = malloc(n * sizeof *z), *o = malloc(n * sizeof *o);
  float *dz = malloc(n * sizeof *dz), *dos = malloc(n * sizeof *dos);
  double *dz64 = malloc(n * sizeof *dz64), *dos64 = malloc(n * sizeof *dos64);
  if (!dout || !z || !o || !dz || !dos || !dz64 || !dos64) return 1;
  for (size_t i = 0; i < n; i++) {
    dout[i] = (float)sin(0.37 * (double)i);
    z[i] = (float)(8.0 * cos(0.11 * (double)i));
    o[i] = (float)cos(0.53 * (double)i);
  }

  DLTensor t_dout = tensor(dout, shape, 32), t_z = tensor(z, shape, 32), t_o = tensor(o, shape, 32);
  DLTensor t_dz = tensor(dz, shape, 32), t_dos = tensor(dos, shape, 32);
  int st = zgate_bwd(&t_dout, &t_z, &t_o, &t_dz, &t_dos, NULL); /* NULL: default options */
  if (st != ZGATE_OK) {
    fprintf(stderr, "zgate_bwd: %s: %s\n", zgate_status_str(st), zgate_last_error());
    return 1;
  }

  /* The float64 reference: same formula, float64 outputs. */
  DLTensor r_dz = tensor(dz64, shape, 64), r_dos = tensor(dos64, shape, 64);
  st = zgate_bwd_reference(&t_dout, &t_z, &t_o, &r_dz, &r_dos);
  if (st != ZGATE_OK) return 1;
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs(dz[i] - dz64[i]) + fabs(dos[i] - dos64[i]);
    if (e > worst) worst = e;
  }
  printf("zgate %s, CPU path %s: max abs error vs float64 %.3g\n", zgate_version(),
         zgate_cpu_isa_chosen(), worst);
  free(dout), free(z), free(o), free(dz), free(dos), free(dz64), free(dos64);
  return worst < 1e-5 ? 0 : 1;
}
