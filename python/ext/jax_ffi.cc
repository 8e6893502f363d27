// zgate/libzgate_jax: XLA FFI handlers through which JAX runs zgate_bwd / zgate_fwd inside its
// programs (python/zgate/_jax.py registers them with jax.ffi and calls them by ffi_call).
// One handler per platform serves both ops: three buffers in and two out is the backward
// (dout, z, o -> dz, dout_scaled), two in and one out the forward (o, z -> out).
// XLA allocates every buffer, compact row-major; on CUDA the kernel is queued on XLA's stream
// of the call's device. A refused call becomes an ffi::Error carrying zgate_last_error().
// Also exported: zgate_jax_validate, the library's own check of a call's shapes and dtypes,
// which _jax.py runs when tracing, so that bad input raises zgate.Error before XLA runs.
#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"
#include "zgate.h"
#include "zgate_private.h"

#ifdef ZGATE_JAX_CUDA
#include <cuda_runtime_api.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace ffi = xla::ffi;

#define ZGATE_JAX_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// zgate_bwd on t = (dout, z, o, dz, dout_scaled) or zgate_fwd on t = (o, z, out).
int call(bool is_bwd, DLTensor *t, int32_t num_threads, void *stream) {
  zgate_options o;
  zgate_options_init(&o);
  o.num_threads = num_threads;
  o.cuda_stream = stream;
  return is_bwd ? zgate_bwd(&t[0], &t[1], &t[2], &t[3], &t[4], &o)
                : zgate_fwd(&t[0], &t[1], &t[2], &o);
}

// A DLTensor over an XLA buffer (strides NULL: compact row-major); its shape points into the
// buffer's dimensions, which outlive the call.
ffi::Error view(const char *name, const ffi::AnyBuffer &b, DLDevice dev, DLTensor *t) {
  DLDataType dt;
  switch (b.element_type()) {
    case ffi::DataType::F32: dt = {kDLFloat, 32, 1}; break;
    case ffi::DataType::F16: dt = {kDLFloat, 16, 1}; break;
    case ffi::DataType::BF16: dt = {kDLBfloat, 16, 1}; break;
    default:
      return ffi::Error::InvalidArgument(std::string("zgate: ") + name + ": XLA element type " +
                                         std::to_string(int(b.element_type())) +
                                         " is not float32, float16 or bfloat16");
  }
  auto dims = b.dimensions();
  *t = DLTensor{b.untyped_data(), dev, int32_t(dims.size()), dt,
                const_cast<int64_t *>(dims.begin()), nullptr, 0};
  return ffi::Error::Success();
}

ffi::Error gate(DLDevice dev, void *stream, int32_t num_threads, ffi::RemainingArgs args,
                ffi::RemainingRets rets) {
  const size_t n_in = args.size();
  const bool is_bwd = n_in == size_t(zg_ops[ZG_OP_BWD].n_in);
  const zg_op_desc &op = zg_ops[is_bwd ? ZG_OP_BWD : ZG_OP_FWD];
  if (n_in != size_t(op.n_in) || rets.size() != size_t(op.n_out))
    return ffi::Error::InvalidArgument("zgate: a call takes (dout, z, o) -> (dz, dout_scaled) "
                                       "or (o, z) -> out");
  DLTensor t[ZG_MAX_TENSORS];
  for (size_t i = 0; i < n_in; i++) {
    ffi::ErrorOr<ffi::AnyBuffer> b = args.get<ffi::AnyBuffer>(i);
    if (b.has_error()) return b.error();
    ffi::Error e = view(op.tensors[i], *b, dev, &t[i]);
    if (e.failure()) return e;
  }
  for (size_t i = 0; i < rets.size(); i++) {
    ffi::ErrorOr<ffi::Result<ffi::AnyBuffer>> b = rets.get<ffi::AnyBuffer>(i);
    if (b.has_error()) return b.error();
    ffi::Error e = view(op.tensors[n_in + i], **b, dev, &t[n_in + i]);
    if (e.failure()) return e;
  }
  int st = call(is_bwd, t, num_threads, stream);
  if (st == ZGATE_OK) return ffi::Error::Success();
  return ffi::Error::InvalidArgument(std::string("zgate: ") + zgate_status_str(st) + " (" +
                                     std::to_string(st) + "): " + zgate_last_error());
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

ffi::Error gate_cpu(int32_t num_threads, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  KeepSubnormals ieee;
  return gate(DLDevice{kDLCPU, 0}, nullptr, num_threads, args, rets);
}

#ifdef ZGATE_JAX_CUDA
ffi::Error gate_cuda(cudaStream_t stream, int32_t device, int32_t num_threads,
                     ffi::RemainingArgs args, ffi::RemainingRets rets) {
  return gate(DLDevice{kDLCUDA, device}, stream, num_threads, args, rets);
}
#endif

}  // namespace

// The handlers' C symbols, which _jax.py registers with jax.ffi.
ZGATE_JAX_EXPORT XLA_FFI_Error *zgate_jax_cpu(XLA_FFI_CallFrame *);
XLA_FFI_DEFINE_HANDLER_SYMBOL(zgate_jax_cpu, gate_cpu,
                              ffi::Ffi::Bind()
                                  .Attr<int32_t>("num_threads")
                                  .RemainingArgs()
                                  .RemainingRets());

#ifdef ZGATE_JAX_CUDA   // its absence tells _jax.py that JAX arrays on a GPU are refused
ZGATE_JAX_EXPORT XLA_FFI_Error *zgate_jax_cuda(XLA_FFI_CallFrame *);
XLA_FFI_DEFINE_HANDLER_SYMBOL(zgate_jax_cuda, gate_cuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ctx<ffi::DeviceOrdinal>()
                                  .Attr<int32_t>("num_threads")
                                  .RemainingArgs()
                                  .RemainingRets());
#endif

// The library's validation of a call on data-less CPU tensors (bwd: dout, z, o, dz,
// dout_scaled; fwd: o, z, out), each described in `desc` as (ndim, DLPack code, bits, shape...):
// ZGATE_OK or ZGATE_ERR_NULL_DATA where the call is valid (nothing is read or written either
// way), or the status that refuses it, zgate_last_error() then naming the tensor and dimension.
ZGATE_JAX_EXPORT int zgate_jax_validate(int is_bwd, int64_t *desc, int32_t num_threads) {
  DLTensor t[ZG_MAX_TENSORS];
  const zg_op_desc &op = zg_ops[is_bwd ? ZG_OP_BWD : ZG_OP_FWD];
  for (int i = 0; i < op.n_in + op.n_out; desc += 3 + desc[0], i++)
    t[i] = DLTensor{nullptr, DLDevice{kDLCPU, 0}, int32_t(desc[0]),
                    DLDataType{uint8_t(desc[1]), uint8_t(desc[2]), 1}, desc + 3, nullptr, 0};
  return call(is_bwd, t, num_threads, nullptr);
}
