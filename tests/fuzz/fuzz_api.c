/* libFuzzer target: random DLTensor descriptions for zgate_bwd / zgate_fwd and their
 * float64 references, over small real heap buffers (fz_case.h says how the input decodes).
 *
 * The harness asserts the contract on every call:
 *   - a status in range, a name for it, and zgate_last_error() "" after success and a
 *     message after failure;
 *   - a call the contract refuses (fz_analyze.c: "definite") is refused, and a clean one
 *     succeeds (calls zgate may conservatively refuse are "odd": either answer); a refusal
 *     carries the status of one of the reasons found (docs/reliability.md's table);
 *   - on failure every byte of every buffer is unchanged;
 *   - on success every output element was written with a value near the float64 formula
 *     and every other byte is unchanged;
 *   - ASan/UBSan see every touched byte: buffers end at the last element, shape and stride
 *     arrays are exactly ndim long (at most ZGATE_MAX_NDIM + 1 for a larger ndim).
 * A violation prints the case and aborts, which libFuzzer records as a crash. */
#define _POSIX_C_SOURCE 200809L /* posix_memalign, strnlen */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz_case.h"

static void fail(const fz_case *c, int status, const char *what) {
  fprintf(stderr, "zgate fuzz: CONTRACT VIOLATION: %s\n", what);
  fz_dump(c, status);
  abort();
}

static int call(const fz_case *c) {
  const DLTensor *t[FZ_MAX_T] = {0};
  for (int i = 0; i < c->n_t; i++) {
    const fz_tensor *ft = &c->t[i];
    t[i] = !ft->present ? NULL : ft->same_ptr ? &c->t[ft->clone_of].dl : &ft->dl;
  }
  const zgate_options *opts = c->opts_null ? NULL : (const zgate_options *)(const void *)c->opts_mem;
  switch (c->op) {
    case FZ_BWD: return zgate_bwd(t[0], t[1], t[2], (DLTensor *)t[3], (DLTensor *)t[4], opts);
    case FZ_FWD: return zgate_fwd(t[0], t[1], (DLTensor *)t[2], opts);
    case FZ_BWD_REF: return zgate_bwd_reference(t[0], t[1], t[2], (DLTensor *)t[3], (DLTensor *)t[4]);
    default: return zgate_fwd_reference(t[0], t[1], (DLTensor *)t[2]);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_case c;
  fz_decode(&c, data, size);
  fz_analyze(&c);
  fz_fill_and_poison(&c);
  unsigned char *snap[FZ_MAX_BUF] = {0};
  for (int k = 0; k < c.n_buf; k++) {
    snap[k] = malloc((size_t)c.buf_size[k] + 1);
    memcpy(snap[k], c.buf[k], (size_t)c.buf_size[k]);
  }

  int st = call(&c);

  static int verbose = -1; /* ZGATE_FUZZ_VERBOSE=1: describe every case (corpus review) */
  if (verbose < 0) verbose = getenv("ZGATE_FUZZ_VERBOSE") != NULL;
  if (verbose) fz_dump(&c, st);

  const char *name = zgate_status_str(st);
  const char *msg = zgate_last_error();
  if (st < 0 || st > ZGATE_ERR_INTERNAL) fail(&c, st, "status out of range");
  if (!name || !*name) fail(&c, st, "zgate_status_str gave no name");
  if (!msg) fail(&c, st, "zgate_last_error() is NULL");
  if (strnlen(msg, 4096) == 4096) fail(&c, st, "zgate_last_error() is not a short string");
  if (st == ZGATE_OK) {
    if (*msg) fail(&c, st, "success, but zgate_last_error() is not empty");
    if (c.definite) fail(&c, st, "accepted a call that the contract says must be refused");
    const char *why = fz_check_success(&c, snap);
    if (why) fail(&c, st, why);
  } else {
    if (!*msg) fail(&c, st, "failure without a message");
    if (st == ZGATE_ERR_INTERNAL) fail(&c, st, "ZGATE_ERR_INTERNAL");
    if (st == ZGATE_ERR_CUDA && !zgate_cuda_built()) fail(&c, st, "ZGATE_ERR_CUDA without CUDA");
    if (!c.definite && !c.odd) fail(&c, st, "refused a call that the contract accepts");
    if (!(c.statuses & (1u << st))) fail(&c, st, "refused with a status that no reason found has");
    for (int k = 0; k < c.n_buf; k++)
      if (memcmp(snap[k], c.buf[k], (size_t)c.buf_size[k]) != 0)
        fail(&c, st, "a buffer changed although the call failed");
  }
  const char *probe = zgate_status_str(c.status_probe);
  if (!probe || !*probe) fail(&c, st, "zgate_status_str(any int) must name it");

  for (int k = 0; k < c.n_buf; k++) free(snap[k]);
  fz_free(&c);
  return 0;
}
