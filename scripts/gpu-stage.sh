# Sourced by scripts/gpu-validate.sh and scripts/gpu-mamba.sh. `stage NAME LIMIT 'COMMAND'`
# runs COMMAND through bash -c (exported functions work) when NAME is in $STAGES, for at most
# LIMIT seconds, its output in $OUT/NAME.log, and adds its line to the array `summary`;
# `stage_tail NAME LINES` prints the last non-empty lines of NAME's log, where it ran;
# `stage_summary` prints the lines of `summary` and fails when a stage failed.
summary=()
stage() {
  case " $STAGES " in *" $1 "*) ;; *) return 0 ;; esac
  local t0=$(date +%s) r
  if timeout "$2" bash -c "$3" >"$OUT/$1.log" 2>&1; then r=ok; else r="FAILED (exit $?)"; fi
  summary+=("$(printf '%-9s %-16s %4d s' "$1" "$r" $(( $(date +%s) - t0 )))")
}
stage_tail() {
  [ ! -f "$OUT/$1.log" ] || { echo "--- $1 (tail)"; grep -v "^$" "$OUT/$1.log" | tail -n "$2" | cut -c1-240; }
}
stage_summary() {
  echo; echo "stages:"; printf '  %s\n' "${summary[@]}"
  ! printf '%s\n' "${summary[@]}" | grep -q FAILED
}
