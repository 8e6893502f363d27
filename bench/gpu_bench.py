#!/usr/bin/env python3
"""GPU benchmark of zgate_bwd against the device's copy bandwidth, PyTorch eager,
torch.compile of the same formula, and the original Triton kernel (mamba3_siso_bwd_kernel_dzdo)
when its source folder is given.

  python3 bench/gpu_bench.py --lib build/gpu/src/libzgate.so [--orig PATH] [--json out.json]

Per shape, dtype and Z layout (dense, or a view into the input projection with strides
(L*P, P, D, 1), P = 2*H*D + 480, i.e. 8672 for H*D = 4096): the median kernel time from
triton.testing.do_bench (CUDA events, L2 flushed before every call), GB/s counting
5 x elements x element size, and the fraction of the device-to-device copy bandwidth
measured in this run (bytes read plus written) on 1 GiB, and beside it the fraction of a
copy of the same bytes (half read, half written) timed the same way ("same-size copy": it
pays the same fixed costs of launch, ramp-up and drain and of the L2 flush's write-back).
Also the per-call wall time of back-to-back calls from Python and the first-call latency of
each implementation; --clean-flush adds, for zgate and the same-size copy, a time taken after
a flush that leaves L2 clean (a read of another 256 MB) instead of dirty (do_bench's zeroing).

First call in a fresh process: --first-call DTYPE[,DTYPE2] creates the CUDA context through
PyTorch and the tensors of shape 0 (dense), then loads libzgate and times its first bwd call
(and a second) up to a synchronize; with a second dtype, that dtype's first call after.

The original kernel is imported from --orig (or env ZGATE_ORIG_MAMBA3): a folder holding
mamba3_siso_bwd.py and utils.py. Its code is never copied into this repository; a fake
package path mamba_ssm.ops.triton.mamba3 pointing at the folder is built in a temp dir.
It is called with preallocated outputs (its own launch, as in compute_dzdo); for headdims
that are not a power of two it reads and writes past each row, so its tensors get slack.
zgate is called through a minimal ctypes shim over libzgate (prebuilt DLTensors, the
current torch stream); the python/zgate package, when importable, adds a per-call column.

Paired rounds (--paired R): per row, R rounds that each time one back-to-back batch of every
implementation, the order rotated round by round; the summary gives, for zgate and each
variant against every other implementation, the median ratio over the rounds and a one-sided
sign test (p < 0.01) (bench/paired_stats.py). The same kernel writing other buffers differs
by up to 0.4-0.65% this way (H200, 3 December 2026: docs/performance.md, docs/perf-notes.md):
smaller verdicts do not separate kernels. The implementation `zgate_aa` (zgate again, with
its own output buffers) measures that margin in the run itself, and the summary then counts
only the verdicts beyond it. bench/gpu_table.py renders docs/performance.md's table from --json.

Build variants (scripts/gpu-run.sh): --variant-libs NAME=PATH,... loads several builds of
libzgate into this one process and times each as its own implementation on the same
tensors, interleaved shape by shape; the summary gives each one's geomean fraction of copy.
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import tempfile
import time

import torch
import triton
import triton.testing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paired_stats import aa_margin, beyond_margin, paired_verdict  # noqa: E402

SHAPES = [
    (2, 2048, 24, 64),
    (16, 2345, 32, 64),
    (8, 2048, 32, 64),
    (4, 4096, 64, 64),
    (1, 32768, 64, 64),
    (2, 8192, 32, 128),
    (2, 2048, 40, 80),
    (4, 4096, 48, 96),
]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


# ---- ctypes shim over libzgate --------------------------------------------------------------
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class ZgOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("num_threads", ctypes.c_int),
                ("cpu_isa", ctypes.c_char_p), ("cuda_stream", ctypes.c_void_p)]


_DL_CODES = {torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16)}


class Shim:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.zgate_bwd.restype = ctypes.c_int
        self.lib.zgate_bwd.argtypes = [ctypes.POINTER(DLTensor)] * 5 + [ctypes.POINTER(ZgOptions)]
        self.lib.zgate_last_error.restype = ctypes.c_char_p
        self.lib.zgate_build_info.restype = ctypes.c_char_p

    def dl(self, t, keep):
        shape = (ctypes.c_int64 * 4)(*t.shape)
        strides = (ctypes.c_int64 * 4)(*t.stride())
        keep += [shape, strides]
        code, bits = _DL_CODES[t.dtype]
        return DLTensor(t.data_ptr(), DLDevice(2, t.device.index or 0), 4, DLDataType(code, bits, 1),
                        shape, strides, 0)

    def bwd_fn(self, dout, z, o, dz, dos):
        keep = []
        ts = [self.dl(t, keep) for t in (dout, z, o, dz, dos)]
        refs = [ctypes.byref(t) for t in ts]
        opts = ZgOptions(ctypes.sizeof(ZgOptions), 0, None, torch.cuda.current_stream().cuda_stream)
        oref = ctypes.byref(opts)
        f = self.lib.zgate_bwd
        lib = self.lib

        def call():
            rc = f(refs[0], refs[1], refs[2], refs[3], refs[4], oref)
            if rc:
                raise RuntimeError("zgate_bwd: %d %s" % (rc, lib.zgate_last_error().decode()))
        call.keep = (keep, ts, opts)
        return call


# ---- the other implementations -------------------------------------------------------------
def formula(dout, z, o):
    zf = z.float()
    s = torch.sigmoid(zf)
    df = dout.float()
    dz = df * o.float() * s * (1 + zf * (1 - s))
    dos = df * s * zf
    return dz.to(dout.dtype), dos.to(dout.dtype)


def load_original(path):
    """Import mamba3_siso_bwd from `path` under a fake mamba_ssm package in a temp dir."""
    root = tempfile.mkdtemp(prefix="zgate_orig_")
    pkg = os.path.join(root, "mamba_ssm", "ops", "triton")
    os.makedirs(pkg)
    for d in ("mamba_ssm", "mamba_ssm/ops", "mamba_ssm/ops/triton"):
        open(os.path.join(root, d, "__init__.py"), "w").close()
    os.symlink(os.path.abspath(path), os.path.join(pkg, "mamba3"))
    sys.path.insert(0, root)
    import importlib
    return importlib.import_module("mamba_ssm.ops.triton.mamba3.mamba3_siso_bwd")


def orig_fn(mod, dout, z, o, dz, dos):
    kern = mod.mamba3_siso_bwd_kernel_dzdo
    B, L, H, D = dout.shape
    HV = triton.next_power_of_2(D)

    def grid(meta):
        return (triton.cdiv(L, meta["CHUNK_SIZE"]), H, B)

    def call():
        kern[grid](dout, z, o, dz, dos, *dout.stride(), *z.stride(), *o.stride(), *dz.stride(),
                   *dos.stride(), L, D, HEADDIM_V=HV)
    return call


# ---- tensors ----------------------------------------------------------------------------------
def padded_empty(shape, dtype, slack):
    """A compact tensor followed by `slack` spare elements (the original over-runs rows)."""
    n = math.prod(shape)
    return torch.empty(n + slack, dtype=dtype, device="cuda")[:n].view(shape)


def make_inputs(shape, dtype, layout, slack):
    B, L, H, D = shape
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)
    dout = padded_empty(shape, dtype, slack)
    o = padded_empty(shape, dtype, slack)
    dout.copy_(torch.randn(shape, device="cuda", generator=g))
    o.copy_(torch.randn(shape, device="cuda", generator=g))
    if layout == "dense":
        z = padded_empty(shape, dtype, slack)
        z.copy_(torch.randn(shape, device="cuda", generator=g) * 4)
        proj = None
    else:
        P = 2 * H * D + 480
        proj = torch.randn(B * L * P + slack, device="cuda", generator=g).to(dtype)
        z = proj[: B * L * P].view(B, L, P)[:, :, H * D:2 * H * D].view(B, L, H, D)
        z.mul_(4)
    return dout, z, o, proj


def ulp_err(got, ref, scale):
    """Float32 outputs: max |got - ref| in float32 ulps of the policy's scale (bound 4)."""
    ulp = torch.exp2(torch.floor(torch.log2(scale.clamp_min(2.0 ** -126))) - 23)
    return ((got.double() - ref).abs() / ulp).max().item()


def rel_err(got, ref):
    ref = ref.double()
    return ((got.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


# ---- timing ---------------------------------------------------------------------------------
def kernel_ms(fn, args):
    return triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep, return_mode="median")


def first_call_ms(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def per_call_us(fn, est_ms):
    n = int(max(10, min(200, 30.0 / max(est_ms, 1e-3))))
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / n


def b2b_ms(fn, est_ms, batches=9):
    """Kernel time as the CUDA targets define it: CUDA events around back-to-back calls (no L2
    flush between them), per call; median, min and max over `batches` batches of about 5 ms.
    A GPU-side sleep queued first lets the host enqueue the whole batch before the GPU reaches
    it, so host overhead per call (Python, guards, allocation) is not timed; `starved` counts
    batches whose enqueueing outlasted that sleep (then the figure includes host time)."""
    n = int(max(3, min(200, math.ceil(5.0 / max(est_ms, 1e-3)))))
    fn()
    torch.cuda.synchronize()
    ts, starved = [], 0
    sleep_ms = 1.0 + 0.1 * n  # 100 us of host time a call is far above any implementation's
    for _ in range(batches):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(sleep_ms * 1.98e6))  # SM cycles at the H200's 1.98 GHz
        t0 = time.perf_counter()
        a.record()
        for _ in range(n):
            fn()
        b.record()
        if (time.perf_counter() - t0) * 1e3 > sleep_ms:
            starved += 1
        b.synchronize()
        ts.append(a.elapsed_time(b) / n)
    return statistics.median(ts), min(ts), max(ts), starved


def copy_ms(nbytes, args):
    """Median do_bench time of a device copy moving nbytes (half read, half written)."""
    n = (nbytes // 2) // 4
    src = torch.randn(n, device="cuda", dtype=torch.float32)
    dst = torch.empty_like(src)
    fn = lambda: dst.copy_(src)  # noqa: E731
    ms = triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep, return_mode="median")
    b2b = b2b_ms(fn, ms)[0]
    del src, dst
    return ms, b2b


_CLEAN = {}


def clean_flush_ms(fn, reps=40):
    """Median event time of fn after do_bench's flush (zeroing 256 MB leaves dirty lines in
    L2) followed by a read of another 256 MB (L2 then holds clean lines only)."""
    if not _CLEAN:
        _CLEAN["dirty"] = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
        _CLEAN["read"] = torch.ones(64 << 20, dtype=torch.float32, device="cuda")
    ts = []
    for _ in range(reps):
        _CLEAN["dirty"].zero_()
        _CLEAN["read"].sum()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def copy_bandwidth(args):
    n = 1 << 29  # 1 GiB of bytes... as 2-byte elements: 1 GiB
    src = torch.randn(n // 2, device="cuda", dtype=torch.float32).view(torch.bfloat16)
    dst = torch.empty_like(src)
    fn = lambda: dst.copy_(src)  # noqa: E731
    ms = triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep, return_mode="median")
    b2b = b2b_ms(fn, ms)[0]
    nbytes = 2 * src.numel() * src.element_size()
    return nbytes / (ms * 1e-3) / 1e9, nbytes / (b2b * 1e-3) / 1e9


def paired_rounds(row, fns, rounds):
    """Round r times one back-to-back batch of each implementation, the order rotated by r, so
    that drift of clocks and temperature falls on all of them alike; row[impl + "_pair_ms"]
    is the list of per-call times, round by round."""
    names = list(fns)
    times = {n: [] for n in names}
    for r in range(rounds):
        for k in range(len(names)):
            n = names[(k + r) % len(names)]
            fn, ms = fns[n][0], fns[n][1]
            times[n].append(b2b_ms(fn, ms, batches=1)[0])
    for n in names:
        row[n + "_pair_ms"] = times[n]


# ---- first call in a fresh process ------------------------------------------------------------
def first_call_main(args):
    """The CUDA context and the tensors first (as in a training process), then libzgate."""
    out = {}
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    probs = []
    for dname in args.first_call.split(","):
        dtype = DTYPES[dname]
        dout, z, o, _ = make_inputs(SHAPES[0], dtype, "dense", 0)
        dz, dos = torch.empty_like(dout), torch.empty_like(dout)
        probs.append((dname, (dout, z, o, dz, dos)))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    shim = Shim(args.lib)
    out["load_ms"] = (time.perf_counter() - t0) * 1e3
    for k, (dname, ts) in enumerate(probs):
        fn = shim.bwd_fn(*ts)
        pre = "" if k == 0 else "then_"
        out[pre + "dtype"] = dname
        out[pre + "first_ms"] = first_call_ms(fn)
        out[pre + "second_ms"] = first_call_ms(fn)
    out["lib"] = args.lib
    out["module_loading"] = os.environ.get("CUDA_MODULE_LOADING", "default")
    print("first-call " + json.dumps(out), flush=True)


def first_call_summary(path):
    """Medians of scripts/gpu-run.sh's first.log: C probe lines (key=value) and --first-call lines."""
    import re
    probe, via_torch = {}, {}
    for line in open(path):
        if not line.strip():
            continue
        b = line.split()[0]
        if "first-call " in line:
            d = json.loads(line.split("first-call ", 1)[1])
            via_torch.setdefault(b, []).append("%s %.2f, then %s %.2f" % (
                d["dtype"], d["first_ms"], d["then_dtype"], d["then_first_ms"]))
        elif "dtype=" in line:
            kv = dict(re.findall(r"(\w+)=(\S+)", line))
            probe.setdefault((b, kv["dtype"], kv["loading"], "attr_ms" in kv), []).append(kv)
    print("first call (ms), C probe after the context (median over runs):")
    for (b, dt, ld, attr), v in sorted(probe.items()):
        def med(k):
            return statistics.median(float(x[k]) for x in v)
        if attr:
            print("  %-12s %-5s %-7s cudaFuncGetAttributes %.3f, then the first call %.3f" % (
                b, dt, ld, med("attr_ms"), med("first_ms")))
        else:
            print("  %-12s %-5s %-7s first %.3f, second %.3f, another dtype's first %.3f (%d runs)" % (
                b, dt, ld, med("first_ms"), med("second_ms"), med("then_first_ms"), len(v)))
    print("first call (ms) through PyTorch, one fresh process each:")
    for b, v in via_torch.items():
        print("  %-12s %s" % (b, "; ".join(v)))


# ---- main -----------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.environ.get("ZGATE_LIBRARY", "build/gpu/src/libzgate.so"))
    ap.add_argument("--orig", default=os.environ.get("ZGATE_ORIG_MAMBA3"))
    ap.add_argument("--dtypes", default="bf16,fp16,fp32")
    ap.add_argument("--layouts", default="dense,proj")
    ap.add_argument("--shapes", default="all",
                    help="'all', or indices into the shape list and BxLxHxD shapes, e.g. 0,3,1x128x8x64")
    ap.add_argument("--impls", default="zgate,eager,compile,orig")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rep", type=int, default=60)
    ap.add_argument("--json", default=None)
    ap.add_argument("--variant-libs", default="", help="NAME=PATH,... builds timed side by side")
    ap.add_argument("--quick", action="store_true", help="skip the per-call wall times")
    ap.add_argument("--first-call", default="", help="DTYPE[,DTYPE2]: first-call latency only")
    ap.add_argument("--first-call-summary", default="", help="FILE: summarize gpu-run.sh's first.log")
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds: start no new row past this (less a reserve for autotuning); "
                         "the summary covers the rows done")
    ap.add_argument("--paired", type=int, default=0,
                    help="R: per row, also R rounds timing one back-to-back batch of every "
                         "implementation in turn (rotating order); the summary compares them "
                         "round by round (sign test at p < 0.01: a verdict needs R >= 7, since "
                         "6 of 6 rounds is p = 1/64)")
    ap.add_argument("--clean-flush", action="store_true",
                    help="also time zgate and the same-size copy after a clean-L2 flush")
    args = ap.parse_args()
    t_start = time.time()
    if args.first_call_summary:
        return first_call_summary(args.first_call_summary)
    if args.first_call:
        return first_call_main(args)

    torch.backends.cuda.matmul.allow_tf32 = False
    for knob in ("cache_size_limit", "recompile_limit"):
        try:
            setattr(torch._dynamo.config, knob, 64)
        except Exception:
            pass
    dev = torch.cuda.get_device_properties(0)
    shim = Shim(args.lib)
    print("device: %s, %d SMs; torch %s, triton %s" % (dev.name, dev.multi_processor_count,
                                                     torch.__version__, triton.__version__))
    print("zgate: %s" % shim.lib.zgate_build_info().decode())
    impls = [i for i in args.impls.split(",") if i]
    variants = {}
    for spec in filter(None, args.variant_libs.split(",")):
        name, path = spec.split("=", 1)
        variants[name] = Shim(path)
        impls.append(name)
    mod = None
    if "orig" in impls:
        if args.orig:
            mod = load_original(args.orig)
        else:
            print("original Triton kernel: not given (--orig / ZGATE_ORIG_MAMBA3), skipped")
            impls.remove("orig")
    pkg = None
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
        os.environ.setdefault("ZGATE_LIBRARY", os.path.abspath(args.lib))
        import zgate as pkg  # noqa: F401
        if not hasattr(pkg, "bwd"):
            pkg = None
    except Exception as e:  # the package is optional here
        print("python/zgate not usable (%s): per-call column from the package skipped" % e)
        pkg = None

    copy_gbs, copy_b2b_gbs = copy_bandwidth(args)
    print("device-to-device copy: %.0f GB/s (bytes read + written), %.0f GB/s back to back"
          % (copy_gbs, copy_b2b_gbs))
    compiled = torch.compile(formula, dynamic=False)  # specialized to each shape: its best kernels
    shapes = SHAPES if args.shapes == "all" else [
        tuple(int(x) for x in i.split("x")) if "x" in i else SHAPES[int(i)] for i in args.shapes.split(",")]
    rows = []
    first = {}
    same_ms = {}
    reserve = 45.0 if "orig" in impls else 10.0  # the original autotunes up to ~35 s a new key
    todo = [(d, lay, sh) for d in args.dtypes.split(",") for lay in args.layouts.split(",") for sh in shapes]
    for k, (dname, layout, shape) in enumerate(todo):
        if args.deadline and time.time() - t_start > args.deadline - reserve:
            print("deadline: stopped after %d of %d rows" % (k, len(todo)), flush=True)
            break
        dtype = DTYPES[dname]
        B, L, H, D = shape
        slack = triton.next_power_of_2(D) + 64
        dout, z, o, proj = make_inputs(shape, dtype, layout, slack)
        numel = dout.numel()
        nbytes = 5 * numel * dout.element_size()
        ref_dz, ref_dos = None, None
        zd, od, dd = z.double(), o.double(), dout.double()
        s = torch.sigmoid(zd)
        ref_dz = dd * od * s * (1 + zd * (1 - s))
        ref_dos = dd * s * zd
        scale_dz = scale_dos = None
        if dtype == torch.float32:  # the policy's scales (check/zgate_check.h)
            scale_dz = (dd * od).abs() * s * (1 + zd.abs() * (1 - s))
            scale_dos = (dd * zd).abs() * s
        del zd, od, dd, s
        row = {"shape": list(shape), "dtype": dname, "layout": layout, "numel": numel,
               "bytes": nbytes}
        if nbytes not in same_ms:
            same_ms[nbytes] = copy_ms(nbytes, args)
        row["copy_same_ms"], row["copy_same_b2b_ms"] = same_ms[nbytes]
        same_gbs = nbytes / (row["copy_same_ms"] * 1e-3) / 1e9
        fns = {}
        for impl in impls:
            dz = padded_empty(shape, dtype, slack)
            dos = padded_empty(shape, dtype, slack)
            if impl in ("zgate", "zgate_aa"):  # zgate_aa: the same kernel, its own buffers
                fn = shim.bwd_fn(dout, z, o, dz, dos)
            elif impl in variants:
                fn = variants[impl].bwd_fn(dout, z, o, dz, dos)
            elif impl == "eager":
                res = {}

                def fn(res=res):
                    res["out"] = formula(dout, z, o)
            elif impl == "compile":
                res = {}

                def fn(res=res):
                    res["out"] = compiled(dout, z, o)
            elif impl == "triton":  # zgate.triton: the Ascend-ready Triton kernel, on CUDA
                from zgate import triton as zg_triton

                def fn(dz=dz, dos=dos):
                    zg_triton.bwd(dout, z, o, dz=dz, dout_scaled=dos)
            elif impl == "zgate_co":  # zgate writing into buffers torch.compile allocated
                dz, dos = compiled(dout, z, o)
                fn = shim.bwd_fn(dout, z, o, dz, dos)
            else:
                fn = orig_fn(mod, dout, z, o, dz, dos)
            key = (impl, dname, layout)
            fc = first_call_ms(fn)
            if key not in first:
                first[key] = fc
                row[impl + "_first_ms"] = fc
            ms = kernel_ms(fn, args)
            gbs = nbytes / (ms * 1e-3) / 1e9
            row[impl + "_ms"] = ms
            row[impl + "_gbs"] = gbs
            row[impl + "_frac"] = gbs / copy_gbs
            row[impl + "_frac_same"] = gbs / same_gbs
            bm, bmin, bmax, starved = b2b_ms(fn, ms)
            row[impl + "_b2b_ms"], row[impl + "_b2b_range"] = bm, (bmin, bmax)
            row[impl + "_b2b_frac"] = nbytes / (bm * 1e-3) / 1e9 / copy_b2b_gbs
            row[impl + "_b2b_frac_same"] = row["copy_same_b2b_ms"] / bm
            if starved:
                row[impl + "_b2b_starved"] = starved
            if args.clean_flush and (impl == "zgate" or impl in variants):
                row[impl + "_clean_ms"] = clean_flush_ms(fn)
            if not args.quick:
                row[impl + "_call_us"] = per_call_us(fn, ms)
            if impl in ("zgate", "zgate_aa", "orig", "zgate_co", "triton") or impl in variants:
                got_dz, got_dos = dz, dos
            else:
                got_dz, got_dos = res["out"]
            row[impl + "_err"] = max(rel_err(got_dz, ref_dz), rel_err(got_dos, ref_dos))
            if scale_dz is not None:
                row[impl + "_ulps"] = max(ulp_err(got_dz, ref_dz, scale_dz), ulp_err(got_dos, ref_dos, scale_dos))
            if impl == "zgate" and pkg is not None and not args.quick:
                try:
                    pf = lambda: pkg.bwd(dout, z, o, dz=dz, dout_scaled=dos)  # noqa: E731
                    pf()
                    row["pkg_call_us"] = per_call_us(pf, ms)
                except Exception as e:
                    print("python/zgate bwd failed: %s" % e)
                    pkg = None
            if args.paired:
                fns[impl] = (fn, ms, dz, dos)
            del fn, dz, dos
        if args.paired:
            paired_rounds(row, fns, args.paired)
        del fns
        if args.clean_flush:
            n = (nbytes // 2) // 4
            src = torch.randn(n, device="cuda", dtype=torch.float32)
            dst = torch.empty_like(src)
            row["copy_same_clean_ms"] = clean_flush_ms(lambda: dst.copy_(src))
            del src, dst
        rows.append(row)
        line = "%-5s %-5s %-18s %7.1f MB copy %6.1f us, b2b %6.1f us" % (
            dname, layout, str(shape), nbytes / 1e6, row["copy_same_ms"] * 1e3, row["copy_same_b2b_ms"] * 1e3)
        for impl in impls:
            line += " | %s %7.1f us %5.1f%% (%5.1f%%) b2b %7.1f us %5.1f%%%s" % (
                impl, row[impl + "_ms"] * 1e3, 100 * row[impl + "_frac"], 100 * row[impl + "_frac_same"],
                row[impl + "_b2b_ms"] * 1e3, 100 * row[impl + "_b2b_frac"],
                " STARVED %d" % row[impl + "_b2b_starved"] if impl + "_b2b_starved" in row else "")
            if impl + "_ulps" in row:
                line += " %.2f ulp" % row[impl + "_ulps"]
        if args.clean_flush:
            line += " | clean L2: copy %.1f us" % (row["copy_same_clean_ms"] * 1e3) + "".join(
                " %s %.1f us" % (i, row[i + "_clean_ms"] * 1e3) for i in impls if i + "_clean_ms" in row)
        print(line, flush=True)
        del dout, z, o, proj, ref_dz, ref_dos, scale_dz, scale_dos
        torch.cuda.empty_cache()

    # ---- summary ----
    print()
    print("copy bandwidth %.0f GB/s (1 GiB); times are medians (us), %% of that copy bandwidth, "
          "in brackets %% of a same-size copy" % copy_gbs)
    hdr = ("| dtype | Z | shape | MB | same-size copy us | " + " | ".join("%s us (%% copy) [%% same]" % i for i in impls)
           + " | zgate err |")
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for r in rows:
        cells = ["%.1f (%.1f%%) [%.1f%%]" % (r[i + "_ms"] * 1e3, 100 * r[i + "_frac"], 100 * r[i + "_frac_same"])
                 for i in impls]
        print("| %s | %s | %s | %.0f | %.1f | %s | %.1e |" % (r["dtype"], r["layout"], tuple(r["shape"]),
                                                           r["bytes"] / 1e6, r["copy_same_ms"] * 1e3,
                                                           " | ".join(cells), r.get("zgate_err", 0.0)))
    print()
    print("back to back (kernel time): copy %.0f GB/s (1 GiB); medians (us) "
          "[min-max of the batches], %% of that copy, in brackets %% of a same-size copy back to back"
          % copy_b2b_gbs)
    hdr = "| dtype | Z | shape | MB | same-size copy us | " + " | ".join("%s us (%% copy) [%% same]" % i for i in impls) + " |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for r in rows:
        cells = ["%.1f [%.1f-%.1f] (%.1f%%) [%.1f%%]" % (
            r[i + "_b2b_ms"] * 1e3, r[i + "_b2b_range"][0] * 1e3, r[i + "_b2b_range"][1] * 1e3,
            100 * r[i + "_b2b_frac"], 100 * r[i + "_b2b_frac_same"]) for i in impls]
        print("| %s | %s | %s | %.0f | %.1f | %s |" % (r["dtype"], r["layout"], tuple(r["shape"]), r["bytes"] / 1e6,
                                                     r["copy_same_b2b_ms"] * 1e3, " | ".join(cells)))
    print()
    for name in variants:
        fr = [r[name + "_frac"] for r in rows]
        fs = [r[name + "_frac_same"] for r in rows]
        print("variant %s: geomean %.2f%% of copy (%.2f%% of same-size copy), min %.1f%%, max %.1f%%, "
              "max error %.1e" % (name, 100 * math.exp(statistics.fmean(math.log(x) for x in fr)),
                                  100 * math.exp(statistics.fmean(math.log(x) for x in fs)), 100 * min(fr),
                                  100 * max(fr), max(r[name + "_err"] for r in rows)))
    for impl in impls:
        u = [r[impl + "_ulps"] for r in rows if impl + "_ulps" in r]
        if u:
            print("%s, float32 rows: worst error %.2f ulp of the policy's scale (bound 4)" % (impl, max(u)))
    big = [r for r in rows if r["bytes"] >= 256e6]
    for impl in impls:
        if not big or impl not in ("zgate", "compile", "zgate_co") and impl not in variants:
            continue
        for key, what in (("_frac", "1 GiB copy"), ("_frac_same", "same-size copy"),
                          ("_b2b_frac", "1 GiB copy, back to back"),
                          ("_b2b_frac_same", "same-size copy, back to back")):
            worst = min(big, key=lambda r: r[impl + key])
            print("%s, shapes moving >= 256 MB: min %.1f%% of the %s (%s %s %s); %d of %d below 97%%" % (
                impl, 100 * worst[impl + key], what, worst["dtype"], worst["layout"], tuple(worst["shape"]),
                sum(r[impl + key] < 0.97 for r in big), len(big)))
    for me in [i for i in impls if i in ("zgate", "zgate_co") or i in variants]:
        for other in ("compile", "orig"):
            if other not in impls:
                continue
            for t, how in (("_ms", "L2 flushed"), ("_b2b_ms", "back to back")):
                ratios = [r[other + t] / r[me + t] for r in rows]
                slower = [r for r in rows if r[me + t] > r[other + t]]
                print("%s vs %s (%s): geomean speedup %.3fx, min %.3fx, slower on %d of %d" % (
                    me, other, how, math.exp(statistics.fmean(math.log(x) for x in ratios)), min(ratios),
                    len(slower), len(rows)))
                for r in slower:
                    print("   slower: %s %s %s %s %.1f us, %s %.1f us (%.1f%%)" % (
                        r["dtype"], r["layout"], tuple(r["shape"]), me, r[me + t] * 1e3, other,
                        r[other + t] * 1e3, 100 * (r[me + t] / r[other + t] - 1)))
    if args.paired:
        print()
        print("paired rounds (%d a row): median of other/this time over the rounds [min-max], "
              "rounds this was slower; verdict by a one-sided sign test at p < 0.01" % args.paired)
        for me in [i for i in impls if i in ("zgate", "zgate_co") or i in variants]:
            for other in [i for i in impls if i != me]:
                v = [(r, paired_verdict(r, me, other)) for r in rows]
                v = [(r, x) for r, x in v if x]
                if not v:
                    continue
                counts = {k: sum(x[5] == k for _, x in v) for k in ("faster", "tie", "slower")}
                print("%s vs %s: geomean of the medians %.4fx; faster on %d, tie on %d, slower on %d of %d" % (
                    me, other, math.exp(statistics.fmean(math.log(x[0]) for _, x in v)), counts["faster"],
                    counts["tie"], counts["slower"], len(v)))
                for r, x in v:
                    print("   %-5s %-5s %-18s %.4fx [%.4f-%.4f] slower in %d of %d: %s" % (
                        r["dtype"], r["layout"], str(tuple(r["shape"])), x[0], x[1], x[2], x[3], x[4], x[5]))
        aa = [paired_verdict(r, "zgate", "zgate_aa") for r in rows] if "zgate_aa" in impls else []
        aa = [x for x in aa if x]
        if aa and "zgate" in impls:
            # The A/A control: what output placement alone moves the same kernel by, this run.
            margin = aa_margin(rows)
            print("A/A control (zgate against itself with other buffers): medians within %.2f%% "
                  "over %d rows, %d sign-test verdicts" % (100 * margin, len(aa), sum(x[5] != "tie" for x in aa)))
            for other in [i for i in impls if i not in ("zgate", "zgate_aa")]:
                v = [(r, paired_verdict(r, "zgate", other)) for r in rows]
                v = [(r, x) for r, x in v if x]
                slow = [(r, x) for r, x in v if beyond_margin(x, margin) == "slower"]
                fast = [(r, x) for r, x in v if beyond_margin(x, margin) == "faster"]
                print("zgate vs %s beyond that margin: faster on %d, slower on %d of %d%s" % (
                    other, len(fast), len(slow), len(v), "".join(
                        "\n   slower: %s %s %s by %.2f%%" % (r["dtype"], r["layout"], tuple(r["shape"]),
                                                           100 * (1 / x[0] - 1)) for r, x in slow)))
    print("first call (ms), per implementation, dtype and Z layout:")
    for (impl, dname, layout), v in sorted(first.items()):
        print("   %-8s %-5s %-6s %10.2f" % (impl, dname, layout, v))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name, "copy_gbs": copy_gbs, "copy_b2b_gbs": copy_b2b_gbs, "rows": rows,
                       "first_call_ms": {"%s/%s/%s" % k: v for k, v in first.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
