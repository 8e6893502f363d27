/* The CPU streaming ceiling of `zgate bench` (see stream_ceiling.h).
 *
 * Every variant walks its share of the arrays in 64-byte lines (after a byte-wise head that
 * brings d to a line boundary, so its stores never split lines): per line 64/W loads of W
 * bytes from each input, XORs, and 64/W stores to each output. The AVX2 and AVX-512 loops are
 * compiled with target attributes and chosen by CPUID at run time, so this file needs no
 * per-file flags and runs on any x86-64. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include "stream_ceiling.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ZB_X86 1
#elif defined(__aarch64__) && defined(__GNUC__)
#include <arm_neon.h>
#define ZB_NEON 1
#endif

/* ---- the loops -------------------------------------------------------------------------- */

/* One loop body per (ISA, stores, prefetch): ZB_LOOP(ATTR, NAME, W, T, LOAD, XOR, STORE, PF)
 * defines NAME(a, b, c, d, e, lines). LOAD/XOR/STORE act on one W-byte vector. */
#define ZB_LOOP(ATTR, NAME, W, T, LOAD, XOR, STORE, PF)                                               \
  static ATTR void NAME(const char *a, const char *b, const char *c, char *d, char *e, size_t lines) { \
    for (size_t l = 0; l < lines; l++, a += 64, b += 64, d += 64) {                                   \
      if (PF) {                                                                                       \
        ZB_PREFETCH(a + ZB_PREFETCH_BYTES);                                                           \
        ZB_PREFETCH(b + ZB_PREFETCH_BYTES);                                                           \
        if (c) ZB_PREFETCH(c + ZB_PREFETCH_BYTES);                                                    \
      }                                                                                               \
      for (int k = 0; k < 64; k += W) {                                                               \
        T y = LOAD(b + k);                                                                            \
        STORE(d + k, XOR(LOAD(a + k), y));                                                            \
        if (c) STORE(e + k, XOR(y, LOAD(c + k)));                                                     \
      }                                                                                               \
      if (c) c += 64, e += 64;                                                                        \
    }                                                                                                 \
  }

/* Non-temporal (NTST) and plain (ST) stores, each with and without prefetch. */
#define ZB_FOUR(ATTR, STEM, W, T, LOAD, XOR, ST, NTST)        \
  ZB_LOOP(ATTR, STEM##_nt, W, T, LOAD, XOR, NTST, 0)         \
  ZB_LOOP(ATTR, STEM##_nt_pf, W, T, LOAD, XOR, NTST, 1)      \
  ZB_LOOP(ATTR, STEM##_plain, W, T, LOAD, XOR, ST, 0)        \
  ZB_LOOP(ATTR, STEM##_plain_pf, W, T, LOAD, XOR, ST, 1)

#ifdef ZB_X86
#define ZB_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

#define L16(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define S16(p, v) _mm_storeu_si128((__m128i *)(void *)(p), v)
#define N16(p, v) _mm_stream_si128((__m128i *)(void *)(p), v)
ZB_FOUR(, sse2, 16, __m128i, L16, _mm_xor_si128, S16, N16)

#define ZB_AVX2 __attribute__((target("avx2")))
#define L32(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define S32(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), v)
#define N32(p, v) _mm256_stream_si256((__m256i *)(void *)(p), v)
ZB_FOUR(ZB_AVX2, avx2, 32, __m256i, L32, _mm256_xor_si256, S32, N32)

#define ZB_AVX512 __attribute__((target("avx512f")))
#define L64(p) _mm512_loadu_si512((const void *)(p))
#define S64(p, v) _mm512_storeu_si512((void *)(p), v)
#define N64(p, v) _mm512_stream_si512((void *)(p), v)
ZB_FOUR(ZB_AVX512, avx512, 64, __m512i, L64, _mm512_xor_si512, S64, N64)

static int have_avx2(void) { return __builtin_cpu_supports("avx2"); }
static int have_avx512(void) { return __builtin_cpu_supports("avx512f"); }
static void zb_fence(void) { _mm_sfence(); }

#define ZB_X86_ROW(isa, w, have)                                            \
  {#isa " " #w "B, NT stores", w, 1, isa##_nt, have},                       \
      {#isa " " #w "B, NT stores, prefetch", w, 1, isa##_nt_pf, have},      \
      {#isa " " #w "B, plain stores", w, 0, isa##_plain, have},             \
      {#isa " " #w "B, plain stores, prefetch", w, 0, isa##_plain_pf, have}
static const zb_variant all_variants[] = {ZB_X86_ROW(sse2, 16, NULL), ZB_X86_ROW(avx2, 32, have_avx2),
                                          ZB_X86_ROW(avx512, 64, have_avx512)};

#elif defined(ZB_NEON)
/* No non-temporal store in the NEON intrinsics: ordinary stores only, four 16-byte ld1 per
 * 64-byte line. */
#define ZB_PREFETCH(p) __builtin_prefetch((const void *)(p), 0, 3)
#define LN(p) vld1q_u8((const uint8_t *)(const void *)(p))
#define SN(p, v) vst1q_u8((uint8_t *)(void *)(p), v)
ZB_LOOP(, neon_plain, 16, uint8x16_t, LN, veorq_u8, SN, 0)
ZB_LOOP(, neon_plain_pf, 16, uint8x16_t, LN, veorq_u8, SN, 1)
static void zb_fence(void) {}
static const zb_variant all_variants[] = {{"neon 16B, plain stores", 16, 0, neon_plain, NULL},
                                          {"neon 16B, plain stores, prefetch", 16, 0, neon_plain_pf, NULL}};

#else
/* Portable C: 8-byte words, ordinary stores. */
static void word_span(const char *a, const char *b, const char *c, char *d, char *e, size_t lines) {
  const uint64_t *pa = (const void *)a, *pb = (const void *)b, *pc = (const void *)c;
  uint64_t *pd = (void *)d, *pe = (void *)e;
  for (size_t i = 0; i < lines * 8; i++) {
    pd[i] = pa[i] ^ pb[i];
    if (pc) pe[i] = pb[i] ^ pc[i];
  }
}
static void zb_fence(void) {}
static const zb_variant all_variants[] = {{"C 8B, plain stores", 8, 0, word_span, NULL}};
#endif

/* ---- the list of variants this CPU runs ------------------------------------------------------ */

#define ZB_NALL ((int)(sizeof all_variants / sizeof all_variants[0]))
static const zb_variant *variants[ZB_MAX_VARIANTS];
static int nvariants = -1;

int zb_variant_count(void) {
  if (nvariants < 0) { /* the first call lists them */
    int n = 0;
    for (int i = 0; i < ZB_NALL && n < ZB_MAX_VARIANTS; i++)
      if (!all_variants[i].available || all_variants[i].available()) variants[n++] = &all_variants[i];
    nvariants = n;
  }
  return nvariants;
}

const zb_variant *zb_variant_get(int v) { return v >= 0 && v < zb_variant_count() ? variants[v] : NULL; }

/* 1 when variant v can run on these buffers (alignment of its non-temporal stores). */
static int usable(int v, const zb_stream *s) {
  if (v < 0 || v >= zb_variant_count()) return 0;
  if (!variants[v]->nt) return 1;
  /* A line-aligned d (the loops align it) must leave e aligned for the stores. */
  uintptr_t d = (uintptr_t)s->d, e = s->e ? (uintptr_t)s->e : d;
  size_t w = (size_t)variants[v]->width;
  return d % 16 == 0 && (e - d) % w == 0;
}

/* ---- running ---------------------------------------------------------------------------- */

static void bytes_xor(const char *a, const char *b, const char *c, char *d, char *e, size_t n) {
  for (size_t i = 0; i < n; i++) {
    d[i] = (char)(a[i] ^ b[i]);
    if (c) e[i] = (char)(b[i] ^ c[i]);
  }
}

/* One contiguous piece: a byte head to d's next line boundary, whole lines, a byte tail. */
static void piece(const zb_variant *vt, const char *a, const char *b, const char *c, char *d, char *e, size_t n) {
  size_t head = (size_t)(-(uintptr_t)d & 63u);
  if (head > n) head = n;
  size_t lines = (n - head) / 64, done = head + lines * 64;
  bytes_xor(a, b, c, d, e, head);
  vt->span(a + head, b + head, c ? c + head : NULL, d + head, c ? e + head : NULL, lines);
  bytes_xor(a + done, b + done, c ? c + done : NULL, d + done, c ? e + done : NULL, n - done);
}

int zb_stream_run(int v, const zb_stream *s, int threads) {
  if (!usable(v, s)) return -1;
  const zb_variant *vt = variants[v];
  const char *a = s->a, *b = s->b, *c = s->c;
  char *d = s->d, *e = s->c ? s->e : NULL;
  const size_t bytes = s->bytes;
#ifdef _OPENMP
  int nt = threads > 0 ? threads : omp_get_max_threads();
  if (bytes < ((size_t)1 << 20)) nt = 1; /* below 1 MB an array waking threads costs more */
#pragma omp parallel num_threads(nt)
#endif
  {
#ifdef _OPENMP
    const size_t t = (size_t)omp_get_thread_num(), T = (size_t)omp_get_num_threads();
#else
    const size_t t = 0, T = 1;
    (void)threads;
#endif
    /* a contiguous share of whole lines per thread */
    size_t lo = bytes * t / T / 64 * 64, hi = t + 1 == T ? bytes : bytes * (t + 1) / T / 64 * 64;
    piece(vt, a + lo, b + lo, c ? c + lo : NULL, d + lo, c ? e + lo : NULL, hi - lo);
    if (vt->nt) zb_fence();
  }
  return 0;
}

/* ---- timing ----------------------------------------------------------------------------- */

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void zb_stream_time(const zb_stream *s, int threads, int reps, double *secs) {
  const int nv = zb_variant_count();
  for (int v = 0; v < nv; v++) zb_stream_run(v, s, threads); /* warm-up */
  for (int r = 0; r < reps; r++)
    for (int v = 0; v < nv; v++) {
      double t0 = now();
      int st = zb_stream_run(v, s, threads);
      secs[v * reps + r] = st ? -1.0 : now() - t0;
    }
}

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

int zb_summarize(double *v, int n, double out[3]) {
  int k = 0;
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  while (k < n && v[k] < 0) k++; /* runs that were not usable */
  if (k == n) return 0;
  v += k, n -= k;
  out[0] = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  out[1] = v[0];
  out[2] = v[n - 1];
  return n;
}
