#!/usr/bin/env bash
# The README's test command: install what is missing, build, run every test this machine can.
# Each stage is a script in scripts/test.d, run in name order; all stages run, and the
# command fails if any stage failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh test || { echo "install-deps failed"; exit 1; }
stages=(scripts/test.d/*.sh) failed=()
for stage in "${stages[@]}"; do
  echo "=== stage $(basename "$stage")"
  start=$(date +%s)
  if bash "$stage"; then r=ok; else failed+=("$stage"); r=FAILED; fi
  echo "=== stage $(basename "$stage"): $r in $(( $(date +%s) - start )) s"
done
[ ${#failed[@]} -eq 0 ] || echo "failed stages: ${failed[*]}"
echo "stages: $(( ${#stages[@]} - ${#failed[@]} )) passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
