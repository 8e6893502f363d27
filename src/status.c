/* Status messages and the per-thread last-error text. */
#include <stdarg.h>
#include <stdio.h>

#include "zgate_internal.h"

/* One message buffer and one refusal per thread: calls on other threads never clobber
 * them, and there is no lock and nothing to free. */
static _Thread_local char zg_last_error_buf[512];
static _Thread_local zg_refusal zg_last_refusal_rec = ZG_REFUSAL_NONE;

const char *zgate_status_str(int status) {
  switch (status) {
    case ZGATE_OK: return "success";
    case ZGATE_ERR_NULL_ARGUMENT: return "a required tensor pointer or its shape is NULL";
    case ZGATE_ERR_NULL_DATA: return "tensor data is NULL but the tensor has elements";
    case ZGATE_ERR_NDIM: return "ndim is outside 0..8";
    case ZGATE_ERR_NEGATIVE_SIZE: return "a tensor size is negative";
    case ZGATE_ERR_SHAPE_MISMATCH: return "the tensors' shapes differ";
    case ZGATE_ERR_NEGATIVE_STRIDE: return "a tensor stride is negative";
    case ZGATE_ERR_OUTPUT_SELF_OVERLAP: return "two elements of an output share memory";
    case ZGATE_ERR_DTYPE: return "unsupported dtype (float32, float16 or bfloat16 expected)";
    case ZGATE_ERR_LANES: return "dtype lanes is not 1";
    case ZGATE_ERR_OVERFLOW: return "sizes, strides or byte_offset overflow 64-bit byte arithmetic";
    case ZGATE_ERR_MISALIGNED: return "tensor data is not aligned to its element size";
    case ZGATE_ERR_ALIAS: return "an output overlaps another output or an input";
    case ZGATE_ERR_INPLACE_MISMATCH:
      return "dout_scaled starts where dout starts but has another dtype or strides";
    case ZGATE_ERR_DEVICE_MISMATCH: return "the tensors are not all on one device";
    case ZGATE_ERR_DEVICE_UNSUPPORTED: return "unsupported device type";
    case ZGATE_ERR_NO_CUDA: return "CUDA tensor, but zgate was built without CUDA";
    case ZGATE_ERR_CUDA: return "the CUDA runtime reported an error";
    case ZGATE_ERR_OPTIONS: return "malformed zgate_options (struct_size, num_threads or cpu_isa)";
    case ZGATE_ERR_ISA_UNAVAILABLE: return "the requested CPU ISA is not built or not supported by this CPU";
    case ZGATE_ERR_INTERNAL: return "internal error in zgate (please report it)";
    default: return "unknown status";
  }
}

const char *zgate_last_error(void) { return zg_last_error_buf; }

const zg_refusal *zg_last_refusal(void) { return &zg_last_refusal_rec; }

static int zg_vrefuse(int status, zg_refusal what, const char *fmt, va_list ap) {
  zg_last_refusal_rec = what;
  if (vsnprintf(zg_last_error_buf, sizeof zg_last_error_buf, fmt, ap) < 0) zg_last_error_buf[0] = '\0';
  return status;
}

int zg_refuse(int status, zg_refusal what, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  zg_vrefuse(status, what, fmt, ap);
  va_end(ap);
  return status;
}

int zg_fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  zg_vrefuse(status, (zg_refusal)ZG_REFUSAL_NONE, fmt, ap);
  va_end(ap);
  return status;
}

void zg_clear_error(void) {
  zg_last_error_buf[0] = '\0';
  zg_last_refusal_rec = (zg_refusal)ZG_REFUSAL_NONE;
}
