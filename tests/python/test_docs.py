"""The Python code blocks of docs/api.md's "## Python API" section and of the README run, so
they cannot rot."""
import importlib.util
import os
import re
import sys
import types

import pytest

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "api.md")
README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def _blocks():
    if not os.path.exists(DOC):
        return []
    text = open(DOC).read()
    start = text.find("## Python API")
    if start < 0:
        return []
    section = text[start:]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    if os.path.exists(README):
        blocks += re.findall(r"```python\n(.*?)```", open(README).read(), re.S)
    return blocks


def _missing(code):
    for mod in ("torch", "cupy", "jax", "ml_dtypes", "mamba_ssm"):
        if re.search(r"^\s*import [^\n]*\b%s\b|^\s*from %s\b" % (mod, mod), code, re.M):
            if importlib.util.find_spec(mod) is None:
                return "%s is not installed" % mod
    if "cupy" in code:
        import cupy
        try:
            if cupy.cuda.runtime.getDeviceCount() < 1:
                return "no CUDA device"
        except Exception:
            return "no CUDA device"
        import zgate
        if not zgate.info()["cuda_built"]:
            return "libzgate was built without CUDA"
    return None


BLOCKS = _blocks()


def test_the_section_has_examples():
    if not os.path.exists(DOC):
        pytest.skip("docs/api.md not next to the tests")
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("code", BLOCKS, ids=["block%d" % i for i in range(len(BLOCKS))])
def test_doc_block_runs(code):
    why = _missing(code)
    if why:
        pytest.skip(why)
    # A real module: torch.compile looks functions' modules up in sys.modules.
    mod = types.ModuleType("__doc_example__")
    sys.modules[mod.__name__] = mod
    try:
        exec(compile(code, "docs/api.md (Python API)", "exec"), mod.__dict__)
    finally:
        del sys.modules[mod.__name__]


def test_readme_install_lines_bring_what_its_examples_import():
    """Each module the README's Python examples import comes with a `pip install ".[extra]"`
    line of the README whose extras (pyproject.toml) provide it."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    pyproject = os.path.join(os.path.dirname(README), "pyproject.toml")
    if not os.path.exists(README) or not os.path.exists(pyproject):
        pytest.skip("README.md and pyproject.toml not next to the tests")
    with open(pyproject, "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    readme = open(README).read()
    provided = set()
    for group in re.findall(r'pip install "\.\[([\w,]+)\]"', readme):
        for extra in group.split(","):
            assert extra in extras, "the README names an extra [%s] pyproject.toml lacks" % extra
            provided |= {re.split(r"[<>=!~;\[ ]", req)[0].replace("-", "_").lower()
                         for req in extras[extra]}
    imported = set()
    for code in re.findall(r"```python\n(.*?)```", readme, re.S):
        imported |= set(re.findall(r"^\s*(?:import|from)\s+(\w+)", code, re.M))
    imported -= {"zgate"} | set(sys.stdlib_module_names)
    assert imported, "the README has no Python examples importing anything"
    assert imported <= provided, "no README install line brings %s" % sorted(imported - provided)
