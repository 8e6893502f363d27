/* What the register-level SIMD tests (test_simd_exp.c, test_simd_fast.c) share: whether
 * this CPU and OS can run the path under test, and a small seeded random generator. */
#ifndef ZGATE_SIMD_TEST_SUPPORT_H
#define ZGATE_SIMD_TEST_SUPPORT_H

#include <cpuid.h>
#include <stdint.h>

/* AVX2 + FMA + F16C + OSXSAVE with the OS saving YMM state; with ZG_TEST_AVX512 also
 * AVX-512 F/DQ/BW/VL with the OS saving the opmask and ZMM state. */
static int cpu_can_run(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  if (!((c >> 27) & 1) || !((c >> 28) & 1) || !((c >> 12) & 1) || !((c >> 29) & 1)) return 0;
  unsigned xlo, xhi;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  if ((xlo & 6u) != 6u) return 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  if (!((b >> 5) & 1)) return 0;
#ifdef ZG_TEST_AVX512
  if (!((b >> 16) & 1) || !((b >> 17) & 1) || !((b >> 30) & 1) || !((b >> 31) & 1)) return 0;
  if ((xlo & 0xe6u) != 0xe6u) return 0;
#endif
  return 1;
}

/* splitmix64; each test binary seeds it (rng = ...) so its inputs are reproducible */
static uint64_t rng;
static uint64_t next_u64(void) {
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double unif(double lo, double hi) { return lo + (hi - lo) * (double)(next_u64() >> 11) * 0x1p-53; }

#endif /* ZGATE_SIMD_TEST_SUPPORT_H */
