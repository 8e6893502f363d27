/* The CPU streaming ceiling of `zgate bench`: loops that move the operator's bytes (the
 * backward's 3 reads + 2 writes, the forward's 2 + 1) with no math, in several variants
 * (load width 16, 32 or 64 bytes where the CPU has it, chosen at run time; non-temporal or
 * ordinary stores; with or without software prefetch). A program times every variant on the
 * same buffers and judges zgate against the fastest. */
#ifndef ZGATE_TOOLS_STREAM_CEILING_H
#define ZGATE_TOOLS_STREAM_CEILING_H

#include <stddef.h>

/* d = a ^ b and e = b ^ c over `bytes` bytes of each; c and e NULL: d = a ^ b only. Any
 * alignment works; a non-temporal variant wants d (and e) 16-byte aligned at the same place
 * within a vector, else it is not usable on these buffers. */
typedef struct zb_stream {
  const void *a, *b, *c;
  void *d, *e;
  size_t bytes;
} zb_stream;

typedef struct zb_variant {
  const char *name; /* e.g. "avx512 64B, NT stores, prefetch" */
  int width, nt;    /* load width in bytes; non-temporal stores */
  void (*span)(const char *a, const char *b, const char *c, char *d, char *e, size_t lines);
  int (*available)(void); /* NULL: every CPU of the architecture */
} zb_variant;

#define ZB_MAX_VARIANTS 16

/* Prefetch distance of the prefetching variants, in bytes ahead of the loads. The ceiling
 * keeps these variants, whatever zgate's kernels do, so that it is the fastest stream of the
 * bytes whichever way this CPU streams best. */
#define ZB_PREFETCH_BYTES 4096

/* The variants this build has and this CPU runs, 0..zb_variant_count()-1. */
int zb_variant_count(void);
const zb_variant *zb_variant_get(int v);
/* Runs variant v once on `threads` threads (0 = the OpenMP default; small problems run on one
 * thread). Returns 0, or -1 when the variant is not usable on these buffers. */
int zb_stream_run(int v, const zb_stream *s, int threads);

/* Times every variant `reps` times, round robin (one call of each, then the next round), so
 * that a burst of other work on a shared machine hits all of them alike; one untimed call of
 * each first. secs[v * reps + r] gets the seconds, or a negative value for a variant not
 * usable on these buffers. */
void zb_stream_time(const zb_stream *s, int threads, int reps, double *secs);

/* Median, fastest and slowest of the n values at v (sorted in place), out[0..2]; returns the
 * count of non-negative values (0: none, out untouched). */
int zb_summarize(double *v, int n, double out[3]);

#endif /* ZGATE_TOOLS_STREAM_CEILING_H */
