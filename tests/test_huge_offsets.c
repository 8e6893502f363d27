/* Element offsets past 2^31 and 2^32 (and byte offsets past 2^34) without tens of GB:
 * each tensor lives in its own 17 GiB reservation of address space (PROT_NONE,
 * MAP_NORESERVE); only the pages its elements cover are made readable and writable, and
 * poisoned. A 32-bit offset anywhere lands on an inaccessible page (a crash, which ctest
 * reports) or on the wrong element (the oracle sees it). Bytes around the elements on the
 * exposed pages must stay untouched. Skips visibly where the reservation is refused. */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "zt.h"

#define REGION_BYTES ((size_t)17 << 30)
#define MAX_PAGES 512

typedef struct region {
  unsigned char *base;
  size_t pages[MAX_PAGES]; /* exposed page offsets */
  int npages;
  unsigned char *snap;
} region;

static size_t g_page;
static const char *g_isa;
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

static int region_reserve(region *r) {
  memset(r, 0, sizeof *r);
  void *p = mmap(NULL, REGION_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return -1;
  r->base = p;
  return 0;
}

static void region_release(region *r) {
  if (r->base) munmap(r->base, REGION_BYTES);
  free(r->snap);
  memset(r, 0, sizeof *r);
}

static void expose_page(region *r, size_t off) {
  size_t pg = off / g_page * g_page;
  for (int i = 0; i < r->npages; i++)
    if (r->pages[i] == pg) return;
  if (r->npages == MAX_PAGES || pg + g_page > REGION_BYTES) {
    problem("test setup: page budget exceeded");
    return;
  }
  if (mprotect(r->base + pg, g_page, PROT_READ | PROT_WRITE) != 0) {
    problem("test setup: mprotect failed");
    return;
  }
  memset(r->base + pg, ZT_POISON, g_page);
  r->pages[r->npages++] = pg;
}

/* Make every element of t (which points into r) accessible. */
static void expose_tensor(region *r, const DLTensor *t) {
  int size = zgate_check_dtype_size(t->dtype);
  int64_t idx[4];
  for (idx[0] = 0; idx[0] < t->shape[0]; idx[0]++)
    for (idx[1] = 0; idx[1] < t->shape[1]; idx[1]++)
      for (idx[2] = 0; idx[2] < t->shape[2]; idx[2]++)
        for (idx[3] = 0; idx[3] < t->shape[3]; idx[3]++) {
          size_t off = (size_t)((unsigned char *)zt_elem(t, idx) - r->base);
          expose_page(r, off);
          expose_page(r, off + (size_t)size - 1);
        }
}

static void region_snapshot(region *r) {
  free(r->snap);
  r->snap = malloc((size_t)r->npages * g_page + 1);
  for (int i = 0; i < r->npages; i++) memcpy(r->snap + (size_t)i * g_page, r->base + r->pages[i], g_page);
}

/* Bytes on exposed pages that changed, outside the elements of `out` (may be NULL). */
static int64_t region_changed_outside(const region *r, const DLTensor *out) {
  int64_t changed = 0;
  for (int i = 0; i < r->npages; i++) {
    unsigned char *pg = r->base + r->pages[i], *snap = r->snap + (size_t)i * g_page;
    unsigned char *mask = calloc(g_page, 1);
    if (out) {
      int size = zgate_check_dtype_size(out->dtype);
      int64_t idx[4];
      for (idx[0] = 0; idx[0] < out->shape[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < out->shape[1]; idx[1]++)
          for (idx[2] = 0; idx[2] < out->shape[2]; idx[2]++)
            for (idx[3] = 0; idx[3] < out->shape[3]; idx[3]++) {
              unsigned char *e = zt_elem(out, idx);
              for (int b = 0; b < size; b++)
                if (e + b >= pg && e + b < pg + g_page) mask[e + b - pg] = 1;
            }
    }
    for (size_t b = 0; b < g_page; b++)
      if (!mask[b] && pg[b] != snap[b]) changed++;
    free(mask);
  }
  return changed;
}

typedef struct huge_case {
  const char *name;
  int64_t shape[4];
  int64_t strides[4];    /* the same for every tensor */
  uint64_t byte_offset;  /* data = region start, this in byte_offset */
  DLDataType dt[5];      /* dout z o dz dout_scaled */
  int inplace;
} huge_case;

static void run_huge(const huge_case *c, region rg[5]) {
  zt_tensor x[5];
  const char *names[5] = {"dout", "z", "o", "dz", "dout_scaled"};
  for (int i = 0; i < 5; i++) {
    int src = c->inplace && i == 4 ? 0 : i;
    zt_buf fake = {rg[src].base, REGION_BYTES, NULL};
    zt_tensor_init(&x[i], c->dt[c->inplace && i == 4 ? 0 : i], c->shape, c->strides, &fake,
                   (size_t)c->byte_offset, 1, 0);
    x[i].buf = NULL;
    if (!(c->inplace && i == 4)) expose_tensor(&rg[i], &x[i].t);
  }
  /* The largest element offset, to show what the case reaches. */
  int64_t maxoff = 0;
  for (int d = 0; d < 4; d++) maxoff += (c->shape[d] - 1) * c->strides[d];
  printf("%s: shape %s, largest element offset %lld (2^31 = 2147483648), byte_offset %llu\n",
         c->name, zt_shape_str(c->shape), (long long)maxoff, (unsigned long long)c->byte_offset);
  for (int i = 0; i < 3; i++) zt_fill(&x[i].t, &g_rng, i == 1 ? zt_rand_z : zt_rand_mag);

  zt_tensor dout_copy;
  zt_copy_compact(&dout_copy, &x[0].t);
  for (int i = 0; i < 5; i++) region_snapshot(&rg[i]);

  zgate_options opts;
  zgate_options_init(&opts);
  opts.cpu_isa = g_isa;
  opts.num_threads = 2;
  int rc = zgate_bwd(&x[0].t, &x[1].t, &x[2].t, &x[3].t, &x[4].t, &opts);
  if (rc != ZGATE_OK) {
    problem("%s: zgate_bwd returned %d: %s", c->name, rc, zgate_last_error());
  } else {
    zgate_check_stats a, b;
    zgate_check_stats_init(&a);
    zgate_check_stats_init(&b);
    rc = zgate_check_bwd(&dout_copy.t, &x[1].t, &x[2].t, &x[3].t, &x[4].t, &a, &b);
    if (rc || a.failures || b.failures) {
      char la[256], lb[256];
      zgate_check_stats_format(&a, la, sizeof la);
      zgate_check_stats_format(&b, lb, sizeof lb);
      problem("%s: bwd check %d; dz %s; dout_scaled %s", c->name, rc, la, lb);
    }
    for (int i = 0; i < 5; i++) {
      if (c->inplace && i == 4) continue;
      const DLTensor *out = i == 3 ? &x[3].t : (i == 4 || (c->inplace && i == 0)) ? &x[4].t : NULL;
      int64_t ch = region_changed_outside(&rg[i], out);
      if (ch) problem("%s: %lld bytes changed around %s", c->name, (long long)ch, names[i]);
    }
  }

  /* Forward into dz's memory: out = o * silu(z). */
  region_snapshot(&rg[3]);
  rc = zgate_fwd(&x[2].t, &x[1].t, &x[3].t, &opts);
  if (rc != ZGATE_OK) {
    problem("%s: zgate_fwd returned %d: %s", c->name, rc, zgate_last_error());
  } else {
    zgate_check_stats a;
    zgate_check_stats_init(&a);
    rc = zgate_check_fwd(&x[2].t, &x[1].t, &x[3].t, &a);
    if (rc || a.failures) {
      char la[256];
      zgate_check_stats_format(&a, la, sizeof la);
      problem("%s: fwd check %d; out %s", c->name, rc, la);
    }
    int64_t ch = region_changed_outside(&rg[3], &x[3].t);
    if (ch) problem("%s: fwd: %lld bytes changed around out", c->name, (long long)ch);
  }
  zt_buf_free(dout_copy.buf);
}

static void test_huge_offsets(void **state) {
  (void)state;
  const int64_t two31 = (int64_t)1 << 31, two32 = (int64_t)1 << 32;
  const huge_case cases[] = {
      {"batch stride 2^32+17 (float32)", {2, 1, 1, 64}, {two32 + 17, 64, 64, 1}, 0,
       {zt_f32, zt_f32, zt_f32, zt_f32, zt_f32}, 0},
      {"batch stride 2^32+17, in place", {2, 1, 1, 64}, {two32 + 17, 64, 64, 1}, 0,
       {zt_f32, zt_f32, zt_f32, zt_f32, zt_f32}, 1},
      /* Two rows of 32768: the library's second work item (and second thread) starts at
       * b = 1, so its starting offset is computed, not stepped to. */
      {"batch stride 2^32+17, 2 x 32768 (threads)", {2, 1, 1, 32768}, {two32 + 17, 32768, 32768, 1}, 0,
       {zt_bf16, zt_f32, zt_f16, zt_f32, zt_bf16}, 0},
      {"seqlen stride 2^31+3 (mixed dtypes)", {1, 3, 2, 40}, {3 * (two31 + 3), two31 + 3, 41, 1}, 0,
       {zt_bf16, zt_f32, zt_f16, zt_f16, zt_bf16}, 0},
      {"headdim stride 2^31+7 (strided path)", {1, 1, 1, 3}, {3 * (two31 + 7), 3 * (two31 + 7), 3 * (two31 + 7), two31 + 7}, 0,
       {zt_f32, zt_f32, zt_f32, zt_f32, zt_f32}, 0},
      {"seqlen 2^31+5, nheads 2^29+3 (float16)", {1, 2, 3, 17}, {2 * two31, two31 + 5, two31 / 4 + 3, 1}, 0,
       {zt_f16, zt_f16, zt_f16, zt_f16, zt_f16}, 0},
      {"byte_offset 2^34+128", {1, 1, 2, 64}, {128, 128, 64, 1}, ((uint64_t)1 << 34) + 128,
       {zt_f32, zt_bf16, zt_f32, zt_f32, zt_bf16}, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    region rg[5];
    int ok = 1;
    for (int i = 0; i < 5; i++)
      if (region_reserve(&rg[i]) != 0) ok = 0;
    if (!ok) {
      for (int i = 0; i < 5; i++) region_release(&rg[i]);
      skip(); /* unreachable in practice: main already probed */
    }
    run_huge(&cases[k], rg);
    for (int i = 0; i < 5; i++) region_release(&rg[i]);
  }
  int64_t p = g_problems;
  g_problems = 0;
  assert_int_equal(p, 0);
}

int main(void) {
  int skip_code;
  g_isa = zt_isa(&skip_code);
  if (skip_code) return skip_code;
  g_page = (size_t)sysconf(_SC_PAGESIZE);
  g_rng.s = zt_seed("test_huge_offsets");
  /* Probe: five reservations at once, as every case needs. */
  region probe[5];
  int got = 0;
  for (; got < 5; got++)
    if (region_reserve(&probe[got]) != 0) break;
  for (int i = 0; i < got; i++) region_release(&probe[i]);
  if (got < 5) {
    printf("SKIP: cannot reserve 5 x %zu GiB of address space (mmap PROT_NONE|MAP_NORESERVE "
           "refused; ulimit -v or a memory checker?)\n", REGION_BYTES >> 30);
    return ZT_SKIP;
  }
  printf("path: %s\n", g_isa ? g_isa : zgate_cpu_isa_chosen());
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_huge_offsets)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
