/* Which backends this machine offers (CPU paths, CUDA devices), and the few CUDA runtime
 * calls the tool needs. The tool stays plain C: with ZGATE_CLI_CUDA it includes the CUDA
 * runtime's C header and links cudart; without it, the CUDA calls are stubs reporting no
 * device. */
#include <stdlib.h>
#include <string.h>

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

/* Adds a CPU path (isa) or a CUDA device (isa NULL), once. */
static void add(cli_backend *out, int *count, const char *isa, int device) {
  for (int i = 0; i < *count; i++)
    if (isa ? out[i].isa && !strcmp(out[i].isa, isa) : out[i].is_cuda && out[i].device == device) return;
  if (*count >= CLI_MAX_BACKENDS) return;
  cli_backend *b = &out[(*count)++];
  memset(b, 0, sizeof *b);
  b->is_cuda = !isa, b->isa = isa, b->device = device;
  if (isa) snprintf(b->label, sizeof b->label, "cpu:%s", isa);
  else snprintf(b->label, sizeof b->label, "cuda:%d", device);
}

/* "cpu:avx512 (built, but ...)" appended to the list of what is not run here. */
static void note(char *skipped, size_t n, const char *what, const char *isa, const char *why) {
  size_t len = strlen(skipped);
  if (len < n) snprintf(skipped + len, n - len, "%s%s%s (built, but %s)", len ? "; " : "", what, isa, why);
}

static int bad_list(const char *cmd, const char *opt, const char *spec) {
  cli_error(cmd, "%s wants a comma-separated list of: %s; got '%s'", opt,
            strcmp(opt, "--isa") ? "all, cpu, best, scalar, avx2, avx512, neon, cuda, cuda:N"
                                 : "cpu, best, scalar, avx2, avx512, neon",
            spec);
  return -1;
}

int cli_backends(const char *cmd, const char *opt, const char *spec, cli_backend *out, char *skipped,
                 size_t nskipped) {
  char list[256], scratch[64];
  int count = 0, ndev = cli_cuda_device_count();
  if (!skipped) skipped = scratch, nskipped = sizeof scratch;
  skipped[0] = '\0';
  if (snprintf(list, sizeof list, "%s", spec) >= (int)sizeof list) list[0] = '\0';
  /* A list of: all, cpu (every CPU path), best, a CPU path, cuda (every device), cuda:N. */
  for (char *item = strtok(list, ","); item; item = strtok(NULL, ",")) {
    const int all = !strcmp(item, "all"), cpu = all || !strcmp(item, "cpu"), best = !strcmp(item, "best");
    const char *isa = best ? zgate_cpu_isa_chosen() : item;
    int known = -1;
    for (int i = 0; i < 4; i++) {
      if (cpu && zgate_cpu_isa_available(cli_cpu_isas[i])) add(out, &count, cli_cpu_isas[i], 0);
      else if (cpu && isa_built(cli_cpu_isas[i]))
        note(skipped, nskipped, "cpu:", cli_cpu_isas[i], "this CPU or OS cannot run it");
      if (!strcmp(isa, cli_cpu_isas[i])) known = i;
    }
    if (all && zgate_cuda_built() && ndev == 0) note(skipped, nskipped, "cuda", "", "no CUDA device found");
    for (int i = 0; i < ndev && (all || !strcmp(item, "cuda")); i++) add(out, &count, NULL, i);
    char *end = NULL;
    long d = !strncmp(item, "cuda:", 5) ? strtol(item + 5, &end, 10) : -1;
    if (cpu || (!strcmp(item, "cuda") && ndev > 0)) continue;
    if (best && known < 0) { /* the library's default path, which ZGATE_CPU_ISA can leave empty */
      const char *env = getenv("ZGATE_CPU_ISA");
      cli_error(cmd, "the environment's ZGATE_CPU_ISA=%s %s, so there is no default CPU path ('best'); unset it "
                     "or set it to a path this machine runs ('zgate info' lists them)", env ? env : "",
                env && isa_built(env) ? "is a path this machine cannot run" : "names no CPU path");
      return -1;
    } else if (known >= 0 && !zgate_cpu_isa_available(isa)) {
      cli_error(cmd, "the CPU path '%s' is %s", isa,
                isa_built(isa) ? "built but this CPU (or OS) cannot run it" : "not built into this zgate");
      return -1;
    } else if (known >= 0) {
      add(out, &count, cli_cpu_isas[known], 0);
    } else if (!strncmp(item, "cuda", 4) && !zgate_cuda_built()) {
      cli_error(cmd, "this zgate was built without CUDA, so '%s' cannot run", item);
      return -1;
    } else if (!strcmp(item, "cuda")) {
      cli_error(cmd, "no CUDA device found (%s)", cli_cuda_last_error());
      return -1;
    } else if (d < 0 || *end || end == item + 5) {
      return bad_list(cmd, opt, spec);
    } else if (d >= ndev) {
      cli_error(cmd, "CUDA device %ld does not exist (this machine has %d)", d, ndev);
      return -1;
    } else {
      add(out, &count, NULL, (int)d);
    }
  }
  return count > 0 ? count : bad_list(cmd, opt, spec);
}

/* ---- CUDA ------------------------------------------------------------------------------ */

#ifdef ZGATE_CLI_CUDA

static char cuda_msg[256] = "";

/* 0 on success, else -1 with the runtime's message kept for cli_cuda_last_error(). */
static int cuda_ok(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return 0;
  snprintf(cuda_msg, sizeof cuda_msg, "%s: %s", what, cudaGetErrorString(e));
  cudaGetLastError(); /* clear errors that are not sticky, so the next call starts clean */
  return -1;
}
#define CUDA_TRY(call) cuda_ok(call, #call)

const char *cli_cuda_last_error(void) { return cuda_msg[0] ? cuda_msg : "no error"; }

int cli_cuda_device_count(void) {
  int n = 0, drv = 0;
  if (cudaDriverGetVersion(&drv) != cudaSuccess || !drv) {
    snprintf(cuda_msg, sizeof cuda_msg, "no CUDA driver is installed on this machine");
    return 0;
  }
  return CUDA_TRY(cudaGetDeviceCount(&n)) ? 0 : n;
}

void cli_cuda_describe(int device, char *buf, size_t n) {
  struct cudaDeviceProp p;
  int drv = 0, rt = 0;
  if (device < 0) {
    cudaRuntimeGetVersion(&rt);
    if (cudaDriverGetVersion(&drv) != cudaSuccess) drv = 0;
    int len = drv ? snprintf(buf, n, "driver %d.%d, ", drv / 1000, drv % 1000 / 10) : 0;
    snprintf(buf + len, n - (size_t)len, "runtime %d.%d", rt / 1000, rt % 1000 / 10);
  } else if (CUDA_TRY(cudaGetDeviceProperties(&p, device))) {
    snprintf(buf, n, "cuda:%d (%s)", device, cuda_msg);
  } else {
    snprintf(buf, n, "cuda:%d %s, compute capability %d.%d, %d SMs, %.1f GiB", device, p.name, p.major, p.minor,
             p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
  }
}

int cli_bufs_to_device(cli_buf *b, int n, int device) {
  for (int i = 0; i < n; i++) {
    size_t bytes = (size_t)b[i].nslots * (size_t)b[i].esize;
    if (!b[i].host) continue;
    if (CUDA_TRY(cudaSetDevice(device)) || (!b[i].dev && CUDA_TRY(cudaMalloc(&b[i].dev, bytes ? bytes : 1))) ||
        CUDA_TRY(cudaMemcpy(b[i].dev, b[i].host, bytes, cudaMemcpyHostToDevice)))
      return -1;
    b[i].device = device, b[i].on_device = 1;
  }
  return 0;
}

int cli_bufs_to_host(cli_buf *b, int n) {
  int rc = 0;
  for (int i = 0; i < n; i++) {
    if (!b[i].on_device) continue;
    b[i].on_device = 0;
    if (CUDA_TRY(cudaSetDevice(b[i].device)) ||
        CUDA_TRY(cudaMemcpy(b[i].host, b[i].dev, (size_t)b[i].nslots * (size_t)b[i].esize, cudaMemcpyDeviceToHost)))
      rc = -1;
  }
  return rc;
}

void cli_cuda_free(int device, void *p) {
  if (p && cudaSetDevice(device) == cudaSuccess) cudaFree(p);
}

int cli_cuda_sync(int device) { return CUDA_TRY(cudaSetDevice(device)) || CUDA_TRY(cudaDeviceSynchronize()) ? -1 : 0; }

int cli_cuda_time(int device, int (*fn)(void *), void *ctx, size_t copy_bytes, int reps, double *secs) {
  const size_t flush_bytes = (size_t)256 << 20; /* several times any L2 */
  void *flush = NULL, *src = NULL, *dst = NULL;
  cudaEvent_t start = NULL, stop = NULL;
  int rc = CUDA_TRY(cudaSetDevice(device)) || CUDA_TRY(cudaMalloc(&flush, flush_bytes)) ||
           CUDA_TRY(cudaEventCreate(&start)) || CUDA_TRY(cudaEventCreate(&stop)) ||
           (!fn && (CUDA_TRY(cudaMalloc(&src, copy_bytes ? copy_bytes : 1)) ||
                    CUDA_TRY(cudaMalloc(&dst, copy_bytes ? copy_bytes : 1))));
  for (int r = -1; r < reps && !rc; r++) { /* r = -1: the untimed run */
    float ms = 0.0f;
    rc = CUDA_TRY(cudaMemsetAsync(flush, 0, flush_bytes, 0)) || CUDA_TRY(cudaEventRecord(start, 0)) ||
         (fn ? fn(ctx) != 0 : CUDA_TRY(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, 0))) ||
         CUDA_TRY(cudaEventRecord(stop, 0)) || CUDA_TRY(cudaEventSynchronize(stop)) ||
         CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
    if (r >= 0) secs[r] = 1e-3 * ms;
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  cudaFree(flush);
  cudaFree(src);
  cudaFree(dst);
  return rc ? -1 : 0;
}

#else /* built without CUDA: no device, and nothing ever runs on one */

const char *cli_cuda_last_error(void) { return "this zgate tool was built without CUDA"; }
int cli_cuda_device_count(void) { return 0; }
void cli_cuda_describe(int device, char *buf, size_t n) { snprintf(buf, n, "cuda:%d (no CUDA in this build)", device); }
int cli_bufs_to_device(cli_buf *b, int n, int device) { return (void)b, (void)n, (void)device, -1; }
int cli_bufs_to_host(cli_buf *b, int n) { return (void)b, (void)n, -1; }
void cli_cuda_free(int device, void *p) { (void)device, (void)p; }
int cli_cuda_sync(int device) { return (void)device, -1; }
int cli_cuda_time(int device, int (*fn)(void *), void *ctx, size_t copy_bytes, int reps, double *secs) {
  return (void)device, (void)fn, (void)ctx, (void)copy_bytes, (void)reps, (void)secs, -1;
}

#endif
