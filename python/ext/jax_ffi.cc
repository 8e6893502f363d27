// zgate/libzgate_jax: XLA FFI handlers through which JAX runs zgate_bwd / zgate_fwd inside its
// programs (python/zgate/_jax.py registers them with jax.ffi and calls them by ffi_call).
// XLA allocates every buffer, compact row-major; on CUDA the kernel is queued on XLA's stream
// of the call's device. A refused call becomes an ffi::Error carrying zgate_last_error().
// Also exported: zgate_jax_validate, the library's own check of a call's shapes and dtypes,
// which _jax.py runs when tracing, so that bad input raises zgate.Error before XLA runs.
#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"
#include "zgate.h"

#ifdef ZGATE_JAX_CUDA
#include <cuda_runtime_api.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace ffi = xla::ffi;

#define ZGATE_JAX_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// DLPack's dtype of an XLA element type; false for those zgate does not take.
bool dl_dtype(ffi::DataType t, DLDataType *out) {
  switch (t) {
    case ffi::DataType::F32: *out = {kDLFloat, 32, 1}; return true;
    case ffi::DataType::F16: *out = {kDLFloat, 16, 1}; return true;
    case ffi::DataType::BF16: *out = {kDLBfloat, 16, 1}; return true;
    default: return false;
  }
}

// A DLTensor over an XLA buffer (strides NULL: compact row-major); its shape points into the
// buffer's dimensions, which outlive the call.
ffi::Error view(const char *name, const ffi::AnyBuffer &b, DLDevice dev, DLTensor *t) {
  DLDataType dt;
  if (!dl_dtype(b.element_type(), &dt))
    return ffi::Error::InvalidArgument(std::string("zgate: ") + name + ": XLA element type " +
                                       std::to_string(int(b.element_type())) +
                                       " is not float32, float16 or bfloat16");
  auto dims = b.dimensions();
  *t = DLTensor{b.untyped_data(), dev, int32_t(dims.size()), dt,
                const_cast<int64_t *>(dims.begin()), nullptr, 0};
  return ffi::Error::Success();
}

ffi::Error status_error(int st) {
  if (st == ZGATE_OK) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(std::string("zgate: ") + zgate_status_str(st) + " (" +
                                     std::to_string(st) + "): " + zgate_last_error());
}

zgate_options options(int32_t num_threads, void *stream) {
  zgate_options o;
  zgate_options_init(&o);
  o.num_threads = num_threads;
  o.cuda_stream = stream;
  return o;
}

ffi::Error bwd(DLDevice dev, void *stream, int32_t num_threads, ffi::AnyBuffer dout,
               ffi::AnyBuffer z, ffi::AnyBuffer o, ffi::Result<ffi::AnyBuffer> dz,
               ffi::Result<ffi::AnyBuffer> dout_scaled) {
  DLTensor t[5];
  const char *names[5] = {"dout", "z", "o", "dz", "dout_scaled"};
  const ffi::AnyBuffer *b[5] = {&dout, &z, &o, &*dz, &*dout_scaled};
  for (int i = 0; i < 5; i++) {
    ffi::Error e = view(names[i], *b[i], dev, &t[i]);
    if (e.failure()) return e;
  }
  zgate_options opts = options(num_threads, stream);
  return status_error(zgate_bwd(&t[0], &t[1], &t[2], &t[3], &t[4], &opts));
}

ffi::Error fwd(DLDevice dev, void *stream, int32_t num_threads, ffi::AnyBuffer o,
               ffi::AnyBuffer z, ffi::Result<ffi::AnyBuffer> out) {
  DLTensor t[3];
  const char *names[3] = {"o", "z", "out"};
  const ffi::AnyBuffer *b[3] = {&o, &z, &*out};
  for (int i = 0; i < 3; i++) {
    ffi::Error e = view(names[i], *b[i], dev, &t[i]);
    if (e.failure()) return e;
  }
  zgate_options opts = options(num_threads, stream);
  return status_error(zgate_fwd(&t[0], &t[1], &t[2], &opts));
}

// XLA runs CPU programs with subnormals flushed (x86 MXCSR FTZ and DAZ, Arm FPCR FZ); zgate's
// results keep them, as on every other path, so a CPU call runs with those modes cleared and
// restores them after. OpenMP threads the library starts inherit the cleared modes.
class KeepSubnormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  KeepSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ & ~kFlushBits); }
  ~KeepSubnormals() { _mm_setcsr(saved_); }

 private:
  static constexpr unsigned kFlushBits = 0x8040u;   // FTZ (bit 15), DAZ (bit 6)
  unsigned saved_;
#elif defined(__aarch64__)
  KeepSubnormals() {
    __asm__ volatile("mrs %0, fpcr" : "=r"(saved_));
    set(saved_ & ~(uint64_t(1) << 24));   // FZ
  }
  ~KeepSubnormals() { set(saved_); }

 private:
  static void set(uint64_t v) { __asm__ volatile("msr fpcr, %0" : : "r"(v)); }
  uint64_t saved_;
#endif
};

ffi::Error bwd_cpu(int32_t num_threads, ffi::AnyBuffer dout, ffi::AnyBuffer z, ffi::AnyBuffer o,
                   ffi::Result<ffi::AnyBuffer> dz, ffi::Result<ffi::AnyBuffer> dout_scaled) {
  KeepSubnormals ieee;
  return bwd(DLDevice{kDLCPU, 0}, nullptr, num_threads, dout, z, o, dz, dout_scaled);
}

ffi::Error fwd_cpu(int32_t num_threads, ffi::AnyBuffer o, ffi::AnyBuffer z,
                   ffi::Result<ffi::AnyBuffer> out) {
  KeepSubnormals ieee;
  return fwd(DLDevice{kDLCPU, 0}, nullptr, num_threads, o, z, out);
}

#ifdef ZGATE_JAX_CUDA
ffi::Error bwd_cuda(cudaStream_t stream, int32_t device, int32_t num_threads,
                    ffi::AnyBuffer dout, ffi::AnyBuffer z, ffi::AnyBuffer o,
                    ffi::Result<ffi::AnyBuffer> dz, ffi::Result<ffi::AnyBuffer> dout_scaled) {
  return bwd(DLDevice{kDLCUDA, device}, stream, num_threads, dout, z, o, dz, dout_scaled);
}

ffi::Error fwd_cuda(cudaStream_t stream, int32_t device, int32_t num_threads, ffi::AnyBuffer o,
                    ffi::AnyBuffer z, ffi::Result<ffi::AnyBuffer> out) {
  return fwd(DLDevice{kDLCUDA, device}, stream, num_threads, o, z, out);
}
#endif

}  // namespace

// The handlers' C symbols, which _jax.py wraps with jax.ffi.pycapsule.
ZGATE_JAX_EXPORT XLA_FFI_Error *zgate_jax_bwd_cpu(XLA_FFI_CallFrame *);
ZGATE_JAX_EXPORT XLA_FFI_Error *zgate_jax_fwd_cpu(XLA_FFI_CallFrame *);

XLA_FFI_DEFINE_HANDLER_SYMBOL(zgate_jax_bwd_cpu, bwd_cpu,
                              ffi::Ffi::Bind()
                                  .Attr<int32_t>("num_threads")
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(zgate_jax_fwd_cpu, fwd_cpu,
                              ffi::Ffi::Bind()
                                  .Attr<int32_t>("num_threads")
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

#ifdef ZGATE_JAX_CUDA
ZGATE_JAX_EXPORT XLA_FFI_Error *zgate_jax_bwd_cuda(XLA_FFI_CallFrame *);
ZGATE_JAX_EXPORT XLA_FFI_Error *zgate_jax_fwd_cuda(XLA_FFI_CallFrame *);

XLA_FFI_DEFINE_HANDLER_SYMBOL(zgate_jax_bwd_cuda, bwd_cuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Attr<int32_t>("num_threads")
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(zgate_jax_fwd_cuda, fwd_cuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Attr<int32_t>("num_threads")
                                  .Arg<ffi::AnyBuffer>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::AnyBuffer>());
#endif

// 1 where the CUDA handlers are built (libzgate built with CUDA), else 0.
ZGATE_JAX_EXPORT int zgate_jax_cuda_built(void) {
#ifdef ZGATE_JAX_CUDA
  return 1;
#else
  return 0;
#endif
}

// The library's validation of a call with these shapes and DLPack dtypes (bwd: dout, z, o,
// dz, dout_scaled; fwd: o, z, out), on data-less CPU tensors: ZGATE_OK or
// ZGATE_ERR_NULL_DATA where the call is valid (nothing is read or written either way), or the
// status that refuses it, zgate_last_error() then naming the tensor and dimension.
ZGATE_JAX_EXPORT int zgate_jax_validate(int is_bwd, const int32_t *ndim,
                                        int64_t *const *shape, const uint8_t *code,
                                        const uint8_t *bits, int32_t num_threads) {
  DLTensor t[5];
  for (int i = 0; i < (is_bwd ? 5 : 3); i++)
    t[i] = DLTensor{nullptr, DLDevice{kDLCPU, 0}, ndim[i], DLDataType{code[i], bits[i], 1},
                    shape[i], nullptr, 0};
  zgate_options opts = options(num_threads, nullptr);
  return is_bwd ? zgate_bwd(&t[0], &t[1], &t[2], &t[3], &t[4], &opts)
                : zgate_fwd(&t[0], &t[1], &t[2], &opts);
}
