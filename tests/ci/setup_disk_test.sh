#!/usr/bin/env bash
# scripts/setup.sh on a disk without room for a first setup stops before installing anything, with
# one line that says how much is free where and how much it needs (a full disk otherwise failed
# inside pip, half-installed). Runs a copy of the script in an empty folder with a need no disk has.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/scripts"
cp "$src/scripts/setup.sh" "$src/scripts/timing.sh" "$dir/scripts/"
# A stand-in for the next step: if the check let setup through, this file would appear.
printf 'touch "%s/installed"\n' "$dir" >"$dir/scripts/install_deps.sh"

rc=0
KILN_SETUP_NEED_GB=1000000 bash "$dir/scripts/setup.sh" >"$dir/out" 2>"$dir/err" || rc=$?
[[ $rc -eq 1 ]] || { echo "FAIL: exit code $rc, expected 1"; cat "$dir/err"; exit 1; }
[[ ! -e "$dir/installed" ]] || { echo "FAIL: setup went on past the check"; exit 1; }
[[ $(wc -l <"$dir/err") -eq 1 && ! -s "$dir/out" ]] || { echo "FAIL: expected one line on stderr"; cat "$dir/out" "$dir/err"; exit 1; }
grep -E -q '^kiln setup: [0-9]+ GB free on /[^ ]*, a first setup needs about 1000000 GB;' "$dir/err" ||
  { echo "FAIL: unexpected message: $(cat "$dir/err")"; exit 1; }

# With the check off, setup goes on to its next step.
KILN_SETUP_NEED_GB=0 bash "$dir/scripts/setup.sh" >/dev/null 2>&1 || true
[[ -e "$dir/installed" ]] || { echo "FAIL: KILN_SETUP_NEED_GB=0 did not skip the check"; exit 1; }
echo "PASS: $(cat "$dir/err")"
