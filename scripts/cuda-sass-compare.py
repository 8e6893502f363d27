#!/usr/bin/env python3
"""Compare the machine code (SASS) of the gate kernels in two builds of libzgate, kernel by
kernel, with no GPU: the proof that a change of the CUDA sources leaves the speed as it was.

    scripts/cuda-sass-compare.py OLD/src/libzgate.so NEW/src/libzgate.so [--cuobjdump PATH]

A kernel is named by its translation unit (kernels_<op>_<kind>.cu), its vector width and its
layout (the last two template arguments of gate_kernel), so that the other template
arguments and the anonymous namespace may be named differently in the two builds. Each
kernel's SASS (instructions with their encodings and addresses) must be the same text.
Prints one line a kernel and a total; exits 1 when any kernel differs or exists in one build
only. cuobjdump comes with the CUDA toolkit (Triton's wheel bundles one, too)."""
import argparse
import re
import shutil
import subprocess
import sys

LAYOUTS = {0: "FLAT", 1: "ROWS", 2: "ANY"}


def kernels(lib, cuobjdump):
    out = subprocess.run([cuobjdump, "-sass", lib], capture_output=True, text=True, check=True).stdout
    found, body = {}, None
    for line in out.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            tu = re.search(r"kernels_(\w+?)_cu", name)
            args = re.findall(r"Li(\d+)E", name)
            if not tu or len(args) < 2:
                sys.exit("unexpected kernel name %s in %s" % (name, lib))
            key = (tu.group(1), int(args[-2]), int(args[-1]))
            if key in found:
                sys.exit("two kernels named %s in %s" % (key, lib))
            body = found[key] = []
        elif body is not None and line.strip() and not line.strip().startswith("."):
            body.append(line.strip())
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    args = ap.parse_args()
    old, new = kernels(args.old, args.cuobjdump), kernels(args.new, args.cuobjdump)
    same = differ = 0
    for key in sorted(set(old) | set(new)):
        where = "%-10s V=%d %-4s" % (key[0], key[1], LAYOUTS.get(key[2], key[2]))
        if key not in old or key not in new:
            print("%s only in the %s build" % (where, "old" if key in old else "new"))
            differ += 1
        elif old[key] == new[key]:
            print("%s %5d lines, identical" % (where, len(new[key])))
            same += 1
        else:
            print("%s DIFFERS (%d lines old, %d new)" % (where, len(old[key]), len(new[key])))
            differ += 1
    print("%d kernels identical, %d differ (old build %d kernels, new build %d)" % (same, differ, len(old), len(new)))
    return 1 if differ or not same else 0


if __name__ == "__main__":
    sys.exit(main())
