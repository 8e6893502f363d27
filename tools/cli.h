/* Shared pieces of the `zgate` command: options, backends, test tensors, the machine.
 * Every failure the user can cause is reported in their words by cli_error() and turned
 * into a nonzero exit by the subcommand; nothing here aborts. */
#ifndef ZGATE_CLI_H
#define ZGATE_CLI_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include <zgate.h>
#include <zgate_cases.h>
#include <zgate_private.h> /* zg_ops: each operator's operands by name */

/* Exit codes of every subcommand: 1 when a check failed or zgate returned an error, 2 for
 * bad options or an output path that cannot be written (nothing is run), 3 when something
 * asked for did not run (not enough memory, no device) and nothing failed. */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2, CLI_EXIT_NOT_RUN = 3 };

/* printf-style functions, their format checked where the compiler can. */
#if defined(__GNUC__)
#define CLI_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define CLI_PRINTF(fmt, args)
#endif

/* "zgate <cmd>: <message>" on stderr. */
CLI_PRINTF(2, 3) void cli_error(const char *cmd, const char *fmt, ...);

/* A case's tensors by slot: the backward's operands in its signature's order (ZG_BWD_DOUT ..
 * ZG_BWD_DOS, zg_ops[ZG_OP_BWD].tensors), whose dtypes and views cases.def gives. Another
 * operator's operand i sits in slot cli_slot(op, i): the forward's o, z and out in o's, z's
 * and dz's. */
enum { CLI_NSLOTS = 5 };
static inline int cli_slot(zg_op op, int i) { return op == ZG_OP_FWD ? zgate_case_fwd_slot[i] : i; }
int cli_nargs(zg_op op);              /* the operator's inputs plus outputs */
int cli_uses(zg_op op, int slot);     /* 1 when one of op's operands sits in slot */
typedef struct cli_dtypes {
  DLDataType t[CLI_NSLOTS];
} cli_dtypes;
#define CLI_F32 ((DLDataType)ZGC_F32)
#define CLI_BF16 ((DLDataType)ZGC_BF16)
/* The dtypes of op's operands, one name when they agree ("bf16"), else each by its name in
 * the signature ("dout=bf16 z=f32 ...", "o=bf16 z=f32 out=f16"). */
void cli_dtypes_str(const cli_dtypes *d, zg_op op, char *buf, size_t n);

/* Layouts of the test and benchmark tensors: cases.def's, each a view per tensor. */
typedef enum cli_layout {
  CLI_DENSE = ZGATE_CASE_LAYOUT_dense,
  CLI_ZVIEW = ZGATE_CASE_LAYOUT_zview,
  CLI_PERMUTED = ZGATE_CASE_LAYOUT_permuted,
  CLI_INPLACE = ZGATE_CASE_LAYOUT_inplace,
  CLI_NLAYOUTS = ZGATE_CASE_NLAYOUTS
} cli_layout;
#define cli_layout_names zgate_case_layout_names
extern const char *const cli_layout_about[CLI_NLAYOUTS]; /* what each name means, in words */

/* ---- options -------------------------------------------------------------------------- */

#define CLI_MAX_SHAPES 32
#define CLI_MAX_DTYPES 16

/* The options of `zgate check` and `zgate bench`; each command takes the shared ones and
 * its own (CLI_SHARED_OPTS plus its table). */
/* Where a view's first element sits within a 64-byte line: 16 bytes past one, where glibc's
 * malloc puts every block it maps (large buffers as users allocate them; NumPy's too), or on
 * a line. Fixed, not whatever malloc returns this time, so that runs compare. */
typedef enum { CLI_PLACE_MALLOC, CLI_PLACE_LINE } cli_placement;

typedef struct cli_cfg {
  const char *cmd;
  int64_t shapes[CLI_MAX_SHAPES][4];
  int nshapes;
  cli_dtypes dtypes[CLI_MAX_DTYPES];
  int ndtypes;
  unsigned layouts;                       /* bit i = layout i */
  const char *backend_spec, *backend_opt; /* backend_opt: --backend or --isa, for messages */
  double max_memory;                      /* bytes a case may take, 0 = what is available */
  int threads;
  unsigned ops; /* bit op (zg_op) */
  const char *report;
  int special;
  int repeats, warmup, settle, plot;
  cli_placement placement; /* of every tensor (bench --aligned) */
  const char *json, *png;
} cli_cfg;

/* The options both commands take, the start of their getopt_long tables. Each option's val is
 * a letter that cli_parse knows; only --name is accepted (and -h). check adds report 'r' and
 * no-special 'S'; bench repeats 'n', warmup 'w', settle 'q', json 'j', png 'p', no-plot 'P',
 * aligned 'A'. */
#define CLI_SHARED_OPTS                                                                                     \
  {"help", 0, NULL, 'h'}, {"shape", 1, NULL, 's'}, {"dtype", 1, NULL, 'd'}, {"layout", 1, NULL, 'l'},       \
      {"backend", 1, NULL, 'b'}, {"isa", 1, NULL, 'i'}, {"op", 1, NULL, 'o'}, {"threads", 1, NULL, 't'}, \
      {"max-memory", 1, NULL, 'm'}

/* Parses argv[1..] against `opts` (ended by a zero entry) into cfg. Returns 0, -1 for --help
 * (the caller prints it), or CLI_EXIT_USAGE after saying why (unknown option, missing or bad
 * value, stray argument). */
int cli_parse(cli_cfg *cfg, int argc, char **argv, const struct option *opts);
/* Checks that `path` (the value of option `opt`) can be written: an existing writable file,
 * or a new name in a writable directory; 0, or -1 after a message with the OS's reason. */
int cli_check_output(const char *cmd, const char *opt, const char *path);

/* ---- backends ------------------------------------------------------------------------- */

/* Where a call runs: a CPU path forced by name, or a CUDA device. */
typedef struct cli_backend {
  int is_cuda;
  const char *isa; /* CPU: "scalar", "avx2", ...; CUDA: NULL */
  int device;      /* CUDA device ordinal */
  char label[48];  /* "cpu:avx2", "cuda:0" */
} cli_backend;

#define CLI_MAX_BACKENDS 16
extern const char *const cli_cpu_isas[4]; /* the CPU paths zgate knows, in order */
/* Fills `out` with the backends `spec` names ("all": each CPU path this machine runs, each
 * CUDA device); `skipped` (may be NULL) gets a line per path built but not runnable here,
 * for the report. `opt` is the option that gave spec, for messages. Returns the count, or -1
 * after a message. */
int cli_backends(const char *cmd, const char *opt, const char *spec, cli_backend *out, char *skipped,
                 size_t nskipped);

/* ---- test tensors --------------------------------------------------------------------- */

/* One tensor of a case: a host allocation with guard regions before and after the view,
 * its strides, and (for CUDA) a device copy of the whole allocation. */
typedef struct cli_buf {
  DLDataType dtype;
  int esize;
  int64_t shape[4];
  int64_t strides[4];
  int64_t offset; /* elements from the allocation's start to the view's first element */
  int64_t nslots; /* elements in the allocation */
  unsigned char *host;
  unsigned char *snapshot; /* a copy taken before a call, to find writes outside the view */
  void *dev;
  int device;
  int on_device;
} cli_buf;

/* Allocates the tensor of slot `which` of `layout` at `placement`, poisoned (all bits
 * set, a NaN in every dtype). Returns 0, or -1 when out of memory. */
int cli_buf_make(cli_buf *b, int which, cli_layout layout, const int64_t shape[4], DLDataType dtype,
                 cli_placement placement);
/* The bytes cli_buf_make allocates for that tensor, guards included. */
double cli_buf_bytes(int which, cli_layout layout, const int64_t shape[4], DLDataType dtype);
void cli_buf_free(cli_buf *b);
/* The view's first element in host memory. */
unsigned char *cli_buf_first(const cli_buf *b);
/* The DLTensor of the view, in device or host memory as the buffer says. */
DLTensor cli_buf_tensor(const cli_buf *b);
/* Element (i0,i1,i2,i3) of the view, as a double, and stores rounding to nearest even. */
double cli_buf_get(const cli_buf *b, const int64_t idx[4]);
void cli_buf_set(cli_buf *b, const int64_t idx[4], double v);
void cli_buf_poison(cli_buf *b);
int cli_buf_take_snapshot(cli_buf *b); /* 0, or -1 when out of memory */
/* Elements outside the view whose bytes changed since the snapshot; -1 when it cannot look
 * (no snapshot, or out of memory): never a pass. */
int64_t cli_buf_outside_writes(const cli_buf *b);
int64_t cli_numel(const int64_t shape[4]);
/* Operator op on the tensors of its slots in b[], where dout_scaled goes to `dos`
 * (b[ZG_BWD_DOS], or b[ZG_BWD_DOUT] in place), on each buffer's device or host copy.
 * Returns zgate's status. */
int cli_call(zg_op op, cli_buf *b, cli_buf *dos, const zgate_options *opts);

/* Random numbers (splitmix64), reproducible from a seed. */
typedef struct cli_rng {
  uint64_t s;
} cli_rng;
double cli_rng_uniform(cli_rng *r); /* [0, 1) */
double cli_rng_normal(cli_rng *r);

/* ---- CUDA (stubs saying so when the tool is built without CUDA) ------------------------ */

int cli_cuda_device_count(void); /* 0 when none, or no driver, or built without CUDA */
/* One line about device i (name, SMs, memory, capability); device -1: driver and runtime. */
void cli_cuda_describe(int device, char *buf, size_t n);
const char *cli_cuda_last_error(void);
/* Uploads every allocated buffer of b[0..n-1] to `device` (allocating its copy), or downloads
 * the ones on a device back; 0, or -1 (cli_cuda_last_error says why). */
int cli_bufs_to_device(cli_buf *b, int n, int device);
int cli_bufs_to_host(cli_buf *b, int n);
void cli_cuda_free(int device, void *p);
int cli_cuda_sync(int device);
/* Times `reps` runs (after one untimed run) on `device` with events, the L2 cache flushed
 * before each: of fn(ctx), or with fn NULL of a device-to-device copy of copy_bytes.
 * secs[r] gets each run's seconds. 0, or -1 (cli_cuda_last_error says why). */
int cli_cuda_time(int device, int (*fn)(void *), void *ctx, size_t copy_bytes, int reps, double *secs);

/* ---- the machine (cli_system.c) -------------------------------------------------------- */

/* 0 when `need` bytes fit both the host memory available now (MemAvailable, /proc/meminfo)
 * and max_bytes (when > 0, from --max-memory); else -1 and `why` says "needs ... of memory,
 * more than ..." with both figures. Asked before a case allocates anything. */
int cli_memory_fits(double need, double max_bytes, char *why, size_t n);
/* /proc/loadavg's 1, 5 and 15 minute figures and the CPUs online; 0, or -1 (unknown). */
int cli_loadavg(double load[3], int *cpus);
double cli_now(void);                                            /* monotonic seconds */
void cli_shape_str(const int64_t shape[4], char *buf, size_t n); /* "(2, 2048, 24, 64)" */
int cli_max_threads(void); /* OpenMP's default thread count, 1 without OpenMP */

int cli_cmd_check(int argc, char **argv);
int cli_cmd_bench(int argc, char **argv);

#endif /* ZGATE_CLI_H */
