"""python -m zgate.acceptance: the request's verdict on one device, precision and speed.

The case list (check/cases.def) on the same seeded inputs everywhere, judged against the
float64 reference and, with --golden, another device's outputs. --precision-only: the whole
list (every dtype mix, in place, permuted, size 0), nothing timed. Otherwise its cases with one
dtype (bfloat16, float32), dense or Z as a view (--quick adds the smallest real shape), also
timed; with --baseline, PASS when the geomean of the time ratios is at least 0.9 over the cases
whose ideal transfer time is 10 us or more (two at least); not judged where this run or the
baseline ran under the Triton interpreter (a CPU stand-in: it checks a recipe end to end, its
times mean nothing). --impl: zgate (the C library; its Triton kernel on npu), triton (zgate's
Triton kernel on cuda, or on cpu under TRITON_INTERPRET=1), upstream (mamba_ssm's dzdo kernel,
backward only; on cpu under the interpreter), or MODULE:FUNCTION: any function of upstream's
compute_dzdo signature, (do, z, o) -> (dz, do_scaled) in do's dtype (the MindSpeed-Ops
contribution, say), judged as zgate's Triton kernel on the cases it can take. Upstream's kernel
is the competitor: its precision is reported, not judged, unless its outputs are saved as a
golden run (it is wrong where the headdim is not a power of two and the tensors' strides
differ, e.g. 80 and 96 with Z as a view). A golden file records per case whether its outputs
passed the float64 policy; a run that saves one with a failing case fails, and a run given one
is refused on such a case, which is named. docs/operator.md gives the procedure on the GPU and
the NPU.

Exit status: 0 every criterion asked for passed and every case ran; 1 one failed or a case
did not run; 2 bad arguments (refused before any work).
"""
import argparse
import datetime
import importlib
import json
import os
import platform
import re
import sys

import numpy as np

from .._mamba import import_upstream_dzdo
from .. import cases as C
from . import device as D
from . import report as R
from . import run as U


class BadArgs(Exception):
    pass


def _parser():
    ap = argparse.ArgumentParser(prog="python -m zgate.acceptance",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", required=True, choices=("npu", "cuda", "cpu"))
    ap.add_argument("--impl", default="zgate",
                    help="zgate, triton, upstream, or MODULE:FUNCTION (upstream's signature)")
    ap.add_argument("--upstream-path", metavar="DIR")
    ap.add_argument("--op", choices=("bwd", "fwd"), help="only this operator's cases")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--precision-only", action="store_true",
                    help="the whole case list, nothing timed, no baseline")
    ap.add_argument("--filter", help="only the cases whose name contains this text")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: OpenMP's default)")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--save-baseline", metavar="FILE")
    g.add_argument("--baseline", metavar="FILE")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--save-golden", metavar="FILE")
    g.add_argument("--golden", metavar="FILE")
    ap.add_argument("--output", metavar="FILE", help="the Markdown report")
    ap.add_argument("--json", metavar="FILE", help="the results for machines")
    ap.add_argument("--lang", default="en", choices=("en", "zh-CN"))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--flush-mb", type=int, help="MB written between repeats (cpu 16, else 256)")
    ap.add_argument("--seed", type=int, default=20261203)
    return ap


def _writable(path):
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d) or not os.access(d, os.W_OK) or (
            os.path.exists(path) and not os.access(path, os.W_OK)):
        raise BadArgs("cannot write %s" % path)


def _check_args(a):
    """Everything that can be refused before any work: (cases, baseline, golden)."""
    for n in ("warmup", "repeats", "threads", "flush_mb"):
        v = getattr(a, n)
        if v is not None and (v < 0 or (n == "repeats" and v < 1)):
            raise BadArgs("--%s %d is out of range" % (n.replace("_", "-"), v))
    if a.threads and (a.device, a.impl) != ("cpu", "zgate"):
        raise BadArgs("--threads is for --device cpu --impl zgate")
    function = _is_function(a.impl)
    if not function and a.impl not in ("zgate", "triton", "upstream"):
        raise BadArgs("--impl %r is not zgate, triton, upstream or MODULE:FUNCTION" % a.impl)
    allowed = {"cpu": ("zgate", "triton", "upstream"), "cuda": ("zgate", "triton", "upstream"),
               "npu": ("zgate", "upstream")}[a.device]
    if a.impl not in allowed and not function:
        raise BadArgs("--impl %s does not run on --device %s (there: %s)" % (
            a.impl, a.device, ", ".join(allowed)))
    if a.precision_only and (a.baseline or a.save_baseline):
        raise BadArgs("--precision-only times nothing: no --baseline or --save-baseline")
    if a.upstream_path and a.impl != "upstream":
        raise BadArgs("--upstream-path is for --impl upstream")
    if (a.impl == "upstream" or function) and a.op != "bwd":
        raise BadArgs("--impl %s has only the backward kernel: add --op bwd (and the same --op "
                      "to the runs compared with it)" % a.impl)
    for p in (a.output, a.json, a.save_baseline, a.save_golden):
        if p:
            _writable(p)
    cases = [c for c in U.case_list(a.quick, a.op, not a.precision_only)
             if (not a.filter or a.filter in c.name) and (not function or U.takes(c))]
    if not cases:
        raise BadArgs("no case matches --filter %r" % a.filter)
    names = [c.name for c in cases]
    base = gold = None
    if a.baseline:
        try:
            with open(a.baseline) as f:
                base = json.load(f)
            R.check_compatible({"seed": a.seed}, names, base, a.baseline)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise BadArgs("baseline %s: %s" % (a.baseline, e)) from None
    if a.golden:
        try:
            gold = C.load_golden(a.golden, a.seed, names)
        except ValueError as e:
            raise BadArgs(str(e)) from None
    return cases, base, gold


def _is_function(impl):
    return re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", impl) is not None


def _impl(a):
    import zgate
    if a.impl == "zgate":
        return U.zgate_impl(zgate, a.threads)
    if _is_function(a.impl):
        name, _, attr = a.impl.partition(":")
        try:
            fn = getattr(importlib.import_module(name), attr)
        except (ImportError, AttributeError) as e:
            raise BadArgs("--impl %s: %s: %s" % (a.impl, type(e).__name__, e)) from None
        if not callable(fn):
            raise BadArgs("--impl %s is not callable" % a.impl)
        return U.function_impl(fn)
    import zgate.triton as zt      # importable without Triton: available() says what is missing
    why = zt.available(a.device)
    if why:
        raise BadArgs("--impl %s: %s" % (a.impl, why))
    if a.impl == "triton":
        return U.zgate_impl(zt)
    try:
        return U.upstream_impl(import_upstream_dzdo(a.upstream_path))
    except ImportError as e:
        raise BadArgs("--impl upstream: %s" % e) from None


def _versions(dev, a):
    import zgate
    v = {"python": platform.python_version(), "numpy": np.__version__,
         "zgate": zgate.__version__, "host": platform.platform()}
    for mod in ("torch", "torch_npu", "triton", "mamba_ssm"):
        m = sys.modules.get(mod)
        if m is not None and getattr(m, "__version__", None):
            v[mod] = str(m.__version__)
    if a.device == "cuda":
        v["cuda runtime"] = dev.torch.version.cuda
        v["driver"] = _first_line(["nvidia-smi", "--query-gpu=driver_version",
                                   "--format=csv,noheader"])
    if a.device == "npu":      # the files the driver and CANN installers write
        v["driver"] = _first_line(None, "/usr/local/Ascend/driver/version.info")
        v["CANN"] = _first_line(None, os.path.join(os.environ.get(
            "ASCEND_TOOLKIT_HOME", "/usr/local/Ascend/ascend-toolkit/latest"), "version.cfg"))
    if a.device == "cpu":
        v["threads"] = a.threads or "OpenMP default (%d cpus)" % os.cpu_count()
    if a.impl == "upstream":
        v["upstream"] = a.upstream_path or "installed mamba_ssm"
    return v


def _first_line(cmd, path=None):
    """The first line mentioning a version of a command's output or a file; "unknown"."""
    import subprocess
    try:
        text = open(path).read() if path else subprocess.run(
            cmd, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    hit = [x for x in lines if "version" in x.lower()] if path else lines
    return (hit or ["unknown"])[0]


def main(argv=None):
    ap = _parser()
    a = ap.parse_args(argv)
    try:
        cases, base, gold = _check_args(a)
        try:
            dev = D.open_device(a.device, a.flush_mb, tensors=a.impl != "zgate")
        except RuntimeError as e:
            raise BadArgs(str(e)) from None
        prepare = _impl(a)
    except BadArgs as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    triton_kernel = a.impl != "zgate" or a.device == "npu"
    f32_ulps = C.TRITON_F32_ULPS if triton_kernel else C.F32_ULPS
    interp = triton_kernel and os.environ.get("TRITON_INTERPRET") == "1"
    copy_gbps = None if a.precision_only else dev.copy_gbps(
        (1 << 30) if a.device != "cpu" else (64 << 20))
    meta = {"device": a.device, "device_name": dev.device_name(), "impl": a.impl,
            "seed": a.seed, "quick": a.quick, "op": a.op, "precision_only": a.precision_only,
            "f32_ulps": f32_ulps, "interpreter": interp, "warmup": a.warmup,
            "repeats": a.repeats, "flush_mb": dev.flush_bytes >> 20, "copy_gbps": copy_gbps,
            "golden": a.golden, "baseline": a.baseline, "date":
            datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "timer": {"cpu": "wall time", "cuda": "torch.profiler", "npu": "do_bench_npu" if
                      getattr(dev, "do_bench_npu", None) else "torch_npu.profiler"}[a.device]}
    if a.impl == "upstream":
        meta["not_run"] = ["forward cases: upstream has no forward gate kernel"]
    if _is_function(a.impl):
        meta["not_run"] = ["forward cases, in place, and outputs of a dtype other than do's: "
                           "upstream's signature takes none of them"]
    rows, saved = [], {"__seed__": np.array(a.seed), "__maker__": np.array(
        "--impl %s on %s" % (a.impl, meta["device_name"]))}
    for case in cases:
        row = U.measure(dev, prepare, case, a.seed, f32_ulps, gold, a.warmup, a.repeats,
                        copy_gbps, interp)
        outs = row.pop("outs")
        if outs:
            saved.update(C.golden_entries(case.name, outs, all(m["ok"] for m in row["outputs"])))
        rows.append(row)
        k = row.get("kernel")
        print("%-44s %s" % (case.name, row["error"] or "%s%s" % (
            "ok  " if row["precision_ok"] else "FAIL", "" if k is None else " %10.1f us%s" % (
                k["median"], "  launch-bound" if row["launch_bound"] else ""))), flush=True)
    meta["versions"] = _versions(dev, a)
    res = {"meta": meta, "cases": rows}
    cmp = R.compare(res, base) if base else None
    # upstream's precision is judged only where its outputs are to be a golden run
    crits = R.criteria(res, cmp, a.golden, a.impl != "upstream" or bool(a.save_golden))
    res["comparison"], res["criteria"] = cmp, [list(c) for c in crits]
    res["request"] = R.request_by_dtype(res)
    text = R.markdown(res, cmp, crits, a.lang)
    for path, data in ((a.output, text), (a.json, res), (a.save_baseline, res)):
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(data) if isinstance(data, str) else json.dump(data, f, indent=1)
    if a.save_golden:
        np.savez(a.save_golden, **saved)
        wrong = [r["case"] for r in rows if r.get("precision_ok") is False]
        if wrong:
            print("golden %s: outputs that failed the float64 policy on %s; a run given it "
                  "is refused on them" % (a.save_golden, ", ".join(wrong)))
    ok = all(c[1] is not False for c in crits)      # None: reported, not judged
    print("\n".join("%s %s: %s" % ({True: "PASS", False: "FAIL", None: "INFO"}[c[1]], c[0],
                                    c[2]) for c in crits))
    if cmp and "geomean" in cmp["summary"]:
        print("speed geomean %.3f over %d cases" % (cmp["summary"]["geomean"],
                                                    cmp["summary"]["n"]))
    return 0 if ok else 1
