/* What the machine allows a run of the zgate command, asked before any work: the host memory
 * available now, whether an output path can be written, the load average. Linux facts come
 * from /proc; where it is missing the limits given on the command line are all there is. */
#define _POSIX_C_SOURCE 200809L /* access, clock_gettime under -std=c11 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli.h"

/* MemAvailable of /proc/meminfo in bytes, or -1 when it cannot be read. */
static double mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return -1.0;
  char line[256];
  double kb = -1.0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
  fclose(f);
  return kb < 0 ? -1.0 : kb * 1024.0;
}

int cli_memory_fits(double need, double max_bytes, char *why, size_t n) {
  const double gib = 1024.0 * 1024.0 * 1024.0, avail = mem_available();
  if (max_bytes > 0 && need > max_bytes)
    snprintf(why, n, "needs %.1f GiB of memory, more than --max-memory %.1f GiB allows", need / gib, max_bytes / gib);
  else if (avail >= 0 && need > avail)
    snprintf(why, n, "needs %.1f GiB of memory, more than the %.1f GiB available now (MemAvailable)", need / gib,
             avail / gib);
  else
    return 0;
  return -1;
}

int cli_check_output(const char *cmd, const char *opt, const char *path) {
  /* Opened for appending, an existing file is left as it was; a new one is removed again. */
  const int existed = access(path, F_OK) == 0;
  FILE *f = fopen(path, "a");
  if (f) {
    fclose(f);
    if (!existed) remove(path);
    return 0;
  }
  const int e = errno;
  const char *slash = strrchr(path, '/');
  if (e == ENOENT && slash) /* name the missing directory, not the file that cannot be made in it */
    cli_error(cmd, "%s %s: cannot write there: %.*s: %s", opt, path, (int)(slash - path), path, strerror(e));
  else
    cli_error(cmd, "%s %s: cannot write there: %s", opt, path, strerror(e));
  return -1;
}

int cli_loadavg(double load[3], int *cpus) {
  *cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
  FILE *f = fopen("/proc/loadavg", "r");
  if (!f) return -1;
  int n = fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]);
  fclose(f);
  return n == 3 ? 0 : -1;
}

double cli_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_shape_str(const int64_t shape[4], char *buf, size_t n) {
  snprintf(buf, n, "(%lld, %lld, %lld, %lld)", (long long)shape[0], (long long)shape[1], (long long)shape[2],
           (long long)shape[3]);
}

int cli_max_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}
