"""The documentation holds: the Python blocks of the README and of docs/api.md's Python section
run, every relative link and #anchor resolves, every repository path named exists, the README
and the docs stay within their line budgets, and the Chinese operator introduction names, in
Chinese, the commit of the English text it translates (docs/operator.md unchanged since) and
follows its structure."""
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import types

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DOC = os.path.join(ROOT, "docs", "api.md")
README = os.path.join(ROOT, "README.md")
OPERATOR = os.path.join(ROOT, "docs", "operator.md")
OPERATOR_ZH = os.path.join(ROOT, "docs", "operator.zh-CN.md")
README_MAX_LINES = 150
DOCS_MAX_LINES = 1800        # README.md and docs/*.md, translations aside
# Top-level folders of the repository: a word starting with one of these and a slash is a path.
REPO_DIRS = ("src", "docs", "bench", "scripts", "tests", "python", "include", "check", "tools",
             "fuzz")

needs_tree = pytest.mark.skipif(not os.path.exists(DOC) or not os.path.exists(README),
                                reason="README.md and docs/ not next to the tests")


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _documents():
    """Every Markdown file a user reads: the README, the changelog and docs/."""
    paths = [os.path.join(ROOT, n) for n in ("README.md", "CHANGELOG.md")]
    paths += sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return [p for p in paths if os.path.exists(p)]


def _blocks():
    if not os.path.exists(DOC):
        return []
    text = _read(DOC)
    start = text.find("## Python API")
    if start < 0:
        return []
    blocks = re.findall(r"```python\n(.*?)```", text[start:], re.S)
    if os.path.exists(README):
        blocks += re.findall(r"```python\n(.*?)```", _read(README), re.S)
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


@needs_tree
def test_the_python_section_has_examples():
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
        exec(compile(code, "docs (Python example)", "exec"), mod.__dict__)
    finally:
        del sys.modules[mod.__name__]


@needs_tree
def test_readme_install_lines_bring_what_its_examples_import():
    """Each module the README's Python examples import comes with a `pip install ".[extra]"`
    line of the README whose extras (pyproject.toml) provide it."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    pyproject = os.path.join(ROOT, "pyproject.toml")
    if not os.path.exists(pyproject):
        pytest.skip("pyproject.toml not next to the tests")
    with open(pyproject, "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    readme = _read(README)
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


def _slug(heading):
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path):
    seen, anchors = {}, set()
    in_code = False
    for line in _read(path).splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#{1,6} (.*)", line)
        if m:
            base = _slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            anchors.add(base if n == 0 else "%s-%d" % (base, n))
    return anchors


def _prose(path):
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", _read(path), flags=re.S | re.M)


@needs_tree
def test_links_resolve():
    broken = []
    for doc in _documents():
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(doc)):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            name = os.path.relpath(doc, ROOT)
            if not os.path.exists(full):
                broken.append("%s: %s (no such file)" % (name, target))
            elif anchor and full.endswith(".md") and anchor not in _anchors(full):
                broken.append("%s: %s (no such heading)" % (name, target))
    assert not broken, "broken links:\n" + "\n".join(broken)


@needs_tree
def test_named_paths_exist():
    """A path into the repository named anywhere in the docs (prose or commands) exists."""
    pattern = re.compile(r"(?<![\w./$-])((?:%s)/[\w./*-]*)" % "|".join(REPO_DIRS))
    missing = []
    for doc in _documents():
        for path in set(pattern.findall(_read(doc))):
            path = path.rstrip(".")
            if not glob.glob(os.path.join(ROOT, path)):
                missing.append("%s: %s" % (os.path.relpath(doc, ROOT), path))
    assert not missing, "named paths that do not exist:\n" + "\n".join(sorted(missing))


@needs_tree
def test_line_budgets():
    readme = len(_read(README).splitlines())
    assert readme <= README_MAX_LINES, "README.md has %d lines, at most %d" % (
        readme, README_MAX_LINES)
    docs = [README] + [p for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
                       if not re.search(r"\.[a-z]{2}-[A-Z]{2}\.md$", p)]
    total = sum(len(_read(p).splitlines()) for p in docs)
    assert total <= DOCS_MAX_LINES, "README.md and docs/*.md have %d lines, at most %d" % (
        total, DOCS_MAX_LINES)


@needs_tree
def test_translation_names_its_source_and_follows_it():
    if not os.path.exists(OPERATOR_ZH):
        pytest.skip("no translation")
    zh = _read(OPERATOR_ZH)
    m = re.search(r"对应英文版 docs/operator\.md 的提交 ([0-9a-f]{7,40})", zh)
    assert m, ("operator.zh-CN.md must say, in Chinese (对应英文版 docs/operator.md 的提交 "
               "<commit>), which commit of docs/operator.md it translates")
    assert "translates" not in zh, "operator.zh-CN.md's translation note must be in Chinese"

    def levels(text):
        return [len(h) for h in re.findall(r"^(#{1,6}) ", re.sub(r"^```.*?^```", "", text,
                                                                   flags=re.S | re.M), re.M)]
    assert levels(zh) == levels(_read(OPERATOR)), \
        "operator.zh-CN.md's headings do not follow docs/operator.md's"
    git = shutil.which("git")
    if git is None or not os.path.isdir(os.path.join(ROOT, ".git")) and not os.path.isfile(
            os.path.join(ROOT, ".git")):
        return
    shallow = subprocess.run([git, "-C", ROOT, "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True)
    if shallow.returncode != 0 or shallow.stdout.strip() != "false":
        return
    known = subprocess.run([git, "-C", ROOT, "cat-file", "-e", m.group(1) + "^{commit}"],
                           capture_output=True)
    assert known.returncode == 0, "commit %s is not in this repository" % m.group(1)
    # the translation names the English text it follows: docs/operator.md unchanged since
    changed = subprocess.run([git, "-C", ROOT, "diff", "--quiet", m.group(1), "--",
                              "docs/operator.md"], capture_output=True)
    assert changed.returncode == 0, (
        "docs/operator.md changed since %s, the commit operator.zh-CN.md translates: update "
        "the translation and its note" % m.group(1))
