/* What zgate's own bindings (zgate._binding, the JAX handlers) read from the library beyond
 * zgate.h: each operator described once, and what the calling thread's last refused call
 * names, as data beside zgate_last_error()'s text. Exported, internal: not installed. */
#ifndef ZGATE_PRIVATE_H
#define ZGATE_PRIVATE_H

#include "zgate.h"

typedef enum zg_op { ZG_OP_BWD = 0, ZG_OP_FWD = 1 } zg_op;
enum { ZG_NOPS = 2, ZG_MAX_TENSORS = 5 };

typedef struct zg_op_desc {
  const char *name;                    /* "bwd", "fwd" */
  int n_in, n_out;
  const char *tensors[ZG_MAX_TENSORS]; /* its signature's names: n_in inputs, then outputs */
} zg_op_desc;
ZGATE_API extern const zg_op_desc zg_ops[ZG_NOPS]; /* by zg_op; validate.c */

/* Operand slots, in the order of the public signatures (zg_ops[op].tensors). */
enum { ZG_BWD_DOUT = 0, ZG_BWD_Z = 1, ZG_BWD_O = 2, ZG_BWD_DZ = 3, ZG_BWD_DOS = 4 };
enum { ZG_FWD_O = 0, ZG_FWD_Z = 1, ZG_FWD_OUT = 2 };

typedef struct zg_refusal {
  const char *tensor; /* the tensor at fault by its signature name ("dz"); NULL: none */
  int dim;            /* the caller's dimension at fault; -1: none */
  DLDataType dtype;   /* the dtype refused (ZGATE_ERR_DTYPE, ZGATE_ERR_LANES); else zero */
} zg_refusal;
#define ZG_REFUSAL_NONE {NULL, -1, {0, 0, 0}}
/* The calling thread's record, valid until its next call; tensor NULL after a success. */
ZGATE_API const zg_refusal *zg_last_refusal(void);

/* The CUDA devices the process sees: their count, and in buf their names and compute
 * capabilities ("cuda:0 NVIDIA H200, sm_90"), or why none can be used (no driver, a driver
 * older than the runtime, built without CUDA). For zgate.info(). */
ZGATE_API int zg_cuda_devices(char *buf, size_t n);

#endif /* ZGATE_PRIVATE_H */
