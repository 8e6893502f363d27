"""A vector-cost model of the kernel on Ascend 910B from its final HIVM IR and Huawei's
per-instruction fit (vector_costs.json names its file and commit). No Triton import.

Per tile, the vector unit runs the routines called directly in the tile loop (`func.call @v...`
in the `scf.for`; those under an `scf.if` in it fill partial tail tiles), each k * n + b
cycles for n elements. A routine the table does not know leaves the total undefined (None),
never free. Against it, the tile's HBM time: its bytes (each tensor once) over the vector
core's share of the bandwidth; vector / HBM says which bound wins if copies and computation
overlap perfectly. The model cannot know the overlap itself (double buffering makes it
possible, not perfect), the synchronisation between pipes, the real per-core bandwidth and
clock, nor whether the fit holds for this kernel's buffers.
"""
import collections
import functools
import json
import math
import os
import re

from . import plan as _plan

# The share of its nominal HBM bandwidth that a memory-bound kernel sustains, the same for
# every device so that a comparison is on equal terms: an H200's device-to-device copy
# measures 4,266 of its datasheet's 4,800 GB/s (89%, docs/performance.md). Between two
# memory-bound kernels it cancels: the speed ratio is the ratio of nominal bandwidths.
EFFICIENCY = 0.9
# The request's bar: the NPU's kernel at this fraction of an A100's speed or more.
GOAL = 0.9
A100S = ("A100 40GB", "A100 80GB")

TABLE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vector_costs.json")
_TYPES = {"float": "float32", "half": "float16", "bfloat16_t": "bfloat16"}


@functools.lru_cache(maxsize=1)
def table():
    with open(TABLE_FILE) as f:
        return json.load(f)


def tile_loop_calls(text, kernel="gate_kernel"):
    """(per_tile, conditional, outside) lists of vector routine names (`v...`) called in
    @kernel: directly in its outermost scf.for, nested deeper in that loop (tail-only
    fills), and outside the loop."""
    start = text.find("func.func @%s(" % kernel)
    if start < 0:
        raise ValueError("no func.func @%s in the HIVM IR" % kernel)
    per_tile, conditional, outside = [], [], []
    depth, loop_depth = 0, None
    for line in text[start:].splitlines():
        m = re.search(r"func\.call @(v[a-z]+\w*)\(", line)
        if m:
            if loop_depth is None or depth < loop_depth:
                outside.append(m.group(1))
            else:
                (per_tile if depth == loop_depth else conditional).append(m.group(1))
        if loop_depth is None and re.match(r"\s*scf\.for\b", line):
            loop_depth = depth + 1
        depth += line.count("{") - line.count("}")
        if depth <= 0 and line.strip().startswith("}"):
            break
    if loop_depth is None:
        raise ValueError("@%s has no tile loop (scf.for)" % kernel)
    return per_tile, conditional, outside


def classify(name):
    """(table row name, type key, by_analogy) of a vector routine, or (None, reason, False)."""
    t = table()
    op = name.split("_")[0]
    row = t["hivm_calls"].get(op)
    if row is None:
        return None, "no table row for %s" % op, False
    # element types in the name: a cast's source and destination, else the operands' type
    types = [_TYPES[w] for w in re.findall(r"_(float|half|bfloat16_t)(?=_|$)", name)]
    if len(types) != (2 if row == "Cast" else 1):
        return None, "element types %s in the name" % types, False
    key = "%sto%s" % (types[0], types[-1])
    if row in ("Compare", "CompareScalar"):
        m = re.match(r"vcmps?_(eq|ne|ge|gt|le|lt)_", name)
        if not m:
            return None, "comparison of unknown kind", False
        scalar = row == "CompareScalar" or "_vs_" in name
        row = ("CompareScalar%s" if scalar else "Compare%sAligned") % m.group(1).upper()
    rows = t["rows"].get(row, {})
    if key in rows:
        return row, key, False
    alias = t["analogies"].get(row, {}).get(key)
    if alias in rows:
        return row, alias, True
    return None, "no %s row for %s" % (row, key), False


def vector_cost(text, tile_elems, kernel="gate_kernel"):
    """The per-tile vector work of a final HIVM IR text for tiles of `tile_elems`: calls by
    name and by table row (with their cycles), the total (None if any call is unknown)."""
    per_tile, conditional, _ = tile_loop_calls(text, kernel)
    by_kind, unknown, analogy = {}, set(), set()
    for name in per_tile:
        row, key, alias = classify(name)
        if row is None:
            unknown.add("%s (%s)" % (name, key))
            continue
        if alias:
            analogy.add(name)
        k, b = table()["rows"][row][key]
        kind = by_kind.setdefault(row, {"calls": 0, "cycles": 0.0})
        kind["calls"] += 1
        kind["cycles"] += k * tile_elems + b
    total = sum(kind["cycles"] for kind in by_kind.values())
    return {"calls": dict(collections.Counter(per_tile)), "n_calls": len(per_tile),
            "by_kind": by_kind,
            "vector_cycles": None if unknown else total, "unknown": sorted(unknown),
            "by_analogy": sorted(analogy), "tail_only": dict(collections.Counter(conditional))}


def hbm_cost(target, vector_cores, tile_elems, dtypes, vector_cycles=None):
    """The tile's HBM bytes (each tensor once) and, per bandwidth of the target, the cycles
    they take at a vector core's share of it, vector / HBM and the bound that wins
    ('vector', 'HBM', or 'unknown' without vector cycles)."""
    plat = table()["platform"][target]
    nbytes = tile_elems * sum(_plan.DTYPE_BYTES[d] for d in dtypes)
    out = []
    for bw in plat["hbm_bytes_per_s"]:
        per_cycle = bw / vector_cores / plat["clock_hz"]
        h = {"bytes_per_s": bw, "bytes_per_cycle": per_cycle, "cycles": nbytes / per_cycle,
             "ratio": None, "bound": "unknown"}
        if vector_cycles is not None:
            h["ratio"] = vector_cycles / h["cycles"]
            h["bound"] = "vector" if h["ratio"] > 1.0 else "HBM"
        out.append(h)
    return nbytes, out


def predict(target, vector_cores, dtypes, vector_cycles, tile_elems, hbm):
    """Per request shape (the case list's model sizes), dense: its bytes, an A100's time
    streaming them at EFFICIENCY of its datasheet bandwidth and, in "at", per bandwidth of
    `hbm` (hbm_cost's): the kernel's time, each core running its share of the tiles at
    max(vector, HBM / EFFICIENCY) cycles a tile (perfect overlap, the same efficiency as the
    A100), and the speed against each A100 (time_A100 / time_NPU: the request asks for GOAL
    or more)."""
    from ..cases import real_shapes
    comp, clock = table()["competitor"], table()["platform"][target]["clock_hz"]
    rows = []
    for shape in map(tuple, real_shapes()):
        nbytes = math.prod(shape) * sum(_plan.DTYPE_BYTES[d] for d in dtypes)
        _, _, tiles = _plan.plan_call(shape, (_plan.compact_strides(shape),), tile_elems, 0)
        ta = {a: nbytes / (comp[a] * EFFICIENCY) for a in A100S}
        row = {"shape": shape, "bytes": nbytes, "at": []}
        row.update((a + " us", ta[a] * 1e6) for a in A100S)
        for h in hbm:
            secs = None if vector_cycles is None else (
                -(-tiles.n_tiles // vector_cores)
                * max(vector_cycles, h["cycles"] / EFFICIENCY) / clock)
            at = {"npu_us": None if secs is None else secs * 1e6}
            at.update(("vs " + a, None if secs is None else ta[a] / secs) for a in A100S)
            row["at"].append(at)
        rows.append(row)
    return rows


def equal_terms(target="Ascend910B2"):
    """A memory-bound kernel on `target` against each A100, both at EFFICIENCY of their
    nominal HBM bandwidth: per A100, its bandwidth, the speed ratio at each bandwidth the
    table gives the target (with where that figure is from: no Huawei datasheet gives one),
    and what the target needs for GOAL x: its nominal bandwidth, and the device-to-device copy
    bandwidth that would measure at EFFICIENCY of it."""
    comp, plat = table()["competitor"], table()["platform"][target]
    return {a: {"bytes_per_s": comp[a],
                "ratios": [(bw, bw / comp[a], src) for bw, src in
                           zip(plat["hbm_bytes_per_s"], plat["hbm_sources"])],
                "needed_bytes_per_s": GOAL * comp[a],
                "needed_copy_bytes_per_s": GOAL * EFFICIENCY * comp[a]} for a in A100S}


def equal_terms_lines(target="Ascend910B2"):
    """equal_terms as the sentences the documents quote."""
    lines = ["%s against an A100, every device at %d%% of its nominal HBM bandwidth "
             "(memory-bound: the ratio is that of the bandwidths):" % (target, EFFICIENCY * 100)]
    for a, e in equal_terms(target).items():
        lines.append("  %s (%.0f GB/s): %s; %.1fx needs %.0f GB/s nominal (a measured copy "
                     "of %.0f GB/s)" % (
                         a, e["bytes_per_s"] / 1e9,
                         ", ".join("x%.2f at %.1f TB/s (%s)" % (r, bw / 1e12, src)
                                   for bw, r, src in e["ratios"]),
                         GOAL, e["needed_bytes_per_s"] / 1e9,
                         e["needed_copy_bytes_per_s"] / 1e9))
    return lines


def model(text, target, dtypes, tile_elems, cores=None, kernel="gate_kernel"):
    """vector_cost, hbm_cost and predict of one compiled case (the function @kernel of the
    IR). `target` picks the clock and bandwidths; `cores`, the vector cores sharing the
    bandwidth, defaults to the IR's own target spec (VECTOR_CORE_COUNT)."""
    if cores is None:
        m = re.search(r'"VECTOR_CORE_COUNT",\s*(\d+)', text)
        if not m:
            raise ValueError("the HIVM IR has no VECTOR_CORE_COUNT in its target spec")
        cores = int(m.group(1))
    vc = vector_cost(text, tile_elems, kernel)
    nbytes, hbm = hbm_cost(target, cores, tile_elems, dtypes, vc["vector_cycles"])
    vc.update(vector_cores=cores, tile_bytes=nbytes, hbm=hbm,
              predictions=predict(target, cores, dtypes, vc["vector_cycles"], tile_elems, hbm))
    return vc


if __name__ == "__main__":
    import sys
    for name in sys.argv[1:] or ["Ascend910B2"]:
        print("\n".join(equal_terms_lines(name)))
