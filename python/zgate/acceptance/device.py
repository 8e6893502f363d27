"""The devices of the acceptance run: NumPy arrays on the CPU, PyTorch tensors on CUDA, the
NPU or the CPU (the Triton interpreter). Each puts arrays there with their strides, makes
NaN-poisoned outputs in a view, brings results (and an output's whole buffer) back, flushes
its cache and times: kernel_us (device kernel time from the framework's profiler; the call's
wall time on the CPU), wall_us (event-timed wall time of one call, cache flushed before
each), copy_call (a copy of given bytes, timed like the operator). The NPU-only parts are
plain functions.
"""
import csv
import glob
import inspect
import math
import os
import platform
import statistics
import tempfile
import time

import numpy as np

from .. import cases as C


class TimingError(RuntimeError):
    pass


def per_call(kernels, exclude, calls):
    """Per call, the summed duration (us) of the profiled kernels not named in `exclude`
    (the cache flush's). kernels: [(name, us)] in launch order. A call with no kernel, a
    count that does not split evenly over the calls, or a non-positive duration is an error:
    never a zero time."""
    ks = [(n, us) for n, us in kernels if n not in exclude]
    if not ks:
        raise TimingError("the profiler recorded no kernel of the timed call")
    if len(ks) % calls:
        raise TimingError("the profiler recorded %d kernels for %d calls" % (len(ks), calls))
    if any(not us > 0 for _, us in ks):
        raise TimingError("the profiler recorded a kernel without a duration")
    k = len(ks) // calls
    return [sum(us for _, us in ks[i * k:(i + 1) * k]) for i in range(calls)]


def read_kernel_details(path):
    """[(name, duration us, blocks)] from torch_npu.profiler's kernel_details.csv, columns
    read by name (Name, Duration(us); Block Num, or Block Dim in older CANN)."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
        cols = set(rows[0]) if rows else set()
    missing = {"Name", "Duration(us)"} - cols
    if missing:
        raise TimingError("%s has no column %s" % (path, ", ".join(sorted(missing))))
    blk = "Block Num" if "Block Num" in cols else "Block Dim" if "Block Dim" in cols else None
    out = []
    for r in rows:
        try:
            us = float(r["Duration(us)"])
        except ValueError:
            raise TimingError("%s: duration %r of %s is not a number" % (
                path, r["Duration(us)"], r["Name"])) from None
        out.append((r["Name"], us, int(float(r[blk])) if blk and r[blk] else None))
    return out


def bench_npu(do_bench_npu, fn, warmup, repeats, prof_dir):
    """triton-ascend's do_bench_npu as [kernel us] (its mean: one figure), or None where this
    release has no clear_l2_cache (its figures would be of a warm cache). Releases with it
    return milliseconds; a prof_dir keeps it on the profiler rather than on events."""
    if "clear_l2_cache" not in inspect.signature(do_bench_npu).parameters:
        return None
    r = do_bench_npu([fn], warmup=warmup, active=repeats, clear_l2_cache=True, prof_dir=prof_dir)
    r = float(r[0] if isinstance(r, (list, tuple)) else r) * 1e3
    if not (r > 0 and math.isfinite(r)):
        raise TimingError("do_bench_npu gave %r" % r)
    return [r]


class Timing:
    """What every device has besides its arrays: the host's clock around each call (cache
    flushed before it), which is the CPU's timer, and kernel_us the same; devices with
    events and a kernel profiler (Profiled) override both."""
    flush_bytes = 0
    kernel_is_wall = True       # one timing serves both

    def kernel_us(self, fn, warmup, repeats):
        return self.wall_us(fn, warmup, repeats)

    def wall_us(self, fn, warmup, repeats):
        for _ in range(warmup):
            fn()
        out = []
        for _ in range(repeats):
            self.flush()
            t = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t) * 1e6)
        return out

    def copy_gbps(self, nbytes, repeats=5):
        """The device's copy bandwidth (bytes read plus written per second) on nbytes."""
        us = statistics.median(self.wall_us(self.copy_call(nbytes), 1, repeats))
        return nbytes / us * 1e-3

    def device_name(self):
        if self.name != "cpu":
            return self.mod.get_device_name(0)
        try:
            with open("/proc/cpuinfo") as f:
                return next(x.split(":", 1)[1].strip() for x in f if x.startswith("model name"))
        except (OSError, StopIteration):
            return platform.processor() or platform.machine()


class Cpu(Timing):
    """NumPy arrays in host memory, the C library's CPU path."""
    name = "cpu"

    def __init__(self, flush_mb=16):
        self.flush_bytes = flush_mb << 20
        self._flush = np.zeros(self.flush_bytes // 8)

    def put(self, a):
        return a

    def empty(self, shape, dtype, view, slack=0):
        """A new array in `view` (cases.def), its whole buffer NaN, `slack` elements longer."""
        return C.in_view(np.full(shape, np.nan, C.np_dtype(dtype)), view, np.nan, slack)

    def get(self, t):
        return np.array(t)

    def buffer(self, t):
        """The whole buffer of an array that empty made (its base)."""
        return t.base

    def sync(self):
        pass

    def flush(self):
        self._flush += 1.0

    def copy_call(self, nbytes):
        """A call that copies nbytes/2 bytes to another nbytes/2 (nbytes read plus written)."""
        src, dst = np.ones(nbytes // 2, np.uint8), np.zeros(nbytes // 2, np.uint8)
        return lambda: np.copyto(dst, src)


class Torch(Timing):
    """PyTorch tensors on a device (on the CPU: the Triton interpreter's, timed by the host's
    clock), flushed by zeroing a buffer."""

    def __init__(self, name, flush_mb=0):
        import torch
        self.torch, self.name, self.mod = torch, name, getattr(torch, name)
        self.flush_bytes = flush_mb << 20
        self._flush = torch.empty(self.flush_bytes // 4, dtype=torch.int32, device=name)
        self._flush_names = None

    def put(self, a):
        return to_torch(self.torch, a, self.name)

    def empty(self, shape, dtype, view, slack=0):
        strides, offset, n = C.view_strides(view, shape)
        buf = self.torch.full((max(n, 1) + slack,), float("nan"),
                              dtype=getattr(self.torch, dtype), device=self.name)
        return buf.as_strided(shape, strides, offset if n else 0)

    def get(self, t):
        return from_torch(t)

    def buffer(self, t):
        return from_torch(t.as_strided((t.untyped_storage().nbytes() // t.element_size(),),
                                       (1,), 0))

    def sync(self):
        self.mod.synchronize()

    def flush(self):
        self._flush.zero_()

    def copy_call(self, nbytes):
        src = self.torch.ones(nbytes // 2, dtype=self.torch.uint8, device=self.name)
        dst = self.torch.empty_like(src)
        return lambda: dst.copy_(src)


class Profiled(Torch):
    """What CUDA and the NPU share: event-timed wall time, kernel time from a profiler
    (_profile)."""
    kernel_is_wall = False

    def wall_us(self, fn, warmup, repeats):
        for _ in range(warmup):
            fn()
        ev = [(self.mod.Event(enable_timing=True), self.mod.Event(enable_timing=True))
              for _ in range(repeats)]
        for a, b in ev:
            self.flush()
            a.record()
            fn()
            b.record()
        self.sync()
        return [a.elapsed_time(b) * 1e3 for a, b in ev]

    def kernel_us(self, fn, warmup, repeats):
        if self._flush_names is None:      # what the flush launches, to leave out
            self._flush_names = {n for n, _ in self._profile(self.flush, 1)}
        for _ in range(warmup):
            fn()
        return per_call(self._profile(fn, repeats), self._flush_names, repeats)


class Cuda(Profiled):
    def __init__(self, flush_mb):
        super().__init__("cuda", flush_mb)

    def _profile(self, fn, calls):
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile
        self.sync()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(calls):
                self.flush()
                fn()
            self.sync()
        ks = sorted((e for e in p.events() if e.device_type == DeviceType.CUDA),
                    key=lambda e: e.time_range.start)
        return [(e.name, e.time_range.elapsed_us()) for e in ks]


class Npu(Profiled):
    def __init__(self, flush_mb):
        import torch_npu  # noqa: F401  (registers the npu device)
        super().__init__("npu", flush_mb)
        self.do_bench_npu = None
        for where in ("triton.backends.ascend.testing", "triton.testing"):  # by release
            try:
                self.do_bench_npu = __import__(where, fromlist=["x"]).do_bench_npu
                break
            except (ImportError, AttributeError):
                pass

    def kernel_us(self, fn, warmup, repeats):
        if self.do_bench_npu is not None:
            with tempfile.TemporaryDirectory(prefix="zgate_prof_") as d:
                r = bench_npu(self.do_bench_npu, fn, warmup, repeats, d)
            if r is not None:
                return r
        return super().kernel_us(fn, warmup, repeats)

    def _profile(self, fn, calls):
        import torch_npu
        P = torch_npu.profiler
        self.sync()
        with tempfile.TemporaryDirectory(prefix="zgate_prof_") as d:
            with P.profile(activities=[P.ProfilerActivity.NPU],
                           on_trace_ready=P.tensorboard_trace_handler(d)):
                for _ in range(calls):
                    self.flush()
                    fn()
                self.sync()
            found = glob.glob(os.path.join(d, "*", "ASCEND_PROFILER_OUTPUT", "kernel_details.csv"))
            if len(found) != 1:
                raise TimingError("torch_npu.profiler wrote %d kernel_details.csv under %s" % (
                    len(found), d))
            return [(n, us) for n, us, _ in read_kernel_details(found[0])]


def open_device(name, flush_mb=None, tensors=False):
    """The Device, or RuntimeError saying why it cannot be used here. tensors: PyTorch
    tensors on the CPU (the Triton interpreter) rather than NumPy arrays."""
    if name == "cpu" and not tensors:
        return Cpu(flush_mb or 16)
    try:
        import torch
    except ImportError:
        raise RuntimeError("--device %s needs PyTorch: pip install torch" % name) from None
    if name == "cpu":
        return Torch("cpu", flush_mb or 16)
    if name == "npu":
        try:
            import torch_npu  # noqa: F401
        except ImportError:
            raise RuntimeError("--device npu needs torch_npu (pip install torch-npu) and "
                               "CANN") from None
    if not getattr(torch, name).is_available():
        raise RuntimeError("no %s device is visible to PyTorch" % name.upper())
    # the flush: more than the L2 (50 MB on an A100, 60 MB on an H200, 192 MB on a 910B2)
    return (Cuda if name == "cuda" else Npu)(flush_mb or 256)


def to_torch(torch, a, dev):
    """A tensor on `dev` with a's values and strides, never sharing a's memory: a copy of the
    buffer a views (cases.inputs makes it contiguous), viewed as a views it."""
    base = a
    while isinstance(base.base, np.ndarray):
        base = base.base
    flat = np.array(base, copy=True, order="C").reshape(-1)
    t = torch.from_numpy(flat.view(np.int16)).view(torch.bfloat16) if a.dtype == C.BF16 \
        else torch.from_numpy(flat)
    off = (a.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // a.itemsize
    return t.to(dev).as_strided(a.shape, [s // a.itemsize for s in a.strides], off)


def from_torch(t):
    import torch
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(C.BF16)
    return t.contiguous().numpy()
