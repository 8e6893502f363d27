"""The documented acceptance recipes for real on an NVIDIA GPU: each command as docs/operator.md
and the MindSpeed-Ops tree's README write it (read by test_acceptance_recipes.recipes), the GPU
steps as written (upstream's kernel from UPSTREAM), the NPU step on the same GPU as its
stand-in: --device cuda with zgate's Triton kernel (operator.md) or the tree's compute_dzdo
(the README). Then upstream's outputs saved as a golden, which the NPU step must refuse.
Usage: python3 tests/triton/gpu_recipe.py OUT UPSTREAM [--full]   (default: each command with
--quick). Logs and reports in OUT/<recipe>/; a table last; exit 1 when a step did not do what
a correct kernel should."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_acceptance_recipes import recipes  # noqa: E402
from zgate import mindspeed_ops  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def on_gpu(argv, upstream, quick):
    args = list(argv)
    dev = args.index("--device") + 1
    if args[dev] == "npu":
        if not any(":" in a for a in args):         # zgate's kernel on the NPU: the Triton one
            args += ["--impl", "triton"]
        args[dev] = "cuda"
    if "upstream" in args:
        args += ["--upstream-path", upstream]
    return args + (["--quick"] if quick else [])


def run(where, name, args, env):
    j = os.path.join(where, name + ".json")
    with open(os.path.join(where, name + ".log"), "w") as log:
        rc = subprocess.run([sys.executable, "-m", "zgate.acceptance"] + args + ["--json", j],
                            cwd=where, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    crit = json.load(open(j))["criteria"] if os.path.exists(j) else []
    return rc, " ".join("%s=%s" % (k, {True: "PASS", False: "FAIL", None: "info"}[ok])
                        + ("(%s)" % fig if k == "speed" else "") for k, ok, fig in crit)


def main(out, upstream, quick=True):
    tree = os.path.join(out, "tree")
    mindspeed_ops.generate(tree)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [tree] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    docs = {"operator": os.path.join(ROOT, "docs", "operator.md"),
            "tree": os.path.join(tree, "MAMBA3_DZDO_README.md")}
    rows, bad = [], 0
    for doc, path in docs.items():
        where = os.path.join(out, doc)
        os.makedirs(where, exist_ok=True)
        cmds = recipes(open(path, encoding="utf-8").read())
        for i, argv in enumerate(cmds):
            args = on_gpu(argv, upstream, quick)
            rc, crit = run(where, "step%d" % (i + 1), args, env)
            # a correct kernel: exit 0; the install check and the verdict may fail only on speed
            ok = rc == 0 or (rc == 1 and "FAIL" not in crit.replace("speed=FAIL", ""))
            bad += not ok
            rows.append((doc, "step%d" % (i + 1), rc, "ok" if ok else "WRONG", crit,
                         " ".join(argv)))
        if doc == "operator":       # upstream's outputs as the golden: refused, by name
            base = next(c for c in cmds if "--save-baseline" in c)
            npu = next(c for c in cmds if "--golden" in c)
            rc1, crit1 = run(where, "upgold-save", on_gpu(base, upstream, quick) +
                             ["--save-golden", "up.npz"], env)
            gold = npu.index("--golden") + 1
            rc2, _ = run(where, "upgold-use", on_gpu(npu[:gold] + ["up.npz"] + npu[gold + 1:],
                                                     upstream, quick), env)
            with open(os.path.join(where, "upgold-use.log")) as f:
                named = "cannot be the golden run" in f.read()
            for name, rc, want, crit in (("upgold-save", rc1, 1, crit1),
                                         ("upgold-use", rc2, 2, "named" if named else "")):
                ok = rc == want and (name != "upgold-use" or named)
                bad += not ok
                rows.append((doc, name, rc, "ok" if ok else "WRONG", crit,
                             "exit %d expected" % want))
    print("%-9s %-12s %3s %-6s %s" % ("recipe", "step", "rc", "", "criteria / command"))
    for doc, step, rc, ok, crit, cmd in rows:
        print("%-9s %-12s %3d %-6s %s\n%30s%s" % (doc, step, rc, ok, crit, "", cmd[:150]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], "--full" not in sys.argv[3:]))
