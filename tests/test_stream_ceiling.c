/* Test of the ceiling loops of `zgate bench` (tools/stream_ceiling.c): every variant this CPU
 * runs must write exactly d = a ^ b (and e = b ^ c) over every byte it is given and nothing
 * outside them, for the forward's 2 + 1 and the backward's 3 + 2 arrays, at sizes that leave
 * heads and tails off a line, on 1 and 2 threads, with every buffer at several places within
 * a line. A ceiling that skipped bytes would flatter nobody but be wrong, so it is checked.
 * Exit 0 when all pass. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream_ceiling.h"

#define GUARD 64
#define POISON 0xA5

static unsigned char *buf(size_t n) { return malloc(n + 2 * GUARD + 192); } /* room to align and offset */

int main(void) {
  const int nv = zb_variant_count();
  if (nv < 1) {
    fprintf(stderr, "no variant\n");
    return 1;
  }
  static const size_t sizes[] = {0, 1, 15, 64, 100, 4096, 4160, (size_t)3 << 20};
  static const size_t offs[] = {0, 16, 48};
  int fails = 0, runs = 0, skipped = 0;
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
    for (int bwd = 0; bwd < 2; bwd++)
      for (size_t oi = 0; oi < sizeof offs / sizeof *offs; oi++) {
        const size_t n = sizes[si];
        unsigned char *m[5], *p[5];
        for (int k = 0; k < 5; k++) {
          m[k] = buf(n);
          p[k] = (unsigned char *)(((uintptr_t)m[k] + GUARD + 63) & ~(uintptr_t)63) + offs[oi];
          for (size_t i = 0; i < n; i++) p[k][i] = (unsigned char)(i * 131u + (unsigned)k * 17u + (i >> 8));
        }
        for (int v = 0; v < nv; v++)
          for (int threads = 1; threads <= 2; threads++) {
            for (int k = 3; k < 5; k++) memset(p[k] - GUARD, POISON, n + 2 * GUARD);
            zb_stream s = {p[0], p[1], bwd ? p[2] : NULL, p[3], bwd ? p[4] : NULL, n};
            if (zb_stream_run(v, &s, threads)) {
              skipped++;
              continue;
            }
            runs++;
            int bad = 0;
            for (size_t i = 0; i < n && !bad; i++) {
              bad |= p[3][i] != (unsigned char)(p[0][i] ^ p[1][i]);
              bad |= p[4][i] != (bwd ? (unsigned char)(p[1][i] ^ p[2][i]) : POISON);
            }
            for (int g = 0; g < GUARD && !bad; g++)
              for (int k = 3; k < 5; k++) bad |= p[k][-1 - g] != POISON || p[k][n + (size_t)g] != POISON;
            if (bad) {
              fprintf(stderr, "FAIL %s: %zu bytes, %s, offset %zu, %d threads\n", zb_variant_get(v)->name, n,
                      bwd ? "3 + 2" : "2 + 1", offs[oi], threads);
              fails++;
            }
          }
        for (int k = 0; k < 5; k++) free(m[k]);
      }
  /* A non-temporal variant refuses (returns -1, runs nothing) outputs at different places
   * within its vector. */
  for (int v = 0; v < nv; v++) {
    if (!zb_variant_get(v)->nt || zb_variant_get(v)->width < 32) continue;
    unsigned char *m = buf(4096);
    unsigned char *d = (unsigned char *)(((uintptr_t)m + 63) & ~(uintptr_t)63);
    zb_stream s = {d, d, d, d, d + 16, 1024};
    if (zb_stream_run(v, &s, 1) == 0) {
      fprintf(stderr, "FAIL %s: ran with e 16 B off d's place in a vector\n", zb_variant_get(v)->name);
      fails++;
    }
    free(m);
  }
  printf("%d variants, %d runs checked, %d not usable on their buffers, %d failed\n", nv, runs, skipped, fails);
  return fails ? 1 : 0;
}
