"""Compile the kernel for Ascend 910B without an NPU, and report what the compiler planned.

triton-ascend runs its front end (TTIR, then triton-adapter-opt to linalg with HIVM
annotations) on any host; bishengir-compile (from the ascendnpu-ir wheel) then runs HFusion,
HIVM and the UB planner and stops only where it calls CANN's device code generator, hivmc,
which needs CANN. The IR it keeps at that point (module.hivm.opt.mlir) is the final HIVM IR:
every UB buffer with its offset, the double-buffer selects, the GM<->UB copy routines and
the region each copy moves (gm_copies: sized by the tile's mask, or not).
`python -m zgate.triton.ascend --help` prints two lines per combination: the UB plan with
the copies masked to the tile, then the vector-cost model (costmodel.py). Needs
triton-ascend and ascendnpu-ir (never in one environment with upstream triton: both install
a package named triton).
"""
import argparse
import itertools
import math
import os
import re
import subprocess
import sys
import tempfile
import types

from . import costmodel as _cost
from . import plan as _plan

# Atlas A2 (910B) and the Atlas A3 (Ascend910_93xx) names triton-ascend 3.2.0 accepts.
TARGETS = ("Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend910_9362", "Ascend910_9372",
           "Ascend910_9381", "Ascend910_9382", "Ascend910_9391", "Ascend910_9392")
SHORT = {"f32": "float32", "fp32": "float32", "float32": "float32", "f16": "float16",
         "fp16": "float16", "float16": "float16", "bf16": "bfloat16", "bfloat16": "bfloat16"}
TRITON_DTYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
# Shapes the report compiles for: (batch, seqlen, nheads) and d_in_proj of the Z view.
REPORT_BLH, REPORT_PROJ = (2, 2048, 24), 8672


class ToolMissing(RuntimeError):
    """triton-ascend or bishengir-compile is not installed in this Python."""


def _toolchain():
    """(triton-ascend's compiler class, bishengir-compile's path), or ToolMissing."""
    try:
        import triton
        from triton.backends import backends
        import ascendnpuir
    except ImportError as e:
        raise ToolMissing("zgate.triton.ascend needs pip install triton-ascend==3.2.0 "
                          "ascendnpu-ir==1.2.0 pybind11 (%s)" % e) from e
    if "ascend" not in backends:
        raise ToolMissing("the installed triton (%s) has no 'ascend' backend: install "
                          "triton-ascend in an environment without upstream triton"
                          % triton.__version__)
    bishengir = os.path.join(os.path.dirname(ascendnpuir.__file__), "bin", "bishengir-compile")
    if not os.access(bishengir, os.X_OK):
        raise ToolMissing("bishengir-compile not found at %s" % bishengir)
    return backends["ascend"].compiler, bishengir


def ptr_arg(dtype):
    """A pointer argument as the JIT's specialisation sees it: its dtype, address 0."""
    return types.SimpleNamespace(dtype="*" + TRITON_DTYPE[dtype], data_ptr=lambda: 0,
                                 element_size=lambda: _plan.DTYPE_BYTES[dtype])


def kernel_args(op, dtypes, layout, headdim, tile_elems=None, backward_only=False):
    """(args, constexprs) of the kernel, pointers as ptr_arg(), for the call the report
    compiles: REPORT_BLH + (headdim,), dense or with Z as a view into a projection of width
    REPORT_PROJ. The tile is the NPU's (plan.npu_tile) unless tile_elems is given.
    backward_only: for a kernel without the BACKWARD switch (the MindSpeed-Ops tree's),
    plan.backward_arguments; op must be 'bwd'."""
    if backward_only and op != "bwd":
        raise ValueError("a backward-only kernel compiles op 'bwd', not %r" % (op,))
    dtypes = [SHORT[d] for d in dtypes]
    shape = REPORT_BLH + (headdim,)
    strides = [_plan.compact_strides(shape)] * len(dtypes)
    if layout == "zview":
        strides[1] = (shape[1] * REPORT_PROJ, REPORT_PROJ, headdim, 1)   # z: second in both ops
    elif layout != "dense":
        raise ValueError("layout is 'dense' or 'zview', not %r" % (layout,))
    tile = tile_elems or _plan.npu_tile(op, dtypes)
    _, lay, tiles = _plan.plan_call(shape, tuple(strides), tile, _plan.N_INPUTS[op])
    ptrs = [ptr_arg(d) for d in dtypes]
    if backward_only:
        return _plan.backward_arguments(ptrs, lay, tiles)
    return _plan.kernel_arguments(op, ptrs, lay, tiles)


def linalg_of(args, consts, target="Ascend910B2", kernel=None):
    """triton-ascend's front end for the NPU on kernel arguments by name (as
    plan.kernel_arguments gives them, pointers as ptr_arg()), specialised on their values as
    a launch is: (linalg text, metadata). kernel: a jitted function (default gate_kernel)
    whose parameters are exactly the names given. metadata["arg_names"]: the runtime
    parameters left in the compiled signature, in order (those equal to 1 are specialised
    away)."""
    backend_cls, _ = _toolchain()
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.compiler.compiler import ASTSource
    if kernel is None:
        from .kernel import gate_kernel as kernel
    gtarget = GPUTarget("npu", target, 0)
    params = kernel.params
    given = {**args, **consts}
    names = [p.name for p in params]
    if set(names) != set(given):
        raise ValueError("%s takes %s; the arguments given lack %s and add %s" % (
            kernel.fn.__name__, names, sorted(set(names) - set(given)),
            sorted(set(given) - set(names))))
    vals = [given[n] for n in names]
    attrs = make_backend(gtarget).get_attrs_descriptor(params, vals)
    fixed = attrs.get_constants()
    signature, constants = {}, {}
    for p, v in zip(params, vals):
        if p.is_constexpr or p.num in fixed:
            constants[p.name] = v
        if not p.is_constexpr:
            signature[p.name] = (v.dtype if not isinstance(v, int)
                                 else "i32" if -2**31 <= v < 2**31 else "i64")
    stage_globals = backend_cls.add_stages.__globals__
    caught = {}

    def grab(linalg, metadata, options):
        caught["linalg"], caught["metadata"] = linalg, dict(metadata)
        raise RuntimeError("stop: the linalg stage is all that is wanted")

    saved = stage_globals["linalg_to_bin_enable_npu_compile_A2_A3"]
    stage_globals["linalg_to_bin_enable_npu_compile_A2_A3"] = grab
    try:
        triton.compile(ASTSource(kernel, signature, constants, attrs), target=gtarget,
                       options={})
    except Exception:   # the grab above ends the compile; anything else is re-raised below
        if "linalg" not in caught:
            raise
    finally:
        stage_globals["linalg_to_bin_enable_npu_compile_A2_A3"] = saved
    linalg, metadata = stage_globals["_parse_linalg_metadata"](caught["linalg"],
                                                               caught["metadata"])
    metadata = dict(metadata, arg_names=[n for n in signature if n not in constants])
    return linalg, metadata


class UBOverflow(RuntimeError):
    """bishengir-compile refused the tile: it does not fit in the vector core's UB."""


def compile_hivm(linalg, metadata, target, workdir, multibuffer=None):
    """Run bishengir-compile to the final HIVM IR; its path. Raises UBOverflow or
    RuntimeError when the compile stops anywhere but at the missing hivmc."""
    _, bishengir = _toolchain()
    src = os.path.join(workdir, "kernel.mlir")
    with open(src, "w") as f:
        f.write(linalg)
    cmd = [bishengir, src, "--target=%s" % target,
           "--enable-auto-multi-buffer=%s" % str(bool(
               metadata["multibuffer"] if multibuffer is None else multibuffer)).lower(),
           "--enable-hfusion-compile=true", "--enable-hivm-compile=true",
           "--enable-triton-kernel-compile=true", "--save-temps=%s" % workdir,
           "-o", os.path.join(workdir, "kernel")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = r.stdout + r.stderr
    m = re.search(r"ub overflow[^\n]*", out)
    if m:
        raise UBOverflow(m.group(0))
    hivm = os.path.join(workdir, "module.hivm.opt.mlir")
    if "External hivmc run fails" not in out or not os.path.exists(hivm):
        raise RuntimeError("bishengir-compile stopped early (exit %d):\n%s" % (r.returncode,
                                                                             out[-2000:]))
    return hivm


_UB_BUF = re.compile(r"(%\w+) = hivm\.hir\.pointer_cast\(%c(\d+)_i64\)\s*:\s*"
                     r"memref<([0-9x]+)x(\w+),\s*#hivm\.address_space<ub>")
_SELECT = re.compile(r"= arith\.select %\w+, (%\w+), (%\w+) : memref<[^>]*#hivm\.address_space<ub>")
_BITS = {"f32": 32, "f16": 16, "bf16": 16, "i1": 8, "i8": 8, "i16": 16, "i32": 32, "i64": 64}


def parse_hivm(text):
    """The UB plan of a final HIVM IR text.

    ub_bytes: the end of the highest UB buffer (memref<0x..> placeholders ignored).
    double_buffered: every GM<->UB copy has a ping-pong pair, i.e. there are at least as
      many selects between two UB buffers as copy call sites, and each select chooses
      between two buffers that do not overlap.
    scalar_accesses: memref.load / memref.store, the scalar fallback.
    """
    bufs = {}
    for name, off, dims, ty in _UB_BUF.findall(text):
        n = math.prod(int(d) for d in dims.split("x"))
        if n:
            bufs[name] = (int(off), n * _BITS[ty] // 8)
    ub = max((off + size for off, size in bufs.values()), default=0)
    cap = re.search(r'"UB_SIZE",\s*(\d+)\s*:\s*i\d+', text)
    pairs = [(bufs.get(a), bufs.get(b)) for a, b in _SELECT.findall(text)]
    disjoint = all(p and q and (p[0] + p[1] <= q[0] or q[0] + q[1] <= p[0]) for p, q in pairs)
    copy_calls = re.findall(r"call @((?:load_gm_to_ubuf|store_ubuf_to_gm)\w*)", text)
    return {
        "ub_bytes": ub,
        "ub_capacity_bytes": int(cap.group(1)) // 8 if cap else None,
        "double_buffered": bool(copy_calls) and disjoint and len(pairs) >= len(copy_calls),
        "scalar_accesses": len(re.findall(r"\bmemref\.(?:load|store)\b", text)),
        "copies": sorted(set(copy_calls)),
    }


_DEF = re.compile(r"^\s*(%[\w.]+)(?::\d+)? = (.*)$")
_COPY = re.compile(r"func\.call @((load_gm_to_ubuf|store_ubuf_to_gm)\w*)\((%\w+), (%\w+)")
_SUBVIEW = re.compile(r"memref\.subview (%\w+)\[([^\]]*)\] \[([^\]]*)\] \[([^\]]*)\]")


def _function(text, kernel):
    """The lines of func.func @kernel, from its header to its closing brace."""
    start = text.find("func.func @%s(" % kernel)
    if start < 0:
        raise ValueError("no func.func @%s in the HIVM IR" % kernel)
    lines, depth = [], 0
    for line in text[start:].splitlines():
        lines.append(line)
        depth += line.count("{") - line.count("}")
        if depth <= 0 and line.strip().startswith("}"):
            break
    return lines


def gm_copies(text, kernel, arg_names):
    """Every GM<->UB copy of @kernel's final HIVM IR, and whether the tile's valid region
    bounds it (reported to triton-ascend as #2332: a masked-out lane of tl.load can still
    issue its global-memory access; where the compiler turns the mask into the copy's size,
    no address outside the valid region is touched).

    arg_names: the runtime parameters of the compiled signature in order (linalg_of's
    metadata["arg_names"]). Per copy: routine, direction ('load' or 'store'), tensor (the
    pointer parameter behind its GM operand, None if not found), in_loop (inside the tile
    loop), sizes (per dim: the parameters and 'tile' (the loop index) its size is computed
    from, or the literal size) and bounded: the GM operand is a memref.subview at offset 0
    of the tensor's tile whose every size is computed per tile (from the loop index) and,
    for the last two dims, from n_rows and n_cols where those are runtime parameters: a
    partial tile copies only its valid region."""
    lines = _function(text, kernel)
    # the signature's parameters follow the ones triton-ascend adds (hacc.arg_type)
    params = re.findall(r"(%arg\d+): ([^%]*)", lines[0])
    names = dict(zip([a for a, attrs in params if "hacc.arg_type" not in attrs], arg_names))
    defs, loop_var, loop_depth, depth, calls = {}, None, None, 0, []
    for line in lines[1:]:
        m = re.match(r"\s*scf\.for (%\w+) = ", line)
        if m and loop_var is None:
            loop_var, loop_depth = m.group(1), depth + 1
        m = _DEF.match(line)
        if m:
            defs[m.group(1)] = m.group(2)
        m = _COPY.search(line)
        if m:
            calls.append((m, loop_depth is not None and depth >= loop_depth))
        depth += line.count("{") - line.count("}")

    def roots(value, seen=None):
        """The parameters and the loop index a value is computed from."""
        seen = set() if seen is None else seen
        if value in seen:
            return set()
        seen.add(value)
        if value == loop_var:
            return {"tile"}
        if value in names:
            return {names[value]}
        out = set()
        for v in re.findall(r"%[\w.]+", defs.get(value, "")):
            out |= roots(v.split("#")[0], seen)
        return out

    def source(value):
        """(memref.subview match or None, tensor name) behind a copy's GM operand."""
        sub = None
        while value in defs:
            rhs = defs[value]
            m = re.match(r"memref\.(cast|subview|reinterpret_cast) (%\w+)", rhs)
            if not m:
                break
            if m.group(1) == "subview" and sub is None:
                sub = _SUBVIEW.match(rhs)
            value = m.group(2)
        return sub, names.get(value)

    out = []
    for m, in_loop in calls:
        direction = "load" if m.group(2).startswith("load") else "store"
        sub, tensor = source(m.group(3) if direction == "load" else m.group(4))
        sizes, bounded = [], sub is not None and tensor is not None and in_loop
        if sub is not None:
            bounded = bounded and all(o.strip() == "0" for o in sub.group(2).split(","))
            dims = [x.strip() for x in sub.group(3).split(",")]
            for size, extent in zip(dims, ["n_rows", "n_cols"][-len(dims):]):
                if size.startswith("%"):
                    r = sorted(roots(size))
                    sizes.append(r)
                    # per tile, and from the tensor's extent where that is a runtime value
                    bounded = bounded and "tile" in r and (
                        extent in r or extent not in arg_names)
                else:
                    sizes.append(int(size))
                    bounded = False
        out.append({"routine": m.group(1), "direction": direction, "tensor": tensor,
                    "in_loop": in_loop, "sizes": sizes, "bounded": bool(bounded)})
    return out


def ascend_compile_report(target="Ascend910B2", op="bwd", dtypes=("bf16",) * 5,
                          layout="dense", headdim=64, tile_elems=None, keep_dir=None,
                          kernel=None):
    """Compile the kernel (or `kernel`, see linalg_of: gate_kernel's parameters, or those of
    a backward-only kernel without BACKWARD, as the MindSpeed-Ops tree's) for `target`
    through triton-ascend and bishengir-compile: the UB plan of its final HIVM IR
    (parse_hivm) with the tile it used, `hivm_path` (the IR, kept under keep_dir or a fresh
    temporary directory), `gm_copies` (gm_copies: every GM load and store, and whether the
    tile's valid region bounds it), `gm_copies_bounded` (all of them are) and `cost`
    (costmodel.model)."""
    dtypes = tuple(SHORT[d] for d in dtypes)
    if (op, len(dtypes)) not in (("bwd", 5), ("fwd", 3)):
        raise ValueError("op is 'bwd' with 5 dtypes (dout, z, o, dz, dout_scaled) or 'fwd' "
                         "with 3 (o, z, out), not %r with %d" % (op, len(dtypes)))
    backward_only = kernel is not None and "BACKWARD" not in [p.name for p in kernel.params]
    args, consts = kernel_args(op, dtypes, layout, headdim, tile_elems, backward_only)
    linalg, metadata = linalg_of(args, consts, target, kernel)
    name = metadata["kernel_name"]
    workdir = keep_dir or tempfile.mkdtemp(prefix="zgate-hivm-")
    os.makedirs(workdir, exist_ok=True)
    hivm = compile_hivm(linalg, metadata, target, workdir)
    with open(hivm) as f:
        text = f.read()
    rep = parse_hivm(text)
    copies = gm_copies(text, name, metadata["arg_names"])
    rep.update(target=target, op=op, dtypes=list(dtypes), layout=layout, headdim=headdim,
               kernel=name, block_r=consts["BLOCK_R"], block_c=consts["BLOCK_C"],
               out16=consts["OUT16"], hivm_path=hivm, gm_copies=copies,
               gm_copies_bounded=bool(copies) and all(c["bounded"] for c in copies),
               cost=_cost.model(text, target, dtypes, consts["BLOCK_R"] * consts["BLOCK_C"],
                                kernel=name))
    return rep


def _ratio(x):
    return "  ?  " if x is None else "%5.2f" % x


def _print(r, predict):
    """Print a report (with `predict` on the dense layout, a line per request shape as
    --help says); True when the plan holds (UB within capacity, double-buffered, no scalar
    accesses, every GM copy masked to the tile)."""
    c = r["cost"]
    ok = (r["ub_bytes"] <= r["ub_capacity_bytes"] and r["double_buffered"]
          and r["scalar_accesses"] == 0 and r["gm_copies_bounded"])
    # '2d' when every GM<->UB copy is a 2-D copy, else the routine names
    copies = ",".join(sorted({(re.findall(r"_(\dd)_", x) or [x])[0] for x in r["copies"]}))
    bounded = sum(x["bounded"] for x in r["gm_copies"])
    print("%-11s %s %-24s %-5s tile %4dx%-4d UB %6d/%d B  double-buffered %-3s "
          "scalar %d  copies %s, %d/%d masked to the tile%s" % (
              r["target"], r["op"], ",".join(TRITON_DTYPE[d] for d in r["dtypes"]), r["layout"],
              r["block_r"], r["block_c"], r["ub_bytes"], r["ub_capacity_bytes"],
              "yes" if r["double_buffered"] else "NO", r["scalar_accesses"], copies,
              bounded, len(r["gm_copies"]), "" if ok else "  <-- FAIL"))
    kinds = ["%s %d" % (k, v["calls"]) for k, v in c["by_kind"].items()]
    print("    vector %2d calls/tile, %s cycles (%s); HBM %d B/tile: %s" % (
        c["n_calls"], "?" if c["vector_cycles"] is None else "%.0f" % c["vector_cycles"],
        ", ".join(kinds + ["UNKNOWN %s" % u for u in c["unknown"]]), c["tile_bytes"],
        "; ".join("%.1f TB/s %.0f cycles, vector/HBM %s, %s-bound" % (
            h["bytes_per_s"] / 1e12, h["cycles"], _ratio(h["ratio"]), h["bound"])
            for h in c["hbm"])))
    for row in c["predictions"] if predict and r["layout"] == "dense" else []:
        parts = ["%.1f TB/s %s us, x%s / x%s" % (
            h["bytes_per_s"] / 1e12, "?" if p["npu_us"] is None else "%.1f" % p["npu_us"],
            _ratio(p["vs A100 40GB"]).strip(), _ratio(p["vs A100 80GB"]).strip())
            for h, p in zip(c["hbm"], row["at"])]
        print("      %-15s %7.1f MB: %s" % ("x".join(map(str, row["shape"])), row["bytes"] / 1e6,
                                           "; ".join(parts)))
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m zgate.triton.ascend",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--ops", default="bwd,fwd")
    ap.add_argument("--dtypes", default="bf16,f16,f32",
                    help="comma list of one dtype for all tensors, or 'all' for every "
                    "per-tensor combination")
    ap.add_argument("--layouts", default="dense,zview")
    ap.add_argument("--headdim", type=int, default=64)
    ap.add_argument("--predict", action="store_true",
                    help="also print, per request shape (dense layout), the predicted kernel "
                    "time at each bandwidth and the speed against an A100 40 GB / 80 GB, every "
                    "device at the same share of its bandwidth (A100 time / NPU time), and "
                    "what 0.9x each A100 needs")
    a = ap.parse_args(argv)
    try:
        _toolchain()
    except ToolMissing as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    ok = []
    for target, op, ds in itertools.product(*(x.split(",") for x in (a.targets, a.ops, a.dtypes))):
        n = 5 if op == "bwd" else 3
        for dtypes in (itertools.product(_plan.DTYPE_BYTES, repeat=n) if ds == "all"
                       else [(SHORT[ds],) * n]):
            for layout in a.layouts.split(","):
                r = ascend_compile_report(target, op, dtypes, layout, a.headdim)
                ok.append(_print(r, a.predict))
    for target in a.targets.split(",") if a.predict else []:
        print("\n".join(_cost.equal_terms_lines(target)))
    print("%d compiled, %d outside the plan" % (len(ok), ok.count(False)))
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
