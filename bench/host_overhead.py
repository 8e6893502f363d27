"""Per-call host cost of zgate from Python at a tiny shape, where the call is all there is.

    python3 bench/host_overhead.py [--device cpu|cuda] [--shape 1,128,8,64] [--dtype bfloat16]
                                   [--orig PATH] [--calls 2000] [--repeats 7]

For each implementation, `calls` back-to-back calls are timed twice in one run:
  host us/call  time until the last call has *returned* (what Python pays; the GPU may
                still be working), divided by the calls;
  wall us/call  time until the device has *finished* the last call, divided by the calls.
Each figure is the median of `repeats` runs (and the minimum), after a warm-up (and
compilation), net of an empty loop; the rows are timed in turns within each repeat, so that a
change in the host's speed touches them all alike. Two columns read each row's host time
against one eager PyTorch op (torch.neg: one output, one launch), the host's floor for any
op, and against zgate.bwd on PyTorch tensors (given outputs for rows with given outputs, new
ones otherwise).
Rows: zgate's PyTorch entry points, the formula eager and compiled, zgate.bwd on NumPy (CPU;
ml_dtypes' bfloat16) or CuPy (CUDA, where installed; float16 for bfloat16, with CuPy's own
floor), and the original Triton compute_dzdo when --orig (or env ZGATE_ORIG_MAMBA3) names a
folder holding mamba3/ (a copy of mamba_ssm/ops/triton/mamba3) or a mamba checkout.
"""
import argparse
import os
import statistics
import sys
import time


def _formula(dout, z, o):
    import torch
    zf, df = z.float(), dout.float()
    s = torch.sigmoid(zf)
    return (df * o.float() * s * (1 + zf * (1 - s))).to(dout.dtype), (df * s * zf).to(dout.dtype)


def time_rows(rows, sync, calls, repeats):
    """{name: (host median, host min, wall median)} in us per call, net of an empty loop."""
    rows = [(None, lambda: None)] + list(rows)   # the empty loop
    for _, fn in rows:
        for _ in range(20):
            fn()
    sync()
    host = {n: [] for n, _ in rows}
    wall = {n: [] for n, _ in rows}
    loop = range(calls)
    for r in range(repeats):
        k = r % len(rows)   # each repeat starts at another row: no row always follows one
        for n, fn in rows[k:] + rows[:k]:
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
    return {n: (med(host[n]) - h0, min(host[n]) - m0, med(wall[n]) - w0)
            for n, _ in rows if n is not None}


def _other_framework_rows(dev, shape, dtype_name, host):
    """zgate.bwd on NumPy (CPU) or CuPy (CUDA) arrays holding the same values."""
    import zgate
    if dev.type == "cpu":
        import numpy as np
        import ml_dtypes
        dt = ml_dtypes.bfloat16 if dtype_name == "bfloat16" else np.dtype(dtype_name)
        d, z, o = (a.astype(dt) for a in host)
        dz, ds = np.empty_like(d), np.empty_like(d)
        name = "NumPy " + np.dtype(dt).name
    else:
        try:
            import cupy
        except ImportError:
            print("CuPy not installed: no CuPy rows", file=sys.stderr)
            return []
        dt = "float16" if dtype_name == "bfloat16" else dtype_name   # CuPy has no bfloat16
        d, z, o = (cupy.asarray(a).astype(dt) for a in host)
        dz, ds = cupy.empty_like(d), cupy.empty_like(d)
        name = "CuPy " + dt
    rows = [("zgate.bwd, %s, new outputs" % name, lambda: zgate.bwd(d, z, o)),
            ("zgate.bwd, %s, given outputs" % name,
             lambda: zgate.bwd(d, z, o, dz=dz, dout_scaled=ds))]
    if dev.type == "cuda":
        rows.append(("CuPy's floor: cupy.negative(dout) (one output, one launch)",
                     lambda: cupy.negative(d)))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shape", default="1,128,8,64")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--orig", default=os.environ.get("ZGATE_ORIG_MAMBA3"))
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args(argv)

    import torch
    import zgate
    import zgate.torch as zt
    from zgate._mamba import import_upstream_dzdo

    shape = tuple(int(v) for v in a.shape.split(","))
    dtype = getattr(torch, a.dtype)
    dev = torch.device(a.device)
    host = [torch.randn(shape).numpy() for _ in range(3)]
    dout, z, o = (torch.from_numpy(h).to(dev).to(dtype) for h in host)
    dz, dos = torch.empty_like(dout), torch.empty_like(dout)

    def sync():   # CuPy's work too, on PyTorch's stream as a framework user would have it
        if dev.type == "cuda":
            torch.cuda.synchronize()
            if "cupy" in sys.modules:
                sys.modules["cupy"].cuda.get_current_stream().synchronize()

    on_torch = "zgate.bwd, PyTorch %s, " % a.dtype
    rows = [
        (on_torch + "new outputs", lambda: zgate.bwd(dout, z, o)),
        (on_torch + "given outputs", lambda: zgate.bwd(dout, z, o, dz=dz, dout_scaled=dos)),
        ("zgate.torch.compute_dzdo", lambda: zt.compute_dzdo(dout, z, o)),
        ("torch.ops.zgate.bwd (custom op, eager)", lambda: torch.ops.zgate.bwd(dout, z, o)),
    ]
    compiled = torch.compile(_formula)
    floor = "PyTorch's floor: torch.neg(dout) (one eager op: one output, one launch)"
    rows += [("torch.compile of the formula", lambda: compiled(dout, z, o)),
             ("PyTorch eager formula", lambda: _formula(dout, z, o)),
             (floor, lambda: torch.neg(dout))]
    rows += _other_framework_rows(dev, shape, a.dtype, host)
    if a.orig and dev.type == "cuda":
        try:
            orig = import_upstream_dzdo(a.orig).compute_dzdo
            rows.append(("original Triton compute_dzdo", lambda: orig(dout, z, o)))
        except Exception as e:  # report, do not fail the other rows
            print("original: not importable from %s: %s" % (a.orig, e), file=sys.stderr)

    print("zgate %s, %s" % (zgate.__version__, zgate.info()["build_info"]))
    print("torch %s, device %s%s, shape %s %s, %d calls x %d repeats (median)" % (
        torch.__version__, dev,
        " (%s)" % torch.cuda.get_device_name(dev) if dev.type == "cuda" else "",
        shape, a.dtype, a.calls, a.repeats))
    timed = time_rows(rows, sync, a.calls, a.repeats)
    base = timed[floor][0]
    print("| implementation | host us/call | host, min | wall us/call | host / PyTorch's floor "
          "| host / zgate.bwd on PyTorch, same outputs |")
    print("|---|---|---|---|---|---|")
    for name, _ in rows:
        h, m, w = timed[name]
        same = on_torch + ("given outputs" if name.endswith("given outputs") else "new outputs")
        print("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |" % (name, h, m, w, h / base,
                                                           h / timed[same][0]))


if __name__ == "__main__":
    main()
