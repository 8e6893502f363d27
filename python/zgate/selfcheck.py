"""python -m zgate.selfcheck: the shared case list (check/cases.def) against the float64 reference.

    python -m zgate.selfcheck --backend {cpu,cuda,triton,npu} [--output report.md]
        [--quick] [--save-golden FILE | --golden FILE] [--seed N]

Backends: cpu and cuda run the C library (zgate.bwd / zgate.fwd on NumPy arrays or CUDA
torch tensors); triton runs zgate.triton's kernel on CUDA tensors, or on CPU tensors under
the Triton interpreter where no GPU exists; npu runs it on Ascend NPU tensors (torch_npu).

Each case is judged twice: by the request's criterion (float32 outputs: error under 0.1% of
the elementwise scale; float16/bfloat16 outputs: within 1 ulp of the float64 reference, the
best a 16-bit result can be since rounding alone costs up to half an ulp) and by zgate's own
bound (zgate.oracle). --save-golden stores every output; --golden compares this run's
outputs with a stored run on the same seeded inputs (e.g. an NPU against a GPU): float32
within 0.1% of the elementwise scale, 16-bit types within 1 ulp of each other (near the root
of 1 + z(1-s), within the sum of both results' bounds). A case that did not run
is reported as such and fails the run. Exit status: 0 all passed, 1 a case failed or did not
run, 2 bad arguments.
"""
import argparse
import datetime
import os
import platform
import re
import sys
import time
from typing import NamedTuple, Tuple

import numpy as np

from . import oracle as O

REQUEST_REL = 1e-3
PROJ_EXTRA = 160        # a Z view's projection row is H*D + this many elements wider


class Case(NamedTuple):
    name: str
    op: str                       # "bwd" or "fwd"
    shape: Tuple[int, int, int, int]
    dtypes: Tuple[str, ...]       # bwd (dout, z, o, dz, dos); fwd (o, z, out)
    layout: str = "dense"         # "dense", "zview" (Z a view into a projection), "permuted"
                                  # (cases.def's in-place layout is dense with inplace=True)
    inplace: bool = False


_DT = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def _case_file():
    """cases.def: beside this module in an installed package, check/ in the source tree."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "cases.def"),
                 os.path.join(here, "..", "..", "check", "cases.def")):
        if os.path.isfile(path):
            return path
    raise FileNotFoundError("zgate's case list cases.def is neither beside %s nor in the "
                            "source tree's check/" % __file__)


def _read_case_file():
    """(shapes [(shape, set)], dtypes [(name, 5 dtypes)], layouts [name]) of check/cases.def."""
    text = open(_case_file()).read()
    shapes = [(tuple(int(v) for v in m[:4]), m[4]) for m in
              re.findall(r"^ZG_SHAPE\((\d+), (\d+), (\d+), (\d+), (\w+)\)", text, re.M)]
    dtypes = [(m[0], tuple(_DT[t] for t in m[1:])) for m in
              re.findall(r"^ZG_DTYPES\(([\w-]+), (\w+), (\w+), (\w+), (\w+), (\w+)\)", text,
                         re.M)]
    layouts = re.findall(r"^ZG_LAYOUT\((\w+)\)", text, re.M)
    return shapes, dtypes, layouts


def real_shapes():
    """The model-size shapes of the case list (set REAL), in its order."""
    return [shape for shape, group in _read_case_file()[0] if group == "REAL"]


def cases(quick=False):
    """The shared case list (check/cases.def), as every backend runs it. Full: every QUICK and
    FULL shape with every dtype combination in every layout, backward and forward, and the
    REAL (model-size) shapes in bfloat16 (dense, zview, in place) and float32 (zview), the
    forward beside every backward that is not in place.
    quick (the Triton interpreter, CI): the QUICK shapes, each dtype combination once, the
    layouts taken in turn."""
    shapes, dtypes, layouts = _read_case_file()
    out = []
    for si, (shape, group) in enumerate(shapes):
        if group == "REAL":
            if quick:
                continue
            todo = [(d, lay) for d in dtypes for lay in layouts
                    if (d[0] == "bf16" and lay != "permuted") or (d[0] == "f32" and lay == "zview")]
        elif group == "FULL" and quick:
            continue
        elif quick:
            todo = [(d, layouts[(si + di) % len(layouts)]) for di, d in enumerate(dtypes)]
        else:
            todo = [(d, lay) for d in dtypes for lay in layouts]
        tag = "x".join(map(str, shape))
        for (dname, dt), lay in todo:
            inplace = lay == "inplace"
            bdt = dt[:4] + (dt[0],) if inplace else dt
            out.append(Case("bwd %s %s %s" % (tag, dname, lay), "bwd", shape, bdt,
                            "dense" if inplace else lay, inplace))
            if not inplace:
                out.append(Case("fwd %s %s %s" % (tag, dname, lay), "fwd", shape,
                                (dt[2], dt[1], dt[3]), lay))
    return out


def _np_dtype(name):
    if name == "bfloat16":
        if O.BF16 is None:
            raise RuntimeError("bfloat16 cases need ml_dtypes: pip install ml_dtypes")
        return O.BF16
    return np.dtype(name)


def inputs(case, seed):
    """The case's inputs as NumPy arrays (Z possibly a view into a wider buffer), from a
    generator seeded by (seed, case name): the same on every machine."""
    rng = np.random.default_rng([seed] + list(case.name.encode()))
    n_in = 3 if case.op == "bwd" else 2
    dout, z, o = O.inputs(rng, case.shape)
    arrays = [dout, z, o] if case.op == "bwd" else [o, z]
    out = []
    b, l, h, d = case.shape
    for i, (a, dt) in enumerate(zip(arrays, case.dtypes[:n_in])):
        a = a.astype(_np_dtype(dt))
        if case.layout == "zview" and i == 1:
            buf = np.zeros((b, l, h * d + PROJ_EXTRA), a.dtype)
            buf[:, :, PROJ_EXTRA // 2:PROJ_EXTRA // 2 + h * d] = a.reshape(b, l, h * d)
            a = buf[:, :, PROJ_EXTRA // 2:PROJ_EXTRA // 2 + h * d].reshape(b, l, h, d)
        elif case.layout == "permuted":
            a = np.ascontiguousarray(a.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
        out.append(a)
    return out


def reference(case, arrays):
    """[(ref, scale, allow)] per output."""
    if case.op == "bwd":
        dz, dos, sdz, sdos, adz, ados = O.ref_bwd(*arrays)
        return [(dz, sdz, adz), (dos, sdos, ados)]
    out, s, a = O.ref_fwd(*arrays)
    return [(out, s, a)]


# --- backends -------------------------------------------------------------------------------

class Unavailable(RuntimeError):
    pass


def _torch_dev(backend):
    import torch
    if backend == "cuda" or (backend == "triton" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise Unavailable("no CUDA device visible to PyTorch")
        return torch, "cuda"
    if backend == "npu":
        try:
            import torch_npu  # noqa: F401
        except ImportError as e:
            raise Unavailable("torch_npu is not installed (pip install torch-npu; needs "
                              "CANN)") from e
        if not torch.npu.is_available():
            raise Unavailable("no NPU visible to torch_npu")
        return torch, "npu"
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise Unavailable("no GPU: set TRITON_INTERPRET=1 to run the Triton kernel on the CPU")
    return torch, "cpu"


def _to_torch(torch, a, dev):
    """A tensor on `dev` with a's values and strides, never sharing a's memory."""
    if a.flags.c_contiguous:
        c = np.array(a, copy=True)
        t = torch.from_numpy(c.view(np.int16)).view(torch.bfloat16) if a.dtype == O.BF16 \
            else torch.from_numpy(c)
        return t.to(dev)
    # keep the view: copy the whole base buffer, then take the same strides
    base = a.base if a.base is not None else a
    while base.base is not None and isinstance(base.base, np.ndarray):
        base = base.base
    tb = _to_torch(torch, np.ascontiguousarray(base), dev).reshape(-1)
    off = (a.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // a.itemsize
    return tb.as_strided(a.shape, [s // a.itemsize for s in a.strides], off)


def _from_torch(t):
    t = t.detach().cpu()
    import torch
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(O.BF16)
    return t.contiguous().numpy()


def run_backend(backend, case, arrays):
    """The case's outputs as NumPy arrays, computed by `backend`."""
    n_in = len(arrays)
    out_dt = case.dtypes[n_in:]
    if backend == "cpu":
        import zgate
        outs = [np.full(case.shape, np.nan, _np_dtype(d)) for d in out_dt]
        args = [a.copy() if (case.inplace and i == 0) else a for i, a in enumerate(arrays)]
        if case.op == "bwd":
            if case.inplace:
                zgate.bwd(*args, dz=outs[0], inplace=True)
                return [outs[0], args[0].astype(_np_dtype(out_dt[1]))]
            zgate.bwd(*args, dz=outs[0], dout_scaled=outs[1])
        else:
            zgate.fwd(*args, out=outs[0])
        return outs
    torch, dev = _torch_dev(backend)
    import zgate
    mod = zgate if backend in ("cuda", "npu") else __import__("zgate.triton",
                                                               fromlist=["bwd"])
    ts = [_to_torch(torch, a, dev) for a in arrays]
    td = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    outs = [torch.full(case.shape, float("nan"), dtype=td[d], device=dev) for d in out_dt]
    if case.op == "bwd":
        if case.inplace:
            if ts[0].dtype != td[out_dt[1]]:
                raise ValueError("an in-place case needs dout's dtype for dout_scaled")
            mod.bwd(*ts, dz=outs[0], inplace=True)
            outs[1] = ts[0]
        else:
            mod.bwd(*ts, dz=outs[0], dout_scaled=outs[1])
    else:
        mod.fwd(*ts, out=outs[0])
    if dev != "cpu":
        getattr(torch, dev).synchronize()
    return [_from_torch(t) for t in outs]


# --- judging -------------------------------------------------------------------------------

def judge(case, outs, refs, f32_ulps, interp=False):
    """Per output: oracle.measure's figures and the verdicts. interp: the Triton
    interpreter's float32 -> bfloat16 conversion truncates (up to 1 ulp more) and loses
    bfloat16 subnormals, so bfloat16 outputs are held to 2 ulp and subnormal results are
    not judged there (counted as n_skipped)."""
    rows = []
    for name, got, (ref, scale, allow) in zip(
            ("dz", "dout_scaled") if case.op == "bwd" else ("out",), outs, refs):
        skip = None
        if interp and got.dtype == O.BF16:
            skip = np.abs(ref) < 2.0 ** -126
            m = O.measure(got, ref, scale, allow, f32_ulps, skip, half_ulps=2.0)
        else:
            m = O.measure(got, ref, scale, allow, f32_ulps)
        if got.dtype == O.F32:
            req_ok = m["rel_scale"] < REQUEST_REL and _nan_inf_ok(got, ref)
        else:   # 16-bit: the documented criterion is zgate's own
            req_ok = m["bad"] == 0
        m.update(output=name, dtype=got.dtype.name, request_ok=bool(req_ok),
                 bound_ok=m["bad"] == 0)
        rows.append(m)
    return rows


def _nan_inf_ok(got, ref):
    g = got.astype(np.float64)
    with np.errstate(all="ignore"):
        return bool(np.array_equal(np.isnan(g), np.isnan(ref)) and
                    np.all(np.where(np.isinf(ref), g == ref, True)))


def golden_compare(got, gold, ref, scale, allow, f32_ulps):
    """(ok, worst) of this run's output against another device's on the same inputs.
    float32: |got - gold| under 0.1% of the elementwise scale (worst: that fraction);
    16-bit: within 1 ulp of each other, or near the root of 1 + z(1-s), where each may be
    off by the float32 bound + 1/2 ulp, within twice that (worst: in ulps). NaN where the
    other is NaN, infinities equal."""
    g, r = got.astype(np.float64), gold.astype(np.float64)
    if not _nan_inf_ok(got, r):
        return False, float("inf")
    fin = np.isfinite(r)
    with np.errstate(all="ignore"):
        d = np.abs(g - r)[fin]
        if got.dtype == O.F32:
            sc = np.broadcast_to(scale, g.shape)[fin]
            normal = sc >= O.REL_MIN_SCALE
            worst = float((d[normal] / sc[normal]).max()) if normal.any() else 0.0
            return worst < REQUEST_REL, worst
        u = O.ulp(np.broadcast_to(ref, g.shape)[fin], got.dtype)
        near_root = 2 * (f32_ulps * O.ulp(np.broadcast_to(scale, g.shape)[fin], O.F32)
                         + np.broadcast_to(allow, g.shape)[fin]) + u
        worst = float((d / u).max()) if d.size else 0.0
        return bool(np.all((d <= u) | (d <= near_root))), worst


# --- the command ---------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m zgate.selfcheck", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--backend", required=True, choices=("cpu", "cuda", "triton", "npu"))
    ap.add_argument("--output", help="write the Markdown report here")
    ap.add_argument("--quick", action="store_true", help="small shapes only")
    ap.add_argument("--seed", type=int, default=20261203)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--save-golden", metavar="FILE", help="store every output (.npz)")
    g.add_argument("--golden", metavar="FILE", help="compare with a stored run (.npz)")
    ap.add_argument("--filter", help="run only cases whose name contains this text")
    a = ap.parse_args(argv)
    for path in (a.output, a.save_golden):
        d = os.path.dirname(os.path.abspath(path)) if path else None
        if d and not os.path.isdir(d):
            print("error: cannot write %s: no directory %s" % (path, d), file=sys.stderr)
            return 2
    gold = None
    if a.golden:
        try:
            gold = np.load(a.golden)
        except OSError as e:
            print("error: cannot read golden file %s: %s" % (a.golden, e), file=sys.stderr)
            return 2
        if int(gold["__seed__"]) != a.seed:
            print("error: %s was made with seed %d, this run uses %d" % (
                a.golden, int(gold["__seed__"]), a.seed), file=sys.stderr)
            return 2
    triton_kernel = a.backend in ("triton", "npu")
    f32_ulps = TRITON_F32_ULPS if triton_kernel else O.F32_ULPS
    interp = triton_kernel and os.environ.get("TRITON_INTERPRET") == "1"
    todo = [c for c in cases(a.quick) if not a.filter or a.filter in c.name]
    results, saved, t0 = [], {"__seed__": np.array(a.seed)}, time.time()
    for case in todo:
        arrays = inputs(case, a.seed)
        refs = reference(case, arrays)
        try:
            outs = run_backend(a.backend, case, arrays)
            err = None
        except Exception as e:     # reported per case; a case that did not run fails
            outs, err = None, "%s: %s" % (type(e).__name__, e)
        row = {"case": case, "error": err, "outputs": []}
        if outs is not None:
            row["outputs"] = judge(case, outs, refs, f32_ulps, interp)
            for j, (m, got) in enumerate(zip(row["outputs"], outs)):
                key = "%s|%d" % (case.name, j)
                if a.save_golden:
                    saved[key] = got.view(np.uint16) if got.dtype == O.BF16 else got
                if gold is not None:
                    if key not in gold:
                        m["golden_ok"], m["golden_worst"] = False, float("nan")
                    else:
                        gv = gold[key]
                        gv = gv.view(O.BF16) if got.dtype == O.BF16 else gv
                        m["golden_ok"], m["golden_worst"] = golden_compare(
                            got, gv, *refs[j], f32_ulps)
        results.append(row)
        print("%-48s %s" % (case.name, _verdict(row)), flush=True)
    if a.save_golden:
        np.savez_compressed(a.save_golden, **saved)
    text = report(a, results, time.time() - t0, f32_ulps, interp)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    n_fail = sum(_verdict(r) != "pass" for r in results)
    print("selfcheck %s: %d cases, %d passed, %d failed" % (
        a.backend, len(results), len(results) - n_fail, n_fail))
    return 1 if n_fail or not results else 0


# zgate.triton's float32 bound in ulps of the scale: plain float32 math with the
# platform's exp (no error-compensated sigmoid as in the C library). Upstream Triton's exp
# on NVIDIA GPUs is ex2.approx of x*log2(e), whose error grows with |z|: 27.5 ulp was the
# worst seen on the H200 (3 December 2026) over the self-check's cases (|z| up to 200).
TRITON_F32_ULPS = 64


def _verdict(row):
    if row["error"]:
        return "did not run"
    ok = all(m["request_ok"] and m["bound_ok"] and m.get("golden_ok", True)
             for m in row["outputs"])
    return "pass" if ok else "FAIL"


def report(a, results, seconds, f32_ulps, interp):
    lines = ["# zgate self-check: backend %s" % a.backend, ""]
    import zgate
    lines += ["- date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC"),
              "- host: %s, Python %s, zgate %s" % (platform.platform(), platform.python_version(),
                                                  zgate.__version__),
              "- seed: %d; %d cases in %.1f s" % (a.seed, len(results), seconds),
              "- request's criterion: float32 outputs error < 0.1%% of the elementwise scale; "
              "16-bit outputs within 1 ulp of the float64 reference",
              "- zgate's bound: float32 within %d ulp of the scale; 16-bit within 1 ulp (or the "
              "float32 bound + 1/2 ulp near the root of 1 + z(1-s))" % f32_ulps]
    if a.golden:
        lines.append("- golden: %s (float32 within 0.1%% of the scale, 16-bit within 1 ulp of "
                     "each other; near the root within both results' bounds)" % a.golden)
    if interp:
        lines.append("- Triton interpreter: its float32 -> bfloat16 conversion truncates and "
                     "mishandles subnormals, so bfloat16 outputs are no bit-exact evidence "
                     "here; the x86 execution of triton-ascend's lowering is (tests/ascend)")
    if a.backend == "npu":
        lines.append("- NPU: exp and division accuracy and the device binary are those of "
                     "the NPU; this report is the evidence for them")
    n_fail = sum(_verdict(r) != "pass" for r in results)
    lines += ["", "**%s: %d of %d cases passed.**" % ("PASS" if not n_fail else "FAIL",
                                                      len(results) - n_fail, len(results)), "",
              "| case | output | dtype | request | max err / scale | max ulps | zgate bound "
              "(worst fraction) | golden | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        c = r["case"]
        if r["error"]:
            lines.append("| %s | - | - | - | - | - | - | - | did not run: %s |" % (
                c.name, r["error"].replace("|", "/")[:200]))
            continue
        for m in r["outputs"]:
            gcol = "-" if "golden_ok" not in m else "%s (%.3g)" % (
                "ok" if m["golden_ok"] else "FAIL", m["golden_worst"])
            lines.append("| %s | %s | %s | %s | %.2e | %.2f | %s (%.3f) | %s | %s |" % (
                c.name, m["output"], m["dtype"], "ok" if m["request_ok"] else "FAIL",
                m["rel_scale"], m["ulps"], "ok" if m["bound_ok"] else "FAIL", m["worst"],
                gcol, _verdict(r)))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
