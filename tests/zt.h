/* Test support shared by the C tests: random numbers, poisoned buffers with guard bytes,
 * DLTensor views over them, the ISA a test binary runs for, and quick mode. */
#ifndef ZT_H
#define ZT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "zgate.h"
#include "zgate_check.h"

/* ctest's SKIP_RETURN_CODE: a test that cannot run here says so instead of passing. */
#define ZT_SKIP 77

/* The byte every fresh buffer holds: 0xFF.. is a NaN in float32, float16 and bfloat16, so
 * an element never written, or read from padding, shows up as a NaN mismatch. */
#define ZT_POISON 0xFF

/* ---- random numbers (splitmix64), seeded per run and printed for reproduction --------- */
typedef struct zt_rng {
  uint64_t s;
} zt_rng;

/* Seed from ZGATE_TEST_SEED when set, else from the clock; prints "seed=..". */
uint64_t zt_seed(const char *test_name);
uint64_t zt_next(zt_rng *r);
double zt_uniform(zt_rng *r, double lo, double hi);
int64_t zt_int(zt_rng *r, int64_t lo, int64_t hi); /* inclusive */
/* A value of random sign whose magnitude spans 1e-3 .. 1e2, with an occasional zero. */
double zt_rand_mag(zt_rng *r);
/* A gate input: mostly uniform on [-20, 20], some beyond (|z| up to ~150). */
double zt_rand_z(zt_rng *r);

/* ---- quick mode and ISA --------------------------------------------------------------- */
int zt_quick(void); /* ZGATE_TEST_QUICK=1 shrinks every matrix (valgrind, qemu) */
/* The ISA this run is for: ZGATE_CPU_ISA when set (and not "auto"), else NULL. When it is
 * set but not available here, prints why and returns ZT_SKIP in *skip; else *skip = 0. */
const char *zt_isa(int *skip);

/* ---- dtypes ---------------------------------------------------------------------------- */
extern const DLDataType zt_f32, zt_f16, zt_bf16, zt_f64;
extern const DLDataType zt_dtypes[3]; /* f32, f16, bf16 */

/* ---- buffers: poisoned memory with a snapshot for "nothing else changed" checks ------- */
typedef struct zt_buf {
  unsigned char *mem;  /* aligned to 64 bytes */
  size_t size;
  unsigned char *snap; /* copy taken by zt_buf_snapshot */
} zt_buf;

zt_buf *zt_buf_new(size_t size); /* filled with ZT_POISON; never NULL (aborts the test) */
void zt_buf_free(zt_buf *b);
void zt_buf_snapshot(zt_buf *b);
void zt_buf_restore(zt_buf *b); /* back to the snapshot */

/* ---- tensors ---------------------------------------------------------------------------- */
/* A DLTensor with its own shape and strides arrays. Never copy one after zt_tensor_init:
 * t.shape points into it. */
typedef struct zt_tensor {
  DLTensor t;
  int64_t shape[4];
  int64_t strides[4];
  zt_buf *buf; /* the buffer it views, or NULL */
} zt_tensor;

/* Strides: NULL = compact. Elements start `byte_pos` bytes into buf; with use_byte_offset
 * the position goes into byte_offset (data = buf->mem), else into data. compact_as_null:
 * when strides is NULL, leave t.strides NULL (else spell the compact strides out). */
void zt_tensor_init(zt_tensor *x, DLDataType dt, const int64_t shape[4], const int64_t *strides,
                    zt_buf *buf, size_t byte_pos, int use_byte_offset, int compact_as_null);
int64_t zt_numel(const int64_t shape[4]);
/* Bytes from the first element to one past the last (0 when empty). */
size_t zt_span_bytes(DLDataType dt, const int64_t shape[4], const int64_t strides[4]);
void zt_compact_strides(const int64_t shape[4], int64_t strides[4]);
/* Address of element idx. */
void *zt_elem(const DLTensor *t, const int64_t idx[4]);
double zt_get(const DLTensor *t, const int64_t idx[4]);
void zt_set(const DLTensor *t, const int64_t idx[4], double v);
/* Fill every element with gen(rng). */
void zt_fill(const DLTensor *t, zt_rng *r, double (*gen)(zt_rng *));
/* A compact float64 tensor over fresh memory (zt_free_f64 releases it). */
void zt_make_f64(zt_tensor *x, const int64_t shape[4]);
void zt_free_f64(zt_tensor *x);
/* A compact copy (same dtype) of src's values, e.g. dout before an in-place run. */
void zt_copy_compact(zt_tensor *dst, const DLTensor *src);

/* Bytes of buffer b that differ from its snapshot, outside the elements of the `n` tensors
 * in `writable` (those may change). Returns how many; prints the first few. */
int64_t zt_buf_changed_outside(const zt_buf *b, const DLTensor *const *writable, int n,
                               const char *what);

/* 1 when `msg` names `word` as a whole identifier (e.g. "o" in "o: dim 3 ..."). */
int zt_names(const char *msg, const char *word);

/* printf into a static per-thread description buffer. */
const char *zt_shape_str(const int64_t shape[4]);

#endif /* ZT_H */
