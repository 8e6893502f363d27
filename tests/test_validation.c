/* Bad input: each defect, planted alone into an otherwise valid call, gets its own status
 * code, a last-error message that names the tensor at fault, and NOTHING written: every
 * buffer (poisoned outputs, random inputs, guards) compared bytewise with its state before
 * the call. Then the valid corner cases that must be accepted (and compute correctly). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "zgate_private.h"
#include "zt.h"

/* Slots: 0 dout, 1 z, 2 o, 3 dz, 4 dout_scaled. The forward call uses o = slot 2,
 * z = slot 1, out = slot 3. */
enum { S_DOUT, S_Z, S_O, S_DZ, S_DOS };
static const char *const slot_names_bwd[5] = {"dout", "z", "o", "dz", "dout_scaled"};
static const char *const slot_names_fwd[5] = {NULL, "z", "o", "out", NULL};

enum { OP_BWD, OP_FWD, OP_BWD_REF, OP_FWD_REF };
static const char *const op_names[4] = {"zgate_bwd", "zgate_fwd", "zgate_bwd_reference",
                                        "zgate_fwd_reference"};

#define GUARD 128

typedef struct fx {
  zt_tensor x[5];
  zt_buf *b[5];
  const DLTensor *arg[5]; /* what is passed; normally &x[i].t */
  zgate_options opts;
  const zgate_options *popts;
} fx;

static zt_rng g_rng;
static int64_t g_problems;

static void problem(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  g_problems++;
}

/* A valid call: shape (2,3,4,5), float32, each tensor in its own guarded buffer (room for
 * twice its elements so dtype or stride edits stay inside), inputs random, outputs poisoned. */
static void fx_init(fx *f) {
  static const int64_t shape[4] = {2, 3, 4, 5};
  memset(f, 0, sizeof *f);
  for (int i = 0; i < 5; i++) {
    f->b[i] = zt_buf_new(GUARD + 2 * 120 * 8 + GUARD);
    zt_tensor_init(&f->x[i], zt_f32, shape, NULL, f->b[i], GUARD, 0, 0);
    f->arg[i] = &f->x[i].t;
  }
  for (int i = 0; i < 3; i++) zt_fill(&f->x[i].t, &g_rng, i == S_Z ? zt_rand_z : zt_rand_mag);
  zgate_options_init(&f->opts);
  f->popts = NULL;
}

static void fx_free(fx *f) {
  for (int i = 0; i < 5; i++) zt_buf_free(f->b[i]);
}

static int fx_call(fx *f, int op) {
  DLTensor *dz = (DLTensor *)f->arg[S_DZ], *dos = (DLTensor *)f->arg[S_DOS];
  switch (op) {
    case OP_BWD: return zgate_bwd(f->arg[S_DOUT], f->arg[S_Z], f->arg[S_O], dz, dos, f->popts);
    case OP_FWD: return zgate_fwd(f->arg[S_O], f->arg[S_Z], dz, f->popts);
    case OP_BWD_REF: return zgate_bwd_reference(f->arg[S_DOUT], f->arg[S_Z], f->arg[S_O], dz, dos);
    default: return zgate_fwd_reference(f->arg[S_O], f->arg[S_Z], dz);
  }
}

/* Call, expect `code`, a message naming `name` (when not NULL), and no byte changed. */
static void expect_fail(fx *f, int op, int code, const char *name, const char *what) {
  for (int i = 0; i < 5; i++) zt_buf_snapshot(f->b[i]);
  int rc = fx_call(f, op);
  const char *msg = zgate_last_error();
  if (rc != code)
    problem("%s, %s: returned %d (%s), expected %d (%s); message: %s", op_names[op], what, rc,
            zgate_status_str(rc), code, zgate_status_str(code), msg);
  if (!msg[0]) problem("%s, %s: no last-error message", op_names[op], what);
  else if (name && !zt_names(msg, name))
    problem("%s, %s: message does not name %s: %s", op_names[op], what, name, msg);
  /* a tensor the message names, as data (options name none; a shape mismatch names the
   * tensor that differs from the first) */
  const char *got = zg_last_refusal()->tensor;
  if (name && (got ? !strcmp(name, "options") || !zt_names(msg, got) : strcmp(name, "options")))
    problem("%s, %s: the refusal records tensor %s: %s", op_names[op], what, got ? got : "none", msg);
  for (int i = 0; i < 5; i++)
    if (memcmp(f->b[i]->mem, f->b[i]->snap, f->b[i]->size) != 0)
      problem("%s, %s: buffer of slot %d was written", op_names[op], what, i);
}

/* Call, expect success, check outputs with the oracle (inputs as they were). */
static void expect_ok(fx *f, int op, const char *what) {
  zt_tensor dout_copy;
  int have_copy = 0;
  if ((op == OP_BWD || op == OP_BWD_REF) && f->arg[S_DOUT] && zt_numel(f->arg[S_DOUT]->shape) > 0 &&
      f->arg[S_DOUT]->data) {
    zt_copy_compact(&dout_copy, f->arg[S_DOUT]);
    have_copy = 1;
  }
  int rc = fx_call(f, op);
  if (rc != ZGATE_OK) {
    problem("%s, %s: returned %d (%s): %s", op_names[op], what, rc, zgate_status_str(rc),
            zgate_last_error());
  } else if (zgate_last_error()[0]) {
    problem("%s, %s: success left a message: %s", op_names[op], what, zgate_last_error());
  } else if (zt_numel(f->arg[S_Z]->shape) > 0 && (op == OP_BWD || op == OP_FWD)) {
    zgate_check_stats a, b;
    zgate_check_stats_init(&a);
    zgate_check_stats_init(&b);
    int crc = op == OP_FWD ? zgate_check_fwd(f->arg[S_O], f->arg[S_Z], f->arg[S_DZ], &a)
                           : zgate_check_bwd(&dout_copy.t, f->arg[S_Z], f->arg[S_O], f->arg[S_DZ],
                                             f->arg[S_DOS], &a, &b);
    if (crc != 0 || a.failures || b.failures)
      problem("%s, %s: wrong results (check %d, failures %lld + %lld)", op_names[op], what, crc,
              (long long)a.failures, (long long)b.failures);
  }
  if (have_copy) zt_buf_free(dout_copy.buf);
}

static const char *slot_name(int op, int slot) {
  return (op == OP_FWD || op == OP_FWD_REF) ? slot_names_fwd[slot] : slot_names_bwd[slot];
}

/* The slots each op uses, inputs first. */
static int op_slots(int op, int *slots) {
  if (op == OP_FWD || op == OP_FWD_REF) {
    slots[0] = S_O; slots[1] = S_Z; slots[2] = S_DZ;
    return 3;
  }
  for (int i = 0; i < 5; i++) slots[i] = i;
  return 5;
}

static void finish(void) {
  int64_t p = g_problems;
  g_problems = 0;
  assert_int_equal(p, 0);
}

/* ---- one defect at a time, in every tensor, for every entry point ------------------------ */

static void test_null_pointers(void **state) {
  (void)state;
  for (int op = 0; op < 4; op++) {
    int slots[5], n = op_slots(op, slots);
    for (int k = 0; k < n; k++) {
      int s = slots[k];
      fx f;
      char what[64];
      fx_init(&f);
      f.arg[s] = NULL;
      snprintf(what, sizeof what, "NULL %s", slot_name(op, s));
      expect_fail(&f, op, ZGATE_ERR_NULL_ARGUMENT, slot_name(op, s), what);
      fx_free(&f);

      fx_init(&f);
      f.x[s].t.shape = NULL;
      snprintf(what, sizeof what, "NULL shape of %s", slot_name(op, s));
      expect_fail(&f, op, ZGATE_ERR_NULL_ARGUMENT, slot_name(op, s), what);
      fx_free(&f);

      fx_init(&f);
      f.x[s].t.data = NULL;
      snprintf(what, sizeof what, "NULL data of %s", slot_name(op, s));
      expect_fail(&f, op, ZGATE_ERR_NULL_DATA, slot_name(op, s), what);
      fx_free(&f);

      fx_init(&f);
      f.x[s].t.data = NULL;
      f.x[s].t.byte_offset = GUARD;
      snprintf(what, sizeof what, "NULL data + byte_offset of %s", slot_name(op, s));
      expect_fail(&f, op, ZGATE_ERR_NULL_DATA, slot_name(op, s), what);
      fx_free(&f);
    }
  }
  finish();
}

static void test_ndim_and_shapes(void **state) {
  (void)state;
  static const int bad_ndims[] = {-1, ZGATE_MAX_NDIM + 1, 1000};
  static const int other_ndims[] = {0, 1, 3, 5, ZGATE_MAX_NDIM};
  for (int op = 0; op < 4; op++) {
    int slots[5], n = op_slots(op, slots);
    for (int k = 0; k < n; k++) {
      int s = slots[k];
      const char *name = slot_name(op, s);
      char what[96];
      int64_t big_shape[ZGATE_MAX_NDIM + 1] = {2, 3, 4, 5, 1, 1, 1, 1, 1}; /* any ndim <= 9 */
      for (size_t j = 0; j < sizeof bad_ndims / sizeof bad_ndims[0]; j++) {
        fx f;
        fx_init(&f);
        f.x[s].t.ndim = bad_ndims[j];
        if (bad_ndims[j] > 4 && bad_ndims[j] <= ZGATE_MAX_NDIM + 1) f.x[s].t.shape = big_shape;
        snprintf(what, sizeof what, "ndim %d on %s", bad_ndims[j], name);
        expect_fail(&f, op, ZGATE_ERR_NDIM, name, what);
        fx_free(&f);
      }
      /* a valid rank that differs from the others' is a shape mismatch, even where the
       * extra dims have size 1 */
      for (size_t j = 0; j < sizeof other_ndims / sizeof other_ndims[0]; j++) {
        fx f;
        fx_init(&f);
        f.x[s].t.ndim = other_ndims[j];
        f.x[s].t.shape = big_shape;
        f.x[s].t.strides = NULL;
        snprintf(what, sizeof what, "ndim %d on %s only", other_ndims[j], name);
        expect_fail(&f, op, ZGATE_ERR_SHAPE_MISMATCH, k == 0 ? NULL : name, what);
        fx_free(&f);
      }
      for (int d = 0; d < 4; d++) {
        fx f;
        fx_init(&f);
        f.x[s].shape[d] += 1;
        snprintf(what, sizeof what, "%s dim %d one larger", name, d);
        expect_fail(&f, op, ZGATE_ERR_SHAPE_MISMATCH, name, what);
        fx_free(&f);

        fx_init(&f);
        f.x[s].shape[d] = 0; /* empty against non-empty is still a mismatch */
        snprintf(what, sizeof what, "%s dim %d zero, others not", name, d);
        expect_fail(&f, op, ZGATE_ERR_SHAPE_MISMATCH, name, what);
        fx_free(&f);

        fx_init(&f);
        f.x[s].shape[d] = -3;
        snprintf(what, sizeof what, "%s dim %d negative", name, d);
        expect_fail(&f, op, ZGATE_ERR_NEGATIVE_SIZE, name, what);
        fx_free(&f);
      }
    }
    /* Every tensor with the same negative size: still NEGATIVE_SIZE, not a mismatch. */
    fx f;
    fx_init(&f);
    for (int i = 0; i < 5; i++) f.x[i].shape[2] = -1;
    expect_fail(&f, op, ZGATE_ERR_NEGATIVE_SIZE, NULL, "all sizes negative");
    fx_free(&f);
  }
  finish();
}

static void test_dtypes(void **state) {
  (void)state;
  static const DLDataType bad[] = {
      {kDLInt, 32, 1},  {kDLUInt, 16, 1},   {kDLInt, 8, 1},     {kDLFloat, 8, 1},
      {kDLFloat, 0, 1}, {kDLFloat, 128, 1}, {kDLBfloat, 32, 1}, {kDLBfloat, 8, 1},
      {kDLComplex, 64, 1}, {kDLOpaqueHandle, 16, 1}, {6, 8, 1} /* kDLBool in later DLPack */, {99, 32, 1},
      {kDLFloat, 17, 1}};
  for (int op = 0; op < 4; op++) {
    int slots[5], n = op_slots(op, slots);
    for (int k = 0; k < n; k++) {
      int s = slots[k];
      const char *name = slot_name(op, s);
      char what[96];
      for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
        fx f;
        fx_init(&f);
        f.x[s].t.dtype = bad[j];
        snprintf(what, sizeof what, "dtype (code %d, bits %d) on %s", bad[j].code, bad[j].bits, name);
        expect_fail(&f, op, ZGATE_ERR_DTYPE, name, what);
        DLDataType got = zg_last_refusal()->dtype;
        if (got.code != bad[j].code || got.bits != bad[j].bits || zg_last_refusal()->dim != -1)
          problem("%s, %s: the refusal records dtype (code %d, bits %d), dim %d", op_names[op], what,
                  got.code, got.bits, zg_last_refusal()->dim);
        fx_free(&f);
      }
      /* float64 is for the references only. */
      if (op == OP_BWD || op == OP_FWD) {
        fx f;
        fx_init(&f);
        f.x[s].t.dtype = zt_f64;
        snprintf(what, sizeof what, "float64 on %s", name);
        expect_fail(&f, op, ZGATE_ERR_DTYPE, name, what);
        fx_free(&f);
      }
      static const uint16_t lanes[] = {0, 2, 4, 65535};
      for (size_t j = 0; j < 4; j++) {
        fx f;
        fx_init(&f);
        f.x[s].t.dtype.lanes = lanes[j];
        snprintf(what, sizeof what, "lanes %u on %s", lanes[j], name);
        expect_fail(&f, op, ZGATE_ERR_LANES, name, what);
        fx_free(&f);
      }
    }
  }
  finish();
}

static void test_strides(void **state) {
  (void)state;
  for (int op = 0; op < 4; op++) {
    int slots[5], n = op_slots(op, slots), n_in = n == 5 ? 3 : 2;
    for (int k = 0; k < n; k++) {
      int s = slots[k];
      const char *name = slot_name(op, s);
      char what[96];
      for (int d = 0; d < 4; d++) {
        fx f;
        fx_init(&f);
        f.x[s].strides[d] = -1;
        snprintf(what, sizeof what, "negative stride dim %d on %s", d, name);
        expect_fail(&f, op, ZGATE_ERR_NEGATIVE_STRIDE, name, what);
        if (zg_last_refusal()->dim != d)
          problem("%s, %s: the refusal records dim %d", op_names[op], what, zg_last_refusal()->dim);
        fx_free(&f);

        fx_init(&f);
        f.x[s].strides[d] = INT64_MIN;
        snprintf(what, sizeof what, "INT64_MIN stride dim %d on %s", d, name);
        expect_fail(&f, op, ZGATE_ERR_NEGATIVE_STRIDE, name, what);
        fx_free(&f);
        if (k < n_in) continue;

        /* Outputs: a zero stride writes two elements to one place. */
        fx_init(&f);
        f.x[s].strides[d] = 0;
        snprintf(what, sizeof what, "zero stride dim %d on output %s", d, name);
        expect_fail(&f, op, ZGATE_ERR_OUTPUT_SELF_OVERLAP, name, what);
        fx_free(&f);
      }
      if (k < n_in) continue;
      /* Overlapping nonzero strides: nheads stride 1 over a contiguous headdim. */
      fx f;
      fx_init(&f);
      f.x[s].strides[2] = 1;
      snprintf(what, sizeof what, "nheads stride 1 over headdim on %s", name);
      expect_fail(&f, op, ZGATE_ERR_OUTPUT_SELF_OVERLAP, name, what);
      fx_free(&f);
      fx_init(&f);
      f.x[s].strides[0] = 7; /* batch rows overlap seqlen rows */
      snprintf(what, sizeof what, "batch stride 7 on %s", name);
      expect_fail(&f, op, ZGATE_ERR_OUTPUT_SELF_OVERLAP, name, what);
      fx_free(&f);
    }
  }
  finish();
}

/* Point slot `dst` at slot `src`'s memory, `extra` bytes further. */
static void share(fx *f, int dst, int src, size_t extra) {
  f->x[dst].t.data = (char *)f->x[src].t.data + extra;
  f->x[dst].t.byte_offset = f->x[src].t.byte_offset;
}

static void test_aliasing(void **state) {
  (void)state;
  for (int op = 0; op < 4; op++) {
    int bwd = op == OP_BWD || op == OP_BWD_REF;
    int slots[5], n = op_slots(op, slots), n_in = bwd ? 3 : 2;
    char what[96];
    /* Each output over each other tensor: exactly, and shifted by a few elements. */
    for (int ko = n_in; ko < n; ko++)
      for (int k = 0; k < n; k++) {
        int so = slots[ko], s = slots[k];
        if (so == s) continue;
        for (int shift = 0; shift < 3; shift++) {
          size_t extra = shift == 0 ? 0 : shift == 1 ? 4 : 400;
          if (bwd && so == S_DOS && s == S_DOUT && extra == 0) continue; /* in place: valid */
          fx f;
          fx_init(&f);
          share(&f, so, s, extra);
          snprintf(what, sizeof what, "%s over %s +%zu bytes", slot_name(op, so), slot_name(op, s), extra);
          /* The message names both tensors; the output is the one checked here. */
          expect_fail(&f, op, ZGATE_ERR_ALIAS, slot_name(op, so), what);
          fx_free(&f);
        }
      }
    /* The very same DLTensor passed as both outputs. */
    if (bwd) {
      fx f;
      fx_init(&f);
      f.arg[S_DOS] = f.arg[S_DZ];
      expect_fail(&f, op, ZGATE_ERR_ALIAS, NULL, "dz passed as dout_scaled too");
      fx_free(&f);
      /* Interleaved outputs (dz on even, dout_scaled on odd elements) never share an
       * element, but their extents overlap: refused as an alias. */
      fx_init(&f);
      for (int d = 0; d < 4; d++) f.x[S_DZ].strides[d] *= 2, f.x[S_DOS].strides[d] *= 2;
      share(&f, S_DOS, S_DZ, 4);
      expect_fail(&f, op, ZGATE_ERR_ALIAS, NULL, "interleaved dz / dout_scaled");
      fx_free(&f);
      /* In place with another dtype or other strides. */
      fx_init(&f);
      share(&f, S_DOS, S_DOUT, 0);
      f.x[S_DOS].t.dtype = zt_bf16;
      expect_fail(&f, op, ZGATE_ERR_INPLACE_MISMATCH, "dout_scaled", "in place as bfloat16");
      fx_free(&f);
      fx_init(&f);
      share(&f, S_DOS, S_DOUT, 0);
      f.x[S_DOS].t.dtype = zt_f16;
      expect_fail(&f, op, ZGATE_ERR_INPLACE_MISMATCH, "dout_scaled", "in place as float16");
      fx_free(&f);
      fx_init(&f);
      share(&f, S_DOS, S_DOUT, 0);
      f.x[S_DOS].strides[2] = 1; f.x[S_DOS].strides[3] = 4; /* memory order (b, l, d, h) */
      expect_fail(&f, op, ZGATE_ERR_INPLACE_MISMATCH, "dout_scaled", "in place, other strides");
      fx_free(&f);
    }
  }
  finish();
}

static void test_devices(void **state) {
  (void)state;
  for (int op = 0; op < 4; op++) {
    int slots[5], n = op_slots(op, slots);
    char what[96];
    for (int k = 1; k < n; k++) {
      int s = slots[k];
      fx f;
      fx_init(&f);
      f.x[s].t.device.device_type = kDLCUDA;
      snprintf(what, sizeof what, "%s on CUDA, others on the CPU", slot_name(op, s));
      expect_fail(&f, op, ZGATE_ERR_DEVICE_MISMATCH, slot_name(op, s), what);
      fx_free(&f);
      fx_init(&f);
      f.x[s].t.device.device_id = 1;
      snprintf(what, sizeof what, "%s on CPU device 1", slot_name(op, s));
      expect_fail(&f, op, ZGATE_ERR_DEVICE_MISMATCH, slot_name(op, s), what);
      fx_free(&f);
    }
    static const int unknown[] = {kDLOpenCL, kDLVulkan, kDLMetal, kDLVPI, kDLROCM, kDLExtDev, 0, 1000};
    for (size_t j = 0; j < sizeof unknown / sizeof unknown[0]; j++) {
      fx f;
      fx_init(&f);
      for (int i = 0; i < 5; i++) f.x[i].t.device.device_type = (DLDeviceType)unknown[j];
      snprintf(what, sizeof what, "all on device type %d", unknown[j]);
      expect_fail(&f, op, ZGATE_ERR_DEVICE_UNSUPPORTED, NULL, what);
      fx_free(&f);
    }
    if (!zgate_cuda_built()) {
      static const int cuda[] = {kDLCUDA, kDLCUDAManaged};
      for (int j = 0; j < 2; j++) {
        fx f;
        fx_init(&f);
        for (int i = 0; i < 5; i++) f.x[i].t.device.device_type = (DLDeviceType)cuda[j];
        snprintf(what, sizeof what, "all on device type %d, no CUDA built", cuda[j]);
        expect_fail(&f, op, ZGATE_ERR_NO_CUDA, NULL, what);
        fx_free(&f);
      }
    } else {
      printf("CUDA built: the no-CUDA case does not apply here\n");
    }
  }
  finish();
}

static void test_overflow_and_alignment(void **state) {
  (void)state;
  for (int op = 0; op < 4; op++) {
    int slots[5], n = op_slots(op, slots);
    char what[96];
    for (int k = 0; k < n; k++) {
      int s = slots[k];
      const char *name = slot_name(op, s);
      fx f;
      /* A stride whose byte extent passes 2^63. */
      fx_init(&f);
      f.x[s].strides[0] = (int64_t)1 << 62;
      snprintf(what, sizeof what, "batch stride 2^62 on %s", name);
      expect_fail(&f, op, ZGATE_ERR_OVERFLOW, name, what);
      fx_free(&f);
      fx_init(&f);
      f.x[s].strides[1] = INT64_MAX / 2;
      snprintf(what, sizeof what, "seqlen stride INT64_MAX/2 on %s", name);
      expect_fail(&f, op, ZGATE_ERR_OVERFLOW, name, what);
      fx_free(&f);
      /* byte_offset that wraps the address space. */
      fx_init(&f);
      f.x[s].t.byte_offset = UINT64_MAX - 3;
      snprintf(what, sizeof what, "byte_offset 2^64-4 on %s", name);
      expect_fail(&f, op, ZGATE_ERR_OVERFLOW, name, what);
      fx_free(&f);
      fx_init(&f);
      f.x[s].t.byte_offset = (uint64_t)1 << 63;
      snprintf(what, sizeof what, "byte_offset 2^63 on %s", name);
      expect_fail(&f, op, ZGATE_ERR_OVERFLOW, name, what);
      fx_free(&f);
      /* Data near the top of the address space: the extent wraps. Never dereferenced. */
      fx_init(&f);
      f.x[s].t.data = (void *)(~(uintptr_t)0 & ~(uintptr_t)63);
      snprintf(what, sizeof what, "data at the top of memory for %s", name);
      expect_fail(&f, op, ZGATE_ERR_OVERFLOW, name, what);
      fx_free(&f);
      /* Misaligned: data, byte_offset, and a float16 tensor at an odd address. */
      fx_init(&f);
      f.x[s].t.data = (char *)f.x[s].t.data + 1;
      snprintf(what, sizeof what, "data + 1 on float32 %s", name);
      expect_fail(&f, op, ZGATE_ERR_MISALIGNED, name, what);
      fx_free(&f);
      fx_init(&f);
      f.x[s].t.byte_offset = 2;
      snprintf(what, sizeof what, "byte_offset 2 on float32 %s", name);
      expect_fail(&f, op, ZGATE_ERR_MISALIGNED, name, what);
      fx_free(&f);
      fx_init(&f);
      f.x[s].t.dtype = zt_f16;
      f.x[s].t.byte_offset = 3;
      snprintf(what, sizeof what, "byte_offset 3 on float16 %s", name);
      expect_fail(&f, op, ZGATE_ERR_MISALIGNED, name, what);
      fx_free(&f);
    }
    /* The element count itself overflows: sizes 2^40 x 2^40 everywhere. */
    fx f;
    fx_init(&f);
    for (int i = 0; i < 5; i++) {
      f.x[i].shape[0] = (int64_t)1 << 40;
      f.x[i].shape[1] = (int64_t)1 << 40;
    }
    expect_fail(&f, op, ZGATE_ERR_OVERFLOW, NULL, "2^80 elements");
    fx_free(&f);
    /* Compact (NULL) strides whose byte extent overflows: 2^62 elements of 4 bytes. */
    fx_init(&f);
    for (int i = 0; i < 5; i++) {
      f.x[i].shape[0] = (int64_t)1 << 29; /* 2^57 * 20 elements fit, 4x the bytes do not */
      f.x[i].shape[1] = (int64_t)1 << 28;
      f.x[i].t.strides = NULL;
    }
    expect_fail(&f, op, ZGATE_ERR_OVERFLOW, NULL, "2^57*20 x 4 compact bytes");
    fx_free(&f);
  }
  finish();
}

static void test_options(void **state) {
  (void)state;
  for (int op = 0; op < 2; op++) {
    fx f;
    static const size_t sizes[] = {0, 1, 4, (size_t)1 << 20, SIZE_MAX};
    for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++) {
      char what[64];
      fx_init(&f);
      f.opts.struct_size = sizes[j];
      f.popts = &f.opts;
      snprintf(what, sizeof what, "struct_size %zu", sizes[j]);
      expect_fail(&f, op, ZGATE_ERR_OPTIONS, "options", what);
      fx_free(&f);
    }
    static const int threads[] = {-1, -1000, 1 << 30};
    for (size_t j = 0; j < 3; j++) {
      char what[64];
      fx_init(&f);
      f.opts.num_threads = threads[j];
      f.popts = &f.opts;
      snprintf(what, sizeof what, "num_threads %d", threads[j]);
      expect_fail(&f, op, ZGATE_ERR_OPTIONS, "options", what);
      fx_free(&f);
    }
    static const char *const bogus[] = {"bogus", "", "AVX2", "avx2 ", "sse4"};
    for (size_t j = 0; j < sizeof bogus / sizeof bogus[0]; j++) {
      char what[64];
      fx_init(&f);
      f.opts.cpu_isa = bogus[j];
      f.popts = &f.opts;
      snprintf(what, sizeof what, "cpu_isa \"%s\"", bogus[j]);
      expect_fail(&f, op, ZGATE_ERR_OPTIONS, "options", what);
      fx_free(&f);
    }
    static const char *const isas[] = {"scalar", "avx2", "avx512", "neon"};
    for (int j = 0; j < 4; j++) {
      char what[64];
      fx_init(&f);
      f.opts.cpu_isa = isas[j];
      f.popts = &f.opts;
      snprintf(what, sizeof what, "cpu_isa %s", isas[j]);
      if (zgate_cpu_isa_available(isas[j])) expect_ok(&f, op, what);
      else expect_fail(&f, op, ZGATE_ERR_ISA_UNAVAILABLE, "options", what);
      fx_free(&f);
    }
    /* A caller from an older version that knows only struct_size and num_threads. */
    fx_init(&f);
    f.opts.struct_size = offsetof(zgate_options, num_threads) + sizeof(int);
    f.opts.num_threads = 1;
    f.opts.cpu_isa = "bogus"; /* beyond struct_size: must not be read */
    f.popts = &f.opts;
    expect_ok(&f, op, "short struct_size ignores later fields");
    fx_free(&f);
  }
  finish();
}

/* ---- valid corner cases ------------------------------------------------------------------ */

static void test_accepted(void **state) {
  (void)state;
  for (int op = 0; op < 4; op++) {
    int bwd = op == OP_BWD || op == OP_BWD_REF;
    fx f;
    char what[96];
    /* Size 0 in each dim with NULL data everywhere, with and without strides. */
    for (int d = 0; d < 4; d++)
      for (int nulls = 0; nulls < 2; nulls++) {
        fx_init(&f);
        for (int i = 0; i < 5; i++) {
          f.x[i].shape[d] = 0;
          f.x[i].t.data = NULL;
          if (nulls) f.x[i].t.strides = NULL;
        }
        snprintf(what, sizeof what, "size 0 in dim %d, NULL data%s", d, nulls ? ", NULL strides" : "");
        expect_ok(&f, op, what);
        fx_free(&f);
      }
    /* Size 0 with real buffers: nothing written. */
    fx_init(&f);
    for (int i = 0; i < 5; i++) f.x[i].shape[1] = 0;
    for (int i = 0; i < 5; i++) zt_buf_snapshot(f.b[i]);
    expect_ok(&f, op, "size 0 with buffers");
    for (int i = 0; i < 5; i++)
      if (memcmp(f.b[i]->mem, f.b[i]->snap, f.b[i]->size)) problem("size 0 call wrote slot %d", i);
    fx_free(&f);
    /* Strides of size-1 dims do not matter, even absurd ones. */
    fx_init(&f);
    for (int i = 0; i < 5; i++) {
      f.x[i].shape[0] = 1;
      f.x[i].strides[0] = i >= 3 ? 0 : INT64_MAX;
    }
    expect_ok(&f, op, "size-1 dim with stride 0 / INT64_MAX");
    fx_free(&f);
    /* Zero strides on inputs broadcast. */
    fx_init(&f);
    f.x[S_Z].strides[3] = 0;
    f.x[S_O].strides[1] = 0;
    f.x[S_DOUT].strides[0] = 0;
    expect_ok(&f, op, "broadcast inputs (zero strides)");
    fx_free(&f);
    /* Pinned host memory runs on the CPU. */
    fx_init(&f);
    for (int i = 0; i < 5; i++) f.x[i].t.device.device_type = kDLCUDAHost;
    expect_ok(&f, op, "kDLCUDAHost tensors");
    fx_free(&f);
    /* Inputs may alias each other. */
    fx_init(&f);
    share(&f, S_O, S_Z, 0);
    if (bwd) share(&f, S_DOUT, S_Z, 0);
    expect_ok(&f, op, "inputs sharing memory");
    fx_free(&f);
    /* Mixed dtypes. */
    fx_init(&f);
    f.x[S_Z].t.dtype = zt_bf16;
    f.x[S_O].t.dtype = zt_f16;
    f.x[S_DZ].t.dtype = zt_bf16;
    for (int i = 0; i < 3; i++) zt_fill(&f.x[i].t, &g_rng, i == S_Z ? zt_rand_z : zt_rand_mag);
    expect_ok(&f, op, "mixed dtypes");
    fx_free(&f);
    if (!bwd) continue;
    /* In place: the same DLTensor, an equal copy, NULL vs spelled-out compact strides,
     * and the same address reached through data + byte_offset differently split. */
    fx_init(&f);
    f.arg[S_DOS] = f.arg[S_DOUT];
    expect_ok(&f, op, "in place, same DLTensor");
    fx_free(&f);
    fx_init(&f);
    share(&f, S_DOS, S_DOUT, 0);
    f.x[S_DOUT].t.strides = NULL;
    expect_ok(&f, op, "in place, NULL vs explicit compact strides");
    fx_free(&f);
    fx_init(&f);
    f.x[S_DOS].t.data = f.b[S_DOUT]->mem;
    f.x[S_DOS].t.byte_offset = GUARD;
    expect_ok(&f, op, "in place, same address via byte_offset");
    fx_free(&f);
  }
  finish();
}

/* ---- any rank: the elementwise contract -------------------------------------------------
 * Ranks 0 .. ZGATE_MAX_NDIM with odd sizes (size 0 too), every tensor in its own layout
 * (compact, strides spelled out, a permutation of the dims, padded rows, a strided inner
 * dim), random dtypes, in place sometimes, on every CPU path this machine runs and on the
 * float64 reference entry points; each element against zgate_check's policy, outputs
 * poisoned beforehand, guard bytes around every tensor untouched. */

#define ND_GUARD 64

typedef struct nd_tensor {
  DLTensor t;
  int64_t shape[ZGATE_MAX_NDIM], strides[ZGATE_MAX_NDIM];
  unsigned char *mem; /* ND_GUARD, the span, ND_GUARD */
  size_t span;
} nd_tensor;

static int64_t nd_numel(int nd, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < nd; d++) n *= shape[d];
  return n;
}

/* Strides for `layout`: 0 NULL (compact), 1 compact spelled out, 2 compact over a random
 * permutation of the dims (a transposed view of dense memory; `perm` shared by the caller
 * when the tensors should agree), 3 every dim padded, 4 inner stride 2. */
static void nd_layout(int nd, const int64_t *shape, int layout, const int *perm, int64_t *st) {
  int64_t acc = 1;
  for (int k = nd - 1; k >= 0; k--) {
    const int d = layout == 2 ? perm[k] : k;
    st[d] = layout == 4 && k == nd - 1 ? 2 : acc;
    acc = st[d] * (shape[d] > 0 ? shape[d] : 1) + (layout == 3 ? 3 : 0);
  }
}

static void nd_init(nd_tensor *x, DLDataType dt, int nd, const int64_t *shape, int layout,
                    const int *perm) {
  memset(x, 0, sizeof *x);
  memcpy(x->shape, shape, (size_t)nd * sizeof shape[0]);
  nd_layout(nd, shape, layout, perm, x->strides);
  int64_t last = 0;
  for (int d = 0; d < nd; d++) last += (shape[d] - 1) * x->strides[d];
  const int64_t n = nd_numel(nd, shape);
  x->span = n > 0 ? (size_t)(last + 1) * (dt.bits / 8) : 0;
  x->mem = malloc(x->span + 2 * ND_GUARD);
  assert_non_null(x->mem);
  memset(x->mem, ZT_POISON, x->span + 2 * ND_GUARD);
  x->t.data = x->mem + ND_GUARD;
  x->t.device.device_type = kDLCPU;
  x->t.ndim = nd;
  x->t.dtype = dt;
  x->t.shape = nd > 0 ? x->shape : NULL; /* rank 0: no shape array at all */
  x->t.strides = layout == 0 || nd == 0 ? NULL : x->strides;
}

static void *nd_at(const nd_tensor *x, const int64_t *idx) {
  int64_t off = 0;
  for (int d = 0; d < x->t.ndim; d++) off += idx[d] * x->strides[d];
  return (char *)x->t.data + off * (x->t.dtype.bits / 8);
}

static int nd_guards_intact(const nd_tensor *x) {
  for (int g = 0; g < ND_GUARD; g++)
    if (x->mem[g] != ZT_POISON || x->mem[ND_GUARD + x->span + g] != ZT_POISON) return 0;
  return 1;
}

/* One call with fresh tensors; 0 = everything as the policy says. isa NULL: the reference
 * entry point into float64 outputs. */
static int nd_case(int bwd, const char *isa, int nd, const int64_t *shape, zt_rng *r) {
  const int n_in = bwd ? 3 : 2, nt = bwd ? 5 : 3;
  const int64_t numel = nd_numel(nd, shape);
  int perm[ZGATE_MAX_NDIM], shared_perm = (int)(zt_next(r) % 2);
  nd_tensor x[5];
  for (int d = 0; d < nd; d++) perm[d] = d;
  for (int d = nd - 1; d > 0; d--) {
    int j = (int)zt_int(r, 0, d), tmp = perm[d];
    perm[d] = perm[j];
    perm[j] = tmp;
  }
  const int in_place = bwd && zt_next(r) % 4 == 0;
  for (int t = 0; t < nt; t++) {
    DLDataType dt = t >= n_in && !isa ? zt_f64 : zt_dtypes[zt_next(r) % 3];
    int layout = (int)(zt_next(r) % 5);
    if (!shared_perm && layout == 2)
      for (int d = nd - 1; d > 0; d--) {
        int j = (int)zt_int(r, 0, d), tmp = perm[d];
        perm[d] = perm[j];
        perm[j] = tmp;
      }
    if (in_place && t == 4) { /* dout_scaled is dout: same dtype and layout */
      x[4] = x[0];
      x[4].t.shape = nd > 0 ? x[4].shape : NULL;
      if (x[0].t.strides) x[4].t.strides = x[4].strides;
      continue;
    }
    if (in_place && t == 0) dt = isa ? dt : zt_f64;
    nd_init(&x[t], dt, nd, shape, layout, perm);
  }
  /* inputs: random values, and some special ones in z */
  int64_t idx[ZGATE_MAX_NDIM] = {0};
  for (int64_t i = 0; i < numel; i++) {
    for (int t = 0; t < n_in; t++) {
      double v = t == 1 ? zt_rand_z(r) : zt_rand_mag(r);
      if (t == 1 && zt_next(r) % 50 == 0) v = (double[]){0.0, -1.2785, 88.5, -104.0, 1e-40}[zt_next(r) % 5];
      zgate_check_store(x[t].t.dtype, nd_at(&x[t], idx), v);
    }
    for (int d = nd - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
  }
  double *dout0 = malloc((size_t)(numel > 0 ? numel : 1) * sizeof(double));
  assert_non_null(dout0);
  memset(idx, 0, sizeof idx);
  for (int64_t i = 0; i < numel; i++) {
    dout0[i] = zgate_check_load(x[0].t.dtype, nd_at(&x[0], idx));
    for (int d = nd - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
  }
  zgate_options o;
  zgate_options_init(&o);
  o.cpu_isa = isa;
  int rc;
  if (bwd)
    rc = isa ? zgate_bwd(&x[0].t, &x[1].t, &x[2].t, &x[3].t, &x[4].t, &o)
             : zgate_bwd_reference(&x[0].t, &x[1].t, &x[2].t, &x[3].t, &x[4].t);
  else
    rc = isa ? zgate_fwd(&x[0].t, &x[1].t, &x[2].t, &o) : zgate_fwd_reference(&x[0].t, &x[1].t, &x[2].t);
  int bad = 0;
  char what[160];
  int len = snprintf(what, sizeof what, "%s %s rank %d shape (", bwd ? "bwd" : "fwd", isa ? isa : "reference", nd);
  for (int d = 0; d < nd && len < 120; d++) len += snprintf(what + len, sizeof what - (size_t)len, "%s%lld", d ? "," : "", (long long)shape[d]);
  snprintf(what + len, sizeof what - (size_t)len, ")%s", in_place ? " in place" : "");
  if (rc != ZGATE_OK) {
    problem("%s: returned %d: %s", what, rc, zgate_last_error());
    bad = 1;
  }
  memset(idx, 0, sizeof idx);
  for (int64_t i = 0; i < numel && !bad; i++) {
    const double dout = dout0[i], z = zgate_check_load(x[1].t.dtype, nd_at(&x[1], idx));
    const double ov = zgate_check_load(x[bwd ? 2 : 0].t.dtype, nd_at(&x[bwd ? 2 : 0], idx));
    for (int t = n_in; t < nt; t++) {
      const zgate_check_quantity q = !bwd ? ZGATE_CHECK_OUT : t == 3 ? ZGATE_CHECK_DZ : ZGATE_CHECK_DOS;
      const double got = zgate_check_load(x[t].t.dtype, nd_at(&x[t], idx));
      const double ref = zgate_check_formula(q, dout, z, ov);
      if (zgate_check_element(q, x[t].t.dtype, got, ref, dout, z, ov, NULL, NULL) != ZGATE_CHECK_PASS) {
        problem("%s: output %d element %lld: got %.9g, reference %.9g (z %.9g)", what, t, (long long)i, got, ref, z);
        bad = 1;
        break;
      }
    }
    for (int d = nd - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
  }
  for (int t = 0; t < nt; t++) {
    if (in_place && t == 4) continue;
    if (!nd_guards_intact(&x[t])) {
      problem("%s: a guard byte of tensor %d changed", what, t);
      bad = 1;
    }
    free(x[t].mem);
  }
  free(dout0);
  return bad;
}

static void test_ranks(void **state) {
  (void)state;
  static const char *const isas[] = {"scalar", "avx2", "avx512", "neon", NULL};
  static const int ranks[] = {0, 1, 2, 3, 4, 5, ZGATE_MAX_NDIM};
  const int reps = zt_quick() ? 2 : 8;
  for (int k = 0; k < 5; k++) {
    if (isas[k] && !zgate_cpu_isa_available(isas[k])) continue;
    for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++)
      for (int rep = 0; rep < reps; rep++)
        for (int bwd = 0; bwd < 2; bwd++) {
          const int nd = ranks[ri];
          int64_t shape[ZGATE_MAX_NDIM];
          /* odd sizes, small enough that rank 8 stays a few thousand elements; one repeat
           * long enough for the threaded and fused loops; one with a size-0 dim */
          const int64_t top = nd >= 5 ? 3 : nd >= 3 ? 9 : 70;
          for (int d = 0; d < nd; d++) shape[d] = zt_int(&g_rng, 1, top);
          if (rep == 1 && nd >= 1 && nd <= 5) shape[nd - 1] = 4099 + (int64_t)nd * 2 * (nd < 3 ? 40 : 1);
          if (rep == 2 && nd >= 1) shape[zt_int(&g_rng, 0, nd - 1)] = 0;
          nd_case(bwd, isas[k], nd, shape, &g_rng);
        }
  }
  finish();
}

static void test_status_strings(void **state) {
  (void)state;
  const char *seen[ZGATE_ERR_INTERNAL + 1];
  for (int c = 0; c <= ZGATE_ERR_INTERNAL; c++) {
    const char *s = zgate_status_str(c);
    assert_non_null(s);
    assert_true(s[0] != '\0');
    assert_string_not_equal(s, "unknown status");
    for (int j = 0; j < c; j++) assert_string_not_equal(s, seen[j]);
    seen[c] = s;
  }
  static const int unknown[] = {-1, ZGATE_ERR_INTERNAL + 1, 1000, INT32_MIN};
  for (int j = 0; j < 4; j++) assert_string_equal(zgate_status_str(unknown[j]), "unknown status");
  /* The message clears on success. */
  fx f;
  fx_init(&f);
  f.arg[S_Z] = NULL;
  assert_int_equal(fx_call(&f, OP_BWD), ZGATE_ERR_NULL_ARGUMENT);
  assert_true(zgate_last_error()[0] != '\0');
  f.arg[S_Z] = &f.x[S_Z].t;
  assert_int_equal(fx_call(&f, OP_BWD), ZGATE_OK);
  assert_string_equal(zgate_last_error(), "");
  fx_free(&f);
  /* Options helpers. */
  zgate_options a = ZGATE_OPTIONS_INIT, b;
  memset(&b, 0x5A, sizeof b);
  zgate_options_init(&b);
  assert_int_equal(a.struct_size, b.struct_size);
  assert_int_equal(a.num_threads, b.num_threads);
  assert_null(b.cpu_isa);
  assert_null(b.cuda_stream);
  zgate_options_init(NULL);
  assert_non_null(zgate_version());
  assert_string_equal(zgate_version(), ZGATE_VERSION_STRING);
  assert_non_null(zgate_build_info());
  assert_int_equal(zgate_cpu_isa_available("scalar"), 1);
  assert_int_equal(zgate_cpu_isa_available(NULL), 0);
  assert_int_equal(zgate_cpu_isa_available("bogus"), 0);
}

int main(void) {
  g_rng.s = zt_seed("test_validation");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_null_pointers),
      cmocka_unit_test(test_ndim_and_shapes),
      cmocka_unit_test(test_dtypes),
      cmocka_unit_test(test_strides),
      cmocka_unit_test(test_aliasing),
      cmocka_unit_test(test_devices),
      cmocka_unit_test(test_overflow_and_alignment),
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_accepted),
      cmocka_unit_test(test_ranks),
      cmocka_unit_test(test_status_strings),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
