"""Per-call cost of zgate from Python at a tiny shape, where the call is all there is.

    python3 -m zgate._overhead [--device cuda] [--shape 1,128,8,64] [--dtype bfloat16]
                               [--orig PATH] [--calls 2000] [--repeats 7]

For each implementation, `calls` back-to-back calls are timed twice in one run:
  host us/call  time until the last call has *returned* (what Python pays; the GPU may
                still be working), divided by the calls;
  wall us/call  time until the device has *finished* the last call (torch.cuda.synchronize),
                divided by the calls: the throughput of back-to-back calls.
Each figure is the median of `repeats` runs, after a warm-up (and compilation).
Implementations: zgate.bwd (new outputs: the fast path), zgate.bwd with given outputs,
zgate.torch.compute_dzdo, torch.ops.zgate.bwd (the custom op in eager mode), torch.compile of
the formula, PyTorch eager, and the original Triton compute_dzdo when --orig (or env
ZGATE_ORIG_MAMBA3) names the folder holding mamba3_siso_bwd.py (imported under a
temporary mamba_ssm package; nothing of it is kept).
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


def _time(fn, sync, calls, repeats):
    host, wall = [], []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        host.append((t1 - t0) / calls * 1e6)
        wall.append((t2 - t0) / calls * 1e6)
    return statistics.median(host), statistics.median(wall)


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
    print("| implementation | host us/call | wall us/call |")
    print("|---|---|---|")
    for name, fn in impls:
        for _ in range(20):       # warm-up: compilation, autotuning, allocator
            fn()
        sync()
        host, wall = _time(fn, sync, a.calls, a.repeats)
        print("| %s | %.2f | %.2f |" % (name, host, wall))


if __name__ == "__main__":
    main()
