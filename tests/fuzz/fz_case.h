/* The fuzz harness's model of one call: how the fuzz input's bytes decode into tensor
 * descriptions over real heap buffers, and what the harness concludes about them.
 *
 * Input layout (every byte optional: a missing byte reads as 0, and 0 always means the
 * "ordinary" choice, so short inputs decode to valid calls):
 *   header   FZ_HDR_BYTES   op, number of buffers, the shared shape, options, injection
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
#define FZ_MAX_NDIM 9 /* the largest ndim decoded (fz_decode.c: k_ndims) */
/* Largest buffer the harness allocates. Every tensor that the library may accept lies
 * inside one of these; anything bigger is only handed out together with a defect that
 * the contract says must be refused. */
#define FZ_CAP ((int64_t)1 << 16)

/* Header bytes. */
enum {
  FZ_H_OP = 0,       /* % 4: fz_op */
  FZ_H_NBUF = 1,     /* 1 + % FZ_MAX_BUF */
  FZ_H_SHAPE0 = 2,   /* 4 bytes: fz_size() of each dimension */
  FZ_H_OPTS = 6,     /* 0: NULL options; else see fz_decode_opts */
  FZ_H_OPTS2 = 7,
  FZ_H_INJECT = 8,   /* which defect to add when a description does not fit the buffers */
  FZ_HDR_BYTES = 9
};

/* Per-tensor record bytes. */
enum {
  FZ_R_DTYPE = 0,    /* < 208: f32/f16/bf16 (f64 for reference ops); else odd dtypes */
  FZ_R_DTYPE2 = 1,   /* code / bits / lanes for odd dtypes */
  FZ_R_NDIM = 2,     /* < 224: 4; else ndim from a table */
  FZ_R_DEVICE = 3,   /* < 224: CPU 0; else a device from a table */
  FZ_R_SHAPE = 4,    /* < 224: the shared shape; else one dim changed, or shape NULL */
  FZ_R_SHAPEV = 5,   /* fz_size() of the changed dim */
  FZ_R_STRIDES = 6,  /* % 8 layout kind; >= 224 overrides one stride with a special value */
  FZ_R_SP1 = 7,      /* layout parameters */
  FZ_R_SP2 = 8,
  FZ_R_PLACE = 9,    /* < 208: buffer (% nbuf); 208..239: clone of an earlier tensor; >= 240: data NULL */
  FZ_R_DOFF = 10,    /* data pointer offset inside the buffer */
  FZ_R_BOFF = 11,    /* byte_offset */
  FZ_REC_BYTES = 12
};

/* Layout kinds (FZ_R_STRIDES % 8). */
enum {
  FZ_L_NULL = 0,      /* strides NULL: compact row-major */
  FZ_L_COMPACT = 1,   /* explicit compact row-major strides */
  FZ_L_PERMUTED = 2,  /* compact in a permuted dimension order (SP1 picks the order) */
  FZ_L_PADDED = 3,    /* compact with padding per dim (SP1: 2 bits per dim) */
  FZ_L_BROADCAST = 4, /* compact with zero strides on the dims whose SP1 bit is set */
  FZ_L_RANDOM = 5,    /* each stride 0..15 (SP1, SP2: a nibble per dim) */
  FZ_L_PROJ = 6,      /* Z as a view into an input projection: headdim rows with a gap */
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
  int shape_ok;        /* present, ndim 4, shape non-NULL, no negative entry */
  __int128 numel;
  __int128 stride[4];  /* in elements, NULL strides resolved; valid when shape_ok */
  __int128 rel;        /* data_off + byte_offset: first element's byte offset in the buffer */
  __int128 end;        /* one past the last byte an element covers (rel + elsize when numel 1) */
} fz_info;

typedef struct fz_case {
  fz_op op;
  int n_t, n_in, n_buf;
  fz_tensor t[FZ_MAX_T];
  fz_info info[FZ_MAX_T];
  int64_t shape[4];        /* decoded shared shape; after fz_analyze the call's shape */
  unsigned char *buf[FZ_MAX_BUF];
  int64_t buf_size[FZ_MAX_BUF];
  int buf_slack[FZ_MAX_BUF];
  /* options */
  int opts_null;
  zgate_options opts;
  unsigned char *opts_mem; /* what is passed: a copy of opts, possibly larger than it */
  int opts_known_bad;      /* the contract says these options must be refused */
  int opts_odd;            /* options zgate may refuse or accept */
  uint8_t inject;
  uint64_t seed;
  int32_t status_probe;
  /* conclusions */
  int definite;            /* the contract says this call must fail */
  const char *why;         /* first definite reason found (for the crash report) */
  int odd;                 /* zgate may refuse this call though nothing is wrong with it */
  const char *odd_why;
  int inplace_sem;         /* dos covers exactly dout's elements, same dtype (bwd ops) */
} fz_case;

/* fz_decode.c */
int64_t fz_size(uint8_t b, int dim);
void fz_decode(fz_case *c, const uint8_t *data, size_t size);
void fz_free(fz_case *c);

/* fz_analyze.c: fill c->info, size and allocate the buffers, add a defect where a
 * description cannot be placed in them, and classify the call (definite / odd). */
void fz_analyze(fz_case *c);
fz_dt fz_dtype_of(DLDataType t);
int64_t fz_elsize(fz_dt dt);
/* Byte offset (in the tensor's buffer) of element idx[0..3]. */
int64_t fz_elem_off(const fz_info *in, const int64_t idx[4]);
void fz_dump(const fz_case *c, int status);

/* fz_oracle.c: values, poison, and the checks after the call. */
void fz_fill_and_poison(fz_case *c);
double fz_load(const unsigned char *p, fz_dt dt);
uint64_t fz_poison_bits(fz_dt dt);
int fz_is_poison(const unsigned char *p, fz_dt dt);
/* After ZGATE_OK: every output element written and close to the float64 formula, every
 * other byte of every buffer unchanged. Returns NULL or what was wrong. */
const char *fz_check_success(const fz_case *c, unsigned char *const snap[FZ_MAX_BUF]);

#endif /* ZGATE_FZ_CASE_H */
