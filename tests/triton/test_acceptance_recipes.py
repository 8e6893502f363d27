"""The documented acceptance recipes, read from the documents and run end to end with CPU
stand-ins, so that a recipe that would fail on a correct kernel fails here.

The form the documents keep: each `python -m zgate.acceptance` command is one line of an
indented code block (a trailing backslash continues it), a recipe's commands in the order they
run; the word appears nowhere else. Each command runs as written, on the CPU: --device cuda
and npu become cpu; on the NPU zgate's kernel is the Triton one, so --impl triton there;
upstream's kernel is STANDIN below (upstream's own needs einops and a checkout; run under the
interpreter it fails the same cases); MODULE:FUNCTION is the generated MindSpeed-Ops tree; all
under the Triton interpreter, --quick --filter FILTER (a headdim-80 case with Z as a view,
where upstream is wrong) and one repeat. Every criterion but speed must hold, and the run
exits 0: speed is reported, not judged, as for any run timed under the interpreter."""
import importlib
import json
import os
import shlex
import sys

import pytest

import fake_mamba
from zgate import acceptance as A
from zgate import mindspeed_ops

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
# the tree's documents hold no recipe: docs/operator.md runs its API (MODULE:FUNCTION)
TREE_DOCS = ["MAMBA3_DZDO_README.md", "docs/triton/mamba3_siso_bwd_kernel_dzdo.md"]
COMMAND = "python -m zgate.acceptance"
FILTER = "2x5x3x80 "
STANDIN = '''"""A stand-in for upstream's mamba3_siso_bwd.py (state-spaces/mamba): its dzdo kernel's
name, arguments, autotuned CHUNK_SIZE and launch, and its defect: the headdim is padded to a
power of two (HEADDIM_V) and the mask is on that padded width, so each row is read and written
past its end."""
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"CHUNK_SIZE": 32})], key=["HEADDIM_V"])
@triton.jit
def mamba3_siso_bwd_kernel_dzdo(DO, Z, O, DZ, DOS, do_b, do_l, do_h, do_d, z_b, z_l, z_h, z_d,
                                o_b, o_l, o_h, o_d, dz_b, dz_l, dz_h, dz_d,
                                ds_b, ds_l, ds_h, ds_d, seqlen, headdim_v,
                                CHUNK_SIZE: tl.constexpr, HEADDIM_V: tl.constexpr):
    row = tl.program_id(0) * CHUNK_SIZE + tl.arange(0, CHUNK_SIZE)[:, None]
    col = tl.arange(0, HEADDIM_V)[None, :]
    h, b = tl.program_id(1), tl.program_id(2)
    mask = (row < seqlen) & (col < HEADDIM_V)       # the defect: not col < headdim_v
    do = tl.load(DO + b * do_b + h * do_h + row * do_l + col * do_d, mask=mask, other=0.0)
    z = tl.load(Z + b * z_b + h * z_h + row * z_l + col * z_d, mask=mask, other=0.0)
    o = tl.load(O + b * o_b + h * o_h + row * o_l + col * o_d, mask=mask, other=0.0)
    zf = z.to(tl.float32)
    s = tl.sigmoid(zf)
    ds = do.to(tl.float32) * s
    tl.store(DZ + b * dz_b + h * dz_h + row * dz_l + col * dz_d,
             ds * o.to(tl.float32) * (1 + zf * (1 - s)), mask=mask)
    tl.store(DOS + b * ds_b + h * ds_h + row * ds_l + col * ds_d, ds * zf, mask=mask)
'''


def recipes(text):
    """The acceptance commands of a document, in order, as argument lists (without the
    command itself); AssertionError where the command appears in another form."""
    lines, out = text.splitlines(), []
    for i, line in enumerate(lines):
        if COMMAND not in line:
            continue
        assert line.startswith("    ") and line.strip().startswith(COMMAND), (
            "line %d: %s outside a code block line of its own: %r" % (i + 1, COMMAND, line))
        cmd = line.strip()
        while cmd.split("#")[0].rstrip().endswith("\\"):
            i += 1
            cmd = cmd.split("#")[0].rstrip()[:-1] + " " + lines[i].strip()
        out.append(shlex.split(cmd.split(" #")[0])[3:])
    return out


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    """({name: text} of the four documents, the tree's as generated; the folder of the tree
    applied to the skeleton of MindSpeed-Ops, whose API the recipes' MODULE:FUNCTION names)."""
    out = tmp_path_factory.mktemp("msops")
    mindspeed_ops.generate(str(out / "tree"), fake_mamba.write(str(out / "mamba")))
    sys.path.insert(0, os.path.join(ROOT, "tests", "mindspeed_ops_skeleton"))
    try:
        importlib.import_module("apply").apply(str(out / "tree"), str(out / "repo"))
    finally:
        sys.path.pop(0)
    docs = {p: open(os.path.join(ROOT, p), encoding="utf-8").read()
            for p in ("docs/operator.md", "docs/operator.zh-CN.md")}
    docs.update((p, open(os.path.join(out, "tree", p), encoding="utf-8").read())
                for p in TREE_DOCS)
    yield docs, str(out / "repo")
    for name in [m for m in sys.modules if m.split(".")[0] in ("mindspeed_ops", "tests")]:
        del sys.modules[name]           # the next test module applies a tree of its own


@pytest.fixture
def cpu(tmp_path, monkeypatch, documents):
    """run(argv) -> (exit status, the run's JSON or None): a documented command on the CPU."""
    up = tmp_path / "upstream" / "mamba3"
    up.mkdir(parents=True)
    (up / "mamba3_siso_bwd.py").write_text(STANDIN)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(documents[1])
    count = [0]

    def run(argv):
        a = A._parser().parse_args(argv)
        args = list(argv)
        dev = args.index("--device") + 1
        if args[dev] == "npu" and a.impl == "zgate":
            args += ["--impl", "triton"]
        args[dev] = "cpu"
        if a.impl == "upstream":
            args += ["--upstream-path", str(up.parent)]
        count[0] += 1
        j = tmp_path / ("run%d.json" % count[0])
        args += ["--quick", "--filter", FILTER, "--warmup", "0", "--repeats", "1",
                 "--json", str(j)]
        rc = A.main(args)
        return rc, json.loads(j.read_text()) if j.exists() else None
    return run


def _ok_but_speed(res):
    return {k: ok for k, ok, _ in res["criteria"] if k != "speed"}


def test_the_tree_documents_hold_no_recipe_and_operator_md_runs_its_api(documents):
    for doc in TREE_DOCS:
        assert COMMAND not in documents[0][doc], doc
    for doc in ("docs/operator.md", "docs/operator.zh-CN.md"):
        assert any(a[a.index("--impl") + 1].startswith("mindspeed_ops.") for a in
                   recipes(documents[0][doc]) if "--golden" in a and "--impl" in a), doc


@pytest.mark.parametrize("doc", ["docs/operator.md", "docs/operator.zh-CN.md"])
def test_documented_recipe_passes_on_correct_kernels(doc, documents, cpu, capsys):
    cmds = recipes(documents[0][doc])
    golden = [c for c in cmds if "--golden" in c]
    assert golden and [c for c in cmds if "--save-golden" in c], doc
    for argv in cmds:
        rc, res = cpu(argv)
        err = capsys.readouterr().err
        assert rc != 2 and res is not None, (doc, argv, err)
        bad = {k: ok for k, ok in _ok_but_speed(res).items() if ok is False}
        assert not bad, (doc, argv, res["criteria"])
        assert rc == 0, (doc, argv, res["criteria"])
        assert all(ok is None for k, ok, _ in res["criteria"] if k == "speed"), argv
        if "--golden" in argv:                  # judged against the golden run, and passed
            assert _ok_but_speed(res)["golden"] is True
            assert [c[0] for c in res["criteria"]].count("speed") == 1
        if argv in golden:
            assert any(" 2x5x3x80 " in r["case"] + " " for r in res["cases"])


def test_a_golden_from_upstream_is_refused_by_name(documents, cpu, capsys):
    """The documented NPU step given upstream's outputs as its golden: upstream's run that saves
    them fails on the cases it got wrong, and the NPU step is refused, naming them."""
    cmds = recipes(documents[0]["docs/operator.md"])
    base = next(c for c in cmds if "--save-baseline" in c)
    npu = next(c for c in cmds if "--golden" in c)
    rc, res = cpu(base + ["--save-golden", "up.npz"])
    out = capsys.readouterr().out
    wrong = [r["case"] for r in res["cases"] if not r["precision_ok"]]
    assert rc == 1 and "bwd 2x5x3x80 bf16 zview" in wrong and ", ".join(wrong) in out
    npu = [x if x != npu[npu.index("--golden") + 1] else "up.npz" for x in npu]
    rc, res = cpu(npu)
    err = capsys.readouterr().err
    assert rc == 2 and res is None
    assert "cannot be the golden run" in err and "bwd 2x5x3x80 bf16 zview" in err


def test_the_form_is_enforced():
    assert recipes("text\n\n    %s --device cpu \\\n        --quick  # a note\n" % COMMAND) == [
        ["--device", "cpu", "--quick"]]
    with pytest.raises(AssertionError, match="outside a code block"):
        recipes("run `%s --device cpu` here" % COMMAND)
