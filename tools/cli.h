/* Shared pieces of the `zgate` command: argument parsing, backends, test tensors, timing.
 * Every failure the user can cause is reported in their words by cli_error() and turned
 * into a nonzero exit by the subcommand; nothing here aborts. */
#ifndef ZGATE_CLI_H
#define ZGATE_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <zgate.h>

/* Exit codes of every subcommand: 1 when a check failed or zgate returned an error, 2 for
 * bad options or an output path that cannot be written (nothing is run), 3 when something
 * asked for did not run (not enough memory, no device) and nothing failed. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2, CLI_EXIT_NOT_RUN = 3 };

/* ---- messages ------------------------------------------------------------------------- */

/* "zgate <cmd>: <message>" on stderr. */
void cli_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- argument parsing ----------------------------------------------------------------- */

/* One option of a subcommand: "--name VALUE" or "--name=VALUE" (has_value), or a flag. */
typedef struct cli_opt {
  const char *name;  /* without the leading dashes */
  int has_value;
} cli_opt;

/* Walks argv[1..]: for each option calls back with its index in `opts` and its value (NULL
 * for flags). Returns 0, or CLI_EXIT_USAGE after printing why (unknown option, missing
 * value, stray argument). "--help"/"-h" make it return -1 (the caller prints help). */
typedef int (*cli_opt_fn)(void *ctx, int which, const char *value);
int cli_parse(const char *cmd, int argc, char **argv, const cli_opt *opts, int nopts,
              cli_opt_fn fn, void *ctx);

/* Parse helpers: 0 on success, else print a message naming the option and return -1. */
int cli_parse_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi,
                  long long *out);
int cli_parse_shape(const char *cmd, const char *s, int64_t shape[4]);
/* A size in bytes: "8G", "512M", "1.5T", "4096" (K, M, G, T: powers of 1024; a trailing B or
 * iB is allowed). */
int cli_parse_size(const char *cmd, const char *opt, const char *s, double *bytes);

/* Tensor dtypes of one call, in the order dout, z, o, dz, dout_scaled. */
enum { CLI_DOUT = 0, CLI_Z = 1, CLI_O = 2, CLI_DZ = 3, CLI_DOS = 4, CLI_NT = 5 };
extern const char *const cli_tensor_names[CLI_NT];
typedef struct cli_dtypes {
  DLDataType t[CLI_NT];
} cli_dtypes;
/* A comma-separated list: a bare type sets all five tensors, "name=type" one of them, later
 * items win: "bf16", "f32,dz=bf16", "dout=bf16,z=f32,o=f16,dz=f32,dos=bf16". Types:
 * f32/float32, f16/float16/half, bf16/bfloat16; names: dout, z, o, dz, dos (dout_scaled). */
int cli_parse_dtypes(const char *cmd, const char *s, cli_dtypes *out);
DLDataType cli_dtype(int code); /* 0 = f32, 1 = f16, 2 = bf16, 3 = f64 */
const char *cli_dtype_name(DLDataType t);
int cli_dtype_size(DLDataType t);
/* "bf16" when all five agree, else "dout=bf16 z=f32 ...". */
void cli_dtypes_str(const cli_dtypes *d, char *buf, size_t n);
/* The same for the tensors one direction uses: the backward all five, the forward o, z and
 * its output (stored as dz): "bf16" or "o=bf16 z=f32 out=f16". */
void cli_op_dtypes_str(const cli_dtypes *d, int fwd, char *buf, size_t n);

/* Layouts of the test and benchmark tensors. */
typedef enum cli_layout {
  CLI_DENSE = 0,    /* every tensor compact row-major */
  CLI_ZVIEW = 1,    /* z a view into an input projection (row stride 2*H*D + 32, offset H*D) */
  CLI_PERMUTED = 2, /* every tensor in another memory order, some rows padded, z's headdim
                       strided: the general stride path */
  CLI_INPLACE = 3,  /* dense, dout_scaled written over dout */
  CLI_NLAYOUTS = 4
} cli_layout;
extern const char *const cli_layout_names[CLI_NLAYOUTS];
extern const char *const cli_layout_about[CLI_NLAYOUTS]; /* what each name means, in words */
/* Comma-separated layout names into a bit mask (bit i = layout i). */
int cli_parse_layouts(const char *cmd, const char *s, unsigned *mask);
/* --op: "bwd" -> 1, "fwd" -> 2, "both" -> 3 (a bit mask); 0 or -1 (message printed). */
int cli_parse_op(const char *cmd, const char *s, int *ops);

/* ---- backends ------------------------------------------------------------------------- */

/* Where a call runs: a CPU path forced by name, or a CUDA device. */
typedef struct cli_backend {
  int is_cuda;
  const char *isa; /* CPU: "scalar", "avx2", ...; CUDA: NULL */
  int device;      /* CUDA device ordinal */
  char label[48];  /* "cpu:avx2", "cuda:0" */
} cli_backend;

#define CLI_MAX_BACKENDS 16
/* CPU paths zgate knows, in order. */
extern const char *const cli_cpu_isas[4];
/* Fill `out` with the backends selected by `spec` (NULL = every available one: each CPU path
 * this machine runs, each CUDA device); `skipped` (may be NULL) gets a line per path built
 * but not runnable here, for the report. Returns the count, or -1 after a message. */
int cli_backends(const char *cmd, const char *opt, const char *spec, cli_backend *out, char *skipped,
                 size_t nskipped); /* opt: the option that gave spec, for messages */

/* ---- CUDA runtime (stubs when the tool is built without CUDA) ------------------------- */

int cli_cuda_device_count(void); /* 0 when none, or no driver, or built without CUDA */
/* One line about device i (name, SMs, memory, capability). */
void cli_cuda_describe(int device, char *buf, size_t n);
void cli_cuda_versions(char *buf, size_t n); /* driver and runtime versions */
void *cli_cuda_malloc(int device, size_t bytes);  /* NULL on failure */
void cli_cuda_free(int device, void *p);
int cli_cuda_upload(int device, void *dst, const void *src, size_t bytes);   /* 0 = ok */
int cli_cuda_download(int device, void *dst, const void *src, size_t bytes); /* 0 = ok */
int cli_cuda_sync(int device);
/* Memset `bytes` of scratch to flush the L2 cache between timed calls. */
int cli_cuda_flush(int device, void *scratch, size_t bytes);
/* Events: start/stop around work on the legacy default stream; milliseconds between. */
typedef struct cli_cuda_timer cli_cuda_timer;
cli_cuda_timer *cli_cuda_timer_new(int device);
void cli_cuda_timer_free(cli_cuda_timer *t);
int cli_cuda_timer_start(cli_cuda_timer *t);
int cli_cuda_timer_stop(cli_cuda_timer *t, double *ms);
/* Device-to-device copy of `bytes` (the CUDA bandwidth ceiling). */
int cli_cuda_copy(int device, void *dst, const void *src, size_t bytes);
const char *cli_cuda_last_error(void);

/* ---- test tensors --------------------------------------------------------------------- */

/* One tensor of a case: a host allocation with guard regions before and after the view,
 * its strides, and (for CUDA) a device copy of the whole allocation. */
typedef struct cli_buf {
  DLDataType dtype;
  int esize;
  int64_t shape[4];
  int64_t strides[4];
  int64_t offset;      /* elements from the allocation's start to the view's first element */
  int64_t nslots;      /* elements in the allocation */
  unsigned char *host;
  unsigned char *snapshot; /* a copy taken before a call, to find writes outside the view */
  void *dev;
  int device;
  int on_device;
} cli_buf;

/* Allocate tensor `which` (CLI_DOUT..CLI_DOS) of `layout`; poisons it (all bits set, a NaN
 * in every dtype). Returns 0, or -1 when out of memory. */
int cli_buf_make(cli_buf *b, int which, cli_layout layout, const int64_t shape[4], DLDataType dtype);
/* The bytes cli_buf_make allocates for that tensor, guards included. */
double cli_buf_bytes(int which, cli_layout layout, const int64_t shape[4], DLDataType dtype);
void cli_buf_free(cli_buf *b);
/* The DLTensor of the view (host or device memory as the buffer says). */
DLTensor cli_buf_tensor(const cli_buf *b);
/* Element (i0,i1,i2,i3) of the view, as a double, and stores rounding to nearest even. */
double cli_buf_get(const cli_buf *b, const int64_t idx[4]);
void cli_buf_set(cli_buf *b, const int64_t idx[4], double v);
void cli_buf_poison(cli_buf *b);
int cli_buf_take_snapshot(cli_buf *b); /* 0, or -1 when out of memory */
/* Elements outside the view whose bytes changed since the snapshot. */
int64_t cli_buf_outside_writes(const cli_buf *b);
/* Move to a CUDA device (allocates and uploads the whole allocation) / download back. */
int cli_buf_to_device(cli_buf *b, int device);
int cli_buf_from_device(cli_buf *b);
int64_t cli_numel(const int64_t shape[4]);

/* Random numbers (splitmix64), reproducible from a seed. */
typedef struct cli_rng {
  uint64_t s;
} cli_rng;
uint64_t cli_rng_next(cli_rng *r);
double cli_rng_uniform(cli_rng *r); /* [0, 1) */
double cli_rng_normal(cli_rng *r);

/* ---- the machine (cli_system.c) -------------------------------------------------------- */

/* 0 when `need` bytes fit both the host memory available now (MemAvailable, /proc/meminfo)
 * and max_bytes (when > 0, from --max-memory); else -1 and `why` says "needs ... of memory, more than ..."
 * with both figures. Asked before a case allocates anything. */
int cli_memory_fits(double need, double max_bytes, char *why, size_t n);
void cli_bytes_str(double bytes, char *buf, size_t n); /* "23.8 GiB" */
/* 0 when `path` (the value of option `opt`) can be written: an existing writable file, or a
 * new name in a writable directory; else -1 after a message with the OS's reason. */
int cli_check_output(const char *cmd, const char *opt, const char *path);
/* /proc/loadavg's 1, 5 and 15 minute figures and the CPUs online; 0, or -1 (unknown). */
int cli_loadavg(double load[3], int *cpus);

/* ---- misc ----------------------------------------------------------------------------- */

double cli_now(void); /* monotonic seconds */
int cli_stderr_is_tty(void);
void cli_shape_str(const int64_t shape[4], char *buf, size_t n); /* "(2, 2048, 24, 64)" */
int cli_max_threads(void); /* OpenMP's default thread count, 1 without OpenMP */

/* Subcommands. */
int cli_cmd_info(int argc, char **argv);
int cli_cmd_check(int argc, char **argv);
int cli_cmd_bench(int argc, char **argv);

#endif /* ZGATE_CLI_H */
