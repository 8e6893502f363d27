"""zgate's status codes and its exception, importable without the compiled library (the Triton
package uses them on machines where libzgate is not built)."""
import enum


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
    by the binding before reaching the library), ``status_name`` its C name (e.g.
    "ZGATE_ERR_SHAPE_MISMATCH"), ``message`` the library's message for this call, and
    ``tensor`` ("dout", "z", ...) and ``dim`` (the caller's dimension) what the library's
    refusal names, None where it names none."""

    def __init__(self, status, message, tensor=None, dim=None):
        try:
            status = Status(status) if status is not None else None
        except ValueError:
            pass
        self.status = status
        self.status_name = ("ZGATE_" + status.name) if isinstance(status, Status) else (
            "unknown status %r" % (status,) if status is not None else "ZGATE_PYTHON")
        self.message = message
        self.tensor, self.dim = tensor, dim
        code = "" if status is None else " (%d)" % int(status)
        super().__init__("%s%s: %s" % (self.status_name, code, message))

    def __reduce__(self):
        return (type(self), (self.status, self.message, self.tensor, self.dim))
