/* The CPU bandwidth ceiling `zgate bench` compares against: a streaming kernel that reads
 * three arrays and writes two with non-temporal stores, on the same threads as the operator
 * and over the same number of bytes. It does no math, so it shows what the memory system
 * allows for the operator's access pattern. */
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define CEIL_SSE2 1
#endif

#include "bench.h"

void cli_stream_ceiling(const void *a, const void *b, const void *c, void *d, void *e, size_t bytes, int threads) {
#ifdef CEIL_SSE2
  /* 16-byte units; SSE2 is in every x86-64, and two cores saturate memory with it. */
  const __m128i *pa = a, *pb = b, *pc = c;
  __m128i *pd = d, *pe = e;
  const int64_t n = (int64_t)(bytes / 16);
#ifdef _OPENMP
  /* Below 1 MB an array, waking threads costs more than it brings (zgate itself hands out
   * work in items of 32768 elements), so small problems run on one thread. */
#pragma omp parallel for schedule(static) num_threads(threads > 0 ? threads : omp_get_max_threads()) if (n >= 65536)
#endif
  for (int64_t i = 0; i < n; i++) {
    __m128i x = _mm_load_si128(pa + i), y = _mm_load_si128(pb + i), z = _mm_load_si128(pc + i);
    _mm_stream_si128(pd + i, _mm_xor_si128(x, y));
    _mm_stream_si128(pe + i, _mm_xor_si128(y, z));
  }
  _mm_sfence();
#else
  /* Elsewhere plain stores (no portable non-temporal store in C). */
  const uint64_t *pa = a, *pb = b, *pc = c;
  uint64_t *pd = d, *pe = e;
  const int64_t n = (int64_t)(bytes / 8);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads > 0 ? threads : omp_get_max_threads()) if (n >= 131072)
#endif
  for (int64_t i = 0; i < n; i++) {
    pd[i] = pa[i] ^ pb[i];
    pe[i] = pb[i] ^ pc[i];
  }
#endif
}

int cli_stream_ceiling_has_nt(void) {
#ifdef CEIL_SSE2
  return 1;
#else
  return 0;
#endif
}
