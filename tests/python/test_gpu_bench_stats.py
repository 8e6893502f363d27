"""The statistics behind bench/gpu_bench.py's paired verdicts (the sign test and the A/A
margin), checked on made-up round times: the GPU benchmark itself needs a GPU, its judgement
does not."""
import math
import os
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import gpu_bench  # noqa: E402


def test_sign_test_tail():
    assert gpu_bench.sign_test_p(8, 8) == 1 / 256
    assert gpu_bench.sign_test_p(0, 8) == 1.0
    assert gpu_bench.sign_test_p(7, 8) == 9 / 256  # 8 choose 7 plus 8 choose 8
    assert gpu_bench.sign_test_p(7, 8) > 0.01  # so 7 of 8 rounds is a tie, 8 of 8 is not
    assert math.isclose(sum(math.comb(12, i) for i in range(10, 13)) / 2**12, gpu_bench.sign_test_p(10, 12))


def rounds(mine, other):
    return {"zgate_pair_ms": mine, "compile_pair_ms": other}


def test_verdicts():
    med, lo, hi, slow, n, verdict = gpu_bench.paired_verdict(rounds([1.0] * 8, [1.01] * 8), "zgate", "compile")
    assert (slow, n, verdict) == (0, 8, "faster") and math.isclose(med, 1.01) and lo == hi == med
    assert gpu_bench.paired_verdict(rounds([1.01] * 8, [1.0] * 8), "zgate", "compile")[3:] == (8, 8, "slower")
    # One round the other way is not significant at p < 0.01 with 8 rounds.
    assert gpu_bench.paired_verdict(rounds([1.0] * 7 + [1.02], [1.01] * 8), "zgate", "compile")[5] == "tie"
    # Alternating rounds: a tie whatever the median says.
    med, lo, hi, slow, n, verdict = gpu_bench.paired_verdict(rounds([1.0, 1.02] * 4, [1.01] * 8), "zgate", "compile")
    assert verdict == "tie" and slow == 4 and lo < 1 < hi
    # Equal rounds count for neither side.
    assert gpu_bench.paired_verdict(rounds([1.0] * 8, [1.0] * 8), "zgate", "compile")[5] == "tie"


def test_missing_rounds():
    assert gpu_bench.paired_verdict({}, "zgate", "compile") is None
    assert gpu_bench.paired_verdict({"zgate_pair_ms": [1.0]}, "zgate", "compile") is None
