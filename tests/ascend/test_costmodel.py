"""The vector-cost model (zgate.triton.costmodel) and the budget it holds the kernel to.

The parser on hand-written IR (tile loop, tail-only fills, calls outside the loop, unknown
routines); the table's arithmetic; the per-tile calls of the compiled kernel, per recipe,
against the IR; and for every 910B target, op, dtype combination and layout: double
buffering on, UB within capacity, and the predicted vector time within its budget of the
tile's HBM time. Needs triton-ascend and ascendnpu-ir (scripts/test.d/70-ascend.sh)."""
import itertools
import re

import pytest

from zgate import cases
from zgate.triton import ascend, costmodel, plan

TYPES = ("float32", "float16", "bfloat16")
LAYOUTS = ("dense", "zview")

# Budget: the predicted vector cycles of a tile over its HBM cycles at the target's highest
# listed bandwidth: 0.85 when every tensor is 16-bit (the 16-bit recipe), 0.60 when every
# tensor is float32, 1.00 (HBM-bound) for mixes with a float32 output: they keep the
# accurate recipe and add casts, on fewer bytes than float32 (worst: 16-bit inputs and one
# float32 output, 0.93 on the 910B2 at 1.8 TB/s). Ascend910B3 has 40 vector cores on the
# HBM of the 48-core 910B2, so each core has 20% more bytes a cycle to match: its 16-bit
# backward is at 0.98 of the HBM time at 1.8 TB/s (0.87 at 1.6), and no recipe reachable
# from Triton source gets it under 0.85; it is held to the HBM-bound limit at 1.6 TB/s. The
# A3 dies (Ascend910_93xx, 1.6 TB/s each in the table) are held like the 910B of their
# vector core count.
BUDGET = {  # target: (bandwidth, all 16-bit, a float32 output among 16-bit tensors, all float32)
    "Ascend910B2": (1.8e12, 0.85, 1.00, 0.60),
    "Ascend910B3": (1.6e12, 1.00, 1.00, 0.60),
    "Ascend910B4": (0.8e12, 0.85, 1.00, 0.60),
    "Ascend910_9362": (1.6e12, 1.00, 1.00, 0.60),
    "Ascend910_9372": (1.6e12, 1.00, 1.00, 0.60),
    "Ascend910_9381": (1.6e12, 0.85, 1.00, 0.60),
    "Ascend910_9382": (1.6e12, 0.85, 1.00, 0.60),
    "Ascend910_9391": (1.6e12, 0.85, 1.00, 0.60),
    "Ascend910_9392": (1.6e12, 0.85, 1.00, 0.60),
}
FORTY_CORES = ("Ascend910B3", "Ascend910B4", "Ascend910_9362", "Ascend910_9372")

# The per-tile vector instructions of each recipe, by table row (casts: one per 16-bit
# tensor). Lean (every output 16-bit): one division, no selects or compares.
OUT16_MATH = {"bwd": {"Mins": 1, "Exp": 1, "Adds": 2, "Div": 1, "Mul": 5, "Sub": 1},
             "fwd": {"Mins": 1, "Exp": 1, "Adds": 1, "Div": 1, "Mul": 2}}
ACCURATE_MATH = {"bwd": {"Abs": 1, "Muls": 1, "Exp": 1, "Adds": 1, "Div": 2,
                         "CompareGEAligned": 1, "Select": 2, "Mul": 5, "Add": 1},
                 "fwd": {"Abs": 1, "Muls": 1, "Exp": 1, "Adds": 1, "Div": 1,
                         "CompareGEAligned": 1, "Select": 1, "Mul": 2}}


def _out16(op, dtypes):
    outs = dtypes[3:] if op == "bwd" else dtypes[2:]
    return all(plan.DTYPE_BYTES[d] == 2 for d in outs)


def _expected_kinds(op, dtypes):
    kinds = dict((OUT16_MATH if _out16(op, dtypes) else ACCURATE_MATH)[op])
    casts = sum(plan.DTYPE_BYTES[d] == 2 for d in dtypes)
    if casts:
        kinds["Cast"] = casts
    return kinds


# ---- the parser and the table, on hand-written IR ------------------------------------------

SYNTHETIC = """module {
  func.func private @vmul_1d_float(memref<?xf32>, memref<?xf32>, memref<?xf32>)
  func.func @gate_kernel(%arg0: i32) {
    func.call @vbrc_1d_float(%a) : (memref<?xf32>) -> ()
    scf.for %i = %c0 to %n step %c1 : i32 {
      scf.if %tail {
        func.call @vbrc_1d_bfloat16_t(%b) : (memref<?xbf16>) -> ()
      } {hivm.unlikely_condition}
      func.call @vcast_bfloat16_t_to_float_1d_with_mode(%x, %y, %c0) : () -> ()
      func.call @vmul_1d_float(%y, %y, %y) : () -> ()
      func.call @vcmp_ge_1d_float(%y, %y, %m) : () -> ()
      func.call @vcmp_lt_vs_1d_float(%y, %s, %m) : () -> ()
      %u = arith.select %c, %p, %q : memref<8xf32>
      func.call @vfrob_1d_float(%y, %y) : () -> ()
    }
    func.call @vexp_1d_float(%z, %z) : () -> ()
    return
  }
}
"""


def test_parser_sorts_calls_by_where_they_run():
    per_tile, tail, outside = costmodel.tile_loop_calls(SYNTHETIC)
    assert [c.split("_")[0] for c in per_tile] == ["vcast", "vmul", "vcmp", "vcmp", "vfrob"]
    assert tail == ["vbrc_1d_bfloat16_t"]
    assert outside == ["vbrc_1d_float", "vexp_1d_float"]


def test_unknown_calls_are_never_free():
    c = costmodel.vector_cost(SYNTHETIC, 4096)
    assert c["vector_cycles"] is None
    assert c["unknown"] == ["vfrob_1d_float (no table row for vfrob)"]
    assert c["by_analogy"] == ["vcast_bfloat16_t_to_float_1d_with_mode"]
    assert c["n_calls"] == 5 and c["tail_only"] == {"vbrc_1d_bfloat16_t": 1}
    assert set(c["by_kind"]) == {"Cast", "Mul", "CompareGEAligned", "CompareScalarLT"}
    assert all(h["ratio"] is None and h["bound"] == "unknown"
               for h in costmodel.hbm_cost("Ascend910B2", 48, 4096, ("bfloat16",) * 5)[1])


def test_costs_are_the_tables_lines():
    rows = costmodel.table()["rows"]
    k, b = rows["Mul"]["float32tofloat32"]
    assert (k, b) == (0.0206, 23.2291)
    assert costmodel.vector_cost(SYNTHETIC, 4096)["by_kind"]["Mul"]["cycles"] == \
        pytest.approx(k * 4096 + b)
    k, b = rows["Cast"]["float16tofloat32"]   # the bfloat16 cast of SYNTHETIC, by analogy
    assert costmodel.vector_cost(SYNTHETIC, 100)["by_kind"]["Cast"]["cycles"] == \
        pytest.approx(k * 100 + b)
    # bfloat16 has no rows: costed by analogy with float16, and said so
    assert costmodel.classify("vcast_float_to_bfloat16_t_1d_with_mode") == (
        "Cast", "float32tofloat16", True)
    assert costmodel.classify("vmul_1d_bfloat16_t")[0] is None
    t = costmodel.table()
    assert "hicann/ge" in t["source"] and "perf_param_v1.cpp" in t["source"] and t["retrieved"]


def test_hbm_share_of_a_vector_core():
    nbytes, hbm = costmodel.hbm_cost("Ascend910B2", 48, 4096, ("bfloat16",) * 5)
    assert nbytes == 40960
    assert [round(h["bytes_per_cycle"], 1) for h in hbm] == [18.5, 20.8]
    assert hbm[0]["cycles"] == pytest.approx(40960 / (1.6e12 / 48 / 1.8e9))


# ---- the compiled kernel ------------------------------------------------------------------

def _case(r):
    return "%s %s %s %s" % (r["target"], r["op"], ",".join(r["dtypes"]), r["layout"])


def _check_budget(r, target, cost):
    bw, lim16, lim_mixed, lim32 = BUDGET[target]
    n32 = sum(d == "float32" for d in r["dtypes"])
    lim = lim16 if n32 == 0 else lim32 if n32 == len(r["dtypes"]) else lim_mixed
    if n32 and _out16(r["op"], r["dtypes"]):
        lim = lim16                       # float32 inputs only: the 16-bit recipe, more bytes
    (h,) = [h for h in cost["hbm"] if h["bytes_per_s"] == bw]
    assert cost["vector_cycles"] is not None, (_case(r), cost["unknown"])
    assert h["ratio"] <= lim, "%s on %s: vector/HBM %.3f > %.2f at %.1f TB/s" % (
        _case(r), target, h["ratio"], lim, bw / 1e12)


@pytest.mark.parametrize("target", ascend.TARGETS)
@pytest.mark.parametrize("op", ["bwd", "fwd"])
@pytest.mark.parametrize("dtype", TYPES)
def test_counts_match_the_ir(tmp_path, target, op, dtype):
    """The model's per-tile calls are the vector calls of the tile loop: every call in the
    kernel is counted once, the ones left out sit under the tail's scf.if, and the kinds
    are the recipe's."""
    dtypes = (dtype,) * (5 if op == "bwd" else 3)
    r = ascend.ascend_compile_report(target, op, dtypes, "dense", 64, keep_dir=str(tmp_path))
    with open(r["hivm_path"]) as f:
        text = f.read()
    body = text[text.index("func.func @gate_kernel("):]
    all_calls = re.findall(r"func\.call @(v[a-z]+\w*)\(", body)
    c = r["cost"]
    assert c["n_calls"] + sum(c["tail_only"].values()) == len(all_calls), _case(r)
    ifs = re.findall(r"scf\.if [^{]*\{(.*?)\} \{hivm\.unlikely_condition\}", body, re.S)
    in_ifs = [n for region in ifs for n in re.findall(r"func\.call @(v[a-z]+\w*)\(", region)]
    assert sorted(in_ifs) == sorted(n for n, k in c["tail_only"].items() for _ in range(k))
    assert {k: v["calls"] for k, v in c["by_kind"].items()} == _expected_kinds(op, dtypes), \
        (_case(r), c["calls"])
    assert c["unknown"] == [] and r["out16"] == _out16(op, dtypes)
    assert c["vector_cores"] == (40 if target in FORTY_CORES else 48)
    assert r["block_r"] * r["block_c"] == plan.npu_tile(op, dtypes)
    _check_budget(r, target, c)


@pytest.mark.parametrize("op", ["bwd", "fwd"])
def test_every_combination_within_budget(tmp_path, op):
    """Every dtype combination and layout, compiled for Ascend910B2: double-buffered, UB
    within capacity, the recipe its outputs call for, and the budget on every target (the
    IR differs between targets only in the target spec: test_target_changes_only_the_spec)."""
    n = 5 if op == "bwd" else 3
    for combo in itertools.product(TYPES, repeat=n):
        for layout in LAYOUTS:
            r = ascend.ascend_compile_report("Ascend910B2", op, combo, layout, 64,
                                             keep_dir=str(tmp_path))
            assert r["double_buffered"] and r["ub_bytes"] <= r["ub_capacity_bytes"], _case(r)
            assert r["scalar_accesses"] == 0 and all("_2d_" in c for c in r["copies"]), \
                (_case(r), r["copies"])
            assert {k: v["calls"] for k, v in r["cost"]["by_kind"].items()} == \
                _expected_kinds(op, combo), _case(r)
            with open(r["hivm_path"]) as f:
                text = f.read()
            for target, cores in (("Ascend910B2", 48), ("Ascend910B3", 40),
                                  ("Ascend910B4", 40)):
                cost = costmodel.model(text, target, combo,
                                       r["block_r"] * r["block_c"], cores)
                _check_budget(r, target, cost)


@pytest.mark.parametrize("headdim", [64, 80, 96, 128])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_request_headdims_within_budget(tmp_path, headdim, layout):
    for op, dtype in itertools.product(("bwd", "fwd"), TYPES):
        dtypes = (dtype,) * (5 if op == "bwd" else 3)
        r = ascend.ascend_compile_report("Ascend910B2", op, dtypes, layout, headdim,
                                         keep_dir=str(tmp_path))
        assert r["double_buffered"] and r["ub_bytes"] <= r["ub_capacity_bytes"], _case(r)
        _check_budget(r, "Ascend910B2", r["cost"])


def test_target_changes_only_the_spec(tmp_path):
    texts = {}
    for target in ascend.TARGETS:
        r = ascend.ascend_compile_report(target, "bwd", ("bfloat16", "float32", "float16",
                                                         "bfloat16", "float32"), "zview", 64,
                                         keep_dir=str(tmp_path / target))
        with open(r["hivm_path"]) as f:
            texts[target] = f.read()
    strip = [re.sub(r"#hacc\.target_device_spec<.*?>>>", "SPEC", t, count=1, flags=re.S)
             for t in texts.values()]
    assert all(s == strip[0] for s in strip[1:])


def test_predictions_against_an_a100(tmp_path):
    r = ascend.ascend_compile_report("Ascend910B2", "bwd", ("bfloat16",) * 5, "dense", 64,
                                     keep_dir=str(tmp_path))
    c = r["cost"]
    rows = c["predictions"]
    shapes = [tuple(s) for s in cases.real_shapes()]
    assert [p["shape"] for p in rows] == shapes and len(shapes) == 8
    p = rows[shapes.index((4, 4096, 64, 64))]
    assert p["bytes"] == 4 * 4096 * 64 * 64 * 10
    assert [h["bytes_per_s"] for h in c["hbm"]] == [1.6e12, 1.8e12] and len(p["at"]) == 2
    eff = costmodel.EFFICIENCY
    # HBM-bound: no faster than the bytes at the NPU's share of its bandwidth, the A100's share
    for h, at in zip(c["hbm"], p["at"]):
        assert at["npu_us"] >= p["bytes"] / (h["bytes_per_s"] * eff) * 1e6
        assert at["vs A100 40GB"] == pytest.approx(p["A100 40GB us"] / at["npu_us"])
        assert at["vs A100 80GB"] == pytest.approx(p["A100 80GB us"] / at["npu_us"])
        # equal terms: the ratio is the bandwidths' (within the last round of tiles)
        assert at["vs A100 40GB"] == pytest.approx(h["bytes_per_s"] / 1.555e12, rel=0.01)
        assert at["vs A100 80GB"] == pytest.approx(h["bytes_per_s"] / 2.039e12, rel=0.01)
    assert p["A100 40GB us"] == pytest.approx(p["bytes"] / (1.555e12 * eff) * 1e6)


def test_equal_terms():
    """One efficiency for both devices: the 910B2 at its documented 1.6 TB/s is 1.03x an
    A100 40 GB and 0.78x an A100 80 GB; 0.9x needs 1,400 and 1,835 GB/s."""
    e = costmodel.equal_terms("Ascend910B2")
    assert e["A100 40GB"]["bytes_per_s"] == 1.555e12 and e["A100 80GB"]["bytes_per_s"] == 2.039e12
    (bw, r40, src), _ = e["A100 40GB"]["ratios"]
    assert bw == 1.6e12 and "performance model" in src and round(r40, 2) == 1.03
    assert round(e["A100 80GB"]["ratios"][0][1], 2) == 0.78
    assert "profiling guide" in e["A100 80GB"]["ratios"][1][2]
    assert e["A100 40GB"]["needed_bytes_per_s"] == pytest.approx(1.3995e12)
    assert e["A100 80GB"]["needed_bytes_per_s"] == pytest.approx(1.8351e12)
    assert e["A100 80GB"]["needed_copy_bytes_per_s"] == pytest.approx(1.8351e12 * 0.9)
    lines = costmodel.equal_terms_lines("Ascend910B2")
    assert "x1.03 at 1.6 TB/s" in lines[1] and "needs 1400 GB/s" in lines[1]
    assert "x0.78 at 1.6 TB/s" in lines[2] and "needs 1835 GB/s" in lines[2]
    for target in ascend.TARGETS:
        assert costmodel.equal_terms(target)
