/* What the calling thread's last refused call names, as data beside zgate_last_error()'s
 * text: for the Python binding, which words its errors for Python users and must not parse
 * the library's messages. Internal: exported for zgate._binding, not part of zgate.h. */
#ifndef ZGATE_REFUSAL_H
#define ZGATE_REFUSAL_H

#include "zgate.h"

typedef struct zg_refusal {
  const char *tensor; /* the tensor at fault by its signature name ("dz"); NULL: none */
  int dim;            /* the caller's dimension at fault; -1: none */
  DLDataType dtype;   /* the dtype refused (ZGATE_ERR_DTYPE, ZGATE_ERR_LANES); else zero */
} zg_refusal;

#define ZG_REFUSAL_NONE {NULL, -1, {0, 0, 0}}

/* The calling thread's record, valid until its next call; tensor NULL after a success. */
ZGATE_API const zg_refusal *zg_last_refusal(void);

#endif /* ZGATE_REFUSAL_H */
