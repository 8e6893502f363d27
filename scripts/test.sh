#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test this machine can.
# Each stage is a script in scripts/test.d, run in name order; all stages run, and the
# command fails if any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh test || { echo "install-deps failed"; exit 1; }
passed=0; failed=0; failed_names=()
for stage in scripts/test.d/*.sh; do
  echo "=== stage $(basename "$stage")"
  start=$(date +%s)
  if bash "$stage"; then passed=$((passed + 1)); r=ok; else failed=$((failed + 1)); failed_names+=("$stage"); r=FAILED; fi
  echo "=== stage $(basename "$stage"): $r in $(( $(date +%s) - start )) s"
done
[ $failed -eq 0 ] || echo "failed stages: ${failed_names[*]}"
echo "stages: $passed passed, $failed failed"
[ $failed -eq 0 ]
