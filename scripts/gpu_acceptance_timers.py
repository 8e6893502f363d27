#!/usr/bin/env python3
"""The acceptance run's CUDA kernel time (torch.profiler, L2 flushed) next to
triton.testing.do_bench's median (CUDA events, L2 flushed) on the same calls, for the
quick list's cases above the launch-bound line and the request's real bfloat16 shapes (Z a
view into the projection). Speed only: the precision of these calls is the acceptance
run's.

    python3 scripts/gpu_acceptance_timers.py [--upstream-path third_party_ref] [--json FILE]
"""
import argparse
import json

import triton.testing

from zgate import selfcheck as S
from zgate.acceptance import device as D
from zgate.acceptance import run as U
from zgate._mamba import import_upstream_dzdo


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream-path")
    ap.add_argument("--json")
    ap.add_argument("--repeats", type=int, default=50)
    a = ap.parse_args()
    dev = D.open_device("cuda")
    import zgate
    import zgate.triton
    impls = [("zgate", U.zgate_impl(zgate)), ("triton", U.zgate_impl(zgate.triton))]
    if a.upstream_path:
        impls.append(("upstream", U.upstream_impl(import_upstream_dzdo(a.upstream_path))))
    real = {c.shape for c in S.cases(False)} - {c.shape for c in S.cases(True)}
    cases = [c for c in U.case_list(False, "bwd") if c.shape in real and
             c.dtypes[0] == "bfloat16" and c.layout == "zview"]
    rows = []
    print("%-36s %-9s %10s %10s %7s" % ("case", "impl", "profiler", "do_bench", "diff"))
    for case in cases:
        ins = _device_inputs(dev, case)
        for name, prepare in impls:
            try:
                call, _ = prepare(dev, case, ins)
                call()
                prof = sorted(dev.kernel_us(call, 5, a.repeats))[a.repeats // 2]
                bench = triton.testing.do_bench(call, warmup=25, rep=200,
                                                return_mode="median") * 1e3
                rows.append({"case": case.name, "impl": name, "profiler_us": prof,
                             "do_bench_us": bench})
                print("%-36s %-9s %10.1f %10.1f %+6.1f%%" % (case.name, name, prof, bench,
                                                           100 * (bench / prof - 1)), flush=True)
            except Exception as e:      # one implementation failing must not stop the table
                print("%-36s %-9s %s: %s" % (case.name, name, type(e).__name__, e), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


def _device_inputs(dev, case):
    """Random inputs with the case's layout, made on the device (the float64 reference of the
    largest shapes would take minutes on the host)."""
    torch = dev.torch
    b, l, h, d = case.shape
    dt = getattr(torch, case.dtypes[0])
    dout, o = (torch.randn(case.shape, device="cuda").to(dt) for _ in range(2))
    proj = torch.randn(b, l, h * d + S.PROJ_EXTRA, device="cuda").to(dt)
    z = proj[:, :, S.PROJ_EXTRA // 2:S.PROJ_EXTRA // 2 + h * d].view(b, l, h, d)
    return [dout, z, o]


if __name__ == "__main__":
    main()
