/* Which backends this machine offers (CPU paths, CUDA devices), and the few CUDA runtime
 * calls the tool needs. The tool stays plain C: with ZGATE_CLI_CUDA it includes the CUDA
 * runtime's C header and links cudart; without it, the CUDA calls are stubs reporting no
 * device. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, isatty, access under -std=c11 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef ZGATE_CLI_CUDA
#include <cuda_runtime_api.h>
#endif

#include "cli.h"

const char *const cli_cpu_isas[4] = {"scalar", "avx2", "avx512", "neon"};

/* Is `isa` a word of zgate_cpu_isas_built()? */
static int isa_built(const char *isa) {
  const char *built = zgate_cpu_isas_built();
  size_t n = strlen(isa);
  for (const char *p = built; (p = strstr(p, isa)) != NULL; p += n)
    if ((p == built || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ')) return 1;
  return 0;
}

static int add_cpu(cli_backend *out, int *count, const char *isa) {
  for (int i = 0; i < *count; i++)
    if (!out[i].is_cuda && !strcmp(out[i].isa, isa)) return 0;
  if (*count >= CLI_MAX_BACKENDS) return 0;
  cli_backend *b = &out[(*count)++];
  memset(b, 0, sizeof *b);
  b->isa = isa;
  snprintf(b->label, sizeof b->label, "cpu:%s", isa);
  return 0;
}

static int add_cuda(cli_backend *out, int *count, int device) {
  for (int i = 0; i < *count; i++)
    if (out[i].is_cuda && out[i].device == device) return 0;
  if (*count >= CLI_MAX_BACKENDS) return 0;
  cli_backend *b = &out[(*count)++];
  memset(b, 0, sizeof *b);
  b->is_cuda = 1;
  b->device = device;
  snprintf(b->label, sizeof b->label, "cuda:%d", device);
  return 0;
}

/* 'best' is the library's default CPU path, which ZGATE_CPU_ISA can leave empty: say so. */
static int no_default_path(const char *cmd) {
  const char *env = getenv("ZGATE_CPU_ISA");
  int known = 0;
  char runnable[64] = "";
  for (int i = 0; i < 4; i++) {
    known |= env && !strcmp(env, cli_cpu_isas[i]);
    if (zgate_cpu_isa_available(cli_cpu_isas[i])) {
      size_t len = strlen(runnable);
      snprintf(runnable + len, sizeof runnable - len, " %s", cli_cpu_isas[i]);
    }
  }
  cli_error(cmd, "the environment's ZGATE_CPU_ISA=%s %s, so there is no default CPU path ('best'); "
                 "unset ZGATE_CPU_ISA or set it to a path this machine runs:%s",
            env ? env : "", known ? "is a path this machine cannot run" : "names no CPU path (scalar, avx2, avx512, neon, auto)",
            runnable);
  return -1;
}

int cli_backends(const char *cmd, const char *opt, const char *spec, cli_backend *out, char *skipped,
                 size_t nskipped) {
  int count = 0;
  if (skipped && nskipped) skipped[0] = '\0';
  int ndev = cli_cuda_device_count();
  if (!spec || !strcmp(spec, "all")) {
    for (int i = 0; i < 4; i++) {
      if (zgate_cpu_isa_available(cli_cpu_isas[i])) {
        add_cpu(out, &count, cli_cpu_isas[i]);
      } else if (isa_built(cli_cpu_isas[i]) && skipped) {
        size_t len = strlen(skipped);
        snprintf(skipped + len, nskipped - len, "%scpu:%s (built, but this CPU or OS cannot run it)",
                 len ? "; " : "", cli_cpu_isas[i]);
      }
    }
    if (zgate_cuda_built()) {
      for (int d = 0; d < ndev; d++) add_cuda(out, &count, d);
      if (ndev == 0 && skipped) {
        size_t len = strlen(skipped);
        snprintf(skipped + len, nskipped - len, "%scuda (built, but no CUDA device found)", len ? "; " : "");
      }
    }
    return count;
  }
  /* A list of: cpu (every CPU path), cpu:ISA, an ISA name, cuda (every device), cuda:N. */
  const char *p = spec;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    char item[64];
    if (n == 0 || n >= sizeof item) goto bad;
    memcpy(item, p, n);
    item[n] = '\0';
    const char *isa = !strncmp(item, "cpu:", 4) ? item + 4 : item;
    int done = 0;
    if (!strcmp(item, "cpu")) {
      for (int i = 0; i < 4; i++)
        if (zgate_cpu_isa_available(cli_cpu_isas[i])) add_cpu(out, &count, cli_cpu_isas[i]);
      done = 1;
    } else if (!strcmp(isa, "best") || !strcmp(isa, "default")) {
      const char *chosen = zgate_cpu_isa_chosen();
      for (int i = 0; i < 4; i++)
        if (!strcmp(chosen, cli_cpu_isas[i])) add_cpu(out, &count, cli_cpu_isas[i]), done = 1;
      if (!done) return no_default_path(cmd);
    } else {
      for (int i = 0; i < 4; i++) {
        if (strcmp(isa, cli_cpu_isas[i])) continue;
        if (!zgate_cpu_isa_available(isa)) {
          cli_error(cmd, "the CPU path '%s' is %s", isa,
                    isa_built(isa) ? "built but this CPU (or OS) cannot run it" : "not built into this zgate");
          return -1;
        }
        add_cpu(out, &count, cli_cpu_isas[i]);
        done = 1;
      }
    }
    if (!done && !strncmp(item, "cuda", 4)) {
      if (!zgate_cuda_built()) {
        cli_error(cmd, "this zgate was built without CUDA, so '%s' cannot run", item);
        return -1;
      }
      if (item[4] == '\0') {
        if (ndev == 0) {
          cli_error(cmd, "no CUDA device found (%s)", cli_cuda_last_error());
          return -1;
        }
        for (int d = 0; d < ndev; d++) add_cuda(out, &count, d);
        done = 1;
      } else if (item[4] == ':') {
        char *e = NULL;
        long d = strtol(item + 5, &e, 10);
        if (e == item + 5 || *e || d < 0) goto bad;
        if (d >= ndev) {
          cli_error(cmd, "CUDA device %ld does not exist (this machine has %d)", d, ndev);
          return -1;
        }
        add_cuda(out, &count, (int)d);
        done = 1;
      }
    }
    if (!done) goto bad;
    p = end ? end + 1 : p + n;
  }
  if (count == 0) goto bad;
  return count;
bad:
  cli_error(cmd, "%s wants a comma-separated list of: %s; got '%s'", opt,
            strcmp(opt, "--isa") ? "all, cpu, best, scalar, avx2, avx512, neon (or cpu:NAME), cuda, cuda:N"
                                 : "cpu, best, scalar, avx2, avx512, neon (or cpu:NAME)",
            spec);
  return -1;
}

/* ---- CUDA ------------------------------------------------------------------------------ */

#ifdef ZGATE_CLI_CUDA

static _Thread_local char cuda_msg[256] = "";

static int cuda_ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  snprintf(cuda_msg, sizeof cuda_msg, "%s: %s", what, cudaGetErrorString(e));
  cudaGetLastError(); /* clear sticky-free errors so the next call starts clean */
  return -1;
}

const char *cli_cuda_last_error(void) { return cuda_msg[0] ? cuda_msg : "no error"; }

/* The driver's version, 0 when no CUDA driver is installed. */
static int driver_version(void) {
  int drv = 0;
  return cudaDriverGetVersion(&drv) == cudaSuccess ? drv : 0;
}

int cli_cuda_device_count(void) {
  int n = 0;
  if (!driver_version()) {
    snprintf(cuda_msg, sizeof cuda_msg, "no CUDA driver is installed on this machine");
    return 0;
  }
  if (cuda_ok(cudaGetDeviceCount(&n), "cudaGetDeviceCount")) return 0;
  return n;
}

void cli_cuda_describe(int device, char *buf, size_t n) {
  struct cudaDeviceProp p;
  if (cuda_ok(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties")) {
    snprintf(buf, n, "cuda:%d (%s)", device, cuda_msg);
    return;
  }
  snprintf(buf, n, "cuda:%d %s, compute capability %d.%d, %d SMs, %.1f GiB", device, p.name, p.major,
           p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
}

void cli_cuda_versions(char *buf, size_t n) {
  int drv = driver_version(), rt = 0;
  cudaRuntimeGetVersion(&rt);
  if (drv)
    snprintf(buf, n, "driver %d.%d, runtime %d.%d", drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
  else
    snprintf(buf, n, "runtime %d.%d", rt / 1000, (rt % 1000) / 10);
}

void *cli_cuda_malloc(int device, size_t bytes) {
  void *p = NULL;
  if (cuda_ok(cudaSetDevice(device), "cudaSetDevice")) return NULL;
  if (cuda_ok(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc")) return NULL;
  return p;
}

void cli_cuda_free(int device, void *p) {
  if (!p) return;
  cudaSetDevice(device);
  cudaFree(p);
}

int cli_cuda_upload(int device, void *dst, const void *src, size_t bytes) {
  if (cuda_ok(cudaSetDevice(device), "cudaSetDevice")) return -1;
  return cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}

int cli_cuda_download(int device, void *dst, const void *src, size_t bytes) {
  if (cuda_ok(cudaSetDevice(device), "cudaSetDevice")) return -1;
  return cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

int cli_cuda_sync(int device) {
  if (cuda_ok(cudaSetDevice(device), "cudaSetDevice")) return -1;
  return cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

int cli_cuda_flush(int device, void *scratch, size_t bytes) {
  if (cuda_ok(cudaSetDevice(device), "cudaSetDevice")) return -1;
  return cuda_ok(cudaMemsetAsync(scratch, 0, bytes, 0), "cudaMemsetAsync");
}

struct cli_cuda_timer {
  int device;
  cudaEvent_t start, stop;
};

cli_cuda_timer *cli_cuda_timer_new(int device) {
  cli_cuda_timer *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->device = device;
  if (cuda_ok(cudaSetDevice(device), "cudaSetDevice") ||
      cuda_ok(cudaEventCreate(&t->start), "cudaEventCreate") ||
      cuda_ok(cudaEventCreate(&t->stop), "cudaEventCreate")) {
    free(t);
    return NULL;
  }
  return t;
}

void cli_cuda_timer_free(cli_cuda_timer *t) {
  if (!t) return;
  cudaSetDevice(t->device);
  cudaEventDestroy(t->start);
  cudaEventDestroy(t->stop);
  free(t);
}

int cli_cuda_timer_start(cli_cuda_timer *t) {
  return cuda_ok(cudaEventRecord(t->start, 0), "cudaEventRecord");
}

int cli_cuda_timer_stop(cli_cuda_timer *t, double *ms) {
  float f = 0.0f;
  if (cuda_ok(cudaEventRecord(t->stop, 0), "cudaEventRecord") ||
      cuda_ok(cudaEventSynchronize(t->stop), "cudaEventSynchronize") ||
      cuda_ok(cudaEventElapsedTime(&f, t->start, t->stop), "cudaEventElapsedTime"))
    return -1;
  *ms = f;
  return 0;
}

int cli_cuda_copy(int device, void *dst, const void *src, size_t bytes) {
  if (cuda_ok(cudaSetDevice(device), "cudaSetDevice")) return -1;
  return cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync");
}

#else /* built without CUDA */

const char *cli_cuda_last_error(void) { return "this zgate tool was built without CUDA"; }
int cli_cuda_device_count(void) { return 0; }
void cli_cuda_describe(int device, char *buf, size_t n) { snprintf(buf, n, "cuda:%d (no CUDA in this build)", device); }
void cli_cuda_versions(char *buf, size_t n) { snprintf(buf, n, "not built with CUDA"); }
void *cli_cuda_malloc(int device, size_t bytes) { (void)device, (void)bytes; return NULL; }
void cli_cuda_free(int device, void *p) { (void)device, (void)p; }
int cli_cuda_upload(int device, void *dst, const void *src, size_t bytes) { (void)device, (void)dst, (void)src, (void)bytes; return -1; }
int cli_cuda_download(int device, void *dst, const void *src, size_t bytes) { (void)device, (void)dst, (void)src, (void)bytes; return -1; }
int cli_cuda_sync(int device) { (void)device; return -1; }
int cli_cuda_flush(int device, void *scratch, size_t bytes) { (void)device, (void)scratch, (void)bytes; return -1; }
struct cli_cuda_timer { int unused; };
cli_cuda_timer *cli_cuda_timer_new(int device) { (void)device; return NULL; }
void cli_cuda_timer_free(cli_cuda_timer *t) { (void)t; }
int cli_cuda_timer_start(cli_cuda_timer *t) { (void)t; return -1; }
int cli_cuda_timer_stop(cli_cuda_timer *t, double *ms) { (void)t, (void)ms; return -1; }
int cli_cuda_copy(int device, void *dst, const void *src, size_t bytes) { (void)device, (void)dst, (void)src, (void)bytes; return -1; }

#endif

/* ---- misc ------------------------------------------------------------------------------ */

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_stderr_is_tty(void) { return isatty(2); }

int cli_max_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

uint64_t cli_rng_next(cli_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double cli_rng_uniform(cli_rng *r) { return (double)(cli_rng_next(r) >> 11) * 0x1p-53; }

double cli_rng_normal(cli_rng *r) {
  double u = cli_rng_uniform(r), v = cli_rng_uniform(r);
  return sqrt(-2.0 * log(1.0 - u)) * cos(6.283185307179586 * v);
}
