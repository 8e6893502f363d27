"""DLPack structures mirrored in ctypes, and the consumer side of the capsule protocol.

A producer's ``__dlpack__()`` returns a PyCapsule named "dltensor" holding a DLManagedTensor*
(DLPack 0.x), or, asked with ``max_version=(1, 0)``, one named "dltensor_versioned" holding
a DLManagedTensorVersioned* (DLPack 1.x: a version, flags such as read-only, then the same
DLTensor). A consumer that keeps the tensor renames the capsule "used_dltensor" (or
"used_dltensor_versioned"), so the capsule's own destructor no longer frees it, and calls
the tensor's deleter once it is done. We consume that way so the producer's memory is
released as soon as the C call returns, not whenever the capsule happens to be collected.
"""
import ctypes

# DLDeviceType values used here.
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13

# DLDataTypeCode values.
KDL_INT = 0
KDL_UINT = 1
KDL_FLOAT = 2
KDL_BFLOAT = 4
KDL_COMPLEX = 5
KDL_BOOL = 6

_CODE_WORDS = {KDL_INT: "int", KDL_UINT: "uint", KDL_FLOAT: "float", KDL_BFLOAT: "bfloat",
               KDL_COMPLEX: "complex"}


def dtype_name(code, bits, lanes=1):
    """A DLPack dtype in the usual words: "int32", "float64", "bool", "float32x4"."""
    if code == KDL_BOOL:
        name = "bool"
    elif code in _CODE_WORDS:
        name = "%s%d" % (_CODE_WORDS[code], bits)
    else:
        return "DLPack dtype code %d, %d bits, %d lanes" % (code, bits, lanes)
    return name if lanes == 1 else "%sx%d" % (name, lanes)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


# The deleter may run Python code (NumPy's does Py_DECREF): call it holding the GIL.
DLDeleter = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DLDeleter),
]

assert ctypes.sizeof(DLTensor) == 48 and ctypes.sizeof(DLManagedTensor) == 64

# DLPack 1.x: DLManagedTensorVersioned, and the bits of its flags.
FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1
MAJOR = 1   # the major version of DLManagedTensorVersioned read here


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DLDeleter),
    ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor),
]

assert ctypes.sizeof(DLManagedTensorVersioned) == 80

_capsule_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get_pointer.restype = ctypes.c_void_p
_capsule_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_set_name = ctypes.pythonapi.PyCapsule_SetName
_capsule_set_name.restype = ctypes.c_int
_capsule_set_name.argtypes = [ctypes.py_object, ctypes.c_void_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]

# PyCapsule_SetName keeps the pointer, not a copy: the names must live as long as any capsule.
_USED_NAME = ctypes.create_string_buffer(b"used_dltensor")
_USED_VERSIONED = ctypes.create_string_buffer(b"used_dltensor_versioned")


class Borrowed:
    """A DLManagedTensor or DLManagedTensorVersioned taken from a capsule; ``release()`` calls
    its deleter exactly once. ``flags``: the versioned tensor's flags (0 for a legacy one)."""

    __slots__ = ("ptr", "tensor", "flags", "versioned", "_managed")

    def __init__(self, capsule):
        if _capsule_is_valid(capsule, b"dltensor_versioned") == 1:
            self.ptr = _capsule_get_pointer(capsule, b"dltensor_versioned")
            managed = DLManagedTensorVersioned.from_address(self.ptr)
            if managed.version.major != MAJOR:
                # a layout we cannot read: left to the capsule's destructor, untouched
                raise ValueError("the DLPack capsule has version %d.%d; zgate reads %d.x"
                                 % (managed.version.major, managed.version.minor, MAJOR))
            used, self.flags, self.versioned = _USED_VERSIONED, managed.flags, True
        elif _capsule_is_valid(capsule, b"dltensor") == 1:
            self.ptr = _capsule_get_pointer(capsule, b"dltensor")
            managed = DLManagedTensor.from_address(self.ptr)
            used, self.flags, self.versioned = _USED_NAME, 0, False
        elif (_capsule_is_valid(capsule, b"used_dltensor") == 1
              or _capsule_is_valid(capsule, b"used_dltensor_versioned") == 1):
            raise ValueError("this DLPack capsule was already consumed")
        else:
            raise ValueError("__dlpack__() did not return a DLPack capsule")
        if _capsule_set_name(capsule, ctypes.addressof(used)) != 0:
            raise ValueError("could not mark the DLPack capsule as consumed")
        self._managed = managed
        self.tensor = managed.dl_tensor

    def release(self):
        managed, self._managed = getattr(self, "_managed", None), None
        if managed is not None and managed.deleter:
            managed.deleter(self.ptr)

    def __del__(self):
        # A safety net only: the normal path calls release() right after the C call.
        try:
            self.release()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


def describe(t):
    """(data, device_type, device_id, code, bits, lanes, shape, strides) of a DLTensor.

    data includes byte_offset; strides are in elements (computed compact when NULL)."""
    ndim = t.ndim
    shape = tuple(t.shape[i] for i in range(ndim)) if ndim > 0 else ()
    if t.strides:
        strides = tuple(t.strides[i] for i in range(ndim))
    else:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.append(acc)
            acc *= max(n, 1)
        strides = tuple(reversed(strides))
    data = (t.data or 0) + t.byte_offset
    return (data, t.device.device_type, t.device.device_id, t.dtype.code, t.dtype.bits,
            t.dtype.lanes, shape, strides)
