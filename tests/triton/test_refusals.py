"""zgate.triton refuses what the C library refuses with the same record: for each bad call,
zgate.Error's (status, tensor, dim) equal those of zgate.bwd / zgate.fwd on the same torch
tensors (validate.c's checks and their order). Calls the binding cannot read at all (sparse,
meta) are refused by zgate.triton with a status and the tensor at fault."""
import ctypes

import pytest
import torch

import zgate
import zgate.triton as zt

S = zgate.Status
SHAPE = (2, 3, 4)
BWD = ("dout", "z", "o", "dz", "dout_scaled")
FWD = ("o", "z", "out")
N_IN = {BWD: 3, FWD: 2}


def _t(shape=SHAPE, dtype=torch.float32):
    return torch.randn(shape).to(dtype)


def _args(names, given):
    """Arguments by name: fresh inputs, updated with the dict `given`."""
    return {**{n: _t() for n in names[:N_IN[names]]}, **given}


def _call(fn, names, args):
    pos = [args[n] for n in names[:N_IN[names]]]
    kw = {n: args[n] for n in names[N_IN[names]:] if n in args}
    if "inplace" in args:
        kw["inplace"] = args["inplace"]
    return fn(*pos, **kw)


def _record(fn, names, args):
    with pytest.raises(zgate.Error) as ei:
        _call(fn, names, args)
    e = ei.value
    return e.status, e.tensor, e.dim


def _shifted(offset, shape=SHAPE):
    """Two views of one buffer: at its start, and `offset` elements in."""
    n = int(torch.tensor(shape).prod())
    flat = torch.randn(n + offset)
    return flat[:n].view(shape), flat[offset:offset + n].view(shape)


def _misaligned(shape=SHAPE):
    """A float32 tensor whose data is 2 bytes past a 4-byte boundary."""
    n = int(torch.tensor(shape).prod())
    buf = bytearray(4 * n + 8)
    addr = ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
    t = torch.frombuffer(buf, dtype=torch.float32, offset=(-addr) % 4 + 2, count=n)
    assert t.data_ptr() % 4 == 2
    return t.view(shape)


def _bad_calls():
    """(id, names, args): one bad input per row, the C library's checks in turn."""
    rows = []
    for names in (BWD, FWD):
        op = "bwd" if names is BWD else "fwd"
        for name in names:
            for what, bad in (("rank9", _t((1,) * 6 + SHAPE)), ("int32", _t(dtype=torch.int32)),
                              ("float64", _t(dtype=torch.float64)), ("misaligned", _misaligned())):
                rows.append(("%s-%s-%s" % (op, name, what), names, _args(names, {name: bad})))
            if name == names[0]:
                continue   # the first tensor is what the others are compared with
            rows.append(("%s-%s-rank" % (op, name), names, _args(names, {name: _t(SHAPE + (1,))})))
            for d in range(len(SHAPE)):
                shape = list(SHAPE)
                shape[d] += 1
                rows.append(("%s-%s-dim%d" % (op, name, d), names, _args(names, {name: _t(shape)})))
        for name in names[N_IN[names]:]:
            for d in range(len(SHAPE)):   # a zero stride on dim d
                shape = list(SHAPE)
                shape[d] = 1
                rows.append(("%s-%s-stride0-dim%d" % (op, name, d), names,
                             _args(names, {name: torch.zeros(shape).expand(SHAPE)})))
            # strides (1, 2, 4) on sizes (2, 3, 4): dim 1 steps inside dim 0's span
            rows.append(("%s-%s-interleaved" % (op, name), names,
                         _args(names, {name: torch.zeros(18).as_strided(SHAPE, (1, 2, 4))})))
            for other in names:
                if other != name and {name, other} != {"dout_scaled", "dout"}:
                    t = _t()
                    rows.append(("%s-%s-aliases-%s" % (op, name, other), names,
                                 _args(names, {name: t, other: t})))
            a, b = _shifted(5)
            rows.append(("%s-%s-overlaps-%s" % (op, name, names[1]), names,
                         _args(names, {name: b, names[1]: a})))
        # the first failing check decides: every tensor's rank and dtype before any shape,
        # one tensor's dtype before a later tensor's rank
        rows.append(("%s-order-dtype-before-shape" % op, names,
                     _args(names, {"z": _t((2, 3, 5)), names[-1]: _t(dtype=torch.int32)})))
        rows.append(("%s-order-tensor-by-tensor" % op, names,
                     _args(names, {"z": _t(dtype=torch.int32), names[-1]: _t((1,) * 9)})))
    # self-overlap of every output before any alias
    t = _t()
    rows.append(("bwd-order-self-overlap-before-alias", BWD, _args(BWD, {
        "dz": t, "z": t, "dout_scaled": torch.zeros(1).expand(SHAPE)})))
    # in place: dout_scaled at dout's address with another dtype or strides; at another
    # address inside dout (an alias, not an in-place mismatch)
    dout = _t()
    rows.append(("bwd-inplace-dtype", BWD, _args(BWD, {
        "dout": dout, "dout_scaled": dout.view(torch.float16)[..., :4]})))
    rows.append(("bwd-inplace-strides", BWD, _args(BWD, {
        "dout": dout, "dout_scaled": dout.as_strided((2, 3, 4), (12, 1, 3))})))
    base, shifted = _shifted(1)
    rows.append(("bwd-inplace-shifted", BWD, _args(BWD, {"dout": base, "dout_scaled": shifted})))
    return rows


ROWS = _bad_calls()


@pytest.mark.parametrize("names,args", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_refusal_record_equals_the_libraries(names, args):
    lib = zgate.bwd if names is BWD else zgate.fwd
    tri = zt.bwd if names is BWD else zt.fwd
    want = _record(lib, names, args)
    assert want[0] is not None, want   # a refusal of the library, with its record
    assert _record(tri, names, args) == want


def test_in_place_accepted_as_the_library_does():
    """dout_scaled at dout's address with strides that differ only on a size-1 dim: in place,
    in both."""
    z, o, dout = _t((1, 3, 4)), _t((1, 3, 4)), _t((1, 3, 4))
    got = []
    for fn in (zgate.bwd, zt.bwd):
        d = dout.clone()
        dz, _ = fn(d, z, o, dout_scaled=d.as_strided((1, 3, 4), (99, 4, 1)))
        got.append((dz, d))
    for g, w in zip(*got):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["bwd", "fwd"])
def test_non_tensors_as_the_binding(op):
    """What is not an array is refused before the library: status, tensor and dim None, the
    first such argument before any tensor's own refusal."""
    names = BWD if op == "bwd" else FWD
    lib, tri = getattr(zgate, op), getattr(zt, op)
    for i, name in enumerate(names):
        for bad in (1, "x") + ((None,) if i < N_IN[names] else ()):
            # a later non-tensor is refused before an earlier tensor's rank
            nine = names[1 if i == 0 else 0]
            args = _args(names, {name: bad, nine: _t((1,) * 9)})
            want = _record(lib, names, args)
            assert want == (None, None, None)
            assert _record(tri, names, args) == want
    if op == "bwd":
        args = _args(BWD, {"dout_scaled": _t(), "inplace": True})
        assert _record(tri, BWD, args) == _record(lib, BWD, args) == (None, None, None)


@pytest.mark.parametrize("op", ["bwd", "fwd"])
def test_unreadable_tensors_name_the_tensor(op):
    """Sparse and meta tensors, which the binding cannot read: zgate.triton names the tensor
    (the device check, as the library's, names the first tensor when all are on one)."""
    names = BWD if op == "bwd" else FWD
    tri = getattr(zt, op)
    for name in names:
        args = _args(names, {name: _t().to_sparse()})
        assert _record(tri, names, args) == (S.ERR_DEVICE_UNSUPPORTED, name, None)
        if name != names[0]:
            args = _args(names, {name: torch.empty(SHAPE, device="meta")})
            assert _record(tri, names, args) == (S.ERR_DEVICE_MISMATCH, name, None)
    meta = {n: torch.empty(SHAPE, device="meta") for n in names[:N_IN[names]]}
    assert _record(tri, names, meta) == (S.ERR_DEVICE_UNSUPPORTED, names[0], None)
