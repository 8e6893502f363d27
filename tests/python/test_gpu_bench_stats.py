"""The statistics behind bench/gpu_bench.py's paired verdicts (the sign test and the A/A
margin, bench/paired_stats.py) and the table bench/gpu_table.py renders from its JSON, checked
on made-up round times: the GPU benchmark itself needs a GPU, its judgement does not."""
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import gpu_table  # noqa: E402
import paired_stats  # noqa: E402  (the functions gpu_bench.py uses)


def test_sign_test_tail():
    assert paired_stats.sign_test_p(8, 8) == 1 / 256
    assert paired_stats.sign_test_p(0, 8) == 1.0
    assert paired_stats.sign_test_p(7, 8) == 9 / 256  # 8 choose 7 plus 8 choose 8
    assert paired_stats.sign_test_p(7, 8) > 0.01  # so 7 of 8 rounds is a tie, 8 of 8 is not
    assert math.isclose(sum(math.comb(12, i) for i in range(10, 13)) / 2**12, paired_stats.sign_test_p(10, 12))


def test_fewest_rounds_for_a_verdict():
    # gpu_bench.py's --paired help: with 6 rounds even a clean sweep is no verdict, with 7 it is.
    assert paired_stats.sign_test_p(6, 6) > 0.01 and paired_stats.sign_test_p(7, 7) < 0.01


def rounds(mine, other):
    return {"zgate_pair_ms": mine, "compile_pair_ms": other}


def test_verdicts():
    med, lo, hi, slow, n, verdict = paired_stats.paired_verdict(rounds([1.0] * 8, [1.01] * 8), "zgate", "compile")
    assert (slow, n, verdict) == (0, 8, "faster") and math.isclose(med, 1.01) and lo == hi == med
    assert paired_stats.paired_verdict(rounds([1.01] * 8, [1.0] * 8), "zgate", "compile")[3:] == (8, 8, "slower")
    # One round the other way is not significant at p < 0.01 with 8 rounds.
    assert paired_stats.paired_verdict(rounds([1.0] * 7 + [1.02], [1.01] * 8), "zgate", "compile")[5] == "tie"
    # Alternating rounds: a tie whatever the median says.
    med, lo, hi, slow, n, verdict = paired_stats.paired_verdict(rounds([1.0, 1.02] * 4, [1.01] * 8), "zgate", "compile")
    assert verdict == "tie" and slow == 4 and lo < 1 < hi
    # Equal rounds count for neither side.
    assert paired_stats.paired_verdict(rounds([1.0] * 8, [1.0] * 8), "zgate", "compile")[5] == "tie"


def test_missing_rounds():
    assert paired_stats.paired_verdict({}, "zgate", "compile") is None
    assert paired_stats.paired_verdict({"zgate_pair_ms": [1.0]}, "zgate", "compile") is None


def test_aa_margin_and_beyond():
    rows = [{"zgate_pair_ms": [1.0] * 8, "zgate_aa_pair_ms": [1.004] * 8, "compile_pair_ms": [0.99] * 8},
            {"zgate_pair_ms": [1.0] * 8, "zgate_aa_pair_ms": [0.997] * 8, "compile_pair_ms": [0.997] * 8}]
    margin = paired_stats.aa_margin(rows)
    assert math.isclose(margin, 0.004)
    assert paired_stats.aa_margin([{"zgate_pair_ms": [1.0]}]) is None
    # Row 0: zgate 1% slower than compile, beyond the 0.4% margin; row 1: 0.3%, inside it.
    calls = [paired_stats.beyond_margin(paired_stats.paired_verdict(r, "zgate", "compile"), margin) for r in rows]
    assert calls == ["slower", "tie"]
    assert paired_stats.beyond_margin(None, margin) is None
    fast = paired_stats.paired_verdict({"zgate_pair_ms": [1.0] * 8, "compile_pair_ms": [1.01] * 8}, "zgate", "compile")
    assert paired_stats.beyond_margin(fast, margin) == "faster" and paired_stats.beyond_margin(fast, 0.02) == "tie"


def test_table():
    def impl(name, ms, pair, frac):
        return {name + "_b2b_ms": ms, name + "_b2b_frac": frac, name + "_b2b_frac_same": frac * 1.01,
                name + "_ms": ms * 1.1, name + "_pair_ms": pair}
    row = {"dtype": "fp32", "layout": "proj", "shape": [2, 2048, 40, 80], "bytes": 262.1e6,
           "copy_same_b2b_ms": 0.0642, "zgate_err": 7.6e-8}
    row.update(impl("zgate", 0.0648, [0.0648] * 8, 0.949))
    row.update(impl("compile", 0.0643, [0.0643] * 8, 0.956))
    row.update(impl("zgate_aa", 0.0648, [0.0649] * 8, 0.948))
    text = gpu_table.render({"rows": [row]})
    lines = text.splitlines()
    assert lines[0] == ("| dtype | Z | shape | MB | same-size copy us | zgate us (% copy) [% same] | compile us (% copy)"
                        " | paired: zgate vs compile | A/A: zgate vs zgate_aa | flushed: zgate / compile us | zgate err |")
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
    assert "paired: zgate vs compile" in lines[0] and lines[0].index("compile") < lines[0].index("A/A: zgate vs zgate_aa")
    assert "| fp32 | proj | (2, 2048, 40, 80) | 262 | 64.2 | 64.8 (94.9%) [95.8%] | 64.3 (95.6%) |" in lines[2]
    assert "0.992x slower" in lines[2] and "1.002x faster" in lines[2]
    assert "A/A margin (zgate against zgate_aa): 0.15%" in text
    assert "zgate vs compile beyond it: faster on 0, slower on 1 of 1; slower: fp32 proj (2, 2048, 40, 80)" in text
