#!/usr/bin/env python3
"""Upstream's Mamba-3 layer with zgate's compute_dzdo: every gradient, the gate's own errors
in the layer, and the gate's share of the backward time.

    python3 tests/mamba/mamba_layer_check.py --mamba PATH [--headdims 64,128,80,96] [--batch 2]
        [--seqlen 2048] [--nheads 24] [--rep 20] [--json FILE] [--in-process] [--zgate-only]

PATH is a state-spaces/mamba checkout (its mamba_ssm/ and tests/ folders; never committed):
mamba_ssm is imported from it without its __init__.py. Each headdim runs in a process of its
own (a crash of one does not hide the others; --in-process runs them in this one); a headdim
whose process died runs again with --zgate-only, where upstream's compute_dzdo never runs and
zgate's gradients are judged against the reference alone. There
the Mamba3 module (SISO, bf16, d_state 128, expand 2, so d_model = nheads * headdim / 2) runs
forward and backward on one input and one output gradient, its weights and inputs the same
in every run:
  upstream   compute_dzdo as shipped; run twice, the second time with nothing patched
             (the A/A distance: run-to-run noise of upstream's backward)
  zgate      under zgate.torch.use_in_mamba_ssm(), whose counter must show the layer's call
  reference  the same weights in float32, the SISO scan by upstream's own PyTorch reference
             (mamba3_siso_fwd_ref of tests/ops/triton/test_mamba3_siso.py), TF32 off
Every gradient (the input's and each parameter's) is compared by ||a - b|| / ||b||: zgate
against upstream, and each against the reference; "ratio" is zgate's distance to the
reference over upstream's. The gate alone is checked on the (dO, Z, O) of the layer's own
call during upstream's first run: elements of dZ and dO_scaled more than 1 bf16 ulp from the
float64 formula, and those out of the tolerance of docs/operator.md, for each
implementation; and the time of that first call to a synchronize (upstream autotunes on the
first call of each padded headdim in a process; Triton's compile cache may be warm). Time:
CUDA events around backward() and around compute_dzdo, upstream and zgate alternating,
medians of --rep rounds each after two warm-up rounds.
Exit status 1 when zgate did not run, a zgate element is out of tolerance, or a zgate
gradient is more than 5% further from the reference than upstream's; 2 when a headdim's
process died. --device cpu is only for a dry run on a stand-in checkout (upstream's kernels
need CUDA); its times are the host clock's.
"""
import argparse
import copy
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

RATIO_LIMIT = 1.05


def load_upstream(path):
    """(the mamba_ssm.modules.mamba3 module, mamba3_siso_fwd_ref) from the checkout at path."""
    path = os.path.abspath(path)
    test_file = os.path.join(path, "tests", "ops", "triton", "test_mamba3_siso.py")
    if not os.path.isdir(os.path.join(path, "mamba_ssm")) or not os.path.isfile(test_file):
        sys.exit("mamba_layer_check: %s is not a state-spaces/mamba checkout (mamba_ssm/ and "
                 "tests/ops/triton/test_mamba3_siso.py)" % path)
    sys.path.insert(0, path)
    from zgate import _mamba
    _mamba.import_mamba_module(skip_package_init=True)
    from mamba_ssm.modules import mamba3
    spec = importlib.util.spec_from_file_location("upstream_test_mamba3_siso", test_file)
    tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests)
    return mamba3, tests.mamba3_siso_fwd_ref


def reference_scan(fwd_ref):
    """mamba3_siso_combined's training call, computed by upstream's PyTorch reference in float32."""
    def siso(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=None, Z=None, chunk_size=64,
             Input_States=None, return_final_states=False, cu_seqlens=None):
        if Input_States is not None or return_final_states or cu_seqlens is not None:
            raise NotImplementedError("the reference covers the training forward only")
        out, _ = fwd_ref(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, D=D, Z=Z,
                         Initial_States=None, chunk_size=chunk_size, dtype=torch.float32)
        return out
    return siso


class Clock:
    """CUDA events on a GPU (times on the device's stream); the host clock on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def ms(self, start, end):
        return start.elapsed_time(end) if self.cuda else (end - start) * 1e3


def formula64(do, z, o):
    """(dz, do_scaled, the scale of each) in float64, as the oracle of docs/operator.md."""
    do, z, o = do.double(), z.double(), o.double()
    s = torch.sigmoid(z)
    scale_dz = (do * o).abs() * s * (1 + z.abs() * (1 - s))
    return do * o * s * (1 + z * (1 - s)), do * s * z, scale_dz, (do * z).abs() * s


def ulp(x, mantissa_bits):
    """Unit in the last place at |x| of a type with float32's exponent range (float64 in)."""
    _, e = torch.frexp(x)                       # |x| = m * 2**e, m in [0.5, 1)
    u = torch.exp2((torch.clamp(e - 1, min=-126) - mantissa_bits).double())
    return torch.where(x == 0, torch.full_like(u, 2.0 ** (-126 - mantissa_bits)), u)


def gate_errors(got, ref, scale):
    """Elements of a bf16 result more than 1 ulp from the float64 reference, those out of the
    tolerance of docs/operator.md (more than 1 ulp and more than 4 float32 ulp of the scale
    plus half a bf16 ulp), and the largest absolute error."""
    err = (got.double() - ref).abs()
    u = ulp(ref, 7)
    out = (err > u) & (err > 4 * ulp(scale, 23) + 0.5 * u)
    return {"off_1ulp": int((err > u).sum()), "out_of_tolerance": int(out.sum()),
            "max_err": float(err.max())}


class Probe:
    """Stands in for compute_dzdo during upstream's first run: calls upstream's function (its
    result goes on), then zgate's on the same (dO, Z, O), each timed to a synchronize, and
    compares both with the float64 formula."""

    def __init__(self, clock):
        self.clock, self.original, self.result = clock, None, None

    def _timed(self, fn):
        self.clock.sync()
        t0 = time.perf_counter()
        r = fn()
        self.clock.sync()
        return r, (time.perf_counter() - t0) * 1e3

    def __call__(self, do, z, o, chunk_size=64):
        import zgate.torch as zt
        impls = {"zgate": zt.compute_dzdo}
        if self.original is not None:  # None: zgate only (its result goes on)
            impls = {"upstream": self.original, **impls}
        got, ms = {}, {}
        for name, fn in impls.items():
            got[name], ms[name] = self._timed(lambda: fn(do, z, o, chunk_size=chunk_size))
        ref = formula64(do, z, o)
        self.result = {"z_strides": list(z.stride()), "first_call_ms": ms}
        if "upstream" in got:
            up, zg = got["upstream"], got["zgate"]
            self.result["elements_differing"] = int((up[0] != zg[0]).sum() + (up[1] != zg[1]).sum())
        for name, r in got.items():
            self.result[name] = {"dz": gate_errors(r[0], ref[0], ref[2]),
                                 "do_scaled": gate_errors(r[1], ref[1], ref[3])}
        return next(iter(got.values()))


class GateTimer:
    """Stands in for compute_dzdo while timing: marks the clock around each call of self.impl."""

    def __init__(self, clock):
        self.clock, self.impl, self.marks = clock, None, []

    def __call__(self, do, z, o, chunk_size=64):
        start = self.clock.mark()
        r = self.impl(do, z, o, chunk_size=chunk_size)
        self.marks.append((start, self.clock.mark()))
        return r


def forward_backward(model, u, g, clock):
    """(output, {gradient name: gradient}) of one forward and backward."""
    model.zero_grad(set_to_none=True)
    x = u.detach().clone().requires_grad_(True)
    out = model(x)
    out.backward(g)
    clock.sync()
    grads = {"input": x.grad.detach().clone()}
    for name, p in model.named_parameters():
        grads[name] = None if p.grad is None else p.grad.detach().clone()
    return out.detach().clone(), grads


def timed_backward(model, u, g, timer, impl):
    """(backward ms, compute_dzdo ms, compute_dzdo calls) of one backward."""
    model.zero_grad(set_to_none=True)
    x = u.detach().clone().requires_grad_(True)
    out = model(x)
    timer.impl, timer.marks = impl, []
    timer.clock.sync()
    start = timer.clock.mark()
    out.backward(g)
    end = timer.clock.mark()
    timer.clock.sync()
    gate = sum(timer.clock.ms(s, e) for s, e in timer.marks)
    return timer.clock.ms(start, end), gate, len(timer.marks)


def distance(a, b):
    """||a - b|| / ||b|| in float64 (the plain norm of a - b where b is zero)."""
    d = (a.double() - b.double()).norm().item()
    n = b.double().norm().item()
    return d / n if n > 0 else d


def compare_grads(zg, ref, up=None, up2=None):
    """Per gradient: zgate's distance to the reference and, with upstream's two runs, the
    A/A distance, zgate's distance to upstream and the ratio of the distances to the reference."""
    rows = {}
    for name in zg:
        if zg[name] is None:
            continue
        zg_ref = distance(zg[name], ref[name])
        rows[name] = {"numel": zg[name].numel(), "zgate_vs_ref": zg_ref}
        if up is None:
            continue
        up_ref = distance(up[name], ref[name])
        rows[name].update({"upstream_aa": distance(up2[name], up[name]),
                           "zgate_vs_upstream": distance(zg[name], up[name]),
                           "upstream_vs_ref": up_ref,
                           "ratio": zg_ref / up_ref if up_ref > 0 else
                           (1.0 if zg_ref == 0 else float("inf"))})
    return rows


def check_headdim(a, headdim):
    import zgate.torch as zt
    mamba3, fwd_ref = load_upstream(a.mamba)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(a.device)
    clock = Clock(dev)
    d_model = a.nheads * headdim // 2
    torch.manual_seed(0)
    model = mamba3.Mamba3(d_model=d_model, headdim=headdim, device=dev, dtype=torch.bfloat16)
    assert model.nheads == a.nheads and not model.is_mimo and not model.is_outproj_norm
    gen = torch.Generator(device=dev).manual_seed(1)
    u = torch.randn(a.batch, a.seqlen, d_model, device=dev, generator=gen).to(torch.bfloat16)
    g = torch.randn(a.batch, a.seqlen, d_model, device=dev, generator=gen).to(torch.bfloat16)
    row = {"headdim": headdim, "d_model": d_model, "shape": [a.batch, a.seqlen, a.nheads, headdim],
           "zgate_only": a.zgate_only}
    print("headdim %d: d_model %d, gate shape %s" % (headdim, d_model, row["shape"]), flush=True)

    t0 = time.perf_counter()
    probe = Probe(clock)
    with zt.use_in_mamba_ssm(replacement=probe) as h:
        probe.original = None if a.zgate_only else h.original
        row["replaced"] = h.replaced
        out_up, up = forward_backward(model, u, g, clock)
    if probe.result is None:
        raise RuntimeError("the layer's backward did not call compute_dzdo")
    row["gate"], row["first_run_s"] = probe.result, time.perf_counter() - t0
    if a.zgate_only:
        out_up = up = None
    else:
        out_up2, up2 = forward_backward(model, u, g, clock)    # nothing patched
    with zt.use_in_mamba_ssm() as h:
        out_zg, zg = forward_backward(model, u, g, clock)
        row["zgate_calls"] = h.calls

    ref_model = copy.deepcopy(model).float()
    combined = mamba3.mamba3_siso_combined
    mamba3.mamba3_siso_combined = reference_scan(fwd_ref)
    try:
        out_ref, ref = forward_backward(ref_model, u.float(), g.float(), clock)
    finally:
        mamba3.mamba3_siso_combined = combined
    del ref_model
    row["forward"] = {"zgate_vs_ref": distance(out_zg, out_ref)}
    if up is not None:
        row["forward"].update({"upstream_aa_max_diff": (out_up - out_up2).abs().max().item(),
                               "zgate_vs_upstream_max_diff": (out_zg - out_up).abs().max().item(),
                               "upstream_vs_ref": distance(out_up, out_ref)})
        row["grads"] = compare_grads(zg, ref, up, up2)
        del up2
    else:
        row["grads"] = compare_grads(zg, ref)
    del up, zg, ref

    timer = GateTimer(clock)
    times = {name: [] for name in (("zgate",) if a.zgate_only else ("upstream", "zgate"))}
    with zt.use_in_mamba_ssm(replacement=timer) as h:
        impls = {"zgate": zt.compute_dzdo}
        if not a.zgate_only:
            impls = {"upstream": h.original, **impls}
        for r in range(a.rep + 2):
            for name, impl in impls.items():
                bwd_ms, gate_ms, calls = timed_backward(model, u, g, timer, impl)
                assert calls == 1, "compute_dzdo ran %d times in one backward" % calls
                if r >= 2:
                    times[name].append((bwd_ms, gate_ms))
    row["time"] = {}
    for name, ts in times.items():
        bwd, gate = statistics.median(t[0] for t in ts), statistics.median(t[1] for t in ts)
        row["time"][name] = {"backward_ms": bwd, "gate_ms": gate, "gate_share": gate / bwd}
    row["problems"] = problems(row)
    row["ok"] = not row["problems"]
    return row


def problems(row):
    found = []
    if row["zgate_calls"] != 1:
        found.append("zgate ran %d times in one backward, not once" % row["zgate_calls"])
    zg = row["gate"]["zgate"]
    if zg["dz"]["out_of_tolerance"] or zg["do_scaled"]["out_of_tolerance"]:
        found.append("zgate: %d dz and %d do_scaled elements out of tolerance"
                     % (zg["dz"]["out_of_tolerance"], zg["do_scaled"]["out_of_tolerance"]))
    for name, c in row["grads"].items():
        if c.get("ratio", 0) > RATIO_LIMIT:  # no ratio: upstream did not run (--zgate-only)
            found.append("d(%s): zgate %.3g from the reference, upstream %.3g"
                         % (name, c["zgate_vs_ref"], c["upstream_vs_ref"]))
    return found


def report(row):
    print("headdim %d (d_model %d), z strides %s; compute_dzdo replaced at %s"
          % (row["headdim"], row["d_model"], tuple(row["gate"]["z_strides"]),
             ", ".join(row["replaced"])))
    f = row["forward"]
    if "upstream_vs_ref" in f:
        print("  forward: upstream A/A max diff %.3g, zgate vs upstream %.3g, upstream vs ref %.3g,"
              " zgate vs ref %.3g" % (f["upstream_aa_max_diff"], f["zgate_vs_upstream_max_diff"],
                                      f["upstream_vs_ref"], f["zgate_vs_ref"]))
    else:
        print("  forward: zgate vs ref %.3g (upstream's compute_dzdo not run)" % f["zgate_vs_ref"])
    print("  %-22s %10s %10s %10s %10s %10s %7s" % (
        "gradient", "elements", "up A/A", "zg vs up", "up vs ref", "zg vs ref", "ratio"))
    num = lambda c, k, fmt: fmt % c[k] if k in c else "%*s" % (len(fmt % 0.0), "-")
    for name, c in row["grads"].items():
        print("  %-22s %10d %s %s %s %10.3g %s" % (
            name, c["numel"], num(c, "upstream_aa", "%10.3g"), num(c, "zgate_vs_upstream", "%10.3g"),
            num(c, "upstream_vs_ref", "%10.3g"), c["zgate_vs_ref"], num(c, "ratio", "%7.4f")))
    gt = row["gate"]
    for name in row["time"]:
        dz, ds = gt[name]["dz"], gt[name]["do_scaled"]
        print("  gate %-8s: > 1 ulp: dz %d, do_scaled %d; out of tolerance: %d, %d; max abs err "
              "%.3g, %.3g; first call %.1f ms" % (
                  name, dz["off_1ulp"], ds["off_1ulp"], dz["out_of_tolerance"],
                  ds["out_of_tolerance"], dz["max_err"], ds["max_err"],
                  gt["first_call_ms"][name]))
    if "elements_differing" in gt:
        print("  gate outputs differing between the two: %d elements" % gt["elements_differing"])
    for name, t in row["time"].items():
        print("  time %-8s: backward %.3f ms, compute_dzdo %.3f ms = %.2f%% of it"
              % (name, t["backward_ms"], t["gate_ms"], 100 * t["gate_share"]))
    print("  %s" % ("ok" if row["ok"] else "PROBLEMS: " + "; ".join(row["problems"])), flush=True)


def summary(rows, died):
    print("\nsummary:")
    for row in rows:
        t, gt = row["time"], row["gate"]
        off = {n: gt[n]["dz"]["off_1ulp"] + gt[n]["do_scaled"]["off_1ulp"] for n in t}
        verdict = "ok" if row["ok"] else "PROBLEMS"
        if row.get("zgate_only"):
            print("  headdim %3d: %s with zgate only; gate share of the backward %.2f%%; elements "
                  "> 1 ulp: zgate %d; worst gradient distance to the reference %.3g" % (
                      row["headdim"], verdict, 100 * t["zgate"]["gate_share"], off["zgate"],
                      max(c["zgate_vs_ref"] for c in row["grads"].values())))
            continue
        print("  headdim %3d: %s; gate share of the backward: upstream %.2f%%, zgate %.2f%%; "
              "elements > 1 ulp: upstream %d, zgate %d; worst gradient ratio %.4f" % (
                  row["headdim"], verdict, 100 * t["upstream"]["gate_share"],
                  100 * t["zgate"]["gate_share"], off["upstream"], off["zgate"],
                  max(c["ratio"] for c in row["grads"].values())))
    for d in died:
        print("  headdim %3d: its process died %s (see above)" % (
            d["headdim"], "with zgate's compute_dzdo only" if d["zgate_only"]
            else "with upstream's compute_dzdo in"))


def environment(a):
    import zgate
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "absent"
    rev = os.path.join(a.mamba, "REVISION")
    return {"date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "device": torch.cuda.get_device_name() if a.device == "cuda" else a.device,
            "torch": torch.__version__, "triton": triton_version,
            "libzgate": zgate.library_path(),
            "mamba_revision": open(rev).read().strip() if os.path.isfile(rev) else "unknown"}


def child(argv, headdim):
    """check_headdim in a fresh process; its row, or None when it died."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="mamba_layer_")
    os.close(fd)
    args, skip = [], False
    for x in argv:  # this process's arguments less --headdims and --json
        if skip:
            skip = False
        elif x in ("--headdims", "--json"):
            skip = True
        elif not x.startswith(("--headdims=", "--json=")):
            args.append(x)
    cmd = [sys.executable, os.path.abspath(__file__)] + args + [
        "--headdims", str(headdim), "--json", path, "--child"]
    rc = subprocess.call(cmd)
    try:
        with open(path) as f:
            rows = json.load(f)["rows"] if os.path.getsize(path) else []
    finally:
        os.unlink(path)
    if not rows:
        print("headdim %d: its process exited with status %d and no result" % (headdim, rc),
              flush=True)
        return None
    return rows[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mamba", required=True, help="state-spaces/mamba checkout")
    ap.add_argument("--headdims", default="64,128,80,96")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--nheads", type=int, default=24)
    ap.add_argument("--rep", type=int, default=20)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--in-process", action="store_true", help="every headdim in this process")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--zgate-only", action="store_true",
                    help="upstream's compute_dzdo never runs; gradients against the reference only")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    a = ap.parse_args(argv)
    headdims = [int(v) for v in a.headdims.split(",")]
    if any(h % 2 for h in headdims):
        ap.error("headdims must be even (d_model = nheads * headdim / 2)")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("mamba_layer_check: no CUDA device")
    env = environment(a)
    if not a.child:
        print("; ".join("%s %s" % kv for kv in env.items()), flush=True)
    rows, died = [], []
    for hd in headdims:
        if a.in_process or a.child or len(headdims) == 1:
            row = check_headdim(a, hd)
            report(row)
        else:
            row = child(argv, hd)
            if row is None and not a.zgate_only:
                print("headdim %d: again with zgate's compute_dzdo only" % hd, flush=True)
                died.append({"headdim": hd, "zgate_only": False})
                row = child(argv + ["--zgate-only"], hd)
        if row is None:
            died.append({"headdim": hd, "zgate_only": True})
        else:
            rows.append(row)
        if a.json:  # after every headdim, so that a run stopped short keeps what it has
            with open(a.json, "w") as f:
                json.dump({"environment": env, "args": vars(a), "rows": rows, "died": died}, f,
                          indent=1)
    if a.child:
        return 0
    summary(rows, died)
    if died:
        return 2
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
