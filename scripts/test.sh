#!/usr/bin/env bash
# Sets kiln up (scripts/setup.sh), builds the libFuzzer targets with clang, and runs the
# whole test suite with ctest. Extra arguments go to ctest (e.g. -R Conformance).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

KILN_DEPS=test KILN_BUILD_TARGET=all bash scripts/setup.sh

# Fuzz targets need clang's libFuzzer runtime; they build in their own tree, instrumented with
# ASan and UBSan, beside a kiln of the same build that the lsan.* tests run with LeakSanitizer.
if [[ ! -f build-fuzz/build.ninja ]]; then
  CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKILN_BUILD_FUZZERS=ON -DKILN_BUILD_TESTS=OFF >/dev/null
fi
ninja -C build-fuzz -j "${KILN_JOBS:-$(nproc)}" fuzzers kiln | grep -v '^\[' || true

cd build
status=0
ctest --output-on-failure -j "${KILN_JOBS:-$(nproc)}" "$@" || status=$?
# The failed tests' output again, last, where a log's tail (CI's) shows it.
if [[ $status -ne 0 && -f Testing/Temporary/LastTestsFailed.log ]]; then
  while IFS=: read -r _ name; do
    echo "==== $name: the end of its output"
    awk -v n="$name" 'index($0, "Testing: " n) && $NF == n { on = 1; next } on && index($0, "\"" n "\" end time") { on = 0 } on' \
      Testing/Temporary/LastTest.log | tail -40
  done < Testing/Temporary/LastTestsFailed.log
fi
exit "$status"
