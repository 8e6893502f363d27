/* Pieces of `zgate bench`: the outputs (table, JSON, gnuplot chart). The CPU ceiling is
 * stream_ceiling.c. */
#ifndef ZGATE_CLI_BENCH_H
#define ZGATE_CLI_BENCH_H

#include "cli.h"
#include "stream_ceiling.h"

/* Rows whose figures cannot be trusted: the slowest timed call (the operator's or the
 * ceiling's) took more than NOISY_SPREAD times the fastest, or the operator beat its ceiling
 * by more than a memory-bound operator can (MAX_PLAUSIBLE_PCT): the machine was busy. */
#define BENCH_NOISY_SPREAD 1.25
#define BENCH_MAX_PLAUSIBLE_PCT 105.0
/* --settle waits until the 1-minute load average is under this many per CPU online: the
 * benchmark's own threads then meet little other work. */
#define BENCH_SETTLE_LOAD_PER_CPU 0.25

/* One measured configuration. Figures of three: [0] at the median time, [1] the lowest, [2]
 * the highest over the timed calls (times: median, fastest, slowest). */
typedef struct bench_result {
  const cli_backend *be;
  int fwd;
  int64_t shape[4];
  cli_dtypes dt;
  int layout;
  double bytes;         /* bytes the operator reads plus writes */
  double ceiling_bytes; /* bytes the ceiling moves (the same, rounded up to whole lines) */
  int repeats;
  double time_s[3], ceiling_s[3], first_s;
  double gbps[3], ceiling_gbps[3];
  double pct[3]; /* 100 * gbps / ceiling_gbps; the range pairs the extremes */
  /* CPU: every stream variant's GB/s ([0] < 0: not usable on these buffers), and the
   * fastest by median, the ceiling (-1 on CUDA) */
  int nvariants, ceiling_variant;
  double variant_gbps[ZB_MAX_VARIANTS][3];
  int threads;
  int failed;      /* zgate returned an error (else error[] says why it did not run) */
  char error[256]; /* non-empty when the configuration could not run */
} bench_result;

typedef struct bench_meta {
  int threads;
  char date[64];
  int have_load, cpus; /* the load average when the run started, and the CPUs online */
  double load[3];
  int settle_asked, settled; /* --settle given; the load fell under the threshold in time */
  double settle_wait_s;
} bench_meta;

/* The table on stdout, a line for each flagged row's reason at the end, then the CPU
 * ceiling's variants. */
void bench_print_table(const bench_result *r, int n, const bench_meta *m);
int bench_write_json(const char *path, const bench_result *r, int n, const bench_meta *m);
/* The chart goes to png_path; the gnuplot data and script beside it, named as png_path with
 * its ".png" replaced by ".dat" and ".gp" (appended when it has none). */
int bench_check_png(const char *png_path); /* 0, or -1 after a message (before any work) */
/* Writes the .dat and .gp files and runs gnuplot when it is found. Returns 0 when the PNG
 * was drawn, 1 when gnuplot is missing (files written, message printed), -1 on an error
 * (message printed). */
int bench_plot(const char *png_path, const bench_result *r, int n, const bench_meta *m);

#endif /* ZGATE_CLI_BENCH_H */
