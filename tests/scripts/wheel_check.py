"""What an installed zgate wheel must do where no compiler is: run by scripts/test.d/25-wheel.sh
(CPU) and scripts/gpu-wheel.sh (CUDA) with the venv's python, PATH holding only the venv's bin.

    python tests/scripts/wheel_check.py README.md [--device cuda] [--require-all]

Checks, one line each, a failure named and the exit status 1: no compiler, CMake or nvcc on
PATH; zgate imported from this environment, not from a source tree; its import time (a fresh
process, the best of 3) within IMPORT_LIMIT_S; the CPU path chosen is the best this CPU has
(by /proc/cpuinfo's flags, derived here, not asked of the library); libzgate loads no
libcudart; zgate.info() on CUDA: --device cuda, a device named, else why there is none; and
the README's Python examples run (one whose imports are missing is reported as skipped).
With --require-all (CI's and the GPU machine's runs) a skipped check fails the run: every
example must have run."""
import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import importlib.util

IMPORT_LIMIT_S = 0.5
TOOLS = ("cc", "gcc", "c++", "g++", "clang", "cmake", "ninja", "nvcc")
results = []


def record(name, ok, detail):
    results.append((name, "ok" if ok is True else ("SKIPPED" if ok is None else "FAILED"), detail))
    print("%-28s %-8s %s" % results[-1], flush=True)


def check_no_toolchain():
    found = {t: shutil.which(t) for t in TOOLS}
    found = {t: p for t, p in found.items() if p}
    record("no compiler/CMake/nvcc", not found,
           "none of %s on PATH=%s" % (" ".join(TOOLS), os.environ.get("PATH")) if not found
           else "found %s" % found)


def check_installed_here(zgate):
    where = os.path.realpath(zgate.__file__)
    record("installed package", where.startswith(os.path.realpath(sys.prefix) + os.sep), where)


def check_import_time():
    code = "import time; t = time.perf_counter(); import zgate; print(time.perf_counter() - t)"
    times = [float(subprocess.run([sys.executable, "-c", code], check=True, text=True,
                                  capture_output=True).stdout) for _ in range(3)]
    best = min(times)
    record("import time", best <= IMPORT_LIMIT_S,
           "%.3f s best of 3 (%s s), limit %.1f s" % (best, " ".join("%.3f" % t for t in times),
                                                       IMPORT_LIMIT_S))


def best_isa_of_this_cpu():
    """The CPU path zgate should choose, from /proc/cpuinfo (the kernel lists only what the OS
    has enabled): avx512 needs F, DQ, BW, VL with FMA and F16C; avx2 needs AVX2, FMA, F16C."""
    machine = platform.machine()
    if machine in ("aarch64", "arm64"):
        return "neon"
    if machine not in ("x86_64", "AMD64"):
        return "scalar"
    with open("/proc/cpuinfo") as f:
        m = re.search(r"^flags\s*:(.*)$", f.read(), re.M)
    flags = set(m.group(1).split()) if m else set()
    if {"avx512f", "avx512dq", "avx512bw", "avx512vl", "fma", "f16c"} <= flags:
        return "avx512"
    if {"avx2", "fma", "f16c"} <= flags:
        return "avx2"
    return "scalar"


def check_cpu_path(info):
    want = best_isa_of_this_cpu()
    record("CPU path is this CPU's best", info["cpu_isa_chosen"] == want,
           "chosen %s, /proc/cpuinfo says %s (built: %s)"
           % (info["cpu_isa_chosen"], want, " ".join(info["cpu_isas_built"])))


def check_no_cudart(zgate):
    if not shutil.which("ldd") and not os.path.exists("/usr/bin/ldd"):
        record("no libcudart loaded", None, "ldd not found")
        return
    ldd = shutil.which("ldd") or "/usr/bin/ldd"
    out = subprocess.run([ldd, zgate.library_path()], check=True, text=True,
                         capture_output=True).stdout
    bad = [line.strip() for line in out.splitlines() if "cudart" in line]
    record("no libcudart loaded", not bad, "ldd %s: %s" % (os.path.basename(zgate.library_path()),
                                                       bad or "no libcudart"))


def check_cuda(info, device):
    if device == "cuda":
        ok = info["cuda_built"] and info["cuda_device_count"] > 0
        record("CUDA device named", ok, info.get("cuda_devices") or info.get("cuda_unavailable"))
    else:
        # no GPU here: the CPU path runs (the examples below) and info() says why not CUDA
        ok = info["cuda_device_count"] > 0 or bool(info.get("cuda_unavailable"))
        record("CUDA: devices or a reason", ok,
               info.get("cuda_devices") or "unavailable: %s" % info.get("cuda_unavailable"))


def missing_import(code):
    for mod in sorted(set(re.findall(r"^\s*(?:import|from)\s+(\w+)", code, re.M))):
        if importlib.util.find_spec(mod) is None:
            return mod
    return None


def check_readme(readme):
    with open(readme, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    record("README has examples", len(blocks) > 0, "%d Python blocks" % len(blocks))
    for i, code in enumerate(blocks):
        name = "README example %d" % (i + 1)
        mod = missing_import(code)
        if mod:
            record(name, None, "%s is not installed" % mod)
            continue
        try:
            exec(compile(code, "%s (Python example %d)" % (readme, i + 1), "exec"), {})
            record(name, True, "ran")
        except Exception as e:  # noqa: BLE001  the example's failure, reported
            record(name, False, "%s: %s" % (type(e).__name__, e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("readme")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--require-all", action="store_true",
                    help="a skipped check (an example whose imports are missing) fails the run")
    args = ap.parse_args()
    check_no_toolchain()
    import zgate
    check_installed_here(zgate)
    check_import_time()
    info = zgate.info()
    check_cpu_path(info)
    check_no_cudart(zgate)
    check_cuda(info, args.device)
    check_readme(args.readme)
    failed = sum(r[1] == "FAILED" for r in results)
    skipped = sum(r[1] == "SKIPPED" for r in results)
    print("wheel_check: %d checks, %d failed, %d skipped%s"
          % (len(results), failed, skipped,
             " (--require-all: a skip fails the run)" if skipped and args.require_all else ""))
    return 1 if failed or (skipped and args.require_all) else 0


if __name__ == "__main__":
    sys.exit(main())
