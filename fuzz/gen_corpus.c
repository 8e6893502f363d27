/* Writes the seed corpus (fuzz/corpus/) in the input layout of fz_case.h: one small file
 * per situation the fuzzer should start from: valid calls in every layout and dtype mix,
 * in place, and each class of bad input. Regenerate with
 *   build/<dir>/fuzz/zgate_fuzz_gen_corpus fuzz/corpus
 * (the files are deterministic; the fuzzer's own finds are not kept in the repository). */
#include <stdio.h>
#include <string.h>

#include "fz_case.h"

typedef struct seed {
  uint8_t b[FZ_HDR_BYTES + FZ_MAX_T * FZ_REC_BYTES + FZ_MAX_BUF + 12];
  int n_t;
} seed;

static int g_count;
static const char *g_dir;

/* Byte for a small size v (fz_size: dims 0..2 take 1..4, dim 3 takes 1..40). */
static uint8_t sz(int v) { return (uint8_t)(v - 1); }
/* Byte for entry k of fz_size's table (0: size 0, 20: -1, 23: INT64_MAX, 28: 2^40, 29: 2^62). */
static uint8_t sz_tab(int k) { return (uint8_t)(224 + k); }

static uint8_t *rec(seed *s, int ti) { return s->b + FZ_HDR_BYTES + ti * FZ_REC_BYTES; }

static void start(seed *s, fz_op op, int nbuf, uint8_t d0, uint8_t d1, uint8_t d2, uint8_t d3) {
  memset(s, 0, sizeof *s);
  s->n_t = op == FZ_BWD || op == FZ_BWD_REF ? 5 : 3;
  s->b[FZ_H_OP] = (uint8_t)op;
  s->b[FZ_H_NBUF] = (uint8_t)(nbuf - 1);
  s->b[FZ_H_SHAPE0] = d0;
  s->b[FZ_H_SHAPE0 + 1] = d1;
  s->b[FZ_H_SHAPE0 + 2] = d2;
  s->b[FZ_H_SHAPE0 + 3] = d3;
  /* outputs in buffers of their own where there are enough (z and o may share one) */
  static const int bwd4[5] = {0, 1, 1, 2, 3};
  for (int ti = 0; ti < s->n_t; ti++)
    rec(s, ti)[FZ_R_PLACE] = (uint8_t)(s->n_t == 5 && nbuf == 4 ? bwd4[ti] : ti % nbuf);
}

/* dtype choice 0 f32, 1 f16, 2 bf16, 3 f64 (reference ops only). */
static void dtypes(seed *s, const char *codes) {
  for (int ti = 0; ti < s->n_t && codes[ti]; ti++) rec(s, ti)[FZ_R_DTYPE] = (uint8_t)(codes[ti] - '0');
}

static void emit(seed *s, const char *name) {
  uint8_t *tail = rec(s, s->n_t);
  uint64_t v = 0x9e3779b97f4a7c15ull * (uint64_t)(g_count + 1);
  for (int k = 0; k < 8; k++) tail[FZ_MAX_BUF + k] = (uint8_t)(v >> (8 * k));
  size_t n = (size_t)(tail + FZ_MAX_BUF + 12 - s->b);
  char path[1024];
  snprintf(path, sizeof path, "%s/%02d-%s", g_dir, g_count++, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(s->b, 1, n, f) != n) { perror(path); return; }
  fclose(f);
}

int main(int argc, char **argv) {
  if (argc != 2) { fprintf(stderr, "usage: %s OUTDIR\n", argv[0]); return 2; }
  g_dir = argv[1];
  seed s;

  /* ---- valid calls ---- */
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(17)); emit(&s, "bwd-f32-dense");
  start(&s, FZ_BWD, 4, sz(1), sz(2), sz(3), sz(40)); dtypes(&s, "22222"); emit(&s, "bwd-bf16-dense");
  start(&s, FZ_BWD, 4, sz(2), sz(1), sz(2), sz(33)); dtypes(&s, "11111"); emit(&s, "bwd-f16-dense");
  start(&s, FZ_BWD, 4, sz(1), sz(4), sz(2), sz(9)); dtypes(&s, "21012"); emit(&s, "bwd-mixed-dtypes");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(16));
  rec(&s, 1)[FZ_R_STRIDES] = FZ_L_PROJ; rec(&s, 1)[FZ_R_SP1] = 13; emit(&s, "bwd-z-proj-view");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  for (int ti = 0; ti < 5; ti++) { rec(&s, ti)[FZ_R_STRIDES] = FZ_L_PERMUTED; rec(&s, ti)[FZ_R_SP1] = (uint8_t)(5 * ti + 3); }
  emit(&s, "bwd-permuted");
  start(&s, FZ_BWD, 4, sz(3), sz(2), sz(2), sz(5));
  for (int ti = 0; ti < 5; ti++) { rec(&s, ti)[FZ_R_STRIDES] = FZ_L_PADDED; rec(&s, ti)[FZ_R_SP1] = (uint8_t)(0x5a + ti); }
  emit(&s, "bwd-padded");
  start(&s, FZ_BWD, 4, sz(2), sz(2), sz(2), sz(7));
  rec(&s, 1)[FZ_R_STRIDES] = FZ_L_BROADCAST; rec(&s, 1)[FZ_R_SP1] = 0x7; emit(&s, "bwd-z-broadcast");
  start(&s, FZ_BWD, 1, sz(1), sz(2), sz(2), sz(3));
  rec(&s, 0)[FZ_R_DOFF] = 0; rec(&s, 1)[FZ_R_DOFF] = 0; rec(&s, 2)[FZ_R_DOFF] = 4; /* inputs share memory */
  rec(&s, 3)[FZ_R_DOFF] = 16; rec(&s, 4)[FZ_R_DOFF] = 28; /* outputs after them */
  emit(&s, "bwd-one-buffer-inputs-overlap");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(1), sz(12));
  rec(&s, 4)[FZ_R_PLACE] = 208; /* clone of tensor 0: in place */
  emit(&s, "bwd-inplace");
  rec(&s, 4)[FZ_R_DOFF] = 16; emit(&s, "bwd-inplace-same-pointer");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(1), sz(12)); dtypes(&s, "21122");
  rec(&s, 0)[FZ_R_STRIDES] = FZ_L_PADDED; rec(&s, 0)[FZ_R_SP1] = 0x33;
  rec(&s, 4)[FZ_R_PLACE] = 208; rec(&s, 4)[FZ_R_DOFF] = 1; /* in place, own arrays */
  emit(&s, "bwd-inplace-bf16-padded");
  start(&s, FZ_BWD, 4, sz_tab(0), sz(3), sz(2), sz(8));
  for (int ti = 0; ti < 5; ti++) rec(&s, ti)[FZ_R_PLACE] = 240; /* NULL data */
  emit(&s, "bwd-size0-null-data");
  start(&s, FZ_BWD, 4, sz(1), sz(1), sz(1), sz(1)); emit(&s, "bwd-one-element");
  start(&s, FZ_BWD, 4, sz(2), sz(2), sz(2), sz(24));
  s.b[FZ_H_OPTS] = 3 | (1 << 3); emit(&s, "bwd-opts-2threads-scalar");
  s.b[FZ_H_OPTS] = 2 | (2 << 3); emit(&s, "bwd-opts-avx2");
  s.b[FZ_H_OPTS] = 2 | (3 << 3); emit(&s, "bwd-opts-avx512");
  start(&s, FZ_FWD, 3, sz(2), sz(3), sz(2), sz(17)); emit(&s, "fwd-f32-dense");
  start(&s, FZ_FWD, 3, sz(1), sz(3), sz(4), sz(40)); dtypes(&s, "121");
  rec(&s, 1)[FZ_R_STRIDES] = FZ_L_PROJ; rec(&s, 1)[FZ_R_SP1] = 7; emit(&s, "fwd-mixed-proj");
  start(&s, FZ_BWD_REF, 4, sz(2), sz(2), sz(2), sz(5)); dtypes(&s, "33333"); emit(&s, "bwdref-f64");
  start(&s, FZ_FWD_REF, 3, sz(2), sz(2), sz(2), sz(5)); dtypes(&s, "302"); emit(&s, "fwdref-mixed");
  start(&s, FZ_BWD, 2, sz(1), sz(2), sz(2), sz(3));
  for (int ti = 0; ti < 3; ti++) rec(&s, ti)[FZ_R_PLACE] = 0; /* inputs: one buffer */
  rec(&s, 3)[FZ_R_PLACE] = 1; rec(&s, 4)[FZ_R_PLACE] = 1; /* dz, dos one buffer */
  /* strides (0, 12, 6, 2): even elements for dz, odd ones (byte_offset 4) for dos */
  rec(&s, 3)[FZ_R_STRIDES] = FZ_L_RANDOM; rec(&s, 3)[FZ_R_SP1] = 0xC0; rec(&s, 3)[FZ_R_SP2] = 0x26;
  rec(&s, 4)[FZ_R_STRIDES] = FZ_L_RANDOM; rec(&s, 4)[FZ_R_SP1] = 0xC0; rec(&s, 4)[FZ_R_SP2] = 0x26;
  rec(&s, 4)[FZ_R_BOFF] = 1; /* 4 bytes later: interleaved */
  emit(&s, "bwd-outputs-interleaved");

  /* ---- bad input ---- */
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  rec(&s, 3)[FZ_R_PLACE] = 208; emit(&s, "bad-dz-is-dout");
  rec(&s, 3)[FZ_R_DOFF] = 16; rec(&s, 4)[FZ_R_PLACE] = 211; rec(&s, 4)[FZ_R_DOFF] = 16;
  emit(&s, "bad-dz-dos-same-pointer");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8)); dtypes(&s, "00002");
  rec(&s, 4)[FZ_R_PLACE] = 208; rec(&s, 4)[FZ_R_DOFF] = 2; emit(&s, "bad-inplace-dtype");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  rec(&s, 4)[FZ_R_PLACE] = 208; rec(&s, 4)[FZ_R_DOFF] = 8; rec(&s, 4)[FZ_R_BOFF] = 4;
  emit(&s, "bad-inplace-shifted");
  start(&s, FZ_FWD, 3, sz(2), sz(3), sz(2), sz(8));
  rec(&s, 2)[FZ_R_PLACE] = 209; emit(&s, "bad-fwd-out-is-z");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  rec(&s, 3)[FZ_R_STRIDES] = FZ_L_BROADCAST; rec(&s, 3)[FZ_R_SP1] = 0x2; emit(&s, "bad-output-zero-stride");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  rec(&s, 1)[FZ_R_STRIDES] = 224 + FZ_L_COMPACT; rec(&s, 1)[FZ_R_SP2] = 0 << 2 | 3; emit(&s, "bad-negative-stride");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  rec(&s, 2)[FZ_R_STRIDES] = 224 + FZ_L_COMPACT; rec(&s, 2)[FZ_R_SP2] = 7 << 2 | 1; emit(&s, "bad-stride-2p62");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  rec(&s, 2)[FZ_R_STRIDES] = 224 + FZ_L_COMPACT; rec(&s, 2)[FZ_R_SP2] = 3 << 2 | 0; emit(&s, "bad-stride-int64max");
  start(&s, FZ_BWD, 4, sz(2), sz_tab(20), sz(2), sz(8)); emit(&s, "bad-negative-size");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  rec(&s, 2)[FZ_R_SHAPE] = 224 + 3; rec(&s, 2)[FZ_R_SHAPEV] = sz(9); emit(&s, "bad-shape-mismatch");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  rec(&s, 1)[FZ_R_NDIM] = 224 + 3; emit(&s, "bad-ndim3");
  rec(&s, 1)[FZ_R_NDIM] = 224 + 0; emit(&s, "bad-ndim0");
  rec(&s, 1)[FZ_R_NDIM] = 224 + 5; emit(&s, "bad-ndim8");
  rec(&s, 1)[FZ_R_NDIM] = 224 + 7; emit(&s, "bad-ndim-int-min");
  rec(&s, 1)[FZ_R_NDIM] = 0; rec(&s, 1)[FZ_R_SHAPE] = 255; emit(&s, "bad-shape-null");
  rec(&s, 1)[FZ_R_SHAPE] = 0; rec(&s, 3)[FZ_R_NDIM] = 255; emit(&s, "bad-null-tensor");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  rec(&s, 0)[FZ_R_PLACE] = 240; emit(&s, "bad-null-data");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  rec(&s, 2)[FZ_R_DTYPE] = 208; rec(&s, 2)[FZ_R_DTYPE2] = 0 | 2 << 3; emit(&s, "bad-dtype-int32");
  rec(&s, 2)[FZ_R_DTYPE2] = 2 | 2 << 3 | 1 << 6; emit(&s, "bad-lanes2");
  rec(&s, 2)[FZ_R_DTYPE2] = 2 | 3 << 3; emit(&s, "bad-f64-outside-reference");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  for (int ti = 0; ti < 5; ti++) rec(&s, ti)[FZ_R_DEVICE] = 224 + 1;
  emit(&s, "bad-cuda-not-built");
  rec(&s, 2)[FZ_R_DEVICE] = 0; emit(&s, "bad-mixed-devices");
  for (int ti = 0; ti < 5; ti++) rec(&s, ti)[FZ_R_DEVICE] = 224 + 4;
  emit(&s, "bad-opencl");
  for (int ti = 0; ti < 5; ti++) rec(&s, ti)[FZ_R_DEVICE] = 224 + 3;
  emit(&s, "odd-cuda-host");
  start(&s, FZ_BWD, 4, sz(2), sz(3), sz(2), sz(8));
  rec(&s, 3)[FZ_R_BOFF] = 192 + 0; emit(&s, "bad-misaligned");
  rec(&s, 3)[FZ_R_BOFF] = 192 + 8; emit(&s, "bad-byte-offset-2p63");
  rec(&s, 3)[FZ_R_BOFF] = 192 + 6; emit(&s, "huge-byte-offset-2p62");
  start(&s, FZ_BWD, 4, sz(1), sz(1), sz(1), sz_tab(28)); emit(&s, "huge-headdim-2p40");
  /* the same with each kind of defect fz_analyze can add, on different tensors */
  for (int k = 1; k < 12; k++) {
    char name[64];
    s.b[FZ_H_INJECT] = (uint8_t)(k | (k % 5) << 4);
    snprintf(name, sizeof name, "huge-headdim-defect%d", k);
    emit(&s, name);
  }
  start(&s, FZ_FWD, 3, sz(3), sz(4), sz(4), sz(40));
  rec(&s, 1)[FZ_R_STRIDES] = 224 + FZ_L_COMPACT; rec(&s, 1)[FZ_R_SP2] = 6 << 2 | 0;
  emit(&s, "huge-stride-2p40");
  start(&s, FZ_BWD, 4, sz_tab(29), sz_tab(29), sz(1), sz(1)); emit(&s, "bad-numel-overflow");
  start(&s, FZ_BWD, 4, sz_tab(29), sz_tab(29), sz_tab(0), sz(1)); emit(&s, "size0-huge-dims");
  start(&s, FZ_FWD, 3, sz(2), sz(3), sz(2), sz(8));
  s.b[FZ_H_OPTS] = 4; emit(&s, "bad-opts-threads-negative");
  s.b[FZ_H_OPTS] = 5 << 3; emit(&s, "bad-opts-isa-bogus");
  s.b[FZ_H_OPTS] = 1; s.b[FZ_H_OPTS2] = 3; emit(&s, "odd-opts-struct-size-0");
  s.b[FZ_H_OPTS2] = 2; emit(&s, "opts-struct-size-old");
  printf("wrote %d seeds to %s\n", g_count, g_dir);
  return 0;
}
