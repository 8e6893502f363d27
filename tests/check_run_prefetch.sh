#!/bin/sh
# The x86 fused run kernels (bwd_run_*, fwd_run_* of kernels_simd.c, built for avx2 and avx512)
# must keep their software prefetch in the built library. gcc 12 once deleted every prefetch
# of the float32 runs without a warning (fixed in commit 2a0f628: a function that only
# prefetches looked "const" to it), which changed no result and cost 15-20 points of
# bandwidth, so no other test could see it. Usage: check_run_prefetch.sh LIBRARY OBJDUMP.
# Exit 77 (skipped) without objdump.
lib=$1
objdump=${2:-objdump}
command -v "$objdump" >/dev/null 2>&1 || { echo "no objdump: not checked"; exit 77; }
"$objdump" -d --no-show-raw-insn "$lib" | awk '
  /^[0-9a-f]+ <[^>]*>:$/ {
    name = $2; gsub(/[<>:]/, "", name)
    # two ISAs define the same names; gcc moves unlikely code into NAME.cold pieces
    cur = name ~ /^(bwd|fwd)_run_/ && name !~ /\.cold$/ ? $1 " " name : ""
    if (cur != "") runs[cur] = 0
    next
  }
  cur != "" && /prefetcht0/ { runs[cur]++ }
  END {
    n = 0; bad = 0
    for (f in runs) { n++; printf "%-40s %4d prefetcht0\n", f, runs[f]; if (runs[f] == 0) bad = 1 }
    if (n < 8) { print "expected the run kernels of avx2 and avx512, found " n; exit 1 }
    if (bad) print "a run kernel lost its prefetch"
    exit bad
  }'
