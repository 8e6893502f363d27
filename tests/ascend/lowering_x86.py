"""The Ascend NPU kernel's own IR, compiled for x86 and called through ctypes.

build() takes the IR that bishengir-compile receives for one plan (triton-ascend's ttadapter
stage, named ops: zgate.triton.ascend.linalg_of) and lowers it for the host:

    mlir-opt --convert-elementwise-to-linalg   (named ops: elementwise arith/math on tensors)
    triton-ascend's linalg_to_llir              (its CPU pass list, run with Debian's MLIR 19)
    clang -O2 -shared -fPIC                     (compiler-rt builtins, MLIR's runner utils)

Nothing is stripped: the IR holds no HIVM or annotation ops, only attributes that the upstream
passes ignore (hivm.unlikely_condition, a branch hint on the masked-load fill;
tt.divisibility and tt.tensor_kind on arguments, hints for the NPU compiler; the kernel's
SyncBlockLockArgIdx / WorkspaceArgIdx / global_kernel / parallel_mode attributes). mlir-opt
runs without --allow-unregistered-dialect, so an op of a dialect it does not know stops the
build at its name instead of surviving into the lowering.

Rounding: f32 -> f16/bf16 is `arith.truncf`, which LLVM lowers to compiler-rt's __truncsfhf2
/ __truncsfbf2, round to nearest even like the NPU's vcast (RINT). Debian's libgcc 12 has no
__truncsfbf2, so compiler-rt's builtins are linked in (--rtlib=compiler-rt). exp is the C
library's expf (math.exp lowers to llvm.exp.f32).

run() calls the kernel once per program id. It runs in a forked child: the lowering
allocates each tile's buffers with malloc and never frees them (the IR has no deallocs; the
NPU keeps them in UB), and a wild store then kills the child, not the test process. The
child sends the output buffers back whole, guard regions included.
"""
import ctypes
import hashlib
import json
import os
import re
import subprocess
import traceback
import types

import numpy as np

from zgate.triton import ascend
from zgate.triton.plan import SLOTS, kernel_arguments

LLVM_ROOT = os.environ.get("ZGATE_LLVM_ROOT", "/usr/lib/llvm-19")
KERNEL = "gate_kernel"
MLIR_TYPE = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
# The kernel's pointer parameters in order, and the six i32 the launcher appends.
PTR_PARAMS = ("dout_ptr", "z_ptr", "o_ptr", "dz_ptr", "dos_ptr")
GRID_ARGS = 6
OUTPUTS = {"bwd": (3, 4), "fwd": (2,)}


class ToolchainError(RuntimeError):
    """A tool of the lowering is missing or failed."""


def _tool(name):
    path = os.path.join(LLVM_ROOT, "bin", name)
    if not os.access(path, os.X_OK):
        raise ToolchainError("%s not found: apt-get install mlir-19-tools llvm-19 clang-19 "
                             "libclang-rt-19-dev libmlir-19 (or set ZGATE_LLVM_ROOT)" % path)
    return path


def _sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise ToolchainError("%s failed (exit %d):\n%s" % (os.path.basename(cmd[0]),
                                                           r.returncode, r.stderr[-4000:]))


def kernel_args_of(op, dtypes, layout, tiles):
    """(args, constexprs) by name, as a launch of this plan passes them; pointers as
    ascend.ptr_arg of the op's dtypes (public order) at address 0, as the report compiles them
    (their alignment only sets tt.divisibility hints, which the CPU lowering ignores)."""
    return kernel_arguments(op, [ascend.ptr_arg(d) for d in dtypes], layout, tiles)


def linalg_text(op, dtypes, layout, tiles):
    """The IR bishengir-compile receives for this plan, specialised on its sizes and
    strides as a launch is."""
    return ascend.linalg_of(*kernel_args_of(op, dtypes, layout, tiles))[0]


def _linalg_to_llir(mlir_path):
    """triton-ascend's linalg_to_llir (its pass list and mlir-translate) on our MLIR 19."""
    backend_cls, _ = ascend._toolchain()
    fn = backend_cls.add_stages.__globals__.get("linalg_to_llir")
    if fn is None:
        raise ToolchainError("this triton-ascend has no linalg_to_llir in its compiler module")
    _tool("mlir-opt"), _tool("mlir-translate")
    saved = os.environ.get("MLIR_ROOT")
    os.environ["MLIR_ROOT"] = LLVM_ROOT          # read by its _get_mlir_path
    try:
        with open(mlir_path) as f:
            return fn(f.read(), {}, types.SimpleNamespace(debug=False))
    except subprocess.CalledProcessError as e:
        raise ToolchainError("linalg_to_llir: %s" % e) from e
    finally:
        if saved is None:
            del os.environ["MLIR_ROOT"]
        else:
            os.environ["MLIR_ROOT"] = saved


def _by_pointer(op, seq):
    """`seq` (one item per tensor, the op's public order) per kernel pointer parameter; the
    forward's unused pointers get z's, as plan.kernel_arguments does."""
    by_slot = dict(zip(SLOTS[op], seq))
    return [by_slot.get(n[:-len("_ptr")], by_slot["z"]) for n in PTR_PARAMS]


def _linalg_params(text):
    """The kernel's parameter types as written in the linalg text, and whether its body uses
    the sync-lock or workspace argument."""
    m = re.search(r"func\.func @%s\((.*?)\)\s+attributes[^{]*\{[^}]*\}(.*)" % KERNEL, text,
                  re.S)
    if not m:
        raise ToolchainError("no func.func @%s in the linalg text" % KERNEL)
    return (re.findall(r"%arg\d+: (memref<\?x\w+>|i32|i64)", m.group(1)),
            bool(re.search(r"%arg[01]\b", m.group(2))))


def _llvm_params(ll):
    m = re.search(r"define void @%s\(([^)]*)\)" % KERNEL, ll)
    if not m:
        raise ToolchainError("no define void @%s in the LLVM IR" % KERNEL)
    return [p.split()[0] for p in m.group(1).split(",")]


def _signature(op, dtypes, layout, tiles, text):
    """The runtime parameters the front end kept, checked against the linalg text:
    two memref<?xi8> (sync-lock, workspace), the five pointers with their element types,
    the integer arguments not specialised away (Triton folds ints equal to 1 into
    constants), then the six i32 of the grid and program id."""
    from triton.backends.compiler import AttrsDescriptor
    from zgate.triton.kernel import gate_kernel
    args, _ = kernel_args_of(op, dtypes, layout, tiles)
    ints = [p.name for p in gate_kernel.params if not p.is_constexpr
            and p.name not in PTR_PARAMS
            and not (AttrsDescriptor.is_equal_to_1(args[p.name]) and not p.do_not_specialize)]
    params, uses_scratch = _linalg_params(text)
    if uses_scratch:
        raise ToolchainError("the kernel uses its sync-lock or workspace argument; run() "
                             "passes 64 unused bytes for them")
    want_mem = ["memref<?xi8>"] * 2 + ["memref<?x%s>" % MLIR_TYPE[d]
                                       for d in _by_pointer(op, dtypes)]
    if (params[:7] != want_mem or len(params) != 7 + len(ints) + GRID_ARGS
            or params[-GRID_ARGS:] != ["i32"] * GRID_ARGS):
        raise ToolchainError("the kernel's signature is not the expected one: got %s, "
                             "expected %s + %d ints + %d i32" % (params, want_mem, len(ints),
                                                                 GRID_ARGS))
    return {"ints": ints, "int_types": params[7:7 + len(ints)]}


def build(op, dtypes, layout, tiles, workdir):
    """Path of a shared library holding the lowered kernel of this plan (op, dtypes in the
    op's public order, plan.Layout, plan.Tiles); cached in `workdir` by the linalg text's
    hash. A JSON file beside it records the runtime signature that run() follows."""
    dtypes = tuple(ascend.SHORT[d] for d in dtypes)
    text = linalg_text(op, dtypes, layout, tiles)
    key = hashlib.sha256(text.encode()).hexdigest()[:20]
    so = os.path.join(workdir, "%s.so" % key)
    if os.path.exists(so):
        return so
    sig = _signature(op, dtypes, layout, tiles, text)
    stem = os.path.join(workdir, key)
    with open(stem + ".ttadapter.mlir", "w") as f:
        f.write(text)
    _sh([_tool("mlir-opt"), stem + ".ttadapter.mlir", "--convert-elementwise-to-linalg",
         "-o", stem + ".linalg.mlir"])
    ll = _linalg_to_llir(stem + ".linalg.mlir")
    with open(stem + ".ll", "w") as f:
        f.write(ll)
    llvm = _llvm_params(ll)
    want = ["ptr", "ptr", "i64", "i64", "i64"] * 7 + sig["int_types"] + ["i32"] * GRID_ARGS
    if llvm != want:
        raise ToolchainError("the lowered kernel takes (%s), expected (%s)" % (
            ", ".join(llvm), ", ".join(want)))
    sig.update(llvm=llvm, op=op, dtypes=dtypes,
               consts=kernel_args_of(op, dtypes, layout, tiles)[1])
    lib = os.path.join(LLVM_ROOT, "lib")
    tmp = so + ".tmp%d" % os.getpid()
    _sh([_tool("clang"), "-O2", "-shared", "-fPIC", "--rtlib=compiler-rt",
         "-Wno-override-module", stem + ".ll", "-o", tmp, "-L" + lib,
         "-l:libmlir_c_runner_utils.so.19.1", "-lm", "-Wl,-rpath," + lib])
    with open(stem + ".json", "w") as f:
        json.dump(sig, f)
    os.replace(tmp, so)
    return so


def _extent(a):
    """Elements from a's first element to one past its last (non-negative strides)."""
    if a.size == 0:
        return 0
    steps = [s // a.itemsize for s in a.strides]
    if any(s < 0 for s in steps):
        raise ValueError("negative strides are not supported")
    return 1 + sum((n - 1) * s for n, s in zip(a.shape, steps))


def _root(a):
    """The array that owns a's memory."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    if not a.flags.c_contiguous:
        raise ValueError("an output's buffer is not contiguous")
    return a


def _call(so_path, sig, args, arrays_by_pointer, grid):
    lib = ctypes.CDLL(so_path)
    fn = getattr(lib, KERNEL)
    ctypes_of = {"ptr": ctypes.c_void_p, "i64": ctypes.c_int64, "i32": ctypes.c_int32}
    fn.argtypes = [ctypes_of[t] for t in sig["llvm"]]
    fn.restype = None
    scratch = np.zeros(64, np.uint8)            # sync-lock and workspace: never read
    s = scratch.ctypes.data
    mem = [s, s, 0, scratch.size, 1] * 2
    for a in arrays_by_pointer:
        p = a.__array_interface__["data"][0]
        mem += [p, p, 0, _extent(a), 1]
    ints = [args[n] for n in sig["ints"]]
    for n, v, t in zip(sig["ints"], ints, sig["int_types"]):
        if not -2 ** (int(t[1:]) - 1) <= v < 2 ** (int(t[1:]) - 1):
            raise ValueError("%s = %d does not fit the kernel's %s" % (n, v, t))
    for pid in range(grid):
        fn(*mem, *ints, grid, 1, 1, pid, 0, 0)


def run(so_path, op, arrays, layout, tiles, grid):
    """Run the kernel built by build() on numpy arrays in the op's public order (bwd: dout,
    z, o, dz, dout_scaled; fwd: o, z, out), views allowed, for program ids 0..grid-1. The
    outputs' whole underlying buffers come back from the child process."""
    with open(os.path.splitext(so_path)[0] + ".json") as f:
        sig = json.load(f)
    names = [a.dtype.name for a in arrays]
    if sig["op"] != op or tuple(sig["dtypes"]) != tuple(names):
        raise ValueError("%s was built for %s %s, not %s %s" % (
            so_path, sig["op"], sig["dtypes"], op, names))
    args, consts = kernel_args_of(op, names, layout, tiles)
    if consts != sig["consts"]:
        raise ValueError("tiles %s differ from the build's %s" % (consts, sig["consts"]))
    folded = [n for n, v in args.items() if isinstance(v, int) and n not in sig["ints"]]
    if any(args[n] != 1 for n in folded):
        raise ValueError("the build folded %s to 1; this layout has %s" % (
            folded, [args[n] for n in folded]))
    roots = []
    for i in OUTPUTS[op]:
        r = _root(arrays[i])
        if not any(r is q for q in roots):
            roots.append(r)
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:                                 # child: run, send the outputs, exit
        code = 0
        try:
            os.close(rfd)
            _call(so_path, sig, args, _by_pointer(op, arrays), grid)
            with os.fdopen(wfd, "wb") as w:
                for r in roots:
                    w.write(r.tobytes())
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status or len(data) != sum(r.nbytes for r in roots):
        raise RuntimeError("the kernel's process ended with %s" % (
            "signal %d" % os.WTERMSIG(status) if os.WIFSIGNALED(status)
            else "exit %d" % os.WEXITSTATUS(status)))
    at = 0
    for r in roots:
        r.reshape(-1).view(np.uint8)[...] = np.frombuffer(data, np.uint8, r.nbytes, at)
        at += r.nbytes
