/* The fuzz harness's model of one call: how the fuzz input's bytes decode into tensor
 * descriptions over real heap buffers, and what the harness concludes about them.
 *
 * Input layout (every byte optional: a missing byte reads as 0, and 0 always means the
 * "ordinary" choice, so short inputs decode to valid calls):
 *   header   FZ_HDR_BYTES   op, number of buffers, the call's rank and shape, options, injection
 *   tensors  FZ_REC_BYTES each, 5 records for bwd ops and 3 for fwd ops, in API order
 *   tail     1 slack byte per buffer, 8 bytes of value seed, 4 bytes of status probe
 * The seed corpus (tests/fuzz/corpus/) is in this layout.
 */
#ifndef ZGATE_FZ_CASE_H
#define ZGATE_FZ_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "zgate.h"

#define FZ_MAX_T 5
#define FZ_MAX_BUF 4
/* Longest shape and stride array the harness builds: one past the API's ranks. A tensor of
 * a larger ndim gets one this long, so a library that reads ndim entries of it is caught. */
#define FZ_MAX_NDIM (ZGATE_MAX_NDIM + 1)
/* Largest buffer the harness allocates. Every tensor that the library may accept lies
 * inside one of these; anything bigger is only handed out together with a defect that
 * the contract says must be refused. */
#define FZ_CAP ((int64_t)1 << 16)

/* Header bytes. */
enum {
  FZ_H_OP = 0,       /* % 4: fz_op */
  FZ_H_NBUF = 1,     /* 1 + % FZ_MAX_BUF */
  FZ_H_NDIM = 2,     /* the call's rank, (4 + byte) % (ZGATE_MAX_NDIM + 1): 0 reads as 4 */
  FZ_H_SHAPE0 = 3,   /* ZGATE_MAX_NDIM bytes: fz_size() of each dimension */
  FZ_H_OPTS = FZ_H_SHAPE0 + ZGATE_MAX_NDIM, /* 0: NULL options; else see decode_opts */
  FZ_H_OPTS2,
  FZ_H_INJECT,       /* which defect to add when a description does not fit the buffers */
  FZ_HDR_BYTES
};

/* Per-tensor record bytes. */
enum {
  FZ_R_DTYPE = 0,    /* < 208: f32/f16/bf16 (f64 for reference ops); else odd dtypes */
  FZ_R_DTYPE2 = 1,   /* code / bits / lanes for odd dtypes */
  FZ_R_NDIM = 2,     /* < 224: the call's rank; else another (fz_decode.c: other_ndim) */
  FZ_R_DEVICE = 3,   /* < 224: CPU 0; else a device from a table */
  FZ_R_SHAPE = 4,    /* < 224: the call's shape; 255: shape NULL; else dim (byte % 8) % ndim
                        changed */
  FZ_R_SHAPEV = 5,   /* fz_size() of the changed dim */
  FZ_R_LAYOUT = 6,   /* % 8: layout kind */
  FZ_R_SP = 7,       /* 4 bytes, little-endian: the layout's parameter sp */
  FZ_R_SPECIAL = 11, /* >= 224: one stride gets a special value */
  FZ_R_SPECIAL_AT = 12, /* (byte % 8) % ndim: which dim; byte >> 4: which value (k_strides) */
  FZ_R_PLACE = 13,   /* < 208: buffer (% nbuf); 208..239: clone of an earlier tensor;
                        >= 240: data NULL */
  FZ_R_DOFF = 14,    /* data pointer offset inside the buffer */
  FZ_R_BOFF = 15,    /* byte_offset */
  FZ_REC_BYTES = 16
};

/* Layout kinds (FZ_R_LAYOUT % 8), for n dims. */
enum {
  FZ_L_NULL = 0,      /* strides NULL: compact row-major */
  FZ_L_COMPACT = 1,   /* explicit compact row-major strides */
  FZ_L_PERMUTED = 2,  /* compact in dim order number sp % n! (lexicographic, outermost first) */
  FZ_L_PADDED = 3,    /* compact, padded by (sp >> 2d) & 3 elements after dim d */
  FZ_L_BROADCAST = 4, /* compact with zero strides on the dims whose bit of sp is set */
  FZ_L_RANDOM = 5,    /* stride of dim d: (sp >> 4d) & 15 */
  FZ_L_PROJ = 6,      /* Z as a view into an input projection: the last two dims compact,
                         the dims outside them rows with a gap of sp % 64 elements */
  FZ_L_NULL2 = 7
};

typedef enum fz_op { FZ_BWD = 0, FZ_FWD = 1, FZ_BWD_REF = 2, FZ_FWD_REF = 3 } fz_op;

/* Storage types the harness decodes values of; FZ_DT_OTHER is anything zgate refuses. */
typedef enum fz_dt { FZ_DT_F32, FZ_DT_F16, FZ_DT_BF16, FZ_DT_F64, FZ_DT_OTHER } fz_dt;

typedef struct fz_tensor {
  int present;         /* 0: the call gets a NULL DLTensor pointer */
  int clone_of;        /* -1, or the earlier tensor this one copies (in place when 0 -> dos) */
  int buf;             /* buffer index; -1: data NULL */
  int64_t data_off;    /* data = buffer + data_off */
  DLTensor dl;         /* shape/strides: exactly-sized heap arrays (ASan sees overreads) */
  int owns_arrays;     /* 0 when dl.shape/dl.strides are borrowed from clone_of */
  int same_ptr;        /* an exact clone passed as clone_of's very DLTensor pointer */
} fz_tensor;

/* What the harness works out about one tensor (all arithmetic exact, in __int128). */
typedef struct fz_info {
  fz_dt dt;
  int64_t elsize;
  int shape_ok;        /* present, ndim 0..ZGATE_MAX_NDIM, shape non-NULL (or ndim 0), no
                          negative entry */
  __int128 numel;
  __int128 stride[ZGATE_MAX_NDIM]; /* in elements, NULL strides resolved; valid when shape_ok */
  __int128 rel;        /* data_off + byte_offset: first element's byte offset in the buffer */
  __int128 end;        /* one past the last byte an element covers (rel + elsize when numel 1) */
} fz_info;

typedef struct fz_case {
  fz_op op;
  int n_t, n_in, n_buf;
  fz_tensor t[FZ_MAX_T];
  fz_info info[FZ_MAX_T];
  int ndim;                     /* decoded rank and shape; after fz_analyze the call's */
  int64_t shape[FZ_MAX_NDIM];   /* (tensor 0's), entries past ndim 1 */
  unsigned char *buf[FZ_MAX_BUF];
  int64_t buf_size[FZ_MAX_BUF];
  int buf_slack[FZ_MAX_BUF];
  /* options */
  int opts_null;
  zgate_options opts;
  unsigned char *opts_mem; /* what is passed: a copy of opts, possibly larger than it */
  int opts_bad;            /* the status the contract says these options get, or 0 */
  int opts_odd;            /* options zgate may refuse or accept */
  uint8_t inject;
  uint64_t seed;
  int32_t status_probe;
  /* conclusions */
  int definite;            /* the contract says this call must fail */
  const char *why;         /* first definite reason found (for the crash report) */
  int odd;                 /* zgate may refuse this call though nothing is wrong with it */
  const char *odd_why;
  uint32_t statuses;       /* bit s: a reason found (definite or odd) is refused with status s */
  int inplace_sem;         /* dos covers exactly dout's elements, same dtype (bwd ops) */
} fz_case;

/* For the per-element walks, run thousands of times a call: libFuzzer's tracing of their
 * loops halves the harness's speed and tells nothing (the library's coverage guides). */
#if defined(__clang__)
#define FZ_NO_COVERAGE __attribute__((no_sanitize("coverage")))
#else
#define FZ_NO_COVERAGE
#endif

/* A rank the API takes. */
static inline int fz_rank_ok(int32_t ndim) { return ndim >= 0 && ndim <= ZGATE_MAX_NDIM; }

/* fz_decode.c */
/* Entries in a tensor's shape and stride arrays: ndim, at most FZ_MAX_NDIM (none if < 0). */
int fz_array_len(int32_t ndim);
void fz_decode(fz_case *c, const uint8_t *data, size_t size);
void fz_free(fz_case *c);

/* fz_analyze.c: fill c->info, size and allocate the buffers, add a defect where a
 * description cannot be placed in them, and classify the call (definite / odd). */
void fz_analyze(fz_case *c);
int64_t fz_elsize(fz_dt dt);
/* Every index of an nd-dim shape n in row-major order: fz_index_first sets idx to the first
 * and says whether there is one; fz_index_next steps to the next, 0 after the last. */
int fz_index_first(int nd, const int64_t *n, int64_t *idx);
int fz_index_next(int nd, const int64_t *n, int64_t *idx);
/* Byte offset (in the tensor's buffer) of element idx[0..nd). */
int64_t fz_elem_off(const fz_info *in, int nd, const int64_t *idx);
void fz_dump(const fz_case *c, int status);

/* fz_oracle.c: values, poison, and the checks after the call. */
void fz_fill_and_poison(fz_case *c);
/* After ZGATE_OK: every output element written and close to the float64 formula, every
 * other byte of every buffer unchanged. Returns NULL or what was wrong. */
const char *fz_check_success(const fz_case *c, unsigned char *const snap[FZ_MAX_BUF]);

#endif /* ZGATE_FZ_CASE_H */
