"""zgate: Mamba-3's SiLU output gate and its backward, on CPUs and NVIDIA GPUs.

    s = sigmoid(z)
    fwd:  out         = o * z * s
    bwd:  dz          = dout * o * s * (1 + z * (1 - s))
          dout_scaled = dout * s * z

A thin ctypes binding over the C library libzgate (shipped inside this package, or named by
the ZGATE_LIBRARY environment variable), with the hot path of PyTorch calls compiled
(zgate._hot, beside the library). Arrays are exchanged through DLPack: NumPy (with
ml_dtypes for bfloat16), PyTorch (CPU and CUDA), CuPy and JAX arrays are accepted, and
outputs come back as the same kind. PyTorch autograd and torch.compile support is in
``zgate.torch`` (imported on demand, so this package works without PyTorch).
"""
from ._core import bwd, fwd, reference_bwd, reference_fwd
from ._lib import Error, Status

__version__ = "0.1.0"

__all__ = ["bwd", "fwd", "reference_bwd", "reference_fwd", "Error", "Status", "info",
           "library_path", "__version__"]


def library_path():
    """The path of the loaded libzgate."""
    from . import _lib
    return _lib.path()


def info():
    """What the loaded library was built with and chooses, as a dict."""
    from . import _lib
    lib = _lib.load()
    built = lib.zgate_cpu_isas_built().decode()
    return {
        "version": lib.zgate_version().decode(),
        "python_package_version": __version__,
        "library": _lib.path(),
        "cpu_isas_built": built.split(),
        "cpu_isas_available": [i for i in built.split()
                               if lib.zgate_cpu_isa_available(i.encode())],
        "cpu_isa_chosen": lib.zgate_cpu_isa_chosen().decode(),
        "cuda_built": bool(lib.zgate_cuda_built()),
        "build_info": lib.zgate_build_info().decode(),
        # the compiled hot path of PyTorch calls: its file, or why it is not used
        "hot_path": _lib.hot().__file__ if _lib.hot() is not None else "absent: " + _lib.hot_why(),
    }


def __getattr__(name):
    # `zgate.torch` without importing PyTorch at `import zgate` time.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'zgate' has no attribute %r" % name)
