/* Test and benchmark tensors: one host allocation per tensor with guard regions on both
 * sides of the view, the strides of each layout, element access through the view, a
 * snapshot to find writes outside the view, one call of the operator on them, random numbers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <zgate_check.h>

#include "cli.h"

/* Guard elements before and after every view: a write there is a bug the check reports. */
enum { GUARD_FRONT = 16, GUARD_BACK = 64 };
/* Room to move the view by up to 63 bytes, so that it starts where the placement says. */
enum { PLACE_SLACK = 64 };

int64_t cli_numel(const int64_t shape[4]) { return shape[0] * shape[1] * shape[2] * shape[3]; }

/* The strides of tensor `which` in `layout` (its view in cases.def), its first element
 * (after the front guard), and the elements of the whole allocation. */
static int64_t layout_slots(int which, cli_layout layout, const int64_t sh[4], int64_t st[4], int64_t *offset) {
  const zgate_case_view *v = &zgate_case_views[zgate_case_layouts[layout].view[which]];
  int64_t n = zgate_case_strides(v, sh, st, offset);
  *offset += GUARD_FRONT;
  return GUARD_FRONT + n + GUARD_BACK + PLACE_SLACK;
}

double cli_buf_bytes(int which, cli_layout layout, const int64_t shape[4], DLDataType dtype) {
  int64_t strides[4], offset;
  return (double)layout_slots(which, layout, shape, strides, &offset) * (double)(dtype.bits / 8);
}

int cli_buf_make(cli_buf *b, int which, cli_layout layout, const int64_t shape[4], DLDataType dtype,
                 cli_placement placement) {
  memset(b, 0, sizeof *b);
  b->dtype = dtype;
  b->esize = dtype.bits / 8;
  memcpy(b->shape, shape, sizeof b->shape);
  b->nslots = layout_slots(which, layout, shape, b->strides, &b->offset);
  if ((double)b->nslots * (double)b->esize > 1.0e15) return -1;
  b->host = malloc((size_t)b->nslots * (size_t)b->esize);
  if (!b->host) return -1;
  /* the view's first element 16 bytes past a line or on one: whole elements either way */
  const uintptr_t want = placement == CLI_PLACE_LINE ? 0 : 16;
  const uintptr_t at = (uintptr_t)cli_buf_first(b) & 63u;
  b->offset += (int64_t)((want - at) & 63u) / b->esize;
  cli_buf_poison(b);
  return 0;
}

void cli_buf_free(cli_buf *b) {
  if (b->dev) cli_cuda_free(b->device, b->dev);
  free(b->host);
  free(b->snapshot);
  memset(b, 0, sizeof *b);
}

unsigned char *cli_buf_first(const cli_buf *b) { return b->host + b->offset * b->esize; }

DLTensor cli_buf_tensor(const cli_buf *b) {
  DLTensor t = {0};
  t.data = b->on_device ? b->dev : (void *)b->host;
  t.device.device_type = b->on_device ? kDLCUDA : kDLCPU;
  t.device.device_id = b->on_device ? b->device : 0;
  t.ndim = 4;
  t.dtype = b->dtype;
  t.shape = (int64_t *)b->shape;
  t.strides = (int64_t *)b->strides;
  t.byte_offset = (uint64_t)b->offset * (uint64_t)b->esize;
  return t;
}

static unsigned char *elem(const cli_buf *b, const int64_t idx[4]) {
  int64_t off = b->offset;
  for (int i = 0; i < 4; i++) off += idx[i] * b->strides[i];
  return b->host + off * b->esize;
}

double cli_buf_get(const cli_buf *b, const int64_t idx[4]) { return zgate_check_load(b->dtype, elem(b, idx)); }

void cli_buf_set(cli_buf *b, const int64_t idx[4], double v) { zgate_check_store(b->dtype, elem(b, idx), v); }

/* All bits set: a NaN in float32, float16 and bfloat16, so an element the kernel forgot to
 * write fails the check, and an input element read by mistake turns results into NaN. */
void cli_buf_poison(cli_buf *b) { memset(b->host, 0xff, (size_t)b->nslots * (size_t)b->esize); }

int cli_buf_take_snapshot(cli_buf *b) {
  size_t bytes = (size_t)b->nslots * (size_t)b->esize;
  if (!b->snapshot) b->snapshot = malloc(bytes ? bytes : 1);
  if (!b->snapshot) return -1;
  memcpy(b->snapshot, b->host, bytes);
  return 0;
}

int64_t cli_buf_outside_writes(const cli_buf *b) {
  unsigned char *inside = b->snapshot ? calloc((size_t)b->nslots, 1) : NULL;
  if (!inside) return -1;
  int64_t idx[4];
  for (idx[0] = 0; idx[0] < b->shape[0]; idx[0]++)
    for (idx[1] = 0; idx[1] < b->shape[1]; idx[1]++)
      for (idx[2] = 0; idx[2] < b->shape[2]; idx[2]++)
        for (idx[3] = 0; idx[3] < b->shape[3]; idx[3]++)
          inside[(elem(b, idx) - b->host) / b->esize] = 1;
  int64_t changed = 0;
  for (int64_t i = 0; i < b->nslots; i++)
    if (!inside[i] && memcmp(b->host + i * b->esize, b->snapshot + i * b->esize, (size_t)b->esize))
      changed++;
  free(inside);
  return changed;
}

int cli_call(zg_op op, cli_buf *b, cli_buf *dos, const zgate_options *opts) {
  DLTensor t[CLI_NSLOTS];
  for (int i = 0; i < cli_nargs(op); i++) {
    const int slot = cli_slot(op, i);
    t[i] = cli_buf_tensor(slot == ZG_BWD_DOS ? dos : &b[slot]);
  }
  return op == ZG_OP_FWD ? zgate_fwd(&t[0], &t[1], &t[2], opts) : zgate_bwd(&t[0], &t[1], &t[2], &t[3], &t[4], opts);
}

static uint64_t rng_next(cli_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double cli_rng_uniform(cli_rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53; }

double cli_rng_normal(cli_rng *r) {
  double u = cli_rng_uniform(r), v = cli_rng_uniform(r);
  return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}
