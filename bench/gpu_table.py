#!/usr/bin/env python3
"""docs/performance.md's CUDA results table from the JSON that bench/gpu_bench.py writes
(--json), with the paired verdicts and the A/A margin of the same run. Needs no GPU.

    python3 bench/gpu_table.py build/gpu-out/bench.json > table.md

Columns: back-to-back medians (kernel time as the CUDA targets define it) as us and % of the
1 GiB copy, zgate's % of a same-size copy in brackets; per other implementation the paired
median of its time over zgate's (above 1: zgate faster) with the sign test's verdict;
do_bench's L2-flushed medians; zgate's max |error| / max |reference| against float64. A
summary of the verdicts beyond the run's A/A margin follows when zgate_aa was timed.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from paired_stats import aa_margin, beyond_margin, paired_verdict  # noqa: E402


def render(data, me="zgate"):
    rows = data["rows"]
    impls = [k[:-len("_b2b_ms")] for k in rows[0] if k.endswith("_b2b_ms") and not k.startswith("copy")]
    timed = [i for i in impls if i != me and not i.endswith("_aa")]  # the A/A twin is not a competitor
    others = timed + [i for i in impls if i.endswith("_aa")]
    flushed = [me] + timed
    head = (["dtype", "Z", "shape", "MB", "same-size copy us", "%s us (%% copy) [%% same]" % me]
            + ["%s us (%% copy)" % i for i in timed]
            + ["%s: %s vs %s" % ("A/A" if i.endswith("_aa") else "paired", me, i) for i in others]
            + ["flushed: %s us" % " / ".join(flushed), "%s err" % me])
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["dtype"], r["layout"], str(tuple(r["shape"])), "%.0f" % (r["bytes"] / 1e6),
                 "%.1f" % (r["copy_same_b2b_ms"] * 1e3),
                 "%.1f (%.1f%%) [%.1f%%]" % (r[me + "_b2b_ms"] * 1e3, 100 * r[me + "_b2b_frac"],
                                            100 * r[me + "_b2b_frac_same"])]
        cells += ["%.1f (%.1f%%)" % (r[i + "_b2b_ms"] * 1e3, 100 * r[i + "_b2b_frac"]) for i in timed]
        for i in others:
            v = paired_verdict(r, me, i)
            cells.append("%.3fx %s" % (v[0], v[5]) if v else "-")
        cells += [" / ".join("%.1f" % (r[i + "_ms"] * 1e3) for i in flushed), "%.1e" % r.get(me + "_err", 0.0)]
        out.append("| " + " | ".join(cells) + " |")
    margin = aa_margin(rows, me, me + "_aa")
    if margin is not None:
        out.append("")
        out.append("A/A margin (%s against %s_aa): %.2f%%" % (me, me, 100 * margin))
        for i in timed:
            calls = [(r, beyond_margin(paired_verdict(r, me, i), margin)) for r in rows]
            calls = [(r, c) for r, c in calls if c]
            out.append("%s vs %s beyond it: faster on %d, slower on %d of %d%s" % (
                me, i, sum(c == "faster" for _, c in calls), sum(c == "slower" for _, c in calls), len(calls),
                "".join("; slower: %s %s %s" % (r["dtype"], r["layout"], tuple(r["shape"]))
                        for r, c in calls if c == "slower")))
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="the file gpu_bench.py --json wrote")
    ap.add_argument("--me", default="zgate", help="the implementation the others are compared with")
    args = ap.parse_args()
    with open(args.json) as f:
        sys.stdout.write(render(json.load(f), args.me))


if __name__ == "__main__":
    main()
