"""Per-call cost of zgate from Python at a tiny shape, where the call is all there is.

    python3 -m zgate._overhead [--device cuda] [--shape 1,128,8,64] [--dtype bfloat16]
                               [--orig PATH] [--calls 2000] [--repeats 7] [--breakdown]

For each implementation, `calls` back-to-back calls are timed twice in one run:
  host us/call  time until the last call has *returned* (what Python pays; the GPU may
                still be working), divided by the calls;
  wall us/call  time until the device has *finished* the last call (torch.cuda.synchronize),
                divided by the calls: the throughput of back-to-back calls.
Each figure is the median of `repeats` runs (and the minimum), after a warm-up (and
compilation), net of an empty loop; the rows are timed in turns within each repeat.
Implementations: zgate.bwd (new outputs: the hot path, zgate._hot), zgate.bwd with given
outputs, zgate.torch.compute_dzdo, torch.ops.zgate.bwd (the custom op in eager mode),
torch.compile of the formula, PyTorch eager, one eager PyTorch op (torch.neg: one output, one
launch; the host's floor for any op, to read the other rows against on a host of unknown
speed), and the original Triton compute_dzdo when --orig (or env ZGATE_ORIG_MAMBA3) names the
folder holding mamba3_siso_bwd.py (imported under a temporary mamba_ssm package; nothing of
it is kept).

--breakdown adds a second table: the host time of zgate.bwd's hot path taken apart, on the
same tensors in the same run. Each part is done alone `calls` times in a loop (a Python
function doing only that part), the loop and call of an empty function subtracted; the parts
are timed in turns within each repeat, and each figure is the median of `repeats` (and the
minimum, the figure to read on a loaded host, where a longer turn is likelier to be
preempted). The parts are zgate.bwd's entry (its checks, torch.compiler.is_compiling
included) and what the hot path calls (PyTorch's current stream and allocator; the library through ctypes, whose own cost is shown); the rest (the whole minus
the parts) is zgate._hot's own work: the tensors' attributes read from C, the DLTensor
headers, the calls between. On CPU tensors the library call does real work (use a tiny
shape, e.g. 1,1,1,8); the other parts are the same as on CUDA.
"""
import argparse
import importlib
import os
import statistics
import sys
import tempfile
import time


def _formula(dout, z, o):
    import torch
    zf = z.float()
    s = torch.sigmoid(zf)
    df = dout.float()
    dz = df * o.float() * s * (1 + zf * (1 - s))
    return dz.to(dout.dtype), (df * s * zf).to(dout.dtype)


def _original(path):
    root = tempfile.mkdtemp(prefix="zgate_orig_")
    parts = ["mamba_ssm", "ops", "triton"]
    for i in range(len(parts)):
        d = os.path.join(root, *parts[:i + 1])
        os.makedirs(d, exist_ok=True)
        open(os.path.join(d, "__init__.py"), "w").close()
    os.symlink(os.path.abspath(path), os.path.join(root, *parts, "mamba3"))
    sys.path.insert(0, root)
    return importlib.import_module("mamba_ssm.ops.triton.mamba3.mamba3_siso_bwd").compute_dzdo


def _time_parts(parts, sync, calls, repeats):
    """{name: (host median, host min, wall median)} in us per call over `repeats`, net of the
    loop and call of an empty function (reported under None). The parts are timed in turns in
    each repeat (from another one each time), so that a change in the host's speed during the
    run touches them all alike.
    The minimum is for a loaded host, where a longer turn is likelier to be preempted."""
    def empty():
        pass
    parts = [(None, empty)] + list(parts)
    for _, fn in parts:
        for _ in range(20):
            fn()
    sync()
    host = {n: [] for n, _ in parts}
    wall = {n: [] for n, _ in parts}
    loop = range(calls)
    for r in range(repeats):
        k = r % len(parts)   # each repeat starts at another part: no part always follows one
        for n, fn in parts[k:] + parts[:k]:
            sync()
            t0 = time.perf_counter()
            for _ in loop:
                fn()
            t1 = time.perf_counter()
            sync()
            t2 = time.perf_counter()
            host[n].append((t1 - t0) / calls * 1e6)
            wall[n].append((t2 - t0) / calls * 1e6)
    med = statistics.median
    h0, m0, w0 = med(host[None]), min(host[None]), med(wall[None])
    out = {n: (med(host[n]) - h0, min(host[n]) - m0, med(wall[n]) - w0)
           for n, _ in parts if n is not None}
    out[None] = (h0, m0, w0)
    return out


def _parts(dout, z, o):
    """What zgate.bwd(dout, z, o) does on its hot path (zgate._hot.bwd, python/ext/hot.c)
    besides reading the tensors' attributes, each as a function doing that part alone on
    these tensors: [(name, fn, summed)]; the parts not summed are parts of a part or
    alternatives, for comparison."""
    import torch
    import zgate
    from zgate import _adapters, _args, _lib
    from zgate._adapters import torch as ad

    zgate.bwd(dout, z, o)   # loads the library and the adapter: the hot path is bound
    hot = _lib.hot()
    if hot is None or _adapters._fast_bwd.get(torch.Tensor) is not hot.bwd:
        raise RuntimeError("zgate.bwd's hot path is not bound for torch.Tensor: %s"
                           % (_lib.hot_why() or "zgate._hot is loaded but not bound"))
    cuda = dout.is_cuda
    idx = dout.get_device()
    rs, ea, cf = ad._raw_stream, ad._empty_like, ad._contiguous
    dtype, device, size = dout.dtype, dout.device, tuple(dout.shape)
    # The library rows run on a block of the breakdown's own, packed once by the general
    # path with outputs made here, which live as long as the parts.
    b = _args.Block()
    dz, dos = ea(dout, memory_format=cf), ea(dout, memory_format=cf)
    descs = [ad.describe(t, n, False, None, []) for t, n in
             ((dout, "dout"), (z, "z"), (o, "o"), (dz, "dz"), (dos, "dout_scaled"))]
    _args.pack(b, descs, 2, 0, rs(idx) if cuda else 0)   # fresh outputs, as the hot path
    c_bwd, args = _lib.raw("zgate_bwd"), b.bwd_args
    trivial = _lib.raw("zgate_cuda_built")

    compact = dout.stride() == torch.empty(size, device="meta").stride()
    alloc = ("torch.empty_like(dout)" if compact else
             "torch.empty_like(dout, memory_format=torch.contiguous_format)")

    def f_alloc():   # as zgate._hot allocates: a compact dout is copied without the keyword
        dz = ea(dout) if compact else ea(dout, memory_format=cf)
        return dz, ea(dz)

    def f_empty():
        return (torch.empty(size, dtype=dtype, device=device),
                torch.empty(size, dtype=dtype, device=device))

    keep = (b, dz, dos)   # what args point into and the library writes: alive with the parts

    def f_library():
        return c_bwd(*args) if keep else -1

    rc = f_library()
    if rc:
        raise RuntimeError("zgate_bwd on the breakdown's block: %s" % _lib.fail(rc))

    parts = []
    if cuda:
        parts.append(("current raw stream (torch._C._cuda_getCurrentRawStream)",
                      lambda: rs(idx), True))
    parts += [
        ("2 outputs: dz = %s, torch.empty_like(dz)" % alloc, f_alloc, True),
        ("  instead: torch.empty(size, dtype=, device=) x2 (cached args)", f_empty, False),
        ("library: zgate_bwd through ctypes (validation%s)"
         % (", cudaLaunchKernel" if cuda else ", the CPU work"), f_library, True),
        ("  of which the foreign call: zgate_cuda_built() (no arguments)", trivial, False),
    ]
    return parts


def breakdown(dout, z, o, sync, calls, repeats):
    """Prints the table of the hot path's parts (see the module's docstring)."""
    import torch
    import zgate
    from zgate import _adapters, _lib

    parts = _parts(dout, z, o)
    hot = _lib.hot()
    res = (torch.empty_like(dout), torch.empty_like(dout))
    stub = lambda d, z, o, dz, ds, i, n: res  # noqa: E731
    whole = [
        ("zgate.bwd(dout, z, o): the whole", lambda: zgate.bwd(dout, z, o)),
        ("zgate.bwd's entry and routing, is_compiling() included (the hot path replaced by a "
         "stub)",
         lambda: zgate.bwd(dout, z, o)),
        ("torch.ops.zgate.bwd(dout, z, o) (custom op, eager)",
         lambda: torch.ops.zgate.bwd(dout, z, o)),
        ("the hot path called alone (zgate._hot.bwd)",
         lambda: hot.bwd(dout, z, o, None, None, False, 0)),
    ]
    # the routing alone: time it with the hot path replaced by the stub, in its own turn
    timed = _time_parts([(n, f) for n, f, _ in parts] + [whole[0], whole[2], whole[3]],
                        sync, calls, repeats)
    fast = _adapters._fast_bwd[torch.Tensor]
    _adapters._fast_bwd[torch.Tensor] = stub
    try:
        timed.update((k, v) for k, v in _time_parts([whole[1]], sync, calls, repeats).items()
                     if k is not None)
    finally:
        _adapters._fast_bwd[torch.Tensor] = fast
    loop = timed[None][0]
    print("Host time of zgate.bwd's hot path, in parts (each done alone %d times, net of an "
          "empty loop of %.3f us a turn; median and minimum of %d)" % (calls, loop, repeats))
    print("| part | host us/call | host, min | wall us/call | in the sum |")
    print("|---|---|---|---|---|")
    total = [0.0, 0.0]
    rows = [(whole[1][0], True)] + [(n, summed) for n, _, summed in parts]
    for n, summed in rows:
        h, m, w = timed[n]
        if summed:
            total[0] += h
            total[1] += m
        print("| %s | %.3f | %.3f | %.3f | %s |" % (n, h, m, w, "yes" if summed else ""))
    h_all, m_all, w_all = timed[whole[0][0]]
    print("| **sum of the parts** | **%.3f** | **%.3f** | | |" % tuple(total))
    print("| %s | %.3f | %.3f | %.3f | |" % (whole[0][0], h_all, m_all, w_all))
    print("| rest: the whole minus the parts (zgate._hot's reads of the tensors' attributes "
          "from C, the DLTensor headers, calls) | %.3f | %.3f | | |"
          % (h_all - total[0], m_all - total[1]))
    op, alone = timed[whole[2][0]], timed[whole[3][0]]
    print("| %s | %.3f | %.3f | %.3f | |" % ((whole[2][0],) + op))
    print("| %s | %.3f | %.3f | %.3f | |" % ((whole[3][0],) + alone))
    print("| custom-op dispatch: torch.ops.zgate.bwd minus the hot path alone | %.3f | %.3f "
          "| | |" % (op[0] - alone[0], op[1] - alone[1]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shape", default="1,128,8,64")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--orig", default=os.environ.get("ZGATE_ORIG_MAMBA3"))
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--breakdown", action="store_true",
                    help="also take zgate.bwd's hot path apart (a second table)")
    ap.add_argument("--only-breakdown", action="store_true",
                    help="the breakdown table alone")
    a = ap.parse_args(argv)

    import torch
    import zgate
    import zgate.torch as zt

    shape = tuple(int(v) for v in a.shape.split(","))
    dtype = getattr(torch, a.dtype)
    dev = torch.device(a.device)
    dout, z, o = (torch.randn(shape, device=dev).to(dtype) for _ in range(3))
    dz, dos = torch.empty_like(dout), torch.empty_like(dout)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    impls = [
        ("zgate.bwd (new outputs)", lambda: zgate.bwd(dout, z, o)),
        ("zgate.bwd (given outputs)", lambda: zgate.bwd(dout, z, o, dz=dz, dout_scaled=dos)),
        ("zgate.torch.compute_dzdo", lambda: zt.compute_dzdo(dout, z, o)),
        ("torch.ops.zgate.bwd (custom op, eager)", lambda: torch.ops.zgate.bwd(dout, z, o)),
    ]
    compiled = torch.compile(_formula)
    impls.append(("torch.compile of the formula", lambda: compiled(dout, z, o)))
    impls.append(("PyTorch eager formula", lambda: _formula(dout, z, o)))
    # the cost of any eager PyTorch op on this host, to read the others against
    floor = "PyTorch's floor: torch.neg(dout) (one eager op: one output, one launch)"
    impls.append((floor, lambda: torch.neg(dout)))
    if a.orig and dev.type == "cuda":
        try:
            orig = _original(a.orig)
            impls.append(("original Triton compute_dzdo", lambda: orig(dout, z, o)))
        except Exception as e:  # report, do not fail the other rows
            print("original: not importable from %s: %s" % (a.orig, e), file=sys.stderr)

    print("zgate %s, %s" % (zgate.__version__, zgate.info()["build_info"]))
    print("torch %s, device %s%s, shape %s %s, %d calls x %d repeats (median)" % (
        torch.__version__, dev,
        " (%s)" % torch.cuda.get_device_name(dev) if dev.type == "cuda" else "",
        shape, a.dtype, a.calls, a.repeats))
    if a.only_breakdown:
        breakdown(dout, z, o, sync, a.calls, a.repeats)
        return
    # timed in turns (as the breakdown's parts), so that a change in the host's speed during
    # the run touches every row alike; the warm-up in _time_parts compiles and autotunes
    timed = _time_parts(impls, sync, a.calls, a.repeats)
    base = timed[floor][0]
    print("| implementation | host us/call | host, min | wall us/call | host / PyTorch's floor |")
    print("|---|---|---|---|---|")
    for name, _ in impls:
        h, m, w = timed[name]
        print("| %s | %.2f | %.2f | %.2f | %.2f |" % (name, h, m, w, h / base))
    sys.stdout.flush()
    if a.breakdown:
        print()
        breakdown(dout, z, o, sync, a.calls, a.repeats)


if __name__ == "__main__":
    main()
