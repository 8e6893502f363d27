#!/usr/bin/env bash
# scripts/install-deps.sh installs the set asked for: `main` (scripts/run.sh) only what the
# main job uses and nothing through pip; `test` (scripts/test.sh) that and the test suite's
# tools and Python packages. Run against stub dpkg-query/apt-get/sudo/python3 that report
# every package missing and log what they are asked to install; nothing is installed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
for cmd in dpkg-query apt-get python3; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/log"\n[ %s != dpkg-query ] || exit 1\n' \
    "$cmd" "$stub" "$cmd" >"$stub/$cmd"
done
printf '#!/bin/sh\nexec "$@"\n' >"$stub/sudo"
chmod +x "$stub"/*

# The packages and pip installs that `install-deps.sh $1` asks for, one a line.
asked() {
  rm -f "$stub/log"
  PATH="$stub:$PATH" bash "$repo/scripts/install-deps.sh" "$1" >/dev/null
  sed -n 's/^apt-get install .*--no-install-recommends //p' "$stub/log" | tr ' ' '\n'
  grep -q '^python3 -m pip install' "$stub/log" && echo "(pip)"
  true
}
fail=0
main=$(asked main)
testset=$(asked test)
for p in cmake make gcc libdlpack-dev gnuplot-nox; do
  grep -qx "$p" <<<"$main" || { echo "main set lacks $p"; fail=1; }
done
for p in clang valgrind qemu-user gcc-aarch64-linux-gnu libcmocka-dev libomp-14-dev "(pip)"; do
  grep -qx "$p" <<<"$main" && { echo "main set has the test suite's $p"; fail=1; }
  grep -qx "$p" <<<"$testset" || { echo "test set lacks $p"; fail=1; }
done
for p in $main; do
  [ "$p" = g++ ] && continue   # main asks for it only where nvcc is installed
  grep -qx -- "$p" <<<"$testset" || { echo "test set lacks the main set's $p"; fail=1; }
done
[ $fail = 0 ] && echo "install-deps: main asks for $(echo $main), test for $(grep -vc '(pip)' <<<"$testset") packages and pip"
exit $fail
