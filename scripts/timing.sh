# Sourced by scripts/setup.sh and scripts/test.sh: `timed NAME COMMAND...` runs COMMAND and, when
# KILN_TIMINGS names a file, appends "NAME<TAB>SECONDS" to it; it returns COMMAND's status.
timed() {
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  [[ -z "${KILN_TIMINGS:-}" ]] || printf '%s\t%d\n' "$name" $((SECONDS - t0)) >>"$KILN_TIMINGS"
  return $rc
}
