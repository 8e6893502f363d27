"""The MindSpeed-Ops tree's kernel (python -m zgate.mindspeed_ops) compiled for Ascend910B2 down
to the final HIVM IR: per dtype mix and Z layout, a UB plan, double buffering, copies and
vector cost per tile equal to zgate.triton's backward, and every GM load and store of both
kernels bounded by the tile's valid region. A kernel with an unmasked load is seen unbounded.
Needs triton-ascend and ascendnpu-ir (the venv of scripts/test.d/70-ascend.sh); the tree's
kernel file imports triton only."""
import importlib.util

import pytest

from zgate import mindspeed_ops
from zgate.triton import ascend

KERNEL = "mindspeed_ops/arch32/triton/mamba3/mamba3_siso_bwd_dzdo_kernel.py"
BACKWARD_TENSORS = {("load", "dout_ptr"), ("load", "z_ptr"), ("load", "o_ptr"),
                    ("store", "dz_ptr"), ("store", "dos_ptr")}


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tree_kernel(tmp_path_factory):
    out = tmp_path_factory.mktemp("msops")
    mindspeed_ops.generate(str(out))
    return _load(out / KERNEL, "msops_dzdo_kernel").mamba3_siso_bwd_dzdo_kernel


def _assert_bounded(r):
    where = "%s %s %s" % (r["kernel"], ",".join(r["dtypes"]), r["layout"])
    copies = r["gm_copies"]
    assert {(c["direction"], c["tensor"]) for c in copies} == BACKWARD_TENSORS, (where, copies)
    assert len(copies) == len(BACKWARD_TENSORS), (where, copies)
    assert all(c["in_loop"] and c["bounded"] for c in copies), (where, copies)
    assert r["gm_copies_bounded"], where


# (do, z, o, dz, do_scaled): one dtype throughout, and each input its own (outputs take do's)
DTYPE_MIXES = [(d,) * 5 for d in ("bfloat16", "float16", "float32")] + [
    ("float32", "bfloat16", "float16", "float32", "float32"),
    ("bfloat16", "float32", "float16", "bfloat16", "bfloat16")]


@pytest.mark.parametrize("layout", ["dense", "zview"])
@pytest.mark.parametrize("dtypes", DTYPE_MIXES, ids=lambda d: "-".join(d))
def test_same_plan_and_cost(tmp_path, tree_kernel, dtypes, layout):
    zg, tree = (ascend.ascend_compile_report("Ascend910B2", "bwd", dtypes, layout, 64,
                                             keep_dir=str(tmp_path / name), kernel=k)
                for name, k in (("zgate", None), ("tree", tree_kernel)))
    assert (zg["kernel"], tree["kernel"]) == ("gate_kernel", "mamba3_siso_bwd_dzdo_kernel")
    for key in ("block_r", "block_c", "copies", "double_buffered", "scalar_accesses",
                "ub_bytes"):
        assert tree[key] == zg[key], key
    assert tree["double_buffered"] and tree["scalar_accesses"] == 0
    a, b = zg["cost"], tree["cost"]
    assert b["n_calls"] == a["n_calls"] and b["n_calls"] > 0
    assert a["vector_cycles"] is not None and b["vector_cycles"] == a["vector_cycles"]
    for r in (zg, tree):
        _assert_bounded(r)
    print("%s %s: tile %dx%d; %d vector calls, %.0f cycles, UB %d B, both kernels" % (
        ",".join(dtypes), layout, tree["block_r"], tree["block_c"], b["n_calls"],
        b["vector_cycles"], tree["ub_bytes"]))


def test_unmasked_load_is_seen(tmp_path, tree_kernel):
    """The tree's kernel with z loaded without its mask: the report marks that copy (and only
    that one) unbounded."""
    src = open(tree_kernel.fn.__code__.co_filename).read()
    masked = "z = tl.load(z_at, mask=mask, other=0.0)"
    assert src.count(masked) == 1
    path = tmp_path / "unmasked_kernel.py"
    path.write_text(src.replace(masked, "z = tl.load(z_at)"))
    kernel = _load(path, "unmasked_kernel").mamba3_siso_bwd_dzdo_kernel
    r = ascend.ascend_compile_report("Ascend910B2", "bwd", ("bfloat16",) * 5, "zview", 64,
                                     keep_dir=str(tmp_path / "hivm"), kernel=kernel)
    assert not r["gm_copies_bounded"]
    unbounded = [(c["direction"], c["tensor"]) for c in r["gm_copies"] if not c["bounded"]]
    assert unbounded == [("load", "z_ptr")], r["gm_copies"]


def test_backward_only_kernel_takes_bwd_only(tree_kernel):
    with pytest.raises(ValueError, match="backward-only"):
        ascend.ascend_compile_report("Ascend910B2", "fwd", ("bfloat16",) * 3, "dense", 64,
                                     kernel=tree_kernel)
