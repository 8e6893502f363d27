"""Finding and loading libzgate, its ctypes prototypes, status codes and zgate.Error."""
import ctypes
import enum
import os
import re
import sys
import threading


class Status(enum.IntEnum):
    """zgate_status codes, mirrored from include/zgate.h (values are stable)."""

    OK = 0
    ERR_NULL_ARGUMENT = 1
    ERR_NULL_DATA = 2
    ERR_NDIM = 3
    ERR_NEGATIVE_SIZE = 4
    ERR_SHAPE_MISMATCH = 5
    ERR_NEGATIVE_STRIDE = 6
    ERR_OUTPUT_SELF_OVERLAP = 7
    ERR_DTYPE = 8
    ERR_LANES = 9
    ERR_OVERFLOW = 10
    ERR_MISALIGNED = 11
    ERR_ALIAS = 12
    ERR_INPLACE_MISMATCH = 13
    ERR_DEVICE_MISMATCH = 14
    ERR_DEVICE_UNSUPPORTED = 15
    ERR_NO_CUDA = 16
    ERR_CUDA = 17
    ERR_OPTIONS = 18
    ERR_ISA_UNAVAILABLE = 19
    ERR_INTERNAL = 20


class Error(ValueError):
    """A zgate call failed. ``status`` is the C status code (a Status, or None for errors found
    in Python before reaching the library), ``status_name`` its C name (e.g.
    "ZGATE_ERR_SHAPE_MISMATCH") and ``message`` the library's message for this call."""

    def __init__(self, status, message):
        try:
            status = Status(status) if status is not None else None
        except ValueError:
            pass
        self.status = status
        self.status_name = ("ZGATE_" + status.name) if isinstance(status, Status) else (
            "unknown status %r" % (status,) if status is not None else "ZGATE_PYTHON")
        self.message = message
        code = "" if status is None else " (%d)" % int(status)
        super().__init__("%s%s: %s" % (self.status_name, code, message))

    def __reduce__(self):
        return (type(self), (self.status, self.message))


def _bundled():
    """The copies installed with the package, in order."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.platform == "darwin":
        names = ["libzgate.dylib"]
    elif sys.platform == "win32":
        names = ["zgate.dll", "libzgate.dll"]
    else:
        names = ["libzgate.so"]
    return [os.path.join(here, n) for n in names]


_lock = threading.Lock()
_lib = None
_path = None


def _declare(lib):
    vp, i, cp = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    protos = {
        "zgate_status_str": (cp, [i]),
        "zgate_last_error": (cp, []),
        "zgate_options_init": (None, [vp]),
        # Pointers are passed as plain ints: cheaper than building ctypes pointer objects.
        "zgate_bwd": (i, [vp, vp, vp, vp, vp, vp]),
        "zgate_fwd": (i, [vp, vp, vp, vp]),
        "zgate_bwd_reference": (i, [vp, vp, vp, vp, vp]),
        "zgate_fwd_reference": (i, [vp, vp, vp]),
        "zgate_version": (cp, []),
        "zgate_cpu_isas_built": (cp, []),
        "zgate_cpu_isa_chosen": (cp, []),
        "zgate_cpu_isa_available": (i, [cp]),
        "zgate_cuda_built": (i, []),
        "zgate_build_info": (cp, []),
    }
    for name, (res, args) in protos.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args


def load():
    """The loaded library (loaded once per process)."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        env = os.environ.get("ZGATE_LIBRARY")
        if env:
            # An explicit choice wins over the copy installed with the package, and is never
            # silently replaced by it.
            lib, why = _open(env)
            if lib is None:
                raise Error(None, "ZGATE_LIBRARY=%s: %s (unset ZGATE_LIBRARY to use the library "
                            "installed with the package)" % (env, why))
            _path, _lib = env, lib
            return lib
        tried = []
        for path in _bundled():
            lib, why = _open(path)
            if lib is not None:
                _path, _lib = path, lib
                return lib
            tried.append("%s (%s)" % (path, why))
        raise Error(None, "libzgate not found; install the package with `pip install .` from the "
                    "repository, or point ZGATE_LIBRARY at a built libzgate. Tried: "
                    + "; ".join(tried))


def _open(path):
    """(the loaded library with its prototypes, None), or (None, why not)."""
    if not os.path.exists(path):
        return None, "no such file"
    try:
        lib = ctypes.CDLL(path)
        _declare(lib)
    except (OSError, AttributeError) as e:
        return None, str(e)
    return lib, None


def raw(name):
    """A new function object for `name` of the loaded library, returning a C int and bound
    without argtypes: for callers that pass ready ctypes pointers (zgate._overhead, timing
    the library call alone: nothing is converted per call; a Python int passed to it would
    be truncated to a C int)."""
    f = load()[name]
    f.restype = ctypes.c_int
    return f


def path():
    load()
    return _path


_hot = _hot_why = None


def hot():
    """zgate._hot, the compiled hot path (python/ext/hot.c), from the directory of the loaded
    library (built and installed beside it), or None where it is not there or does not load
    for this interpreter; hot_why() then says why. Loaded once, after the library."""
    global _hot, _hot_why
    if _hot is not None or _hot_why is not None:
        return _hot
    import importlib.machinery
    import importlib.util
    where = os.path.dirname(os.path.abspath(path()))
    with _lock:
        if _hot is not None or _hot_why is not None:
            return _hot
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            f = os.path.join(where, "_hot" + suffix)
            if not os.path.exists(f):
                continue
            try:
                spec = importlib.util.spec_from_file_location("zgate._hot", f)
                m = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(m)
            except ImportError as e:
                _hot_why = "%s does not load: %s" % (f, e)
                return None
            sys.modules["zgate._hot"] = m
            _hot = m
            return m
        _hot_why = ("no _hot%s beside %s (built where CPython's headers exist: install "
                    "python3-dev and rebuild)" % (importlib.machinery.EXTENSION_SUFFIXES[0], where))
        return None


def hot_why():
    """Why hot() is None ('' when it is loaded)."""
    hot()
    return _hot_why or ""


def fail(status, dtype_names=None):
    """The zgate.Error for a nonzero status of the calling thread's last call. dtype_names maps
    the call's tensor names to their dtypes as the caller spells them (e.g. "int32",
    "torch.bool"), so that a refused dtype is named that way rather than by its DLPack code."""
    lib = _lib
    what = lib.zgate_status_str(status).decode("utf-8", "replace")
    detail = lib.zgate_last_error().decode("utf-8", "replace")
    if dtype_names and status == Status.ERR_DTYPE:
        detail = _DLPACK_DTYPE.sub(
            lambda m: "%s: dtype %s" % (m.group(1), dtype_names.get(m.group(1), m.group(2))),
            detail, count=1)
    return Error(status, "%s: %s" % (what, detail) if detail else what)


# The library's words for a dtype it refuses: "<tensor>: dtype (code C, bits B)".
_DLPACK_DTYPE = re.compile(r"^(\w+): dtype (\(code \d+, bits \d+\))")
