"""The PyTorch hot path of zgate.bwd / zgate.fwd (zgate._adapters.torch.bwd_fast / fwd_fast):
its block is byte for byte the general path's, it takes the calls it should and declines the
others (which then give the general path's results and errors), and zgate._overhead's
breakdown runs."""
import contextlib
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import zgate  # noqa: E402
import zgate.torch  # noqa: E402,F401  (torch.ops.zgate)
from zgate import _adapters, _args, _call, _overhead  # noqa: E402
from zgate._adapters import torch as ad  # noqa: E402
from tt_util import cuda_ready, np_of, tinputs  # noqa: E402
from zg_oracle import check, ref_bwd, ref_fwd  # noqa: E402

SHAPE = (2, 5, 3, 8)
CUDA_OK, CUDA_WHY = cuda_ready()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not CUDA_OK,
                                                                reason=CUDA_WHY or "CUDA"))]


def _bound():
    zgate.bwd(*(torch.ones(1, 1, 1, 4) for _ in range(3)))   # loads the library and adapter
    assert _adapters._fast_bwd.get(torch.Tensor) is ad.bwd_fast
    assert _adapters._fast_fwd.get(torch.Tensor) is ad.fwd_fast


def _mixed_inputs(rng, device="cpu"):
    """dout bfloat16 compact, z float16 a strided view (no copy), o float32 permuted."""
    dout, z, o = tinputs(rng, SHAPE, torch.float32, device)
    wide = torch.cat([z, z], dim=3).to(torch.float16)
    return (dout.to(torch.bfloat16), wide[..., :SHAPE[3]],
            o.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_threads", [0, 3])
def test_fast_block_is_the_general_layout(rng, num_threads, device):
    """The padded layouts (FRESH_BWD / FRESH_FWD) write the same bytes as the general
    layouts with the zero fields given as values (on CUDA: the current stream too)."""
    _bound()
    dout, z, o = _mixed_inputs(rng, device)
    b = _args.block()
    if device == "cuda":   # on a stream of its own, so that a stream of 0 would not pass
        torch.cuda.synchronize()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            assert side.cuda_stream
            _check_blocks(b, dout, z, o, num_threads, side.cuda_stream)
        side.synchronize()
    else:
        _check_blocks(b, dout, z, o, num_threads, 0)


def _check_blocks(b, dout, z, o, num_threads, stream):
    for n in range(2):   # the first pass also leaves the block dirty for the second
        dz, dos = ad.bwd_fast(dout, z, o, None, None, False, num_threads)
        fast = bytes(b.buf)
        b.buf.raw = b"\xa5" * _args.BLOCK_BYTES
        descs = [ad.describe(t, n, False, 1, []) for t, n in
                 ((dout, "dout"), (z, "z"), (o, "o"), (dz, "dz"), (dos, "dout_scaled"))]
        _args.pack(b, descs, 2, num_threads, stream)
        assert bytes(b.buf) == fast
        out = ad.fwd_fast(o, z, None, num_threads)
        fast = bytes(b.buf)
        b.buf.raw = b"\x5a" * _args.BLOCK_BYTES
        descs = [ad.describe(t, n, False, 1, []) for t, n in ((o, "o"), (z, "z"), (out, "out"))]
        _args.pack(b, descs, 1, num_threads, stream)
        assert bytes(b.buf) == fast
    r = ref_bwd(*(np_of(t) for t in (dout, z, o)))
    check("dz", np_of(dz), r[0], r[2], r[4])
    check("dout_scaled", np_of(dos), r[1], r[3], r[5])
    check("out", np_of(out), *ref_fwd(np_of(o), np_of(z)))


def test_zgate_bwd_takes_the_fast_path(rng, monkeypatch):
    _bound()
    taken = []

    def spy(*a):
        r = ad.bwd_fast(*a)
        taken.append(r is not None)
        return r
    monkeypatch.setitem(_adapters._fast_bwd, torch.Tensor, spy)
    dout, z, o = tinputs(rng, SHAPE, torch.bfloat16)
    zgate.bwd(dout, z, o)
    zgate.bwd(dout, z, o, num_threads=2)
    zgate.bwd(dout, z, o, dz=torch.empty_like(dout))      # given: declined
    zgate.bwd(dout.clone(), z, o, inplace=True)            # in place: declined
    assert taken == [True, True, False, False]


def _outcome(fn):
    try:
        r = fn()
    except zgate.Error as e:
        return "error", e.status, str(e)
    if r is None:
        return (None,)
    return "ok", tuple(np_of(t).tobytes() for t in r)


# case -> (the call's arguments from (dout, z, o), whether the hot path takes it)
CASES = {
    "plain": (lambda d, z, o: (d, z, o, 0), True),
    "float64 z": (lambda d, z, o: (d, z.double(), o, 0), True),        # the library refuses
    "shape mismatch": (lambda d, z, o: (d, z[:, :2], o, 0), True),     # the library refuses
    "num_threads -1": (lambda d, z, o: (d, z, o, -1), True),           # the library refuses
    "int32 o": (lambda d, z, o: (d, z, o.int(), 0), False),
    "3-D": (lambda d, z, o: (d[0], z[0], o[0], 0), False),
    "num_threads beyond a C int": (lambda d, z, o: (d, z, o, 2 ** 40), False),
    "num_threads a NumPy int": (lambda d, z, o: (d, z, o, np.int64(2)), False),
    "num_threads a bool": (lambda d, z, o: (d, z, o, True), False),
    "z a NumPy array": (lambda d, z, o: (d, z.numpy(), o, 0), False),
    "meta dout": (lambda d, z, o: (d.to("meta"), z, o, 0), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_path_agrees_with_the_general_path(rng, case):
    """Whether the hot path takes a call or not, zgate.bwd gives what the general path gives:
    the same outputs, or the same zgate.Error."""
    _bound()
    args, taken = CASES[case]
    d, z, o, n = args(*tinputs(rng, SHAPE, torch.float32))
    if not taken:
        assert ad.bwd_fast(d, z, o, None, None, False, n) is None
    else:
        assert _outcome(lambda: ad.bwd_fast(d, z, o, None, None, False, n)) != (None,)
    got = _outcome(lambda: zgate.bwd(d, z, o, num_threads=n))

    def general():   # zgate._call with num_threads checked as zgate.bwd checks it
        return _call.bwd(ad, d, z, o, None, None, False, _args.threads_arg(n))
    want = _outcome(general)
    assert got == want
    ok = ("plain", "3-D", "z a NumPy array", "num_threads a NumPy int")
    assert got[0] == ("ok" if case in ok else "error"), got
    if got[0] == "error" and case == "float64 z":
        assert "z: dtype torch.float64 is not" in got[2]


def test_breakdown_runs_and_names_every_part(capsys):
    t = [torch.ones(1, 1, 1, 8, dtype=torch.bfloat16) for _ in range(3)]
    names = [n for n, _, _ in _overhead._parts(*t)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        _overhead.main(["--device", "cpu", "--shape", "1,1,1,8", "--only-breakdown",
                        "--calls", "3", "--repeats", "3"])
    text = buf.getvalue()
    for n in names + ["sum of the parts", "the whole", "rest: the whole minus the parts",
                      "custom-op dispatch", "entry and routing"]:
        assert n in text, n
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) >= len(names) + 7


def test_new_outputs_are_compact_whatever_douts_strides(rng):
    """A dout that is contiguous with an odd stride on a size-1 dimension, or permuted: the
    new outputs have the compact strides of its shape all the same."""
    _bound()
    shape = (1, 4, 2, 8)
    d, z, o = tinputs(rng, shape, torch.bfloat16)
    odd = torch.empty_strided(shape, (999, 16, 8, 1), dtype=torch.bfloat16)
    odd.copy_(d)
    perm = d.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
    assert odd.is_contiguous() and not perm.is_contiguous()
    compact = torch.empty(shape).stride()
    r = ref_bwd(*(np_of(t) for t in (d, z, o)))
    for dout in (odd, perm):
        taken = ad.bwd_fast(dout, z, o, None, None, False, 0)
        assert taken is not None
        for got in (taken, zgate.bwd(dout, z, o), torch.ops.zgate.bwd(dout, z, o)):
            dz, dos = got
            assert dz.stride() == dos.stride() == compact
            assert dz.dtype == dos.dtype == torch.bfloat16 and not dos.requires_grad
            assert dz.data_ptr() != dos.data_ptr()
            check("dz", np_of(dz), r[0], r[2], r[4])
            check("dout_scaled", np_of(dos), r[1], r[3], r[5])
