/*
 * zgate: Mamba-3's SiLU output gate and its backward, on CPUs and NVIDIA GPUs.
 *
 *   forward   out        = o * silu(z) = o * z * s,          s = sigmoid(z)
 *   backward  dz         = dout * o * s * (1 + z * (1 - s))
 *             dout_scaled = dout * s * z
 *
 * The gate is elementwise: the tensors of one call share one shape of any rank 0 ..
 * ZGATE_MAX_NDIM (rank 0 = one element), any sizes >= 0, any non-negative element strides
 * (NULL = compact row-major), byte_offset honoured, dtype float32, float16 or bfloat16 chosen
 * per tensor. Mamba-3 calls it on (batch, seqlen, nheads, headdim); no rank is required. Math is float32; outputs are
 * rounded to nearest even in their own dtype. All tensors live on one device: the CPU
 * (kDLCPU) or one CUDA GPU (kDLCUDA, when the library was built with CUDA).
 *
 * Every entry point returns ZGATE_OK (0) or a zgate_status code; on error nothing has been
 * written. zgate_status_str() names each code; zgate_last_error() gives the calling
 * thread's message for its last failed call (which tensor, which dimension).
 *
 * Plain C11; usable from C++.
 */
#ifndef ZGATE_H
#define ZGATE_H

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#define ZGATE_VERSION_MAJOR 0
#define ZGATE_VERSION_MINOR 1
#define ZGATE_VERSION_PATCH 0
#define ZGATE_VERSION_STRING "0.1.0"
/* One integer that orders versions: 10000 * major + 100 * minor + patch. */
#define ZGATE_VERSION (ZGATE_VERSION_MAJOR * 10000 + ZGATE_VERSION_MINOR * 100 + ZGATE_VERSION_PATCH)

#if defined(_WIN32)
#define ZGATE_API __declspec(dllexport)
#elif defined(__GNUC__)
#define ZGATE_API __attribute__((visibility("default")))
#else
#define ZGATE_API
#endif

/* The highest tensor rank the entry points take. */
#define ZGATE_MAX_NDIM 8

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. 0 is success; values are stable across versions. */
typedef enum zgate_status {
  ZGATE_OK = 0,
  ZGATE_ERR_NULL_ARGUMENT = 1,    /* a required tensor pointer (or its shape, ndim > 0) is NULL */
  ZGATE_ERR_NULL_DATA = 2,        /* data is NULL but the tensor has elements */
  ZGATE_ERR_NDIM = 3,             /* ndim is outside 0..ZGATE_MAX_NDIM (0..8) */
  ZGATE_ERR_NEGATIVE_SIZE = 4,    /* a shape entry is negative */
  ZGATE_ERR_SHAPE_MISMATCH = 5,   /* the tensors' shapes (ndim or sizes) differ */
  ZGATE_ERR_NEGATIVE_STRIDE = 6,  /* a stride is negative */
  ZGATE_ERR_OUTPUT_SELF_OVERLAP = 7, /* two elements of one output share memory (e.g. zero stride) */
  ZGATE_ERR_DTYPE = 8,            /* dtype is not float32, float16 or bfloat16 */
  ZGATE_ERR_LANES = 9,            /* dtype.lanes is not 1 */
  ZGATE_ERR_OVERFLOW = 10,        /* sizes, strides or byte_offset overflow 64-bit byte arithmetic */
  ZGATE_ERR_MISALIGNED = 11,      /* data + byte_offset is not aligned to the element size */
  ZGATE_ERR_ALIAS = 12,           /* an output overlaps another output or an input */
  ZGATE_ERR_INPLACE_MISMATCH = 13, /* dout_scaled starts where dout starts but has another dtype or strides */
  ZGATE_ERR_DEVICE_MISMATCH = 14, /* the tensors are not all on one device */
  ZGATE_ERR_DEVICE_UNSUPPORTED = 15, /* a device type zgate does not handle */
  ZGATE_ERR_NO_CUDA = 16,         /* a CUDA tensor, but this library was built without CUDA */
  ZGATE_ERR_CUDA = 17,            /* the CUDA runtime reported an error (see zgate_last_error) */
  ZGATE_ERR_OPTIONS = 18,         /* zgate_options is malformed (struct_size, num_threads, cpu_isa) */
  ZGATE_ERR_ISA_UNAVAILABLE = 19, /* the requested CPU ISA was not built or this CPU lacks it */
  ZGATE_ERR_INTERNAL = 20         /* a bug in zgate: please report it */
} zgate_status;

/* A message for every status code (never NULL; unknown codes get "unknown status"). */
ZGATE_API const char *zgate_status_str(int status);

/* The calling thread's message for its last failed call, naming the tensor and dimension
 * at fault; "" when the thread's last call succeeded. Valid until the thread's next call. */
ZGATE_API const char *zgate_last_error(void);

/*
 * Per-call options. Always initialise with zgate_options_init() (or ZGATE_OPTIONS_INIT)
 * and then set fields: struct_size records which fields the caller knows, so that fields
 * added in later versions take their defaults for older callers.
 */
typedef struct zgate_options {
  size_t struct_size;  /* sizeof(zgate_options) as compiled by the caller */
  int num_threads;     /* CPU threads; 0 = the OpenMP default (OMP_NUM_THREADS / all cores) */
  const char *cpu_isa; /* force a CPU path ("scalar", "avx2", "avx512", "neon"); NULL = the
                          process-wide choice (best available, or env ZGATE_CPU_ISA) */
  void *cuda_stream;   /* cudaStream_t to run on; NULL = the legacy default stream (0) of
                          the tensors' device. The device comes from the tensors. */
} zgate_options;

#define ZGATE_OPTIONS_INIT {sizeof(zgate_options), 0, NULL, NULL}

ZGATE_API void zgate_options_init(zgate_options *opts);

/*
 * Backward of the gate. Every tensor has the one shape S (the Mamba use: S = (batch,
 * seqlen, nheads, headdim)).
 *   [in]  dout        S incoming gradient of the gate's output
 *   [in]  z           S gate input; often a strided view into the input projection
 *   [in]  o           S pre-gate output
 *   [out] dz          S gradient with respect to z
 *   [out] dout_scaled S dout * silu(z); may be the very tensor dout (in place: same data,
 *                     byte_offset, dtype and strides)
 *   [in]  opts        NULL for defaults
 */
ZGATE_API int zgate_bwd(const DLTensor *dout, const DLTensor *z, const DLTensor *o, DLTensor *dz,
                        DLTensor *dout_scaled, const zgate_options *opts);

/*
 * Forward of the gate: out = o * z * sigmoid(z). Every tensor has the one shape S.
 *   [in]  o   S
 *   [in]  z   S
 *   [out] out S; may not overlap o or z
 */
ZGATE_API int zgate_fwd(const DLTensor *o, const DLTensor *z, DLTensor *out, const zgate_options *opts);

/*
 * Float64 references, for self-checks and tests: the same formulas evaluated in double on
 * the widened inputs, on CPU tensors only, single-threaded. They accept float64 tensors
 * (kDLFloat, 64 bits) in any position besides the three dtypes above, so a caller can get
 * the unrounded reference. Same validation and status codes as zgate_bwd / zgate_fwd.
 */
ZGATE_API int zgate_bwd_reference(const DLTensor *dout, const DLTensor *z, const DLTensor *o,
                                  DLTensor *dz, DLTensor *dout_scaled);
ZGATE_API int zgate_fwd_reference(const DLTensor *o, const DLTensor *z, DLTensor *out);

/* Version and build information. */
ZGATE_API const char *zgate_version(void);        /* ZGATE_VERSION_STRING of the library */
ZGATE_API const char *zgate_cpu_isas_built(void); /* e.g. "scalar avx2 avx512" */
ZGATE_API const char *zgate_cpu_isa_chosen(void); /* the path zgate_bwd uses by default */
/* 1 when the named CPU path is built and this CPU (and OS) can run it, else 0. */
ZGATE_API int zgate_cpu_isa_available(const char *isa);
ZGATE_API int zgate_cuda_built(void);              /* 1 when built with the CUDA backend */
/* One line: version, CPU paths built, CPU path chosen, CUDA built or not. */
ZGATE_API const char *zgate_build_info(void);

#ifdef __cplusplus
}
#endif

#endif /* ZGATE_H */
