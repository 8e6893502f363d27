/* Values in the buffers, output poison, and the checks after a successful call.
 *
 * Poison is a signalling NaN of the output's dtype: arithmetic never produces one (it
 * quiets NaNs), so an output element still holding it was not written. Every written
 * element is judged by the accuracy policy of check/zgate_check.h against the float64
 * formula on the values the call read, special values included. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz_case.h"
#include "zgate_check.h"

static uint64_t poison_bits(fz_dt dt) {
  switch (dt) {
    case FZ_DT_F32: return 0x7FA5A5A5u;
    case FZ_DT_F16: return 0x7DA5u;
    case FZ_DT_BF16: return 0x7FA5u;
    default: return 0x7FF4A5A5A5A5A5A5ull;
  }
}

static int is_poison(const unsigned char *p, fz_dt dt) {
  uint64_t v = 0, want = poison_bits(dt);
  memcpy(&v, p, (size_t)fz_elsize(dt)); /* little-endian hosts */
  return v == want;
}

static const DLDataType dl_types[] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1},
                                       {kDLFloat, 64, 1}};

static double load(const unsigned char *p, fz_dt dt) { return zgate_check_load(dl_types[dt], p); }

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Mostly moderate values in any dtype at any offset: the high byte of each 16-bit word is
 * a sign plus an exponent byte around 1.0 (0x3C..0x42 reads as 2^-7..2^5 in f32/bf16 and
 * 1..8 in f16); one word in 16 is fully random, which brings inf, NaN and subnormals. */
FZ_NO_COVERAGE static void fill(unsigned char *b, int64_t n, uint64_t *s) {
  for (int64_t i = 0; i < n; i++) {
    uint64_t r = next(s);
    if ((i & 1) && (r & 15) != 0)
      b[i] = (unsigned char)((((r >> 4) & 1) << 7) | (0x3C + (r >> 5) % 7));
    else
      b[i] = (unsigned char)(r >> 16);
  }
}

FZ_NO_COVERAGE void fz_fill_and_poison(fz_case *c) {
  uint64_t s = c->seed | 1;
  for (int k = 0; k < c->n_buf; k++) fill(c->buf[k], c->buf_size[k], &s);
  for (int o = c->n_in; o < c->n_t; o++) {
    const fz_tensor *t = &c->t[o];
    const fz_info *in = &c->info[o];
    const int nd = t->dl.ndim;
    if (!t->present || t->buf < 0 || !in->shape_ok || in->dt == FZ_DT_OTHER) continue;
    if (in->numel == 0 || in->numel > FZ_CAP || in->end > c->buf_size[t->buf]) continue;
    if (o == 4 && c->inplace_sem) continue; /* dos is dout: keep dout's values */
    int neg = 0;
    for (int d = 0; d < nd; d++) neg |= in->stride[d] < 0;
    if (neg) continue;
    uint64_t pb = poison_bits(in->dt);
    int64_t idx[ZGATE_MAX_NDIM];
    const int64_t *n = t->dl.shape;
    for (int more = fz_index_first(nd, n, idx); more; more = fz_index_next(nd, n, idx))
      memcpy(c->buf[t->buf] + fz_elem_off(in, nd, idx), &pb, (size_t)in->elsize);
  }
}

static void print_index(int nd, const int64_t *idx) {
  fprintf(stderr, "(");
  for (int d = 0; d < nd; d++) fprintf(stderr, "%s%lld", d ? "," : "", (long long)idx[d]);
  fprintf(stderr, ")");
}

FZ_NO_COVERAGE const char *fz_check_success(const fz_case *c,
                                            unsigned char *const snap[FZ_MAX_BUF]) {
  const char *bad = NULL;
  const int bwd = c->n_t == 5, nd = c->ndim;
  uint8_t *cover[FZ_MAX_BUF] = {0};
  for (int k = 0; k < c->n_buf; k++) cover[k] = calloc(1, (size_t)c->buf_size[k] + 1);
  int64_t idx[ZGATE_MAX_NDIM];
  const int64_t *n = c->shape;
  for (int more = fz_index_first(nd, n, idx); more; more = fz_index_next(nd, n, idx)) {
    double in[3];
    for (int i = 0; i < c->n_in; i++) {
      const fz_info *fi = &c->info[i];
      in[i] = load(snap[c->t[i].buf] + fz_elem_off(fi, nd, idx), fi->dt);
    }
    /* bwd inputs (dout, z, o); fwd inputs (o, z) */
    double dout = bwd ? in[0] : 0, z = in[1], o = bwd ? in[2] : in[0];
    for (int out = c->n_in; out < c->n_t; out++) {
      const fz_info *fi = &c->info[out];
      int64_t off = fz_elem_off(fi, nd, idx);
      unsigned char *p = c->buf[c->t[out].buf] + off;
      memset(cover[c->t[out].buf] + off, 1, (size_t)fi->elsize);
      const char *why = NULL;
      if (!(out == 4 && c->inplace_sem) && is_poison(p, fi->dt))
        why = "an output element was not written (still poisoned)";
      zgate_check_quantity q = !bwd ? ZGATE_CHECK_OUT : out == 3 ? ZGATE_CHECK_DZ : ZGATE_CHECK_DOS;
      double got = load(p, fi->dt), ref = zgate_check_formula(q, dout, z, o);
      if (!why && zgate_check_element(q, dl_types[fi->dt], got, ref, dout, z, o, NULL, NULL))
        why = "an output element is outside zgate_check's bound of the float64 formula";
      if (why && !bad) {
        bad = why;
        fprintf(stderr, "element ");
        print_index(nd, idx);
        fprintf(stderr, " of t%d: got %.17g, float64 formula %.17g, inputs dout %.9g z %.9g"
                " o %.9g\n", out, got, ref, dout, z, o);
      }
    }
  }
  for (int k = 0; k < c->n_buf && !bad; k++)
    for (int64_t i = 0; i < c->buf_size[k]; i++)
      if (!cover[k][i] && c->buf[k][i] != snap[k][i]) {
        fprintf(stderr, "buffer %d byte %lld changed (%#x -> %#x)\n", k, (long long)i,
                snap[k][i], c->buf[k][i]);
        bad = "a byte outside every output element changed";
        break;
      }
  for (int k = 0; k < c->n_buf; k++) free(cover[k]);
  return bad;
}
