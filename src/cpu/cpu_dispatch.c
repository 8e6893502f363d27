/* Which CPU path runs: detection (CPUID plus what the OS saves, via XGETBV), the
 * process-wide choice made once, and per-call overrides.
 *
 * Policy for ZGATE_CPU_ISA (read once, at the first call that needs the choice):
 *   unset, "" or "auto"      the best path built and supported here
 *                            (avx512 > avx2 > neon > scalar);
 *   a path built and usable  that path;
 *   anything else            no default path: every CPU call without its own
 *                            opts->cpu_isa fails with ZGATE_ERR_ISA_UNAVAILABLE (a known
 *                            name this build or CPU cannot run) or ZGATE_ERR_OPTIONS (an
 *                            unknown name), and the message says why. Silently running
 *                            another path would make a forced test run prove nothing.
 * ZGATE_CPU_PREFETCH (bytes, 0..65536; a tuning knob, so any other value means the default):
 * the row kernels' software prefetch distance (zg_cpu_prefetch).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define ZG_X86 1
#endif

/* ---- the paths, and which of them this CPU runs ---------------------------------------- */

/* Best first. */
enum { ZG_ISA_AVX512, ZG_ISA_AVX2, ZG_ISA_NEON, ZG_ISA_SCALAR, ZG_NISAS };

typedef struct zg_features {
  int runs[ZG_NISAS]; /* the CPU has the path's instructions and the OS saves their state */
  int avx512bf16;     /* avx512 takes its table with the AVX512_BF16 bfloat16 runs */
} zg_features;

#ifdef ZG_X86
/* XCR0 via the raw opcode, so this file needs no -mxsave. */
static uint64_t zg_xgetbv0(void) {
  uint32_t lo, hi;
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}
#endif

static zg_features zg_features_value; /* filled once, by zg_detect */
static pthread_once_t zg_features_once = PTHREAD_ONCE_INIT;

static void zg_detect(void) {
  zg_features *f = &zg_features_value;
  f->runs[ZG_ISA_SCALAR] = 1;
#ifdef ZG_X86
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return;
  int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  int fma_f16c = ((c >> 12) & 1) && ((c >> 29) & 1);
  if (!osxsave || !avx) return;
  uint64_t xcr0 = zg_xgetbv0();
  int os_ymm = (xcr0 & 0x6) == 0x6;      /* SSE and AVX state saved */
  int os_zmm = (xcr0 & 0xe6) == 0xe6;    /* plus opmask, ZMM0-15 high halves, ZMM16-31 */
  if (!os_ymm || __get_cpuid_max(0, NULL) < 7) return;
  unsigned b7, a71 = 0;
  __cpuid_count(7, 0, a, b7, c, d);
  if (a >= 1) __cpuid_count(7, 1, a71, b, c, d); /* a: the highest subleaf */
  const unsigned avx512 = 1u << 16 | 1u << 17 | 1u << 30 | 1u << 31; /* F, DQ, BW, VL */
  f->runs[ZG_ISA_AVX2] = ((b7 >> 5) & 1) && fma_f16c;
  f->runs[ZG_ISA_AVX512] = os_zmm && (b7 & avx512) == avx512 && fma_f16c;
  f->avx512bf16 = os_zmm && ((a71 >> 5) & 1);
#elif defined(__aarch64__)
  f->runs[ZG_ISA_NEON] = 1; /* Advanced SIMD is part of the AArch64 baseline */
#endif
}

static const zg_features *zg_features_get(void) {
  pthread_once(&zg_features_once, zg_detect);
  return &zg_features_value;
}

/* avx512's table, with the AVX512_BF16 bfloat16 runs where this CPU has that extension. */
#ifdef ZGATE_HAVE_AVX512
static const zg_cpu_kernels *zg_avx512_table(void) {
  return zg_features_get()->avx512bf16 ? zg_cpu_kernels_avx512_bf16() : zg_cpu_kernels_avx512();
}
#else
#define zg_avx512_table NULL /* not built */
#endif
#ifndef ZGATE_HAVE_AVX2
#define zg_cpu_kernels_avx2 NULL
#endif
#ifndef ZGATE_HAVE_NEON
#define zg_cpu_kernels_neon NULL
#endif

static const struct {
  const char *name;
  const zg_cpu_kernels *(*table)(void); /* NULL when not built */
} zg_isas[ZG_NISAS] = {
    [ZG_ISA_AVX512] = {"avx512", zg_avx512_table},
    [ZG_ISA_AVX2] = {"avx2", zg_cpu_kernels_avx2},
    [ZG_ISA_NEON] = {"neon", zg_cpu_kernels_neon},
    [ZG_ISA_SCALAR] = {"scalar", zg_cpu_kernels_scalar},
};

/* ZGATE_OK and the table, or the reason there is none (without setting a message); *built
 * says whether the name is a path this zgate has. */
static int zg_lookup(const char *name, const zg_cpu_kernels **out, int *built) {
  *out = NULL;
  *built = 0;
  for (int i = 0; i < ZG_NISAS; i++) {
    if (strcmp(name, zg_isas[i].name) != 0) continue;
    *built = zg_isas[i].table != NULL;
    if (!*built || !zg_features_get()->runs[i]) return ZGATE_ERR_ISA_UNAVAILABLE;
    *out = zg_isas[i].table();
    return ZGATE_OK;
  }
  return ZGATE_ERR_OPTIONS;
}

static const char *zg_why_unavailable(int built) {
  return built ? "built, but this CPU (or its OS) cannot run it" : "not built into this zgate";
}

/* ---- the process-wide choice ----------------------------------------------------------- */

static struct {
  const zg_cpu_kernels *kernels; /* NULL when ZGATE_CPU_ISA forced something unusable */
  int status, built;
  char env[32];                  /* the (truncated) value of ZGATE_CPU_ISA, for messages */
  char chosen[96];               /* what zgate_cpu_isa_chosen() reports */
} zg_default;
static pthread_once_t zg_default_once = PTHREAD_ONCE_INIT;

static void zg_default_init(void) {
  const char *env = getenv("ZGATE_CPU_ISA");
  if (env && *env && strcmp(env, "auto") != 0) {
    snprintf(zg_default.env, sizeof zg_default.env, "%s", env);
    zg_default.status = zg_lookup(env, &zg_default.kernels, &zg_default.built);
  } else { /* the best path that runs here; scalar always does */
    for (int i = 0; i < ZG_NISAS; i++)
      if (zg_lookup(zg_isas[i].name, &zg_default.kernels, &zg_default.built) == ZGATE_OK) break;
  }
  if (zg_default.kernels)
    snprintf(zg_default.chosen, sizeof zg_default.chosen, "%s", zg_default.kernels->name);
  else
    snprintf(zg_default.chosen, sizeof zg_default.chosen, "none (ZGATE_CPU_ISA=%s %s)",
             zg_default.env, zg_default.status == ZGATE_ERR_OPTIONS ? "unknown" : "unavailable");
}

static void zg_default_get(void) { pthread_once(&zg_default_once, zg_default_init); }

int zg_cpu_resolve(const char *isa, const zg_cpu_kernels **out) {
  if (isa) {
    int built, st = zg_lookup(isa, out, &built);
    if (st == ZGATE_ERR_OPTIONS)
      return zg_fail(st, "options: cpu_isa \"%.32s\" is unknown (scalar, avx2, avx512, neon)", isa);
    if (st)
      return zg_fail(st, "options: cpu_isa \"%s\" is %s (built: %s)", isa, zg_why_unavailable(built),
                     zgate_cpu_isas_built());
    return ZGATE_OK;
  }
  zg_default_get();
  *out = zg_default.kernels;
  if (zg_default.status == ZGATE_ERR_OPTIONS)
    return zg_fail(ZGATE_ERR_OPTIONS,
                   "environment: ZGATE_CPU_ISA=\"%s\" is unknown (scalar, avx2, avx512, neon, auto)",
                   zg_default.env);
  if (zg_default.status)
    return zg_fail(zg_default.status,
                   "environment: ZGATE_CPU_ISA=\"%s\" forces a path that is %s (built: %s)",
                   zg_default.env, zg_why_unavailable(zg_default.built), zgate_cpu_isas_built());
  return ZGATE_OK;
}

/* ---- the row kernels' prefetch distance (cpu_kernels.h) ---------------------------------- */

static int64_t zg_prefetch_bytes;
static pthread_once_t zg_prefetch_once = PTHREAD_ONCE_INIT;

static void zg_prefetch_init(void) {
  const char *env = getenv("ZGATE_CPU_PREFETCH");
  if (env && *env) {
    char *end;
    long long v = strtoll(env, &end, 10);
    if (*end == 0 && v >= 0 && v <= 65536) {
      zg_prefetch_bytes = v;
      return;
    }
  }
  zg_prefetch_bytes = ZG_CPU_PREFETCH_DEFAULT;
}

int64_t zg_cpu_prefetch(void) {
  pthread_once(&zg_prefetch_once, zg_prefetch_init);
  return zg_prefetch_bytes;
}

/* ---- public queries -------------------------------------------------------------------- */

const char *zgate_cpu_isas_built(void) { return ZGATE_CPU_ISAS_BUILT; /* src/CMakeLists.txt */ }

const char *zgate_cpu_isa_chosen(void) {
  zg_default_get();
  return zg_default.chosen;
}

int zgate_cpu_isa_available(const char *isa) {
  const zg_cpu_kernels *k;
  int built;
  return isa && zg_lookup(isa, &k, &built) == ZGATE_OK;
}
