#!/usr/bin/env bash
# The tree passes its own formatter: every C++ file git tracks is what clang-format (14, Debian's,
# with the .clang-format at the top) writes for it. A file that is not is named, with the first
# lines clang-format would change and the command that fixes it. Exits 77 (skipped) without
# clang-format or git.
#   tests/ci/format_test.sh SOURCE_DIR
set -euo pipefail
cd "$1"
format=$(command -v clang-format-14 || command -v clang-format || true)
if [[ -z $format ]] || ! command -v git >/dev/null || ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "skipped: needs clang-format (apt-get install clang-format) and a git checkout"; exit 77
fi
bad=0
while IFS= read -r -d '' file; do
  if ! diff=$("$format" --style=file "$file" | diff -u "$file" - 2>&1); then
    echo "FAIL: $file is not formatted (fix: $format -i --style=file $file)"
    sed -n '3,12p' <<<"$diff"
    bad=$((bad + 1))
  fi
done < <(git ls-files -z -- '*.cc' '*.h' '*.cu' '*.cuh' '*.cpp' '*.hpp')
[[ $bad == 0 ]] || { echo "$bad files are not formatted"; exit 1; }
echo "PASS: $(git ls-files -- '*.cc' '*.h' '*.cu' '*.cuh' '*.cpp' '*.hpp' | wc -l) files formatted as .clang-format says"
