"""The statistics of bench/gpu_bench.py's paired rounds, apart from the timing so that they can
be used (bench/gpu_table.py) and tested (tests/python/test_gpu_bench_stats.py) without a GPU,
PyTorch or Triton.

A row holds, per implementation, row[impl + "_pair_ms"]: the per-call time of each round, the
rounds having timed every implementation in a rotating order (gpu_bench.paired_rounds).
"""
import math
import statistics


def sign_test_p(k, n):
    """One-sided P(X >= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2.0 ** n


def paired_verdict(row, me, other):
    """(median of other/me over the rounds, min, max, rounds me was slower, rounds, verdict):
    'slower' or 'faster' when a one-sided sign test gives p < 0.01, else 'tie'. None when
    either implementation has no rounds in the row."""
    a, b = row.get(me + "_pair_ms"), row.get(other + "_pair_ms")
    if not a or not b:
        return None
    ratios = [y / x for x, y in zip(a, b)]
    n, slow = len(ratios), sum(x > y for x, y in zip(a, b))
    fast = sum(x < y for x, y in zip(a, b))
    verdict = "slower" if sign_test_p(slow, n) < 0.01 else "faster" if sign_test_p(fast, n) < 0.01 else "tie"
    return statistics.median(ratios), min(ratios), max(ratios), slow, n, verdict


def aa_margin(rows, me="zgate", twin="zgate_aa"):
    """The A/A margin of a run: the largest |median - 1| of `me` against its twin (the same
    kernel writing other buffers) over the rows; None without the twin's rounds."""
    v = [paired_verdict(r, me, twin) for r in rows]
    v = [x for x in v if x]
    return max(abs(x[0] - 1) for x in v) if v else None


def beyond_margin(verdict, margin):
    """'faster' / 'slower' only where the sign test says so and the median lies beyond the
    margin; 'tie' otherwise."""
    if verdict is None:
        return None
    med, v = verdict[0], verdict[5]
    if v == "slower" and med < 1 - margin:
        return "slower"
    if v == "faster" and med > 1 + margin:
        return "faster"
    return "tie"
