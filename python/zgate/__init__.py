"""zgate: Mamba-3's SiLU output gate and its backward, on CPUs and NVIDIA GPUs.

    s = sigmoid(z)
    fwd:  out         = o * z * s
    bwd:  dz          = dout * o * s * (1 + z * (1 - s))
          dout_scaled = dout * s * z

Arrays of NumPy (bfloat16 from ml_dtypes), PyTorch, CuPy and any DLPack or CUDA Array
Interface producer are read by zgate._binding (python/ext), their one path into libzgate;
new outputs are of the first array's kind. JAX arrays go through XLA's FFI (zgate._jax), under
jax.jit too. PyTorch's custom ops, autograd and torch.compile: ``zgate.torch`` (imported on
demand: this package works without PyTorch). docs/api.md has the details.
"""
import sys

from ._errors import Error, Status

__version__ = "0.1.0"

__all__ = ["bwd", "fwd", "reference_bwd", "reference_fwd", "Error", "Status", "info",
           "library_path", "__version__"]

try:
    from . import _binding
except ImportError:   # a source tree: zgate.triton and zgate._errors work without it
    _missing = ("zgate._binding is not built in %s: install the package (pip install .)"
                % __path__[0])

    class _Absent:
        def __getattr__(self, name):
            raise Error(None, _missing)
    _binding = _Absent()
else:
    from . import _kinds
    _binding.configure(_kinds.classify, _kinds.reference_like)


def _compiling():
    """Whether torch.compile is tracing the caller: its calls go through zgate.torch's custom
    ops, since a compiled function cannot be traced. False where PyTorch is not imported."""
    t = sys.modules.get("torch")
    return t is not None and t.compiler.is_compiling()


def _jax_call(first, rest):
    """Whether a call goes to zgate._jax: its first array is a JAX array, or another is a JAX
    tracer (a jax.jit being traced). False where JAX is not imported."""
    jax = sys.modules.get("jax")
    return jax is not None and (isinstance(first, jax.Array) or any(
        isinstance(a, jax.core.Tracer) for a in rest))


def bwd(dout, z, o, *, dz=None, dout_scaled=None, inplace=False, num_threads=0):
    """Backward of the gate: returns (dz, dout_scaled).

    dz = dout * o * s * (1 + z * (1 - s)), dout_scaled = dout * s * z, s = sigmoid(z), in
    float32 math. New outputs are of dout's kind, device and dtype, compact; given ones
    (dz=, dout_scaled=) are written in their own dtype (float32, float16 or bfloat16).
    inplace=True writes dout_scaled into dout. num_threads: CPU threads (0 = the OpenMP
    default). CUDA work is queued, not waited for, on the stream the arrays name: PyTorch's
    current stream, the one a CUDA Array Interface names (CuPy's current stream), else the
    legacy default stream.

    JAX arrays (dout a JAX array, or any input traced by jax.jit): an XLA custom call on XLA's
    stream, eager or jitted, returning new JAX arrays (JAX arrays are immutable: no given
    outputs, no inplace). Shapes and dtypes are checked when the call is traced (zgate.Error).
    """
    if _compiling():
        from .torch import traced_bwd
        return traced_bwd(dout, z, o, dz, dout_scaled, inplace)
    if _jax_call(dout, (z, o)):
        from . import _jax
        return _jax.bwd(dout, z, o, dz, dout_scaled, inplace, num_threads)
    return _binding.bwd(dout, z, o, dz, dout_scaled, inplace, num_threads)


def fwd(o, z, *, out=None, num_threads=0):
    """Forward of the gate: out = o * z * sigmoid(z) (float32 math), returned.

    A new `out` is of o's kind, device and dtype, compact; a given one is written in its own
    dtype. Streams and JAX arrays as for bwd."""
    if _compiling():
        from .torch import traced_fwd
        return traced_fwd(o, z, out)
    if _jax_call(o, (z,)):
        from . import _jax
        return _jax.fwd(o, z, out, num_threads)
    return _binding.fwd(o, z, out, num_threads)


def reference_bwd(dout, z, o, *, dz=None, dout_scaled=None):
    """The library's float64 reference of bwd (CPU arrays only, single-threaded).

    New outputs are NumPy float64 arrays (the unrounded reference); given outputs may also
    be float32/float16/bfloat16."""
    return _binding.reference_bwd(dout, z, o, dz, dout_scaled)


def reference_fwd(o, z, *, out=None):
    """The library's float64 reference of fwd (CPU arrays only); a new out is NumPy float64."""
    return _binding.reference_fwd(o, z, out)


def library_path():
    """The path of the loaded libzgate."""
    return _binding.info()["library"]


def info():
    """What the loaded library was built with and chooses, and the CUDA devices it sees, as a
    dict: cuda_device_count, then cuda_devices (their names) or cuda_unavailable (why none)."""
    count, text = _binding.cuda_devices()
    return dict(_binding.info(), python_package_version=__version__, cuda_device_count=count,
                **{"cuda_devices" if count else "cuda_unavailable": text})


def __getattr__(name):
    # `zgate.torch` without importing PyTorch at `import zgate` time.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'zgate' has no attribute %r" % name)
