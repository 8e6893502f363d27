"""python -m zgate.mindspeed_ops: the generated tree's arch32 kernel is zgate.triton's gate_kernel
with BACKWARD=True folded in, its plan plan.py's backward pieces verbatim, neither names zgate
nor reads the environment, and the NPU launch forced on CPU runs the tile loop; the tree holds
upstream's kernel as upstream has it (from a stand-in of mamba_ssm, and from a mamba checkout
in third_party_ref/mamba where there is one) under its authors' notice, a license header on
every file and no word of zgate in its code; applied to the skeleton of MindSpeed-Ops as its
README says, the package imports as the repository's tests expect, its ATK files fit ATK's
schema and compute what they should (under stand-ins for ATK's classes), the acceptance run
takes its API, and its unit tests pass under this Python's Triton interpreter with zgate
unimportable (70-ascend runs them under triton-ascend's)."""
import ast
import importlib
import os
import re
import subprocess
import sys
import types

import pytest
import torch
import yaml

import fake_mamba
from zgate import mindspeed_ops

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SKELETON = os.path.join(ROOT, "tests", "mindspeed_ops_skeleton")
REAL_UPSTREAM = os.path.join(ROOT, "third_party_ref", "mamba")     # never committed

SRC = os.path.dirname(os.path.abspath(mindspeed_ops.__file__))
KERNEL = "mindspeed_ops/arch32/triton/mamba3/mamba3_siso_bwd_dzdo_kernel.py"
IMPL = "mindspeed_ops/arch32/triton/mamba3/mamba3_siso_bwd_dzdo_impl.py"
ARCH32 = "mindspeed_ops/arch32/triton/mamba3"
ATK = "tests/atk_tests/triton/mamba3_siso_bwd_kernel_dzdo/"
ORIGINAL = mindspeed_ops.ORIGINAL
ALLOWED = {"torch", "torch_npu", "triton", "pytest", "mindspeed_ops", "tests", "atk"} | set(
    sys.stdlib_module_names)
HUAWEI = "Copyright (c) %d, HUAWEI CORPORATION. All rights reserved." % (
    __import__("time").gmtime().tm_year)


def _apply(tree, repo):
    sys.path.insert(0, SKELETON)
    try:
        return importlib.import_module("apply").apply(str(tree), str(repo))
    finally:
        sys.path.remove(SKELETON)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    return fake_mamba.write(str(tmp_path_factory.mktemp("mamba")))


@pytest.fixture(scope="module")
def tree(tmp_path_factory, upstream):
    """The tree (with the stand-in's kernel), applied to the skeleton: (tree, repo); the
    repo's root is on sys.path."""
    out = tmp_path_factory.mktemp("msops")
    _forget_the_tree()
    written = mindspeed_ops.generate(str(out / "tree"), upstream)
    assert KERNEL in written and ORIGINAL in written
    _apply(out / "tree", out / "repo")
    sys.path.insert(0, str(out / "repo"))
    yield out / "tree", out / "repo"
    sys.path.remove(str(out / "repo"))
    _forget_the_tree()


def _forget_the_tree():
    """Drop the modules of any tree imported before (another test module's)."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("mindspeed_ops", "tests")]:
        del sys.modules[name]


def _defs(path):
    """{name: source text} of the top-level functions and classes of a file."""
    text = open(path).read()
    return {n.name: ast.get_source_segment(text, n) for n in ast.parse(text).body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


class _FoldBackward(ast.NodeTransformer):
    """gate_kernel as a backward-only kernel: `if BACKWARD:` replaced by its body, the
    parameter dropped; the docstring and name left to the caller."""

    def visit_If(self, node):
        self.generic_visit(node)
        if isinstance(node.test, ast.Name) and node.test.id == "BACKWARD":
            return node.body
        return node

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.args.args = [a for a in node.args.args if a.arg != "BACKWARD"]
        node.body = node.body[1:]                       # the docstring
        node.name = "kernel"
        return node


def _kernel_body(text, name):
    fn = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name]
    return ast.dump(_FoldBackward().visit(fn[0]))


def test_kernel_is_gate_kernel_backward(tree):
    zg = open(os.path.join(os.path.dirname(SRC), "triton", "kernel.py")).read()
    mine = open(tree[0] / KERNEL).read()
    assert "BACKWARD" in zg and "BACKWARD" not in mine
    assert _kernel_body(mine, "mamba3_siso_bwd_dzdo_kernel") == _kernel_body(zg, "gate_kernel")
    ours = _defs(os.path.join(os.path.dirname(SRC), "triton", "kernel.py"))
    assert _defs(tree[0] / KERNEL)["_tile_base"] == ours["_tile_base"]
    assert len(mine) < len(zg)                          # the forward's lines are gone


def test_plan_is_plan_pys_backward_pieces(tree):
    plan_py = _defs(os.path.join(os.path.dirname(SRC), "triton", "plan.py"))
    impl = _defs(tree[0] / IMPL)
    taken = set(impl) & set(plan_py)
    assert {"collapse", "choose_tiles", "plan_call", "backward_arguments"} <= taken
    for name in taken:
        assert impl[name] == plan_py[name], name
    text = open(tree[0] / IMPL).read()
    for gone in (r"\bkernel_arguments\b", r"\bnpu_tile\b", r"^SLOTS =", "MAX_NDIM", "N_INPUTS"):
        assert not re.search(gone, text, re.M), gone


def test_arch32_reads_without_zgate(tree):
    """No word of zgate's internals or of the forward path, no interpreter branch (the
    license header aside: the generator's header is checked on its own)."""
    for fn in os.listdir(tree[0] / ARCH32):
        text = re.sub(r"\A(#[^\n]*\n)+", "", open(tree[0] / ARCH32 / fn).read())
        for word in ("zgate", r"validate\.c", "_internal", "ZGATE_", "TRITON_INTERPRET",
                     r"os\.environ", r"\bBACKWARD\b", "forward"):
            assert not re.search(word, text, re.I if word == "zgate" else 0), (fn, word)


def test_specialise_refuses_what_it_cannot_cut():
    from zgate.mindspeed_ops import specialise
    src = open(specialise.KERNEL_FILE).read()
    with pytest.raises(RuntimeError, match="one `if BACKWARD:`"):
        specialise.specialise_kernel(src.replace("        if BACKWARD:\n",
                                                 "        if BACKWARD and OUT16:\n"))
    plan_src = open(specialise.PLAN_FILE).read()
    with pytest.raises(RuntimeError, match="zgate"):
        specialise.plan_pieces(plan_src.replace('"""Element strides', '"""zgate: element strides'))
    with pytest.raises(RuntimeError, match="MAX_NDIM"):
        specialise.plan_pieces(plan_src.replace("n_tiles = n_qa * n_qb",
                                                "n_tiles = MAX_NDIM * n_qb"))
    with pytest.raises(RuntimeError, match="BACKWARD"):
        specialise.backward_kernel(src.replace("tl.store(dos_at, dos",
                                               "tl.store(dos_at if BACKWARD else dz_at, dos"))


def _arch32_impl(tree, monkeypatch, programs):
    """The impl module, forced onto the NPU path: `programs` vector cores and a 256-element
    NPU tile, so that CPU calls of a few thousand elements loop over several tiles each."""
    import importlib
    impl = importlib.import_module(IMPL[:-3].replace("/", "."))
    monkeypatch.setattr(impl, "uses_vector_cores", lambda device: True)
    monkeypatch.setattr(impl, "get_vector_num", lambda: programs)
    monkeypatch.setattr(impl, "NPU_TILE", 256)
    grids = []
    kernel = impl.mamba3_siso_bwd_dzdo_kernel

    class Spy:
        def __getitem__(self, grid):
            def launch(**kw):
                grids.append((grid, kw.get("multibuffer")))
                return kernel[grid](**kw)
            return launch
    monkeypatch.setattr(impl, "mamba3_siso_bwd_dzdo_kernel", Spy())
    return impl, grids


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("zview", [False, True])
def test_npu_path_tile_loop(tree, monkeypatch, dtype, zview):
    impl, grids = _arch32_impl(tree, monkeypatch, programs=3)
    B, L, H, D = 2, 17, 3, 80
    g = torch.Generator().manual_seed(7)
    do, o = (torch.randn(B, L, H, D, generator=g).to(dtype) for _ in range(2))
    proj = torch.randn(B, L, 2 * H * D + 11, generator=g).to(dtype)
    z = (proj[..., 5:5 + H * D].view(B, L, H, D) if zview
         else torch.randn(B, L, H, D, generator=g).to(dtype))
    dz, dos = impl.mamba3_siso_bwd_dzdo_impl(do, z, o)
    (grid, multibuffer), = grids
    assert grid == (3,) and multibuffer is True
    _, _, tiles = impl.plan_call(tuple(do.shape), tuple(t.stride() for t in (do, z, o, dz, dos)),
                                 256, 3)
    assert tiles.n_tiles > 3                            # each program loops
    d, zz, oo = (t.double() for t in (do, z, o))
    s = torch.sigmoid(zz)
    tol = {torch.float32: 1e-6, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}[dtype]
    for got, ref in ((dz, d * oo * s * (1 + zz * (1 - s))), (dos, d * s * zz)):
        assert got.dtype == dtype and got.shape == do.shape
        err = (got.double() - ref).abs() - tol * ref.abs()
        assert float(err.max()) <= tol, float(err.max())


def _launch_spy(seen, name, kernel):
    """A stand-in for a jitted kernel: records a launch's sizes, strides and constexprs under
    `name` (pointers and the BACKWARD switch left out), then launches."""
    class Spy:
        def __getitem__(self, grid):
            def launch(**kw):
                seen[name] = {k: v for k, v in kw.items()
                              if not k.endswith("_ptr") and k != "BACKWARD"}
                return kernel[grid](**kw)
            return launch
    return Spy()


@pytest.mark.parametrize("permuted", ["do", "z", "o", None])
def test_plan_as_zgate_triton(tree, monkeypatch, permuted):
    """On the same five tensors (one input permuted), the tree's launch takes the layout and
    tile that zgate.triton's backward takes (the dims ordered by dz's strides), and the same
    outputs."""
    import zgate.triton
    from zgate.triton import kernel as zgate_kernel
    impl = importlib.import_module(IMPL[:-3].replace("/", "."))
    seen = {}
    monkeypatch.setattr(impl, "mamba3_siso_bwd_dzdo_kernel",
                        _launch_spy(seen, "tree", impl.mamba3_siso_bwd_dzdo_kernel))
    monkeypatch.setattr(zgate_kernel, "gate_kernel",
                        _launch_spy(seen, "zgate", zgate_kernel.gate_kernel))
    B, L, H, D = 2, 5, 3, 80
    g = torch.Generator().manual_seed(5)
    t = {n: torch.randn(B, L, H, D, generator=g) for n in ("do", "z", "o")}
    if permuted:
        t[permuted] = torch.randn(B, H, L, D, generator=g).permute(0, 2, 1, 3)
    dz, dos = impl.mamba3_siso_bwd_dzdo_impl(t["do"], t["z"], t["o"])
    outs = [torch.empty_strided(x.shape, x.stride()) for x in (dz, dos)]
    zgate.triton.bwd(t["do"], t["z"], t["o"], dz=outs[0], dout_scaled=outs[1])
    assert seen["tree"] == seen["zgate"], seen
    torch.testing.assert_close(outs, [dz, dos], rtol=0, atol=0)


def _files(tree):
    for root, _, files in os.walk(tree):
        for fn in sorted(files):
            path = os.path.join(root, fn)
            yield os.path.relpath(path, tree), open(path, encoding="utf-8").read()


def test_no_zgate_in_code_and_a_license_header_everywhere(tree):
    """Every file opens with the Apache-2.0 header (upstream's notice above it in ORIGINAL);
    no .py file names zgate or imports past torch, triton, pytest, ATK and the repository;
    no file points at zgate's internals; only the README says where the tree came from."""
    for rel, text in _files(tree[0]):
        assert "@@" not in text, rel
        lines = [ln.lstrip("#").strip() for ln in text.split("\n")[:20]]
        at = lines.index(HUAWEI)        # ValueError: no header
        assert "Licensed under the Apache License, Version 2.0 (the \"License\");" in lines
        assert text.startswith("<!--\n" if rel.endswith(".md") else "# "), rel
        assert at == (len(fake_mamba.NOTICES) if rel == ORIGINAL else rel.endswith(".md")), rel
        for internal in ("validate.c", "zgate_internal", "ZGATE_MAX_NDIM", "tests/ascend",
                         "zg_collapse", "cases.def"):
            assert internal not in text, (rel, internal)
        assert not re.search(r"\b[0-9a-f]{40}\b", text), rel          # no commit hashes
        if not rel.endswith(".py"):
            continue
        assert "zgate" not in text.lower(), rel
        for node in ast.walk(ast.parse(text)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                     else [])
            for name in names:
                assert name.split(".")[0] in ALLOWED, (rel, name)


def test_holder(tmp_path, upstream):
    mindspeed_ops.generate(str(tmp_path), upstream, holder="Example Org")
    for rel, text in _files(tmp_path):
        assert "Copyright (c) %d, Example Org. All rights reserved." % (
            __import__("time").gmtime().tm_year) in text and "HUAWEI" not in text, rel


def _functions(text):
    return {n.name: n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}


def _check_original(text, upstream_root, copied, notices):
    """ORIGINAL's functions are upstream's (same syntax tree, decorators included), exactly
    those `copied`; upstream's copyright lines open the file, above the holder's header."""
    ups = {}
    for rel in ("mamba_ssm/ops/triton/mamba3/mamba3_siso_bwd.py",
                "mamba_ssm/ops/triton/mamba3/utils.py"):
        ups.update(_functions(open(os.path.join(upstream_root, rel)).read()))
    ours = _functions(text)
    assert set(ours) == copied
    for name, node in ours.items():
        assert ast.dump(node) == ast.dump(ups[name]), name
    head = [ln[2:] for ln in text.split("\n")[:len(notices) + 1]]
    assert head == notices + [HUAWEI]


def test_original_is_upstreams(tree, upstream):
    text = open(tree[0] / ORIGINAL).read()
    _check_original(text, upstream, fake_mamba.COPIED, fake_mamba.NOTICES)
    assert "einops" not in text and "import math" not in text          # imports it does not use
    assert "\nHALF: tl.constexpr = tl.constexpr(0.5)\n" in text and "UNUSED" not in text
    mod = importlib.import_module(ORIGINAL[:-3].replace("/", "."))
    do, z, o = (torch.randn(2, 3, 4, 5) for _ in range(3))
    dz, dos = mod.compute_dzdo(do, z, o)                               # it runs as copied
    s = torch.sigmoid(z)
    torch.testing.assert_close(dos, do * s * z)
    torch.testing.assert_close(dz, do * o * s * (1 + z * (1 - s)))


@pytest.mark.skipif(not os.path.isdir(REAL_UPSTREAM), reason="no mamba checkout in "
                    "third_party_ref/mamba (the stand-in's test above covers the copy)")
def test_original_is_a_real_upstreams(tmp_path):
    """From a state-spaces/mamba checkout and from its mamba_ssm folder alike."""
    for path in (REAL_UPSTREAM, os.path.join(REAL_UPSTREAM, "mamba_ssm")):
        text = mindspeed_ops.original(path)
        notices = [ln[2:] for ln in text.split("\n") if ln.startswith("# Copyright")][:-1]
        assert notices and all("HUAWEI" not in n for n in notices)
        _check_original(text, REAL_UPSTREAM, {"mamba3_siso_bwd_kernel_dzdo", "compute_dzdo"},
                        notices)
        compile(text, ORIGINAL, "exec")


def test_package_imports_as_the_repository_expects(tree):
    """After the README's lines: modules stay modules (import ... as m, and the package's
    attribute of the module's name), compute_dzdo is exported, the arch32 package binds none
    of its modules' names. In a fresh interpreter without zgate."""
    code = """if True:
        import sys, types
        sys.modules["zgate"] = None
        import mindspeed_ops.api.triton.mamba3_siso_bwd_kernel_dzdo as m
        import mindspeed_ops.api.triton as pkg
        from mindspeed_ops.api.triton import mamba3_siso_bwd_kernel_dzdo as m2, compute_dzdo
        import mindspeed_ops.arch32.triton.mamba3 as arch
        import mindspeed_ops.arch32.triton.mamba3.mamba3_siso_bwd_dzdo_impl as impl
        assert isinstance(m, types.ModuleType) and m is m2 is pkg.mamba3_siso_bwd_kernel_dzdo
        assert compute_dzdo is m.compute_dzdo and callable(compute_dzdo)
        assert isinstance(impl, types.ModuleType)
        assert all(isinstance(getattr(arch, n), types.ModuleType)
                   for n in dir(arch) if not n.startswith("__")), dir(arch)
        print("imports as expected")
    """
    r = subprocess.run([sys.executable, "-c", code], cwd=str(tree[1]), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "imports as expected" in r.stdout, r.stderr[-3000:]


def test_readme_appends_and_places(tree, tmp_path):
    """The README's table places every generated file; its lines to append are one block for
    mindspeed_ops/api/triton/__init__.py, a skeleton file; apply.py refuses a tree the README
    does not cover."""
    files, appended = _apply(tree[0], tmp_path / "repo")
    assert appended == ["mindspeed_ops/api/triton/__init__.py"]
    readme = open(tree[0] / "MAMBA3_DZDO_README.md", encoding="utf-8").read()
    assert "| `%s` |" % ORIGINAL in readme and "(missing)" not in readme
    assert {rel for rel, _ in _files(tree[0])} - set(files) == {"MAMBA3_DZDO_README.md"}
    (tree[0] / "stray.py").write_text("x = 1\n")
    try:
        with pytest.raises(SystemExit, match="stray.py"):
            _apply(tree[0], tmp_path / "repo2")
    finally:
        (tree[0] / "stray.py").unlink()


def test_tree_without_upstream_applies(tmp_path):
    """Without --upstream (a fresh clone has no mamba checkout): the README's row names the
    original file as missing and places nothing, and the tree applies to the skeleton."""
    mindspeed_ops.generate(str(tmp_path / "tree"))
    readme = (tmp_path / "tree" / "MAMBA3_DZDO_README.md").read_text(encoding="utf-8")
    assert "`%s`" % ORIGINAL not in readme
    assert re.search(r"^\| %s \(missing\) \|.*--upstream PATH" % re.escape(ORIGINAL), readme, re.M)
    files, _ = _apply(tmp_path / "tree", tmp_path / "repo")
    assert ORIGINAL not in files and KERNEL in files


def test_document_and_readme(tree):
    doc = open(tree[0] / "docs/triton/mamba3_siso_bwd_kernel_dzdo.md", encoding="utf-8").read()
    heads = re.findall(r"^#+ (.+)$", doc, re.M)
    for h in ("概述", "函数签名", "参数说明", "前向输入", "前向输出", "约束", "精度结果", "未验证事项"):
        assert h in heads, h
    assert "| 参数 | 类型 | 形状 | 描述 | 是否必须 |" in doc


def test_document_alias_and_chip_dispatch_match_the_api(tree):
    """The document names no function alias (the upstream name is the module) and says what
    _implementation does: arch35 refused, every other chip on arch32."""
    doc = open(tree[0] / "docs/triton/mamba3_siso_bwd_kernel_dzdo.md", encoding="utf-8").read()
    assert not re.search(r"mamba3_siso_bwd_kernel_dzdo\s*=\s*compute_dzdo", doc)
    assert "是该模块本身，不是函数别名" in doc
    assert "未知芯片" not in doc and "其余芯片均走 arch32 实现" in doc
    api = open(tree[0] / "mindspeed_ops/api/triton/mamba3_siso_bwd_kernel_dzdo.py").read()
    body = api[api.index("def _implementation"):api.index("def compute_dzdo")]
    assert body.count("raise ") == 1 and "is_arch35()" in body
    readme = open(tree[0] / "MAMBA3_DZDO_README.md", encoding="utf-8").read()
    assert readme.lower().count("zgate") <= 2 and "zgate" not in doc.lower()
    for rel, text in _files(tree[0]):   # a MindSpeed-Ops reader knows no "request"
        assert not re.search(r"(?<!pull )\bthe request\b|需求", text, re.I), rel


# ATK's configuration schema (atk_common_utils design_config, public): the keys each level of
# a case-design yaml may hold (pydantic models with extra keys forbidden)
DESIGN_KEYS = {"name", "aclnn_name", "triton_name", "version", "expected_error_msg", "api",
               "api_type", "aclnn_api_type", "triton_api_type", "fusion_api_type",
               "dist_api_type", "generate", "standard", "backward", "outputs", "inputs",
               "tensor_input", "method_inputs", "shape_distributions", "dtype_numbers",
               "extra_numbers"}
INPUT_KEYS = {"name", "aclnn_name", "type", "required", "backward", "align_32B",
              "outlier_values", "dtypes", "ranges", "shapes", "tuple_numbers", "boundary",
              "expected_error_msg"}
RANDOM_KEYS = {"type", "values", "weights", "invalid_values", "random_types"}
NESTED = {"ranges": {"valid", "invalid", "valid_weights"},
          "shapes": {"dim_numbers", "dim_values", "max_length"}}


def test_atk_yaml_fits_the_schema(tree):
    design = yaml.safe_load(open(tree[0] / ATK / "mamba3_siso_bwd_kernel_dzdo.yaml"))
    assert set(design) <= DESIGN_KEYS and set(design["standard"]) <= {"acc", "perf"}
    for inp in design["inputs"]:
        assert set(inp) <= INPUT_KEYS, inp["name"]
        assert inp["type"] in ("tensor", "attr") and set(inp["dtypes"]) <= RANDOM_KEYS
        for key, allowed in NESTED.items():
            assert set(inp.get(key, {})) <= allowed, (inp["name"], key)
            for sub in ("valid", "dim_numbers", "dim_values"):
                assert set(inp.get(key, {}).get(sub, {})) <= RANDOM_KEYS
    assert [i["name"] for i in design["inputs"]] == ["do", "z", "o", "chunk_size", "z_layout"]
    api = open(tree[0] / ATK / "api_mamba3_siso_bwd_kernel_dzdo.py").read()
    gen = open(tree[0] / ATK / "generate_mamba3_siso_bwd_kernel_dzdo.py").read()
    assert 'register("%s")' % design["api_type"] in api
    assert 'register("%s")' % design["triton_api_type"] in api
    assert 'register("%s")' % design["generate"] in gen


def _atk_stand_ins(monkeypatch):
    """Modules named as ATK's, holding what the generator and the wrapper take from them."""
    registry = {}

    def register(name):
        return lambda cls: registry.setdefault(name, cls)

    class Base:
        def __init__(self, config=None):
            self.config = config

    class TritonBase(Base):
        def __init__(self, task_result):
            super().__init__()
            self.task_result = task_result          # what its subclasses must let it do
    mods = {"atk.configs.dataset_config": {"InputDataset": types.SimpleNamespace},
            "atk.configs.case_config": {"CaseConfig": object},
            "atk.tasks.api_execute": {"register": register},
            "atk.tasks.api_execute.base_api": {"BaseApi": Base},
            "atk.tasks.api_execute.triton_base_api": {"TritonBaseApi": TritonBase},
            "atk.case_generator.generator.base_generator": {"CaseGenerator": Base},
            "atk.case_generator.generator.generate_types": {
                "GENERATOR_REGISTRY": types.SimpleNamespace(register=register)}}
    for name in ["atk", "atk.configs", "atk.tasks", "atk.case_generator",
                 "atk.case_generator.generator"] + list(mods):
        m = types.ModuleType(name)
        m.__dict__.update(mods.get(name, {}))
        monkeypatch.setitem(sys.modules, name, m)
    return registry


def _load(path, name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_atk_generator_covers_every_shape_per_dtype(tree, monkeypatch):
    registry = _atk_stand_ins(monkeypatch)
    gen = _load(tree[0] / ATK / "generate_mamba3_siso_bwd_kernel_dzdo.py", "atk_gen")
    design = yaml.safe_load(open(tree[0] / ATK / "mamba3_siso_bwd_kernel_dzdo.yaml"))
    g = registry[design["generate"]](None)
    made = {}
    for k in range(3 * design["dtype_numbers"]):        # ATK's order of dtypes is not assumed
        dtype = ("bf16", "fp32", "fp16")[k % 3]
        ins = [types.SimpleNamespace(shape=[3], dtype=d, range_values=None)
               for d in (dtype, "fp32", "fp16", "int", "string")]
        cfg = g.after_case_config(types.SimpleNamespace(inputs=ins))
        assert [i.dtype for i in cfg.inputs[:3]] == [dtype] * 3
        assert cfg.inputs[0].shape == cfg.inputs[1].shape == cfg.inputs[2].shape
        assert cfg.inputs[3].range_values == 64
        made.setdefault(dtype, []).append((tuple(cfg.inputs[0].shape), cfg.inputs[4].range_values))
    everything = {(s, l) for s in gen.CASE_SHAPES for l in ("dense", "in_proj")}
    model = {tuple(s) for s in __import__("zgate.cases", fromlist=["x"]).real_shapes()}
    assert model <= set(gen.CASE_SHAPES) and {s[-1] for s in gen.CASE_SHAPES} >= {64, 80, 96, 128}
    for dtype, cases in made.items():
        assert sorted(cases) == sorted(everything), dtype          # each once
    dims = {n for s in gen.CASE_SHAPES for n in s}                  # the sizes the cases take
    for inp in design["inputs"][:3]:
        assert set(inp["shapes"]["dim_values"]["values"]) == dims, inp["name"]


def test_atk_wrappers(tree, monkeypatch):
    registry = _atk_stand_ins(monkeypatch)
    wrap = _load(tree[0] / ATK / "api_mamba3_siso_bwd_kernel_dzdo.py", "atk_api")
    design = yaml.safe_load(open(tree[0] / ATK / "mamba3_siso_bwd_kernel_dzdo.yaml"))
    bench = registry[design["api_type"]]()
    bench.device, bench.device_id = "cpu", 0
    kw = {"do": torch.zeros(2, 5, 3, 80, dtype=torch.bfloat16), "z": None, "o": None,
          "chunk_size": 64, "z_layout": "in_proj"}
    data = types.SimpleNamespace(kwargs=kw)
    bench.init_by_input_data(data)
    assert kw["z"].stride() == (5 * 400, 400, 80, 1)                # a view into the projection
    # the unit tests' input maker and float64 reference, imported (not repeated), seeded by the
    # case's shape and dtype: the same again
    unit = importlib.import_module("tests.unit_tests.triton.test_mamba3_siso_bwd_kernel_dzdo")
    assert wrap.make_inputs is unit.make_inputs
    assert wrap.ref_float64_mamba3_siso_bwd_dzdo is unit.ref_float64_mamba3_siso_bwd_dzdo
    again = types.SimpleNamespace(kwargs=dict(kw, z=None, o=None))
    bench.init_by_input_data(again)
    assert all(torch.equal(again.kwargs[k].nan_to_num(), kw[k].nan_to_num()) for k in ("do", "z", "o"))
    expected = bench(data)
    for got, ref in zip(expected, unit.ref_float64_mamba3_siso_bwd_dzdo(kw["do"], kw["z"], kw["o"])):
        assert got.dtype == torch.bfloat16 and torch.equal(got, ref.to(torch.bfloat16))
    triton_api = registry[design["triton_api_type"]]("task result")
    assert triton_api.task_result == "task result"         # TritonBaseApi's constructor ran
    for got, ref in zip(triton_api(data), expected):       # the operator (its package export)
        # the interpreter truncates to bfloat16: within one bfloat16 ulp of the benchmark
        d = (got.float() - ref.float()).abs()
        assert bool((d <= ref.float().abs() * 2.0 ** -7 + 1e-30).all())
    calls = []                                             # the gpu node: upstream's kernel
    original = importlib.import_module(ORIGINAL[:-3].replace("/", "."))
    monkeypatch.setattr(original, "compute_dzdo", lambda *a, **k: calls.append(k) or "orig")
    bench.device = "gpu"
    with pytest.raises(ValueError, match="headdim 80"):    # it would write past each row
        bench(data)
    data64 = types.SimpleNamespace(kwargs=dict(kw, do=torch.zeros(2, 5, 3, 64)))
    assert bench(data64) == "orig" and calls == [{"chunk_size": 64}]
    bench.device = "npu"
    with pytest.raises(ValueError, match="triton_api_type"):
        bench.init_by_input_data(data)


def test_acceptance_takes_the_trees_api(tree, capsys):
    """python -m zgate.acceptance --impl MODULE:FUNCTION on the tree's API (CPU tensors under
    the interpreter), as an NPU run names it."""
    from zgate import acceptance
    assert acceptance.main(["--device", "cpu", "--quick", "--precision-only", "--op", "bwd",
                            "--impl", "mindspeed_ops.api.triton.mamba3_siso_bwd_kernel_dzdo:"
                            "compute_dzdo"]) == 0, capsys.readouterr().out[-2000:]


def test_tree_unit_tests_without_zgate(tree):
    """The tree's own tests in the skeleton, in a child process where `import zgate` fails."""
    code = ("import sys; sys.modules['zgate'] = None; import pytest; "
            "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/unit_tests']))")
    r = subprocess.run([sys.executable, "-c", code], cwd=str(tree[1]), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    m = re.search(r"(\d+) passed", r.stdout)
    assert m and int(m.group(1)) >= 10 and "skipped" not in r.stdout, r.stdout[-500:]


def test_command(tmp_path, capsys, upstream):
    assert mindspeed_ops.main([str(tmp_path / "out"), "--upstream", upstream]) == 0
    assert "files written under" in capsys.readouterr().out
    assert (tmp_path / "out" / ORIGINAL).is_file()
    # without --upstream: the rest written, the missing file and how to add it said, status 3
    assert mindspeed_ops.main([str(tmp_path / "bare")]) == 3
    err = capsys.readouterr().err
    assert ORIGINAL in err and "--upstream PATH" in err and "mamba_ssm" in err
    assert not (tmp_path / "bare" / ORIGINAL).exists()
    assert (tmp_path / "bare" / "MAMBA3_DZDO_README.md").is_file()
    # an upstream without the kernel: refused, nothing written
    assert mindspeed_ops.main([str(tmp_path / "none"), "--upstream", str(tmp_path)]) == 2
    assert "--upstream PATH" in capsys.readouterr().err and not (tmp_path / "none").exists()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert mindspeed_ops.main([str(blocker)]) == 2
    assert blocker.read_text() == "x"
