"""The cases, the implementations and the measurement of one case."""
import math
import statistics

from .. import selfcheck as S
from .device import TimingError

LAUNCH_BOUND_US = 10.0      # cases whose ideal transfer time is below this are launch-bound


def _kept(c):
    """The acceptance run's part of the self-check's list: one dtype for all tensors (bfloat16
    or float32), dense or Z as a view into the projection, not in place, not empty (a size-0
    call launches no kernel: nothing to time; the self-check covers it)."""
    return (not c.inplace and c.layout in ("dense", "zview") and len(set(c.dtypes)) == 1
            and c.dtypes[0] in ("bfloat16", "float32") and math.prod(c.shape) > 0)


def case_list(quick, op=None):
    """quick: the self-check's quick list plus the bfloat16 cases of the smallest real shape,
    so that cases above the launch-bound line exist on every device."""
    full = [c for c in S.cases(False) if _kept(c)]
    out = [c for c in S.cases(True) if _kept(c)] if quick else full
    if quick:
        big = min(S.real_shapes(), key=lambda s: (math.prod(s), s))
        out += [c for c in full if c.shape == big and c.dtypes[0] == "bfloat16"]
    return [c for c in out if op in (None, c.op)]


def nbytes(case):
    """Bytes the operator moves: every tensor's elements once."""
    size = {"float32": 4, "float16": 2, "bfloat16": 2}
    return math.prod(case.shape) * sum(size[d] for d in case.dtypes)


# --- implementations: prepare(case, device tensors) -> (call, outputs) ------------------------

def zgate_impl(module, threads=0):
    kw = {"num_threads": threads} if threads else {}
    return lambda dev, case, ins: S.gate_call(module, dev, case, ins, **kw)


def upstream_impl(mod):
    """Upstream's dzdo kernel launched as its compute_dzdo does (same grid and arguments;
    the wrapper itself asserts CUDA tensors). Its rows are padded to the next power of two
    and masked on that size, so it reads and writes past each row's end: every tensor gets
    that much slack after its last element, and the outputs' wrong values show up as such."""
    import triton
    kern = mod.mamba3_siso_bwd_kernel_dzdo

    def prepare(dev, case, ins):
        b, l, h, d = case.shape
        hv = triton.next_power_of_2(d)
        ins = [_with_slack(dev, t, hv) for t in ins]
        outs = [dev.empty(case.shape, dt, slack=hv) for dt in case.dtypes[3:]]
        args = [*ins, *outs] + [s for t in ins + outs for s in t.stride()] + [l, d]

        def grid(meta):
            return (triton.cdiv(l, meta["CHUNK_SIZE"]), h, b)
        return lambda: kern[grid](*args, HEADDIM_V=hv), outs
    return prepare


def _with_slack(dev, t, slack):
    """t's values and strides in a buffer `slack` elements longer than t's extent."""
    extent = t.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    buf = dev.torch.zeros(extent + slack, dtype=t.dtype, device=t.device)
    v = buf.as_strided(t.shape, t.stride(), t.storage_offset())
    v.copy_(t)
    return v


# --- one case -------------------------------------------------------------------------------

def _stats(us):
    return {"median": statistics.median(us), "min": min(us), "max": max(us), "n": len(us)}


def measure(dev, prepare, case, seed, f32_ulps, gold, warmup, repeats, copy_gbps):
    """The case's row: precision (the self-check's check_case) and speed; `error` where it did
    not run."""
    row, call = S.check_case(dev, prepare, case, seed, f32_ulps, gold)
    row.update(op=case.op, shape=list(case.shape), dtype=case.dtypes[0], layout=case.layout,
               bytes=nbytes(case))
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
