/* Internal contract between validation, the API entry points and the backends.
 * validate.c turns the caller's DLTensors into a zg_problem; backends only ever see that. */
#ifndef ZGATE_INTERNAL_H
#define ZGATE_INTERNAL_H

#include <stdint.h>

#include "zgate.h"
#include "zgate_private.h"

/* Storage types zgate knows. ZG_F64 is accepted by the *_reference entry points only. */
typedef enum zg_dtype { ZG_F32 = 0, ZG_F16 = 1, ZG_BF16 = 2, ZG_F64 = 3 } zg_dtype;

/* Bytes per element of each zg_dtype. */
static inline int64_t zg_dtype_size(zg_dtype t) { return t == ZG_F64 ? 8 : t == ZG_F32 ? 4 : 2; }

/* One validated tensor: byte_offset already applied, strides in elements of the problem's
 * collapsed dims (never NULL). */
typedef struct zg_operand {
  char *data;         /* may be NULL only when the problem has no elements */
  zg_dtype dtype;
  int64_t strides[ZGATE_MAX_NDIM];
} zg_operand;


/* A validated call, described once for every backend. The caller's dims are collapsed
 * (validate.c, zg_collapse; never more than the caller's): size-1 dims dropped, the rest ordered by the first output's
 * strides (outermost first), neighbours merged where every tensor walks them contiguously.
 * So ndim is 1..ZGATE_MAX_NDIM, dim ndim-1 is the innermost, every size is >= 2 unless the
 * problem has a single element (ndim 1, size 1) or none (ndim 1, size 0), and a dense
 * problem is one dim. t[0 .. n_in-1] are inputs and t[n_in .. n_in+n_out-1] outputs (for
 * ZG_OP_BWD dout_scaled may be dout itself: in place). */
typedef struct zg_problem {
  zg_op op;
  int n_in, n_out;     /* zg_ops[op]'s */
  int ndim;
  int64_t shape[ZGATE_MAX_NDIM];
  int64_t numel;       /* product of shape; 0 means nothing to do */
  zg_operand t[ZG_MAX_TENSORS];
  DLDevice device;
} zg_problem;

/* Resolved per-call options (defaults filled in). */
typedef struct zg_options {
  int num_threads;     /* 0 = OpenMP default */
  const char *cpu_isa; /* NULL = process-wide choice */
  /* the CPU kernel table, resolved once per call (zg_cpu_resolve); opaque here */
  const struct zg_cpu_kernels *cpu_kernels;
  void *cuda_stream;
} zg_options;

/* Set the calling thread's last-error message (printf-style) and return `status`. */
int zg_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* zg_fail naming the tensor, dim or dtype at fault as data too (zgate_private.h). */
int zg_refuse(int status, zg_refusal what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Clear the calling thread's message and refusal (on success). */
void zg_clear_error(void);

/* validate.c: check the caller's tensors and fill *p. allow_f64 admits float64 tensors
 * (reference entry points). Returns ZGATE_OK or a status with the message already set. */
int zg_validate(zg_op op, const DLTensor *const *tensors, int allow_f64, zg_problem *p);
int zg_resolve_options(const zgate_options *opts, zg_options *out);

/* Backends. Each returns ZGATE_OK or a status with the message set; p->numel > 0. */
int zg_cpu_run(const zg_problem *p, const zg_options *opts);
int zg_reference_run(const zg_problem *p);
#ifdef ZGATE_WITH_CUDA
int zg_cuda_run(const zg_problem *p, const zg_options *opts);
#endif

#endif /* ZGATE_INTERNAL_H */
