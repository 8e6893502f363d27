/* Errors: every call returns a status; nothing is written on failure; the calling thread's
 * message says which tensor and which dimension is at fault. */
#include <stdio.h>
#include <string.h>

#include <zgate.h>

int main(void) {
  float a[24], b[24], c[24], dz[24], dos[24];
  for (int i = 0; i < 24; i++) a[i] = b[i] = c[i] = 1.0f, dz[i] = dos[i] = -7.0f;
  int64_t shape[4] = {1, 2, 3, 4}, other[4] = {1, 2, 4, 3};
  DLTensor t[5];
  void *data[5] = {a, b, c, dz, dos};
  for (int i = 0; i < 5; i++) {
    memset(&t[i], 0, sizeof t[i]);
    t[i].data = data[i];
    t[i].device.device_type = kDLCPU;
    t[i].ndim = 4;
    t[i].dtype.code = kDLFloat;
    t[i].dtype.bits = 32;
    t[i].dtype.lanes = 1;
    t[i].shape = shape;
  }
  t[1].shape = other; /* z's shape differs from dout's */

  int st = zgate_bwd(&t[0], &t[1], &t[2], &t[3], &t[4], NULL);
  printf("status %d (%s)\nmessage: %s\n", st, zgate_status_str(st), zgate_last_error());
  if (st != ZGATE_ERR_SHAPE_MISMATCH || dz[0] != -7.0f) return 1; /* nothing written */

  /* Asking for a CPU path this machine cannot run is an error too, never a silent fallback. */
  zgate_options opts = ZGATE_OPTIONS_INIT;
  opts.cpu_isa = "no-such-isa";
  t[1].shape = shape;
  st = zgate_bwd(&t[0], &t[1], &t[2], &t[3], &t[4], &opts);
  printf("status %d (%s)\n", st, zgate_status_str(st));
  return st == ZGATE_OK ? 1 : 0;
}
