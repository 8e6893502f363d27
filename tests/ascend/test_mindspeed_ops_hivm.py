"""The MindSpeed-Ops tree's kernel (python -m zgate.mindspeed_ops) compiled for Ascend910B2 down
to the final HIVM IR: per dtype and Z layout, the same UB plan, double buffering, copies and
vector cost per tile as zgate.triton's own kernel. Needs triton-ascend and ascendnpu-ir (the
venv of scripts/test.d/70-ascend.sh); the tree's kernel file imports triton only."""
import importlib.util

import pytest

from zgate import mindspeed_ops
from zgate.triton import ascend

KERNEL = "mindspeed_ops/arch32/triton/mamba3/mamba3_siso_bwd_dzdo_kernel.py"


@pytest.fixture(scope="module")
def tree_kernel(tmp_path_factory):
    out = tmp_path_factory.mktemp("msops")
    mindspeed_ops.generate(str(out))
    spec = importlib.util.spec_from_file_location("msops_dzdo_kernel", str(out / KERNEL))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.gate_kernel


@pytest.mark.parametrize("layout", ["dense", "zview"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_same_plan_and_cost(tmp_path, tree_kernel, dtype, layout):
    reps = [ascend.ascend_compile_report("Ascend910B2", "bwd", (dtype,) * 5, layout, 64,
                                         keep_dir=str(tmp_path / name), kernel=k)
            for name, k in (("zgate", None), ("tree", tree_kernel))]
    mine, theirs = ({k: r[k] for k in ("ub_bytes", "double_buffered", "scalar_accesses",
                                       "copies", "block_r", "block_c")} for r in reps)
    assert mine == theirs and mine["double_buffered"] and mine["scalar_accesses"] == 0
    (a, b) = (r["cost"] for r in reps)
    assert a["calls"] == b["calls"] and a["n_calls"] == b["n_calls"] > 0
    assert a["vector_cycles"] == b["vector_cycles"] is not None
    print("%s %s: tile %dx%d, %d vector calls, %.0f cycles per tile, UB %d B" % (
        dtype, layout, mine["block_r"], mine["block_c"], a["n_calls"], a["vector_cycles"],
        mine["ub_bytes"]))
