#!/usr/bin/env python3
"""GPU benchmark of zgate.bwd against the device's copy bandwidth, PyTorch eager, torch.compile
of the same formula, zgate.triton, and upstream's Triton kernel (mamba3_siso_bwd_kernel_dzdo).

  python3 bench/gpu_bench.py [--orig PATH] [--impls ...] [--dtypes ...] [--quick]
                             [--deadline S] [--json out.json] [--png out.png]

Rows, timing and the accuracy mark: docs/performance.md, "Running the benchmarks". Upstream's
kernel comes from PATH (zgate._mamba.import_upstream_dzdo), called with preallocated outputs
as compute_dzdo does; for headdims that are not a power of two it reads and writes past each
row, so every tensor gets slack.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch._dynamo
import triton

import zgate
import zgate.triton
from zgate._mamba import import_upstream_dzdo
from zgate.cases import layout_views, real_shapes, view_strides

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
IMPLS = ("zgate", "triton", "eager", "compile", "orig")


def formula(dout, z, o):
    zf, df = z.float(), dout.float()
    s = torch.sigmoid(zf)
    return ((df * o.float() * s * (1 + zf * (1 - s))).to(dout.dtype), (df * s * zf).to(dout.dtype))


def in_view(view, shape, dtype, slack, generator=None):
    """A tensor in cases.def's `view` with `slack` spare elements after its buffer (upstream's
    kernel over-runs rows): standard normal values from `generator`, else uninitialized."""
    strides, offset, n = view_strides(view, shape)
    if generator is None:
        buf = torch.empty(n + slack, dtype=dtype, device="cuda")
    else:
        buf = torch.randn(n + slack, device="cuda", generator=generator).to(dtype)
    return buf.as_strided(shape, strides, offset)


def make_inputs(shape, dtype, layout, slack):
    """dout, z, o in cases.def's `layout` (each tensor's view)."""
    g = torch.Generator(device="cuda").manual_seed(1234)
    return [in_view(view, shape, dtype, slack, g).mul_(scale)
            for view, scale in zip(layout_views(layout)[1][:3], (1, 4, 1))]


def implementation(name, orig, dout, z, o, layout, slack):
    """(call, outputs): the call writes the outputs (a list it fills, or given tensors, in the
    views of cases.def's `layout`: eager and compile allocate their own)."""
    outs = [in_view(view, dout.shape, dout.dtype, slack) for view in layout_views(layout)[1][3:]]
    if name in ("zgate", "triton"):   # triton: zgate.triton, the NPU kernel's source
        mod = zgate if name == "zgate" else zgate.triton
        return lambda: mod.bwd(dout, z, o, dz=outs[0], dout_scaled=outs[1]), outs
    if name in ("eager", "compile"):
        f = formula if name == "eager" else torch.compile(formula, dynamic=False)

        def call():
            outs[:] = f(dout, z, o)
        return call, outs
    B, L, H, D = dout.shape
    kern, hv = orig.mamba3_siso_bwd_kernel_dzdo, triton.next_power_of_2(D)
    return lambda: kern[lambda m: (triton.cdiv(L, m["CHUNK_SIZE"]), H, B)](
        dout, z, o, *outs, *dout.stride(), *z.stride(), *o.stride(), *outs[0].stride(),
        *outs[1].stride(), L, D, HEADDIM_V=hv), outs


def b2b_ms(fn, batches=9):
    """Per-call time of back-to-back calls: CUDA events around a batch of about 5 ms of
    consecutive calls, queued behind a GPU-side sleep so that no host time is counted; the
    median over `batches` batches. Returns (ms, starved): starved counts batches whose
    queueing outlasted the sleep (their figure then includes host time)."""
    fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(3):
        fn()
    b.record()
    b.synchronize()
    n = max(3, min(200, math.ceil(5.0 / max(a.elapsed_time(b) / 3, 1e-3))))
    sleep_ms, ts, starved = 1.0 + 0.1 * n, [], 0
    for _ in range(batches):
        torch.cuda._sleep(int(sleep_ms * 1.98e6))   # cycles at the H200's 1.98 GHz
        t0 = time.perf_counter()
        a.record()
        for _ in range(n):
            fn()
        b.record()
        starved += (time.perf_counter() - t0) * 1e3 > sleep_ms
        b.synchronize()
        ts.append(a.elapsed_time(b) / n)
    return sorted(ts)[len(ts) // 2], starved


def copy_ms(nbytes):
    """A device-to-device copy moving `nbytes` (half read, half written), timed as the rows are."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    return b2b_ms(lambda: dst.copy_(src))[0]


def chart(rows, names, copy, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no chart: matplotlib is not installed (pip install matplotlib)")
        return
    labels = ["%s %s\n%s" % (r["dtype"], r["layout"], "x".join(map(str, r["shape"]))) for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(rows)), 5))
    w = 0.8 / len(names)
    for k, n in enumerate(names):
        ax.bar([i + k * w for i in range(len(rows))], [100 * r.get(n + "_frac", 0) for r in rows],
               w, label=n)
    ax.axhline(100, color="k", lw=0.8)
    ax.set_xticks([i + 0.4 - w / 2 for i in range(len(rows))])
    ax.set_xticklabels(labels, rotation=90, fontsize=6)
    ax.set_ylabel("%% of device copy bandwidth (%.0f GB/s)" % copy)
    ax.set_title("zgate.bwd on %s: back-to-back kernel time, higher is better"
                 % torch.cuda.get_device_name())
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print("chart:", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--orig", default=os.environ.get("ZGATE_ORIG_MAMBA3"),
                    help="folder of upstream's Mamba-3 Triton kernels")
    ap.add_argument("--dtypes", default="bf16,fp16,fp32")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--quick", action="store_true", help="the first three shapes only")
    ap.add_argument("--deadline", type=float, default=0, help="start no row after this many s")
    ap.add_argument("--json")
    ap.add_argument("--png")
    a = ap.parse_args()
    t0 = time.time()
    # one compiled graph per row (shape, dtype, strides): above Dynamo's default limit of 8
    # recompiles the "compile" column would silently time eager code
    for knob in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 1024)
    orig = import_upstream_dzdo(a.orig) if a.orig else None
    names = [n for n in a.impls.split(",") if n != "orig" or orig is not None]
    if set(names) - set(IMPLS):
        ap.error("--impls takes some of %s" % ",".join(IMPLS))
    copy = (1 << 31) / (copy_ms(1 << 31) * 1e-3) / 1e9   # 1 GiB read, 1 GiB written
    print("%s, zgate %s, torch %s, triton %s; device copy %.0f GB/s" % (
        torch.cuda.get_device_name(), zgate.__version__, torch.__version__, triton.__version__, copy))
    print("%-22s %-5s %-5s" % ("shape", "dtype", "Z") + "".join(" %15s" % n for n in names)
          + "   (us, % of copy)")
    rows = []
    combos = [(s, d, lay) for s in real_shapes()[:3 if a.quick else None]
              for d in a.dtypes.split(",") for lay in ("dense", "zview")]
    for shape, dn, layout in combos:
        if a.deadline and time.time() - t0 > a.deadline:
            print("deadline reached: %d rows not run" % (len(combos) - len(rows)))
            break
        slack = triton.next_power_of_2(shape[3]) * 2
        dout, z, o = make_inputs(shape, DTYPES[dn], layout, slack)
        refs = [r.double() for r in formula(dout.double(), z.double(), o.double())]
        nbytes = 5 * dout.numel() * dout.element_size()
        row = {"shape": shape, "dtype": dn, "layout": layout, "bytes": nbytes,
               "copy_same_us": copy_ms(nbytes) * 1e3}
        line = "%-22s %-5s %-5s" % (shape, dn, layout)
        for n in names:
            fn, outs = implementation(n, orig, dout, z, o, layout, slack)
            fn()
            torch.cuda.synchronize()
            row[n + "_err"] = err = max(((g.double() - r).abs().max() / r.abs().max().clamp_min(
                1e-30)).item() for g, r in zip(outs, refs))
            t, row[n + "_starved"] = b2b_ms(fn)
            row[n + "_us"] = us = t * 1e3
            row[n + "_frac"] = frac = nbytes / (us * 1e-6) / 1e9 / copy
            row[n + "_frac_same"] = row["copy_same_us"] / us
            mark = "!" if err > 1e-2 else "*" if row[n + "_starved"] else " "
            line += " %8.1f %5.1f%%%s" % (us, 100 * frac, mark)
        rows.append(row)
        print(line, flush=True)
        del dout, z, o
    for n in names if rows else []:
        print("%-8s geomean %.1f%% of copy over %d rows" % (
            n, 100 * statistics.geometric_mean(r[n + "_frac"] for r in rows), len(rows)))
    print("'!': outputs off the float64 formula by more than 1e-2 of their largest value; "
          "'*': some batches' queueing outlasted the GPU-side sleep (host time included)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "copy_gbps": copy,
                       "impls": names, "rows": rows}, f, indent=1)
    if a.png and rows:
        chart(rows, names, copy, a.png)
    return 1 if any(r["zgate_err"] > 1e-2 for r in rows if "zgate_err" in r) else 0


if __name__ == "__main__":
    sys.exit(main())
