#!/usr/bin/env python3
"""A few calls of zgate and torch.compile on one benchmark row, for a profiler to look at.

  ncu --profile-from-start off --clock-control none -k regex:'gate_kernel|triton' \
      python3 bench/gpu_profile.py --lib build/gpu/src/libzgate.so --dtype fp32 --layout proj --shape 2

Each implementation is called `--warm` times (compiling, autotuning), then, between
cudaProfilerStart and Stop, `--calls` times, implementations in turn: the profiler sees the
settled kernels of both on the same tensors. zgate also runs once into torch.compile's own output buffers
(`--co`), to separate where the outputs lie from what the kernels do.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_bench import DTYPES, SHAPES, Shim, formula, make_inputs, padded_empty  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.environ.get("ZGATE_LIBRARY", "build/gpu/src/libzgate.so"))
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--layout", default="proj")
    ap.add_argument("--shape", default="2", help="index into gpu_bench.SHAPES, or BxLxHxD")
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--calls", type=int, default=2)
    ap.add_argument("--co", action="store_true", help="also zgate into torch.compile's outputs")
    args = ap.parse_args()
    shape = tuple(int(x) for x in args.shape.split("x")) if "x" in args.shape else SHAPES[int(args.shape)]
    dtype = DTYPES[args.dtype]
    dout, z, o, _ = make_inputs(shape, dtype, args.layout, 0)
    dz, dos = padded_empty(shape, dtype, 0), padded_empty(shape, dtype, 0)
    zg = Shim(args.lib).bwd_fn(dout, z, o, dz, dos)
    compiled = torch.compile(formula, dynamic=False)
    fns = [("zgate", zg), ("compile", lambda: compiled(dout, z, o))]
    if args.co:
        cdz, cdos = compiled(dout, z, o)
        fns.append(("zgate_co", Shim(args.lib).bwd_fn(dout, z, o, cdz, cdos)))
    for _ in range(args.warm):
        for _, f in fns:
            f()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _ in range(args.calls):
        for _, f in fns:
            f()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print("profiled: %s %s %s, order per round: %s" % (args.dtype, args.layout, shape,
                                                       ", ".join(n for n, _ in fns)))


if __name__ == "__main__":
    main()
