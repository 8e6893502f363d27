"""The figures the documents quote from the compile report and the cost model are theirs.

Compiles the kernel for Ascend910B2 (as `python -m zgate.triton.ascend` does) and checks,
against the report: the cost-model tables of docs/performance.md and of the MindSpeed-Ops
tree's document (its template), every UB byte count quoted in docs/operator.md, its Chinese
translation and plan.py's comment, the 910B3/B4 and tile-size ratios of performance.md, and
the equal-terms sentence (costmodel.equal_terms) in all four documents. A figure that
changes in the compiler's output, or in a document, fails here. Needs triton-ascend and
ascendnpu-ir (scripts/test.d/70-ascend.sh)."""
import itertools
import os
import re

import pytest

from zgate.triton import ascend, costmodel

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PERF = "docs/performance.md"
OPERATOR = "docs/operator.md"
OPERATOR_ZH = "docs/operator.zh-CN.md"
PLAN = "python/zgate/triton/plan.py"
TREE_DOC = "python/zgate/mindspeed_ops/tree/docs/triton/mamba3_siso_bwd_kernel_dzdo.md.in"
CJK = "\u3000-\u9fff\uff00-\uffef"

# the compiled cases the documents quote: (op, dtypes, layout)
CASES = {
    "bwd_bf16": ("bwd", ("bfloat16",) * 5, "dense"),
    "bwd_f16": ("bwd", ("float16",) * 5, "dense"),
    "bwd_f32": ("bwd", ("float32",) * 5, "dense"),
    "fwd_bf16": ("fwd", ("bfloat16",) * 3, "dense"),
    "fwd_f16": ("fwd", ("float16",) * 3, "dense"),
    "fwd_f32": ("fwd", ("float32",) * 3, "dense"),
    # the fullest UB of the backward (every combination: test_costmodel.py)
    "bwd_fullest": ("bwd", ("float32", "float16", "float16", "float16", "float32"), "zview"),
}


def _text(rel):
    """A document with its line breaks (and the indent after them) read as one space, none
    between two Chinese characters, so that a quoted sentence matches wherever it wraps."""
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        t = re.sub(r"[ \t]*\n[ \t#]*", " ", f.read())
    return re.sub(r"(?<=[%s]) (?=[%s])" % (CJK, CJK), "", t)


@pytest.fixture(scope="module")
def rep(tmp_path_factory):
    d = tmp_path_factory.mktemp("hivm")
    out = {k: ascend.ascend_compile_report("Ascend910B2", op, dt, lay, 64,
                                           keep_dir=str(d / k))
           for k, (op, dt, lay) in CASES.items()}
    for k, r in out.items():
        with open(r["hivm_path"]) as f:
            r["text"] = f.read()
    return out


def _rows(rel):
    """{first cell: [the other cells]} of the Markdown tables of a document."""
    rows = {}
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        for line in f:
            if line.startswith("|") and not line.startswith("|---"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                rows[cells[0]] = cells[1:]
    return rows


def _cost_cells(r):
    """A report's figures as the cost tables print them."""
    c = r["cost"]
    return {"tile": str(r["block_r"] * r["block_c"]), "calls": str(c["n_calls"]),
            "cycles": "%.0f" % c["vector_cycles"],
            "hbm": " / ".join("%.0f" % h["cycles"] for h in c["hbm"]),
            "ratios": ["%.2f" % h["ratio"] for h in c["hbm"]], "ub": str(r["ub_bytes"])}


PERF_ROWS = {"backward, bf16 or f16": ("bwd_bf16", "bwd_f16"), "backward, f32": ("bwd_f32",),
             "forward, bf16 or f16": ("fwd_bf16", "fwd_f16"), "forward, f32": ("fwd_f32",)}
TREE_ROWS = {"反向，bf16 或 f16": ("bwd_bf16", "bwd_f16"), "反向，f32": ("bwd_f32",)}


def test_performance_cost_table(rep):
    rows = _rows(PERF)
    for label, keys in PERF_ROWS.items():
        assert label in rows, "%s: no cost-table row %r" % (PERF, label)
        tile, calls, cycles, hbm, r16, r18, ub = rows[label]
        for k in keys:
            want = _cost_cells(rep[k])
            got = {"tile": tile, "calls": calls.split(":")[0], "cycles": cycles, "hbm": hbm,
                   "ratios": [r16, r18], "ub": ub}
            assert got == want, "%s, row %r (%s): the document says %s, the compile %s" % (
                PERF, label, k, got, want)


def test_tree_document_cost_table(rep):
    rows = _rows(TREE_DOC)
    for label, keys in TREE_ROWS.items():
        assert label in rows, "%s: no cost-table row %r" % (TREE_DOC, label)
        tile, calls, cycles, hbm, ratios, ub = rows[label]
        for k in keys:
            want = _cost_cells(rep[k])
            got = {"tile": tile, "calls": calls, "cycles": cycles, "hbm": hbm,
                   "ratios": ratios.split(" / "), "ub": ub}
            assert got == want, "%s, row %r (%s): the document says %s, the compile %s" % (
                TREE_DOC, label, k, got, want)


def _ub_quotes(rep):
    cap = rep["bwd_f32"]["ub_capacity_bytes"]
    f32, full, fwd16 = (rep[k]["ub_bytes"] for k in ("bwd_f32", "bwd_fullest", "fwd_bf16"))
    return {
        OPERATOR: ["the float32 backward uses {:,} of {:,} bytes".format(f32, cap),
                   "Z as a view, all {:,};".format(full),
                   "the forward on 16-bit tensors takes 8192 ({:,} bytes)".format(fwd16)],
        OPERATOR_ZH: ["全 float32 的反向占用 {:,} 字节中的 {:,} 字节".format(cap, f32),
                      "用满 {:,} 字节".format(full),
                      "16 位张量上的前向使用 8192（{:,} 字节）".format(fwd16)],
        PLAN: ["float32 backward: {:,} of {:,} bytes, the fullest mix {:,};".format(
            f32, cap, full), "16-bit tensors ({:,} bytes;".format(fwd16)],
        PERF: ["UB within its {} bytes".format(cap)],
        TREE_DOC: ["UB 不超过 {} 字节".format(cap)],
    }


def test_quoted_ub_bytes(rep):
    """Each UB figure a document quotes is the compile's, and no other figure of that size
    stands beside 'UB' or 'bytes' in those documents."""
    allowed = {r["ub_bytes"] for r in rep.values()} | {rep["bwd_f32"]["ub_capacity_bytes"]}
    for rel, quotes in _ub_quotes(rep).items():
        text = _text(rel)
        for q in quotes:
            assert q in text, "%s does not say %r (the compile report's figure)" % (rel, q)
        for sentence in re.split(r"(?<=[.;。；|])", text):
            if re.search(r"\bUB\b|bytes|字节", sentence):
                for n in re.findall(r"(?<![\d.,])(1\d{2},?\d{3})(?![\d,]*\d)", sentence):
                    assert int(n.replace(",", "")) in allowed, \
                        "%s: %s bytes is no UB figure of the compile report (%s): %r" % (
                            rel, n, sorted(allowed), sentence.strip()[:160])


def test_performance_ratios_beyond_the_table(rep, tmp_path):
    """performance.md's 910B2 bytes a cycle, its 910B3 and 910B4 ratios and the 16-bit
    forward at half its tile."""
    text = _text(PERF)
    b2 = rep["bwd_bf16"]["cost"]["hbm"]
    assert "%.1f bytes a cycle at 1.6 TB/s, %.1f at 1.8 TB/s" % (
        b2[0]["bytes_per_cycle"], b2[1]["bytes_per_cycle"]) in text

    def ratios(key, target, cores):
        r = rep[key]
        cost = costmodel.model(r["text"], target, r["dtypes"], r["block_r"] * r["block_c"], cores)
        return [h["ratio"] for h in cost["hbm"]]
    b3b, b3f = ratios("bwd_bf16", "Ascend910B3", 40), ratios("fwd_bf16", "Ascend910B3", 40)
    want = ("the 16-bit backward is at %.2f (1.6 TB/s) and %.2f (1.8 TB/s), the 16-bit "
            "forward %.2f and %.2f" % (b3b[0], b3b[1], b3f[0], b3f[1]))
    assert want in text, "%s does not say %r" % (PERF, want)
    bound = float(re.search(r"910B4 \(0\.8 TB/s\) every case is under (\d+(?:\.\d+)?)",
                            text).group(1))
    worst = max(ratios(k, "Ascend910B4", 40)[0] for k in CASES)
    assert worst < bound, "910B4: %.2f, not under %s" % (worst, bound)
    r = ascend.ascend_compile_report("Ascend910B2", "fwd", ("bfloat16",) * 3, "dense", 64,
                                     tile_elems=4096, keep_dir=str(tmp_path))
    was, now = r["cost"]["hbm"][1]["ratio"], rep["fwd_bf16"]["cost"]["hbm"][1]["ratio"]
    want = "from %.2f to %.2f of the HBM time at 1.8 TB/s" % (was, now)
    assert want in text, "%s does not say %r" % (PERF, want)


def test_performance_mixes_and_predictions(rep, tmp_path):
    """'up to X at 1.8 TB/s' for the dtype mixes with a float32 output, and --predict's range
    against each A100 over the table's cases and the request shapes."""
    text = _text(PERF)
    worst = 0.0
    for op, n in (("bwd", 5), ("fwd", 3)):
        for combo in itertools.product(("float32", "float16", "bfloat16"), repeat=n):
            outs = combo[3:] if op == "bwd" else combo[2:]
            if len(set(combo)) == 1 or "float32" not in outs or set(combo) == {"float32"}:
                continue
            r = ascend.ascend_compile_report("Ascend910B2", op, combo, "dense", 64,
                                             keep_dir=str(tmp_path))
            worst = max(worst, r["cost"]["hbm"][1]["ratio"])
    want = "add casts on fewer bytes: up to %.2f at 1.8 TB/s" % worst
    assert want in text, "%s does not say %r" % (PERF, want)
    at = {}
    for k in ("bwd_bf16", "bwd_f32", "fwd_bf16", "fwd_f32"):
        for row in rep[k]["cost"]["predictions"]:
            for h, p in zip(rep[k]["cost"]["hbm"], row["at"]):
                for a in costmodel.A100S:
                    at.setdefault((h["bytes_per_s"], a), []).append(p["vs " + a])

    def span(bw, a):
        v = at[(bw, a)]
        return "x%.2f to x%.2f" % (min(v), max(v))
    want = ("%s of an A100 40 GB and %s of an A100 80 GB at 1.6 TB/s (%s and %s at 1.8 TB/s)"
            % (span(1.6e12, "A100 40GB"), span(1.6e12, "A100 80GB"),
               span(1.8e12, "A100 40GB"), span(1.8e12, "A100 80GB")))
    assert want in text, "%s does not say %r" % (PERF, want)


def _equal_terms_quotes():
    e = costmodel.equal_terms("Ascend910B2")
    (bw, r40, _), (_, g40, _) = e["A100 40GB"]["ratios"]
    r80, g80 = (x[1] for x in e["A100 80GB"]["ratios"])
    b40, b80 = e["A100 40GB"]["bytes_per_s"] / 1e9, e["A100 80GB"]["bytes_per_s"] / 1e9
    n40, n80 = (e[a]["needed_bytes_per_s"] / 1e9 for a in costmodel.A100S)
    c40, c80 = (e[a]["needed_copy_bytes_per_s"] / 1e9 for a in costmodel.A100S)
    pct = "%d%%" % round(costmodel.EFFICIENCY * 100)
    en = ["same share of its nominal HBM bandwidth (%s," % pct,
          "documented as %.1f TB/s" % (bw / 1e12),
          "about {:.2f}x an A100 40 GB ({:,.0f} GB/s) and {:.2f}x an A100 80 GB SXM ({:,.0f} "
          "GB/s;".format(r40, b40, r80, b80),
          "0.9x needs {:,.0f} GB/s against the first and {:,.0f} GB/s against the second "
          "(nominal; as a measured device-to-device copy, {:,.0f} and {:,.0f} GB/s)"
          .format(n40, n80, c40, c80),
          "sustains about %.2f TB/s" % (n80 / 1e3), "(at it: %.2fx and %.2fx)" % (g40, g80)]
    zh = ["标称 HBM 带宽的同一比例计算时（%s，" % pct, "为 %.1f TB/s" % (bw / 1e12),
          "A100 40 GB（{:,.0f} GB/s）的 {:.2f} 倍".format(b40, r40),
          "A100 80 GB SXM（{:,.0f} GB/s".format(b80), "的 %.2f 倍" % r80,
          "对 A100 40 GB 需要 {:,.0f} GB/s，对 A100 80 GB 需要 {:,.0f} GB/s（标称值；折合实测的"
          "设备内拷贝带宽为 {:,.0f} 与 {:,.0f} GB/s）".format(n40, n80, c40, c80),
          "约 %.2f TB/s" % (n80 / 1e3), "分别为 %.2f 倍与 %.2f 倍" % (g40, g80)]
    return {OPERATOR: en, PERF: en, OPERATOR_ZH: zh, TREE_DOC: zh}


def test_equal_terms_in_every_document():
    """The same equal-terms figures (costmodel.equal_terms) in the four documents."""
    for rel, quotes in _equal_terms_quotes().items():
        text = _text(rel)
        missing = [q for q in quotes if q not in text]
        assert not missing, "%s does not say %s (costmodel.equal_terms)" % (rel, missing)
