"""python -m zgate.mindspeed_ops: the generated tree holds zgate.triton's jitted functions and
plan verbatim, imports no zgate, its ATK yaml has its keys, its ATK generator and wrapper
compute what they should (under stand-ins for ATK's base classes), and its unit tests pass
under this Python's Triton interpreter with zgate unimportable (70-ascend runs them under
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
PLAN = "mindspeed_ops/arch32/triton/mamba3/mamba3_siso_bwd_dzdo_plan.py"
ATK = "tests/atk_tests/triton/mamba3_siso_bwd_kernel_dzdo/"
ALLOWED = {"torch", "torch_npu", "triton", "pytest", "numpy", "mindspeed_ops", "atk"} | set(
    sys.stdlib_module_names)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    out = tmp_path_factory.mktemp("msops")
    written = mindspeed_ops.generate(str(out))
    assert KERNEL in written and PLAN in written
    sys.path.insert(0, str(out))
    yield out
    sys.path.remove(str(out))


def _jitted(path):
    """{name: source text} of the @triton.jit functions of a file, decorator included."""
    text = open(path).read()
    lines = text.splitlines(keepends=True)
    return {n.name: "".join(lines[n.decorator_list[0].lineno - 1:n.end_lineno])
            for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)
            and any(ast.unparse(d) == "triton.jit" for d in n.decorator_list)}


def test_jitted_functions_are_kernel_pys(tree):
    ours = _jitted(os.path.join(os.path.dirname(SRC), "triton", "kernel.py"))
    assert set(ours) == {"_tile_base", "gate_kernel"}
    assert _jitted(tree / KERNEL) == ours
    plan = open(os.path.join(os.path.dirname(SRC), "triton", "plan.py")).read()
    assert re.sub(r"\A(#[^\n]*\n)+", "", open(tree / PLAN).read()) == plan   # header aside


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
