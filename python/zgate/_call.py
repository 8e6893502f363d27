"""One libzgate call on arrays of any kind: describe each array with its adapter, allocate
the outputs not given (like the first input), pack the argument block, call, and name what
the library refused. The callers (zgate._core, zgate.torch) have checked the keywords."""
from . import _args, _dlpack, _lib
from ._adapters import describe
from ._lib import Error

KDL_CUDA = _dlpack.KDL_CUDA


def fail(rc, named):
    """The zgate.Error for status rc; named: (tensor name, array, description) of the call,
    so that a refused dtype is named as the caller spells it (str(array.dtype))."""
    dtypes = {}
    if rc == _lib.Status.ERR_DTYPE:
        for name, x, d in named:
            dt = getattr(x, "dtype", None)
            dtypes[name] = str(dt) if dt is not None else _dlpack.dtype_name(*_args.dtype_of(d))
    return _lib.fail(rc, dtypes)


def _streams(kind, x, d0):
    """(stream for zgate_options, stream for __dlpack__) of a call on d0's device."""
    if _args.device_of(d0)[0] != KDL_CUDA:
        return 0, None
    return kind.stream(x, d0)


def _immutable(kind, what):
    if not kind.MUTABLE:
        raise Error(None, "JAX arrays are immutable: outputs (%s) cannot be given for JAX "
                    "inputs" % what)


def bwd(kind, dout, z, o, dz, dout_scaled, inplace, num_threads):
    """(dz, dout_scaled); inplace: dout_scaled is dout."""
    if inplace:
        if dout_scaled is not None and dout_scaled is not dout:
            raise Error(None, "inplace=True writes dout_scaled into dout; do not pass "
                        "dout_scaled as well")
        dout_scaled = dout
    given = [a for a in (dz, dout_scaled) if a is not None]
    if given:
        _immutable(kind, "dz=, dout_scaled=, inplace=")
    keep = []
    try:
        # in place, dout is written: described as an output (a read-only one is refused)
        d0 = kind.describe(dout, "dout", inplace, 1, keep)
        stream, dls = _streams(kind, dout, d0)
        d1 = describe(z, "z", False, dls, keep)
        d2 = describe(o, "o", False, dls, keep)
        # new outputs are compact, of dout's shape: packed as fresh when they come last
        fresh = 0
        if dout_scaled is None:
            dout_scaled, fresh = kind.empty_like(dout, d0), 1
            if dz is None:
                dz, fresh = kind.empty_like(dout, d0), 2
        elif dz is None:
            dz = kind.empty_like(dout, d0)
        d3 = describe(dz, "dz", True, dls, keep)
        d4 = d0 if inplace else describe(dout_scaled, "dout_scaled", True, dls, keep)
        descs = (d0, d1, d2, d3, d4)
        lib = _lib._lib or _lib.load()
        b = _args.block()
        _args.pack(b, descs, fresh, num_threads, stream)
        t = b.t
        rc = lib.zgate_bwd(t[0], t[1], t[2], t[3], t[4], b.opts)
    finally:
        for k in keep:
            k.release()
    if rc:
        raise fail(rc, [("dout", dout, d0), ("z", z, d1), ("o", o, d2), ("dz", dz, descs[3]),
                        ("dout_scaled", dout_scaled, descs[4])])
    kind.finish(d0, given)
    return dz, dout_scaled


def fwd(kind, o, z, out, num_threads):
    if out is not None:
        _immutable(kind, "out=")
    keep = []
    try:
        d0 = kind.describe(o, "o", False, 1, keep)
        stream, dls = _streams(kind, o, d0)
        d1 = describe(z, "z", False, dls, keep)
        given = [out] if out is not None else []
        if given:
            fresh = 0
        else:
            out, fresh = kind.empty_like(o, d0), 1
        d2 = describe(out, "out", True, dls, keep)
        lib = _lib._lib or _lib.load()
        b = _args.block()
        _args.pack(b, (d0, d1, d2), fresh, num_threads, stream)
        t = b.t
        rc = lib.zgate_fwd(t[0], t[1], t[2], b.opts)
    finally:
        for k in keep:
            k.release()
    if rc:
        raise fail(rc, [("o", o, d0), ("z", z, d1), ("out", out, d2)])
    kind.finish(d0, given)
    return out


def _reference_output(desc, given):
    if given is not None:
        return given
    import numpy
    return numpy.empty(tuple(desc[5]), dtype=numpy.float64)


def reference_bwd(dout, z, o, dz, dout_scaled):
    keep = []
    try:
        inplace = dout_scaled is dout
        d0 = describe(dout, "dout", inplace, None, keep)
        d1 = describe(z, "z", False, None, keep)
        d2 = describe(o, "o", False, None, keep)
        dz = _reference_output(d0, dz)
        dout_scaled = _reference_output(d0, dout_scaled)
        d3 = describe(dz, "dz", True, None, keep)
        d4 = d0 if inplace else describe(dout_scaled, "dout_scaled", True, None, keep)
        lib = _lib._lib or _lib.load()
        b = _args.block()
        _args.pack(b, (d0, d1, d2, d3, d4), 0, 0, 0)
        t = b.t
        rc = lib.zgate_bwd_reference(t[0], t[1], t[2], t[3], t[4])
    finally:
        for k in keep:
            k.release()
    if rc:
        raise fail(rc, [("dout", dout, d0), ("z", z, d1), ("o", o, d2), ("dz", dz, d3),
                        ("dout_scaled", dout_scaled, d4)])
    return dz, dout_scaled


def reference_fwd(o, z, out):
    keep = []
    try:
        d0 = describe(o, "o", False, None, keep)
        d1 = describe(z, "z", False, None, keep)
        out = _reference_output(d0, out)
        d2 = describe(out, "out", True, None, keep)
        lib = _lib._lib or _lib.load()
        b = _args.block()
        _args.pack(b, (d0, d1, d2), 0, 0, 0)
        t = b.t
        rc = lib.zgate_fwd_reference(t[0], t[1], t[2])
    finally:
        for k in keep:
            k.release()
    if rc:
        raise fail(rc, [("o", o, d0), ("z", z, d1), ("out", out, d2)])
    return out
