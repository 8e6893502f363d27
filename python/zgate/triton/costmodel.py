"""A vector-cost model of the kernel on Ascend 910B, from its final HIVM IR and a published
per-instruction table. No Triton import: it reads IR text and the table (vector_costs.json).

Per tile, the vector unit runs the vector routines called directly in the program's tile loop
(`func.call @v...` inside the `scf.for`, not under an `scf.if` in it: those are the fills of
partial tail tiles). Each costs k * n + b cycles for a tile of n elements, k and b from
Huawei's fit (vector_costs.json names the file and commit). A routine the table does not know
is listed as unknown and leaves the total undefined (None), never free.

Against it, the tile's HBM time: its bytes (every tensor read or written once) over the
vector core's share of HBM bandwidth, bandwidth / cores / clock bytes a cycle. The ratio
vector / HBM says which bound wins if copies and computation overlap perfectly. What the model
cannot know: the overlap itself (double buffering makes it possible, not perfect), the
synchronisation between pipes, the real per-core bandwidth and clock, and whether the fit
holds for this kernel's buffers.
"""
import collections
import functools
import json
import math
import os
import re

from . import plan as _plan

TABLE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vector_costs.json")
_TYPES = {"float": "float32", "half": "float16", "bfloat16_t": "bfloat16"}


@functools.lru_cache(maxsize=1)
def table():
    with open(TABLE_FILE) as f:
        return json.load(f)


def tile_loop_calls(text):
    """(per_tile, conditional, outside) lists of vector routine names (`v...`) called in
    @gate_kernel: directly in its outermost scf.for, nested deeper in that loop (tail-only
    fills), and outside the loop."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if "func.func @gate_kernel(" in l), None)
    if start is None:
        raise ValueError("no func.func @gate_kernel in the HIVM IR")
    per_tile, conditional, outside = [], [], []
    depth, loop_depth = 0, None
    for line in lines[start:]:
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
        raise ValueError("@gate_kernel has no tile loop (scf.for)")
    return per_tile, conditional, outside


def classify(name):
    """(table row name, type key, by_analogy) of a vector routine, or (None, reason, False)."""
    t = table()
    op = name.split("_")[0]
    row = t["hivm_calls"].get(op)
    if row is None:
        return None, "no table row for %s" % op, False
    if row == "Cast":
        m = re.match(r"vcast_(\w+?)_to_(\w+?)_1d", name)
        if not m or m.group(1) not in _TYPES or m.group(2) not in _TYPES:
            return None, "cast of unknown types", False
        key = "%sto%s" % (_TYPES[m.group(1)], _TYPES[m.group(2)])
    else:
        types = [_TYPES[w] for w in name.split("_") if w in _TYPES]
        if not types:
            return None, "no element type in the name", False
        key = "%sto%s" % (types[-1], types[-1])
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


def vector_cost(text, tile_elems):
    """The per-tile vector work of a final HIVM IR text for tiles of `tile_elems`: calls by
    name and by table row (with their cycles), the total (None if any call is unknown)."""
    per_tile, conditional, _ = tile_loop_calls(text)
    by_kind, unknown, analogy = {}, set(), set()
    total = 0.0
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
        total += k * tile_elems + b
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
    """Predicted kernel time on dense tensors of each request shape at one bandwidth (`hbm`,
    an entry of hbm_cost): each core runs its share of the tiles, a tile taking max(vector,
    HBM) cycles (copies and computation overlapping perfectly); and the speed against an
    A100 streaming the same bytes at 90% of its datasheet bandwidth (time_A100 / time_NPU:
    the request asks for 0.9 or more). The request's shapes are the case list's model sizes."""
    from ..cases import real_shapes
    t = table()
    comp = t["competitor"]
    per_elem = sum(_plan.DTYPE_BYTES[d] for d in dtypes)
    rows = []
    for shape in map(tuple, real_shapes()):
        n = math.prod(shape)
        tiles = _plan.choose_tiles(_plan.collapse(shape, [_plan.compact_strides(shape)]),
                                   tile_elems)
        secs = None
        if vector_cycles is not None:
            rounds = -(-tiles.n_tiles // vector_cores)
            secs = rounds * max(vector_cycles, hbm["cycles"]) / t["platform"][target]["clock_hz"]
        row = {"shape": shape, "bytes": n * per_elem,
               "npu_us": None if secs is None else secs * 1e6}
        for name in ("A100 40GB", "A100 80GB"):
            ta = n * per_elem / (comp[name] * comp["efficiency"])
            row[name + " us"] = ta * 1e6
            row["vs " + name] = None if secs is None else ta / secs
        rows.append(row)
    return rows


def model(text, target, dtypes, tile_elems, cores=None):
    """The whole model for one compiled case: vector_cost, the tile's HBM bytes and cycles
    per bandwidth with their ratios, and predictions for the request's shapes at each
    bandwidth. `target` picks the clock and bandwidths; `cores`, the vector cores sharing
    the bandwidth, defaults to the IR's own target spec (VECTOR_CORE_COUNT)."""
    if cores is None:
        m = re.search(r'"VECTOR_CORE_COUNT",\s*(\d+)', text)
        if not m:
            raise ValueError("the HIVM IR has no VECTOR_CORE_COUNT in its target spec")
        cores = int(m.group(1))
    vc = vector_cost(text, tile_elems)
    nbytes, hbm = hbm_cost(target, cores, tile_elems, dtypes, vc["vector_cycles"])
    vc.update(vector_cores=cores, tile_bytes=nbytes, hbm=hbm, predictions=[
        predict(target, cores, dtypes, vc["vector_cycles"], tile_elems, h) for h in hbm])
    return vc
