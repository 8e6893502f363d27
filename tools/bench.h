/* Pieces of `zgate bench`: the CPU ceiling kernel and the outputs (JSON, gnuplot chart). */
#ifndef ZGATE_CLI_BENCH_H
#define ZGATE_CLI_BENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli.h"

/* d = a ^ b, e = b ^ c over `bytes` bytes of each (16-byte aligned, a multiple of 16),
 * with non-temporal stores where the ISA has them. */
void cli_stream_ceiling(const void *a, const void *b, const void *c, void *d, void *e, size_t bytes, int threads);
int cli_stream_ceiling_has_nt(void);

/* One measured configuration. */
typedef struct bench_result {
  char backend[48];
  int is_cuda;
  char op[4];
  int64_t shape[4];
  cli_dtypes dt;
  int layout;
  int64_t elements;
  double bytes;          /* bytes the operator reads plus writes */
  int repeats;
  double median_s, min_s, first_s;
  double gbps;
  double ceiling_gbps, ceiling_median_s;
  double pct;            /* 100 * gbps / ceiling_gbps */
  int threads;
  char error[256];       /* non-empty when the configuration could not run */
} bench_result;

typedef struct bench_meta {
  const char *ceiling_cpu;  /* what the CPU ceiling is */
  const char *ceiling_cuda;
  int threads;
  char date[64];
} bench_meta;

int cli_bench_write_json(const char *path, const bench_result *r, int n, const bench_meta *m);
/* Writes <base>.dat and <base>.gp next to png_path and runs gnuplot when it is found.
 * Returns 0 when the PNG was drawn, 1 when gnuplot is missing (files written, message
 * printed), -1 on an error (message printed). */
int cli_bench_plot(const char *png_path, const bench_result *r, int n, const bench_meta *m);

#endif /* ZGATE_CLI_BENCH_H */
