"""python -m zgate.selfcheck: the shared case list (check/cases.def) against the float64 reference.

    python -m zgate.selfcheck --backend {cpu,cuda,triton,npu} [--output report.md]
        [--quick] [--save-golden FILE | --golden FILE] [--seed N] [--filter TEXT]

Backends: cpu and cuda run the C library (zgate.bwd / zgate.fwd on NumPy arrays or CUDA
torch tensors); triton runs zgate.triton's kernel on CUDA tensors, or on CPU tensors under
the Triton interpreter where no GPU exists; npu runs it on Ascend NPU tensors (torch_npu).

Every output is judged by zgate's accuracy policy, check/zgate_check.c, against the library's
float64 reference (judge_case). --save-golden stores every output; --golden also judges this
run's outputs against a stored run's on the same seeded inputs (e.g. an NPU against a GPU).
A case that did not run is reported as such and fails the run. Exit status: 0 all passed,
1 a case failed or did not run, 2 bad arguments. Its devices and judgement are also the
acceptance run's (python -m zgate.acceptance), which adds the timing.
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

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bfloat16 cases then cannot run
    BF16 = None

PROJ_EXTRA = 160        # a Z view's projection row is H*D + this many elements wider
QUANTITY = {"dz": 0, "dout_scaled": 1, "out": 2}    # zgate_check_quantity
F32_ULPS = 4            # the policy's float32 bound, in ulps of the scale (zgate_check.h)
# zgate.triton's float32 bound: plain float32 math with the platform's exp (no
# error-compensated sigmoid as in the C library). Upstream Triton's exp on NVIDIA GPUs is
# ex2.approx of x*log2(e), whose error grows with |z|: 27.5 ulp was the worst seen on the
# H200 over the self-check's cases (|z| up to 200).
TRITON_F32_ULPS = 64
GOLDEN_F32_ULPS = 8192  # 2^13 ulp of the scale: between 0.05% and 0.1% of it


class Case(NamedTuple):
    name: str
    op: str                       # "bwd" or "fwd"
    shape: Tuple[int, int, int, int]
    dtypes: Tuple[str, ...]       # bwd (dout, z, o, dz, dos); fwd (o, z, out)
    layout: str = "dense"         # "dense", "zview" (Z a view into a projection), "permuted"
                                  # (cases.def's in-place layout is dense with inplace=True)
    inplace: bool = False


_DT = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def _read_case_file():
    """(shapes [(shape, set)], dtypes [(name, 5 dtypes)], layouts [name]) of check/cases.def,
    installed beside this module."""
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.def")).read()
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


def np_dtype(name):
    if name == "bfloat16":
        if BF16 is None:
            raise RuntimeError("bfloat16 cases need ml_dtypes: pip install ml_dtypes")
        return BF16
    return np.dtype(name)


def random_inputs(rng, shape, dtype=np.float32):
    """Fresh random (dout, z, o) in `dtype`: z spans the interesting range of the sigmoid,
    including the root of 1 + z(1 - s) near -1.2785 and the exp overflow region."""
    n = int(np.prod(shape)) if len(shape) else 1
    dout = rng.standard_normal(n)
    o = rng.standard_normal(n) * 2.0
    z = rng.standard_normal(n) * 4.0
    k = n // 8
    if k:
        z[:k] = rng.uniform(-30, 30, k)
        z[k:2 * k] = -1.2785 + rng.uniform(-1e-3, 1e-3, k)
    if n >= 64:
        z[-4:] = [-88.5, 88.5, -104.0, 200.0]
    rng.shuffle(z)
    return tuple(np.asarray(a.reshape(shape)).astype(dtype) for a in (dout, z, o))


def inputs(case, seed):
    """The case's inputs as NumPy arrays (Z possibly a view into a wider buffer), from a
    generator seeded by (seed, case name): the same on every machine."""
    rng = np.random.default_rng([seed] + list(case.name.encode()))
    dout, z, o = random_inputs(rng, case.shape)
    arrays = [dout, z, o] if case.op == "bwd" else [o, z]
    out = []
    b, l, h, d = case.shape
    for i, (a, dt) in enumerate(zip(arrays, case.dtypes)):
        a = a.astype(np_dtype(dt))
        if case.layout == "zview" and i == 1:
            buf = np.zeros((b, l, h * d + PROJ_EXTRA), a.dtype)
            buf[:, :, PROJ_EXTRA // 2:PROJ_EXTRA // 2 + h * d] = a.reshape(b, l, h * d)
            a = buf[:, :, PROJ_EXTRA // 2:PROJ_EXTRA // 2 + h * d].reshape(b, l, h, d)
        elif case.layout == "permuted":
            a = np.ascontiguousarray(a.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
        out.append(a)
    return out


# --- judging: zgate_check_tensor, the one implementation of the policy -----------------------

def judge(quantity, got, ref, dout, z, o, f32_ulps=F32_ULPS):
    """zgate_check_tensor's statistics of `got` (a NumPy array) against `ref` with the inputs
    (dout None for "out"), and ok. f32_ulps: the float32 part of the bound in ulps of the
    scale, the policy's 4 times a power of two: the scale's input (dout; o for the forward) is
    handed over multiplied by f32_ulps / 4, which multiplies the scale, its ulp and the
    absolute allowance alike (exact: a power of two). "ulps": the largest error in ulps of
    the scale (float32) or of the type at the reference (16-bit)."""
    from . import _binding
    k = f32_ulps // F32_ULPS
    if k < 1 or k * F32_ULPS != f32_ulps or k & (k - 1):
        raise ValueError("f32_ulps %r is not 4 times a power of two" % f32_ulps)
    q = QUANTITY[quantity]
    if k > 1 and q == QUANTITY["out"]:
        o = np.asarray(o, np.float64) * k
    elif k > 1:
        dout = np.asarray(dout, np.float64) * k
    st = _binding.check_tensor(q, got, ref, dout, z, o)
    st["ulps"] = st["max_err_units"] * (k if got.dtype == np.float32 else 1)
    st["ok"] = st["failures"] == 0
    return st


def as_rounded_to_nearest(got, ref):
    """The Triton interpreter's float32 -> bfloat16 conversion truncates and flushes
    subnormals: a bfloat16 output as round-to-nearest would have stored it, so that the
    policy judges the kernel rather than the interpreter. The stored value or its neighbour
    away from zero, whichever is nearer the reference; where the reference is subnormal the
    element is not judged (it takes the reference's rounded value). (array, elements not
    judged)."""
    if got.dtype != BF16:
        return got, 0
    up = (got.view(np.uint16) + np.uint16(1)).view(BF16)
    g, u = got.astype(np.float64), up.astype(np.float64)
    with np.errstate(invalid="ignore"):
        nearer = np.isfinite(g) & np.isfinite(u) & (np.abs(u - ref) < np.abs(g - ref))
    skip = np.abs(ref) < 2.0 ** -126
    return np.where(skip, ref.astype(BF16), np.where(nearer, up, got)), int(skip.sum())


def judge_case(case, arrays, outs, f32_ulps, gold=None, interp=False):
    """Per output of the case, judge()'s figures against the float64 reference: float32
    within f32_ulps ulp of the elementwise scale (4 for the C library, far inside the
    request's 0.1% of it); float16/bfloat16 within 1 ulp of the reference (near the root of
    1 + z(1-s), the float32 bound plus half an ulp). With a golden run's outputs (a mapping
    "name|j" -> array), the same judge with the stored output in the reference's place:
    float32 within GOLDEN_F32_ULPS (under the request's 0.1%), 16-bit within 1 ulp of each
    other (near the root, four times the float32 bound plus half an ulp: two results each
    within the bound of the float64 value)."""
    import zgate
    if case.op == "bwd":
        names, (dout, z, o) = ("dz", "dout_scaled"), arrays
        refs = zgate.reference_bwd(dout, z, o)
    else:
        names, (o, z), dout = ("out",), arrays, None
        refs = (zgate.reference_fwd(o, z),)
    rows = []
    for j, (name, got, ref) in enumerate(zip(names, outs, refs)):
        skipped = 0
        if interp:
            got, skipped = as_rounded_to_nearest(got, ref)
        m = judge(name, got, ref, dout, z, o, f32_ulps)
        m.update(output=name, dtype=got.dtype.name, n_skipped=skipped)
        key = "%s|%d" % (case.name, j)
        if gold is not None:
            gv = gold[key]
            gv = gv.view(BF16) if got.dtype == BF16 else gv
            wide = GOLDEN_F32_ULPS if got.dtype == np.float32 else 4 * f32_ulps
            g = judge(name, got, gv.astype(np.float64), dout, z, o, wide)
            m["golden_ok"], m["golden_worst"] = g["ok"], g["max_bound_ratio"]
        rows.append(m)
    return rows


def stored(got):
    """An output as a golden file stores it (bfloat16 as its bits)."""
    return got.view(np.uint16) if got.dtype == BF16 else got


def load_golden(path, seed, names):
    """The stored outputs of a golden run, or ValueError saying why they do not fit this one."""
    try:
        gold = np.load(path)
        theirs = int(gold["__seed__"])
    except (OSError, ValueError, KeyError) as e:
        raise ValueError("cannot read golden file %s: %s" % (path, e)) from None
    if theirs != seed:
        raise ValueError("%s was made with seed %d, this run uses %d" % (path, theirs, seed))
    missing = [n for n in names if "%s|0" % n not in gold]
    if missing:
        raise ValueError("%s has no outputs of %d cases of this run (%s)" % (
            path, len(missing), ", ".join(missing[:3])))
    return gold


# --- devices and backends: the acceptance run's devices extend these with timing ----------

class Host:
    """NumPy arrays in host memory, the C library's CPU path."""
    name = "cpu"

    def put(self, a):
        return a

    def empty(self, shape, dtype, slack=0):
        """NaN-poisoned, with `slack` more elements after it."""
        n = int(np.prod(shape))
        return np.full(n + slack, np.nan, np_dtype(dtype))[:n].reshape(shape)

    def get(self, t):
        return np.array(t)

    def sync(self):
        pass


class Torch(Host):
    """PyTorch tensors on a device: "cuda", "npu", or "cpu" (the Triton interpreter)."""

    def __init__(self, name):
        import torch
        self.torch, self.name, self.mod = torch, name, getattr(torch, name)

    def put(self, a):
        return to_torch(self.torch, a, self.name)

    def empty(self, shape, dtype, slack=0):
        n = int(np.prod(shape))
        buf = self.torch.full((n + slack,), float("nan"), dtype=getattr(self.torch, dtype),
                              device=self.name)
        return buf[:n].view(shape)

    def get(self, t):
        return from_torch(t)

    def sync(self):
        self.mod.synchronize()


def to_torch(torch, a, dev):
    """A tensor on `dev` with a's values and strides, never sharing a's memory."""
    if a.flags.c_contiguous:
        c = np.array(a, copy=True)
        t = torch.from_numpy(c.view(np.int16)).view(torch.bfloat16) if a.dtype == BF16 \
            else torch.from_numpy(c)
        return t.to(dev)
    # keep the view: copy the whole base buffer, then take the same strides
    base = a.base if a.base is not None else a
    while base.base is not None and isinstance(base.base, np.ndarray):
        base = base.base
    tb = to_torch(torch, np.ascontiguousarray(base), dev).reshape(-1)
    off = (a.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // a.itemsize
    return tb.as_strided(a.shape, [s // a.itemsize for s in a.strides], off)


def from_torch(t):
    import torch
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(BF16)
    return t.contiguous().numpy()


def gate_call(module, dev, case, ins, **kw):
    """(call, outputs) of module.bwd / module.fwd (zgate or zgate.triton) on the device inputs,
    into new poisoned outputs; in place, dout_scaled is dout (the case list gives it dout's
    dtype)."""
    outs = [dev.empty(case.shape, d) for d in case.dtypes[len(ins):]]
    if case.op == "fwd":
        return lambda: module.fwd(*ins, out=outs[0], **kw), outs
    if case.inplace:
        outs[1] = ins[0]
        return lambda: module.bwd(*ins, dz=outs[0], inplace=True, **kw), outs
    return lambda: module.bwd(*ins, dz=outs[0], dout_scaled=outs[1], **kw), outs


def open_backend(backend):
    """(device, module) of a self-check backend, or RuntimeError saying why not here."""
    import zgate
    if backend == "cpu":
        return Host(), zgate
    import torch
    import zgate.triton
    if backend == "npu":
        try:
            import torch_npu  # noqa: F401
        except ImportError as e:
            raise RuntimeError("torch_npu is not installed (pip install torch-npu; needs "
                              "CANN)") from e
        if not torch.npu.is_available():
            raise RuntimeError("no NPU visible to torch_npu")
        return Torch("npu"), zgate
    if backend == "cuda" or torch.cuda.is_available():
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device visible to PyTorch")
        return Torch("cuda"), zgate if backend == "cuda" else zgate.triton
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("no GPU: set TRITON_INTERPRET=1 to run the Triton kernel on the CPU")
    return Torch("cpu"), zgate.triton


def check_case(dev, make_call, case, seed, f32_ulps, gold=None, interp=False):
    """Run the case once on the device and judge its outputs: (row, call), the call to time
    again; row["error"] and no call where it did not run. make_call(dev, case, device
    inputs) -> (call, device outputs), as gate_call."""
    arrays = inputs(case, seed)
    row = {"case": case.name, "error": None, "outputs": [], "outs": None}
    try:
        ins = [dev.put(a) for a in arrays]
        if case.inplace:        # dout is written over: the arrays stay as they were
            ins[0] = dev.put(arrays[0].copy())
        call, outs = make_call(dev, case, ins)
        call()
        dev.sync()
        row["outs"] = [dev.get(t) for t in outs]
        row["outputs"] = judge_case(case, arrays, row["outs"], f32_ulps, gold, interp)
        row["precision_ok"] = outputs_ok(row["outputs"])
        return row, call
    except Exception as e:     # reported per case; a case that did not run fails the run
        row["error"] = "%s: %s" % (type(e).__name__, e)
        return row, None


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
    todo = [c for c in cases(a.quick) if not a.filter or a.filter in c.name]
    try:
        for path in (a.output, a.save_golden):
            d = os.path.dirname(os.path.abspath(path)) if path else None
            if d and not os.path.isdir(d):
                raise ValueError("cannot write %s: no directory %s" % (path, d))
        gold = load_golden(a.golden, a.seed, [c.name for c in todo]) if a.golden else None
    except ValueError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    triton_kernel = a.backend in ("triton", "npu")
    f32_ulps = TRITON_F32_ULPS if triton_kernel else F32_ULPS
    interp = triton_kernel and os.environ.get("TRITON_INTERPRET") == "1"
    try:
        dev, module = open_backend(a.backend)
        make_call = (lambda dev, case, ins: gate_call(module, dev, case, ins))
    except (ImportError, RuntimeError) as e:   # every case is reported as not run
        why = "%s: %s" % (type(e).__name__, e)
        dev, make_call = None, None
    results, saved, t0 = [], {"__seed__": np.array(a.seed)}, time.time()
    for case in todo:
        if dev is None:
            row = {"case": case.name, "error": why, "outputs": [], "outs": None}
        else:
            row = check_case(dev, make_call, case, a.seed, f32_ulps, gold, interp)[0]
        saved.update(("%s|%d" % (case.name, j), stored(g))
                     for j, g in enumerate(row.pop("outs") or ()))
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


def outputs_ok(outputs):
    return all(m["ok"] and m.get("golden_ok", True) for m in outputs)


def _verdict(row):
    if row["error"]:
        return "did not run"
    return "pass" if outputs_ok(row["outputs"]) else "FAIL"


def report(a, results, seconds, f32_ulps, interp):
    import zgate
    n_fail = sum(_verdict(r) != "pass" for r in results)
    lines = ["# zgate self-check: backend %s" % a.backend, "",
             "- date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime(
                 "%Y-%m-%d %H:%M UTC"),
             "- host: %s, Python %s, zgate %s" % (platform.platform(),
                                                 platform.python_version(), zgate.__version__),
             "- seed: %d; %d cases in %.1f s" % (a.seed, len(results), seconds),
             "- bound (check/zgate_check.c): float32 within %d ulp of the elementwise scale "
             "(under the request's 0.1%% of it); 16-bit within 1 ulp of the float64 reference "
             "(near the root of 1 + z(1-s), the float32 bound + 1/2 ulp)" % f32_ulps]
    if a.golden:
        lines.append("- golden: %s (float32 within 0.1%% of the scale, 16-bit within 1 ulp of "
                     "each other; near the root within four times the bound)" % a.golden)
    if interp:
        lines.append("- Triton interpreter: its float32 -> bfloat16 conversion truncates and "
                     "flushes subnormals, so bfloat16 outputs are judged as rounded to nearest "
                     "and subnormal ones not at all; the x86 execution of triton-ascend's "
                     "lowering is the evidence for them (tests/ascend)")
    if a.backend == "npu":
        lines.append("- NPU: exp and division accuracy and the device binary are those of "
                     "the NPU; this report is the evidence for them")
    lines += ["", "**%s: %d of %d cases passed.**" % ("PASS" if not n_fail else "FAIL",
                                                      len(results) - n_fail, len(results)), "",
              "| case | output | dtype | max ulps | worst / bound | golden | verdict |",
              "|---|---|---|---|---|---|---|"]
    for r in results:
        if r["error"]:
            lines.append("| %s | - | - | - | - | - | did not run: %s |" % (
                r["case"], r["error"].replace("|", "/")[:200]))
        for m in r["outputs"]:
            gcol = "-" if "golden_ok" not in m else "%s (%.3g)" % (
                "ok" if m["golden_ok"] else "FAIL", m["golden_worst"])
            lines.append("| %s | %s | %s | %.2f | %.3f | %s | %s |" % (
                r["case"], m["output"], m["dtype"], m["ulps"], m["max_bound_ratio"],
                gcol, _verdict(r)))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
