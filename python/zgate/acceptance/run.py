"""The cases, the implementations and the measurement of one case."""
import math
import os
import statistics

import numpy as np

from .. import cases as C
from .device import TimingError

LAUNCH_BOUND_US = 10.0      # cases whose ideal transfer time is below this are launch-bound


def _timed(c):
    """The timed run's part of the case list: one dtype for all tensors (bfloat16 or float32),
    dense or Z as a view into the projection, not in place, not empty (a size-0 call launches
    no kernel: nothing to time; the precision-only run covers it)."""
    return (not c.inplace and c.layout in ("dense", "zview") and len(set(c.dtypes)) == 1
            and c.dtypes[0] in ("bfloat16", "float32") and math.prod(c.shape) > 0)


def case_list(quick, op=None, timed=True):
    """Untimed: the whole case list (quick: its small shapes). Timed: its _timed part, and with
    quick also the bfloat16 cases of the smallest real shape, so that cases above the
    launch-bound line exist on every device."""
    out = C.cases(quick)
    if timed:
        full = [c for c in C.cases(False) if _timed(c)]
        out = [c for c in out if _timed(c)] if quick else full
    if timed and quick:
        big = min(C.real_shapes(), key=lambda s: (math.prod(s), s))
        out += [c for c in full if c.shape == big and c.dtypes[0] == "bfloat16"]
    return [c for c in out if op in (None, c.op)]


def nbytes(case):
    """Bytes the operator moves: every tensor's elements once."""
    size = {"float32": 4, "float16": 2, "bfloat16": 2}
    return math.prod(case.shape) * sum(size[d] for d in case.dtypes)


# --- implementations: prepare(dev, case, device inputs) -> (call, outputs, views) -----------
# views[j]: the cases.def View that outputs[j] was made in, NaN throughout its buffer, whose
# padding check_case finds untouched after the call; none for outputs made otherwise.

def zgate_impl(module, threads=0):
    """prepare for module.bwd / module.fwd (zgate or zgate.triton), which write into outputs
    the caller gives: new NaN-poisoned ones in the views of the case's layout, dz's and
    dout_scaled's (the forward's out: dz's); in place, dout_scaled is dout (the case list
    gives it dout's dtype)."""
    kw = {"num_threads": threads} if threads else {}

    def prepare(dev, case, ins):
        views = C.layout_views(case.layout)[1]
        views = views[3:4] if case.op == "fwd" or case.inplace else views[3:5]
        outs = [dev.empty(case.shape, d, v) for d, v in zip(case.dtypes[len(ins):], views)]
        if case.op == "fwd":
            return lambda: module.fwd(*ins, out=outs[0], **kw), outs, views
        if case.inplace:
            outs.append(ins[0])
            return lambda: module.bwd(*ins, dz=outs[0], inplace=True, **kw), outs, views
        return lambda: module.bwd(*ins, dz=outs[0], dout_scaled=outs[1], **kw), outs, views
    return prepare


def takes(case):
    """Whether a function of upstream's signature can run the case: a backward, not in place,
    its outputs of dout's dtype."""
    return case.op == "bwd" and not case.inplace and case.dtypes[3:] == (case.dtypes[0],) * 2


def function_impl(fn):
    """prepare for fn(do, z, o) -> (dz, do_scaled), upstream's compute_dzdo signature: it
    allocates its outputs itself (no layout's view to give it), so the list given back is
    filled by each call."""
    def prepare(dev, case, ins):
        outs = []

        def call():
            outs[:] = fn(*ins)
        return call, outs, ()
    return prepare


def upstream_impl(mod):
    """Upstream's dzdo kernel launched as its compute_dzdo does (same grid and arguments;
    the wrapper itself asserts CUDA tensors). Its rows are padded to the next power of two
    and masked on that size, so it reads and writes past each row's end: every tensor gets
    that much slack after its last element, and the outputs' wrong values show up as such.
    The outputs are compact, as compute_dzdo allocates them, not in the layout's views.
    Under the Triton interpreter (CPU tensors), which cannot time the autotuner's configs,
    the kernel runs with its first config."""
    import triton
    kern, config = mod.mamba3_siso_bwd_kernel_dzdo, {}
    if os.environ.get("TRITON_INTERPRET") == "1" and hasattr(kern, "configs"):
        kern, config = kern.fn, dict(kern.configs[0].kwargs)
    dense = C.layout_views("dense")[1][3]

    def prepare(dev, case, ins):
        b, l, h, d = case.shape
        hv = triton.next_power_of_2(d)
        ins = [_with_slack(dev, t, hv) for t in ins]
        outs = [dev.empty(case.shape, dt, dense, hv) for dt in case.dtypes[3:]]
        args = [*ins, *outs] + [s for t in ins + outs for s in t.stride()] + [l, d]

        def grid(meta):
            return (triton.cdiv(l, meta["CHUNK_SIZE"]), h, b)
        return lambda: kern[grid](*args, HEADDIM_V=hv, **config), outs, ()
    return prepare


def _with_slack(dev, t, slack):
    """t's values and strides in a buffer `slack` elements longer than t's extent."""
    extent = t.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    buf = dev.torch.zeros(extent + slack, dtype=t.dtype, device=t.device)
    v = buf.as_strided(t.shape, t.stride(), t.storage_offset())
    v.copy_(t)
    return v


# --- one case -------------------------------------------------------------------------------

def _padding_written(dev, t, view):
    """How many elements of t's buffer outside its `view` (cases.def) are no longer NaN."""
    pad = C.in_view(np.zeros(t.shape, bool), view, fill=True).base
    return int(np.count_nonzero(~np.isnan(dev.buffer(t)[pad].astype(np.float32))))


def _stats(us):
    return {"median": statistics.median(us), "min": min(us), "max": max(us), "n": len(us)}


def check_case(dev, prepare, case, seed, f32_ulps, gold=None, interp=False):
    """Run the case once on the device and judge its outputs (cases.judge_case): (row, call),
    the call to time again; row["error"] and no call where it did not run."""
    arrays = C.inputs(case, seed)
    row = {"case": case.name, "error": None, "outputs": [], "outs": None, "op": case.op,
           "shape": list(case.shape), "dtypes": list(case.dtypes), "layout": case.layout,
           "inplace": case.inplace, "bytes": nbytes(case)}
    try:
        ins = [dev.put(a) for a in arrays]
        if case.inplace:        # dout is written over: the arrays stay as they were
            ins[0] = dev.put(arrays[0].copy())
        call, outs, views = prepare(dev, case, ins)
        call()
        dev.sync()
        for name, t, view in zip(("dz", "dout_scaled") if case.op == "bwd" else ("out",),
                                 outs, views):
            n = _padding_written(dev, t, view)
            if n:
                raise RuntimeError("%s: %d elements of its buffer outside its view were "
                                   "written" % (name, n))
        row["outs"] = [dev.get(t) for t in outs]
        row["outputs"] = C.judge_case(case, arrays, row["outs"], f32_ulps, gold, interp)
        row["precision_ok"] = all(m["ok"] and m.get("golden_ok", True) for m in row["outputs"])
        return row, call
    except Exception as e:     # reported per case; a case that did not run fails the run
        row["error"] = "%s: %s" % (type(e).__name__, e)
        return row, None


def measure(dev, prepare, case, seed, f32_ulps, gold, warmup, repeats, copy_gbps,
            interp=False):
    """The case's row: precision (check_case) and, with copy_gbps, speed; `error` where it
    did not run."""
    row, call = check_case(dev, prepare, case, seed, f32_ulps, gold, interp)
    if copy_gbps is None:       # precision only
        return row
    row["ideal_us"] = row["bytes"] / copy_gbps * 1e-3
    row["launch_bound"] = row["ideal_us"] < LAUNCH_BOUND_US
    if call is None:
        return row
    try:
        row["kernel"] = _stats(dev.kernel_us(call, warmup, repeats))
        row["wall"] = row["kernel"] if dev.kernel_is_wall else _stats(
            dev.wall_us(call, warmup, repeats))
        if row["kernel"]["median"] > 1.2 * row["wall"]["median"]:
            raise TimingError("kernel time %.1f us above the wall time %.1f us" % (
                row["kernel"]["median"], row["wall"]["median"]))
    except Exception as e:     # reported per case; a case that did not run fails the run
        row["error"] = "%s: %s" % (type(e).__name__, e)
        return row
    try:                       # without it the row lacks its fraction of copy, nothing more
        row["copy"] = _stats(dev.kernel_us(dev.copy_call(row["bytes"]), warmup, repeats))
        row["frac_copy"] = row["copy"]["median"] / row["kernel"]["median"]
    except Exception as e:
        row["copy_error"] = "%s: %s" % (type(e).__name__, e)
    return row
