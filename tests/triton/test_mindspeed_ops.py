"""python -m zgate.mindspeed_ops: the generated tree's arch32 kernel is zgate.triton's
gate_kernel with BACKWARD=True folded in (its forward gone, nothing else changed), its plan
is plan.py's backward pieces verbatim, neither names zgate nor reads the environment, the
launch runs the tile loop on several programs when the NPU path is forced (the module helpers
tests patch); the tree imports no zgate, its ATK yaml has its keys, its ATK generator and
wrapper compute what they should (under stand-ins for ATK's base classes), and its unit tests
pass under this Python's Triton interpreter with zgate unimportable (70-ascend runs them under
triton-ascend's)."""
import ast
import os
import re
import subprocess
import sys
import types

import pytest
import torch

from zgate import mindspeed_ops

SRC = os.path.dirname(os.path.abspath(mindspeed_ops.__file__))
KERNEL = "mindspeed_ops/arch32/triton/mamba3/mamba3_siso_bwd_dzdo_kernel.py"
IMPL = "mindspeed_ops/arch32/triton/mamba3/mamba3_siso_bwd_dzdo_impl.py"
ARCH32 = "mindspeed_ops/arch32/triton/mamba3"
ATK = "tests/atk_tests/triton/mamba3_siso_bwd_kernel_dzdo/"
ALLOWED = {"torch", "torch_npu", "triton", "pytest", "numpy", "mindspeed_ops", "atk"} | set(
    sys.stdlib_module_names)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    out = tmp_path_factory.mktemp("msops")
    written = mindspeed_ops.generate(str(out))
    assert KERNEL in written and IMPL in written
    sys.path.insert(0, str(out))
    yield out
    sys.path.remove(str(out))


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
    mine = open(tree / KERNEL).read()
    assert "BACKWARD" in zg and "BACKWARD" not in mine
    assert _kernel_body(mine, "mamba3_siso_bwd_dzdo_kernel") == _kernel_body(zg, "gate_kernel")
    ours = _defs(os.path.join(os.path.dirname(SRC), "triton", "kernel.py"))
    assert _defs(tree / KERNEL)["_tile_base"] == ours["_tile_base"]
    assert len(mine) < len(zg)                          # the forward's lines are gone


def test_plan_is_plan_pys_backward_pieces(tree):
    plan_py = _defs(os.path.join(os.path.dirname(SRC), "triton", "plan.py"))
    impl = _defs(tree / IMPL)
    taken = set(impl) & set(plan_py)
    assert {"collapse", "choose_tiles", "plan_call", "backward_arguments"} <= taken
    for name in taken:
        assert impl[name] == plan_py[name], name
    text = open(tree / IMPL).read()
    for gone in (r"\bkernel_arguments\b", r"\bnpu_tile\b", r"^SLOTS =", "MAX_NDIM", "N_INPUTS"):
        assert not re.search(gone, text, re.M), gone


def test_arch32_reads_without_zgate(tree):
    """No word of zgate's internals or of the forward path, no interpreter branch (the
    license header aside: the generator's header is checked on its own)."""
    for fn in os.listdir(tree / ARCH32):
        text = re.sub(r"\A(#[^\n]*\n)+", "", open(tree / ARCH32 / fn).read())
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
                                 256)
    assert tiles.n_tiles > 3                            # each program loops
    d, zz, oo = (t.double() for t in (do, z, o))
    s = torch.sigmoid(zz)
    tol = {torch.float32: 1e-6, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}[dtype]
    for got, ref in ((dz, d * oo * s * (1 + zz * (1 - s))), (dos, d * s * zz)):
        assert got.dtype == dtype and got.shape == do.shape
        err = (got.double() - ref).abs() - tol * ref.abs()
        assert float(err.max()) <= tol, float(err.max())


def test_no_file_imports_zgate(tree):
    for root, _, files in os.walk(tree):
        for fn in files:
            path = os.path.join(root, fn)
            text = open(path, encoding="utf-8").read()
            assert "@@" not in text, path
            if not fn.endswith(".py"):
                continue
            for node in ast.walk(ast.parse(text)):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0
                         else [])
                for name in names:
                    assert name.split(".")[0] in ALLOWED, (path, name)


def test_atk_yaml_keys(tree):
    text = open(tree / ATK / "mamba3_siso_bwd_kernel_dzdo.yaml").read()
    top = set(re.findall(r"^(\w+):", text, re.M))
    assert {"api", "api_type", "name", "generate", "dtype_numbers", "standard", "inputs"} <= top
    assert re.findall(r"^  - name: (\w+)", text, re.M) == ["do", "z", "o", "chunk_size",
                                                           "z_layout"]
    assert "generate: generate_mamba3_siso_bwd_kernel_dzdo" in text
    gen = open(tree / ATK / "generate_mamba3_siso_bwd_kernel_dzdo.py").read()
    api = open(tree / ATK / "api_mamba3_siso_bwd_kernel_dzdo.py").read()
    assert 'register("generate_mamba3_siso_bwd_kernel_dzdo")' in gen
    assert 'register("mamba3_siso_bwd_kernel_dzdo")' in api
    assert re.search(r"^api_type: mamba3_siso_bwd_kernel_dzdo$", text, re.M)


def test_document_and_readme(tree):
    doc = open(tree / "docs/triton/mamba3_siso_bwd_kernel_dzdo.md", encoding="utf-8").read()
    heads = re.findall(r"^#+ (.+)$", doc, re.M)
    for h in ("概述", "函数签名", "参数说明", "前向输入", "前向输出", "约束", "精度结果", "未验证事项"):
        assert h in heads, h
    assert "| 参数 | 类型 | 形状 | 描述 | 是否必须 |" in doc
    readme = open(tree / "MAMBA3_DZDO_README.md", encoding="utf-8").read()
    for path in mindspeed_ops.generate(str(tree)):          # every file is placed by the README
        assert path == "MAMBA3_DZDO_README.md" or path.startswith(ATK) or path in readme, path


def _atk_stand_ins(monkeypatch):
    """Modules named as ATK's, holding what the generator and the wrapper take from them."""
    registry = {}

    def register(name):
        return lambda cls: registry.setdefault(name, cls)

    class Base:
        def __init__(self, config=None):
            self.config = config
    mods = {"atk.configs.dataset_config": {"InputDataset": types.SimpleNamespace},
            "atk.configs.case_config": {"CaseConfig": object},
            "atk.tasks.api_execute": {"register": register},
            "atk.tasks.api_execute.base_api": {"BaseApi": Base},
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


def test_atk_generator_and_wrapper(tree, monkeypatch):
    registry = _atk_stand_ins(monkeypatch)
    gen = _load(tree / ATK / "generate_mamba3_siso_bwd_kernel_dzdo.py", "atk_gen")
    g = registry["generate_mamba3_siso_bwd_kernel_dzdo"](None)
    shapes = []
    for _ in range(len(gen.CASE_SHAPES)):
        ins = [types.SimpleNamespace(shape=[3], dtype=d) for d in ("bf16", "fp32", "fp16")]
        cfg = g.after_case_config(types.SimpleNamespace(inputs=ins))
        assert [i.dtype for i in cfg.inputs] == ["bf16"] * 3
        assert cfg.inputs[0].shape == cfg.inputs[1].shape == cfg.inputs[2].shape
        shapes.append(tuple(cfg.inputs[0].shape))
    assert {s[-1] for s in shapes} >= {64, 80, 96, 128} and len(set(shapes)) == len(shapes)

    wrap = _load(tree / ATK / "api_mamba3_siso_bwd_kernel_dzdo.py", "atk_api")
    api = registry["mamba3_siso_bwd_kernel_dzdo"]()
    api.device, api.device_id = "cpu", 0
    kw = {"do": torch.zeros(2, 5, 3, 80, dtype=torch.bfloat16), "z": None, "o": None,
          "chunk_size": 64, "z_layout": "in_proj"}
    data = types.SimpleNamespace(kwargs=kw)
    api.init_by_input_data(data)
    assert kw["z"].stride() == (5 * 400, 400, 80, 1)                # a view into the projection
    again = wrap.make_inputs((2, 5, 3, 80), torch.bfloat16)         # seeded: the same again
    assert all(torch.equal(a, b) for a, b in zip(again, (kw["do"], kw["z"], kw["o"])))
    bench = api(data)
    from mindspeed_ops.api.triton.mamba3_siso_bwd_kernel_dzdo import compute_dzdo
    for got, ref in zip(compute_dzdo(kw["do"], kw["z"], kw["o"]), bench):
        # the interpreter truncates to bfloat16: within one bfloat16 ulp of the benchmark
        d = (got.float() - ref.float()).abs()
        assert bool((d <= ref.float().abs() * 2.0 ** -7 + 1e-30).all())


def test_tree_unit_tests_without_zgate(tree):
    """The tree's own tests, in a child process where `import zgate` fails."""
    code = ("import sys; sys.modules['zgate'] = None; import pytest; "
            "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/unit_tests']))")
    r = subprocess.run([sys.executable, "-c", code], cwd=str(tree), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    m = re.search(r"(\d+) passed", r.stdout)
    assert m and int(m.group(1)) >= 10 and "skipped" not in r.stdout, r.stdout[-500:]


def test_command(tmp_path, capsys):
    assert mindspeed_ops.main([str(tmp_path / "out")]) == 0
    assert "files written under" in capsys.readouterr().out
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert mindspeed_ops.main([str(blocker)]) == 2
    assert blocker.read_text() == "x"
