/* The operators, described once: each one's name and its tensors by their signature names,
 * inputs first. Validation, the reference, the backends (zg_problem), the Python binding and
 * the JAX handlers read this. Internal: exported for zgate's own bindings, not in zgate.h. */
#ifndef ZGATE_OPS_H
#define ZGATE_OPS_H

#include "zgate.h"

typedef enum zg_op { ZG_OP_BWD = 0, ZG_OP_FWD = 1 } zg_op;
enum { ZG_NOPS = 2, ZG_MAX_TENSORS = 5 };

typedef struct zg_op_desc {
  const char *name;                       /* "bwd", "fwd" */
  int n_in, n_out;
  const char *tensors[ZG_MAX_TENSORS];    /* n_in inputs, then n_out outputs */
} zg_op_desc;

/* By zg_op. */
ZGATE_API extern const zg_op_desc zg_ops[ZG_NOPS];

/* Operand slots, in the order of the public signatures (zg_ops[op].tensors). */
enum { ZG_BWD_DOUT = 0, ZG_BWD_Z = 1, ZG_BWD_O = 2, ZG_BWD_DZ = 3, ZG_BWD_DOS = 4 };
enum { ZG_FWD_O = 0, ZG_FWD_Z = 1, ZG_FWD_OUT = 2 };

#endif /* ZGATE_OPS_H */
