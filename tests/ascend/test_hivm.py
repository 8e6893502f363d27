"""The kernel compiled for Ascend 910B2/B3/B4 and the A3 targets (ascend.TARGETS) down to the
final HIVM IR (bishengir-compile without CANN's hivmc): each op x dtype x layout keeps its UB
within capacity, double buffering on, no scalar accesses and 2-D GM<->UB copies, each sized
by the tile's valid region (every dtype combination: test_costmodel.py); an oversized tile is
refused, the next tile size loses double buffering; the parser tells single from double
buffering. Needs triton-ascend and ascendnpu-ir (scripts/test.d/70-ascend.sh makes that
environment)."""
import pytest

from zgate.triton import ascend, plan

TYPES = ("float32", "float16", "bfloat16")


def _assert_planned(r):
    where = "%s %s %s %s" % (r["target"], r["op"], ",".join(r["dtypes"]), r["layout"])
    assert 0 < r["ub_bytes"] <= r["ub_capacity_bytes"] == 192 * 1024, where
    assert r["double_buffered"], where
    assert r["scalar_accesses"] == 0, where
    assert r["copies"] and all("_2d_" in c for c in r["copies"]), (where, r["copies"])
    assert r["cost"]["by_kind"]["Exp"]["calls"] == 1, (where, r["cost"]["calls"])
    # every GM copy sized by the tile's valid region (reported to triton-ascend as #2332)
    assert r["gm_copies_bounded"], (where, [c for c in r["gm_copies"] if not c["bounded"]])
    assert len(r["gm_copies"]) == (5 if r["op"] == "bwd" else 3), (where, r["gm_copies"])


@pytest.mark.parametrize("target", ascend.TARGETS)
@pytest.mark.parametrize("layout", ["dense", "zview"])
@pytest.mark.parametrize("op", ["bwd", "fwd"])
@pytest.mark.parametrize("dtype", TYPES)
def test_same_dtype_every_target(tmp_path, target, layout, op, dtype):
    n = 5 if op == "bwd" else 3
    r = ascend.ascend_compile_report(target, op, (dtype,) * n, layout, 64,
                                     keep_dir=str(tmp_path))
    _assert_planned(r)
    assert r["block_r"] * r["block_c"] == plan.npu_tile(op, (dtype,) * n)


@pytest.mark.parametrize("headdim", [1, 3, 80, 96, 128])
def test_odd_headdims(tmp_path, headdim):
    r = ascend.ascend_compile_report("Ascend910B2", "bwd", ("bfloat16",) * 5, "zview",
                                     headdim, keep_dir=str(tmp_path))
    _assert_planned(r)


def test_oversized_tile_is_refused(tmp_path):
    with pytest.raises(ascend.UBOverflow, match="ub overflow"):
        ascend.ascend_compile_report("Ascend910B2", "bwd", ("float32",) * 5, "dense", 64,
                                     tile_elems=2 * plan.NPU_TILE, keep_dir=str(tmp_path))


@pytest.mark.parametrize("op", ["bwd", "fwd"])
def test_next_tile_loses_double_buffering(tmp_path, op):
    """Twice the planned tile either overflows or silently drops to single buffering: the
    plan's tiles are the largest that stay double-buffered."""
    for dtype in ("float32", "bfloat16"):
        dtypes = (dtype,) * (5 if op == "bwd" else 3)
        try:
            r = ascend.ascend_compile_report("Ascend910B2", op, dtypes, "dense", 64,
                                             tile_elems=2 * plan.npu_tile(op, dtypes),
                                             keep_dir=str(tmp_path))
        except ascend.UBOverflow:
            continue
        assert not r["double_buffered"], (op, dtype, r["ub_bytes"])


def test_parser_sees_single_buffering(tmp_path):
    linalg, md = ascend.linalg_of(*ascend.kernel_args("bwd", ("bfloat16",) * 5, "dense", 64))
    with open(ascend.compile_hivm(linalg, md, "Ascend910B2", str(tmp_path),
                                  multibuffer=False)) as f:
        single = ascend.parse_hivm(f.read())
    assert not single["double_buffered"]
    assert single["scalar_accesses"] == 0


def test_command_prints_every_combination(capsys):
    rc = ascend.main(["--targets", "Ascend910B4", "--ops", "fwd", "--dtypes", "bf16",
                      "--layouts", "dense,zview"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("double-buffered yes") == 2 and "2 compiled, 0 outside the plan" in out
