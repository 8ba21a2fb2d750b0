#!/usr/bin/env bash
# Sets kiln up (scripts/setup.sh), builds the libFuzzer targets with clang, and runs the
# whole test suite with ctest. Extra arguments go to ctest (e.g. -R Conformance).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Where the time goes (issue 50): each phase's seconds, then the tests' from ctest's JUnit file;
# scripts/suite_report.py prints them at the end and refuses an unexplained slow test.
mkdir -p build
export KILN_TIMINGS=$PWD/build/suite_phases.tsv
: >"$KILN_TIMINGS"
source scripts/timing.sh

# The setup's and the tests' Python processes (transformers, peft, Lightning, MLflow, notebooks)
# cache their bytecode in build/pycache. Where PYTHONDONTWRITEBYTECODE is set (this machine sets
# it), every process compiled torch's and transformers' modules again: setup installs them without
# bytecode (scripts/setup_venv.sh). `import torch, transformers, lightning` took 4.5 s against 2.4 s
# cached, and the 12 HfModels/HfExport tests 76-106 s against 52-53 s. The prefix keeps the cache
# out of the .venv and the source tree.
export PYTHONPYCACHEPREFIX=$PWD/build/pycache
unset PYTHONDONTWRITEBYTECODE

KILN_DEPS=test KILN_BUILD_TARGET=all bash scripts/setup.sh

# Fuzz targets need clang's libFuzzer runtime; they build in their own tree, instrumented with
# ASan and UBSan, beside a kiln of the same build that the lsan.* tests run with LeakSanitizer.
# Without clang the fuzz and lsan tests say they are skipped; with clang, a tree that does not
# build fails the suite (it once failed quietly and the lsan tests skipped instead of running).
build_fuzz() {
  if ! command -v clang++ >/dev/null; then
    echo "test.sh: no clang++ here: the fuzz and lsan.* tests will be skipped" >&2
    return 0
  fi
  if [[ ! -f build-fuzz/build.ninja ]]; then
    CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKILN_BUILD_FUZZERS=ON -DKILN_BUILD_TESTS=OFF >/dev/null || return
  fi
  # Progress lines filtered out; with pipefail, ninja's status is the pipeline's.
  local rc=0
  ninja -C build-fuzz -j "${KILN_JOBS:-$(nproc)}" fuzzers kiln | { grep -v '^\[' || true; } || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "test.sh: the fuzz tree (build-fuzz: fuzzers, the ASan kiln) did not build (ninja exit $rc)" >&2
  fi
  return "$rc"
}
timed "build (build-fuzz)" build_fuzz


cd build
status=0
# What each test is and where it is registered, for the report (before the run: this ctest call
# writes Testing/Temporary/LastTest.log anew).
mkdir -p Testing
ctest --show-only=json-v1 "$@" >Testing/suite_tests.json
timed ctest ctest --output-on-failure --output-junit "$PWD/Testing/suite.xml" -j "${KILN_JOBS:-$(nproc)}" "$@" || status=$?
# The failed tests' output again, last, where a log's tail (CI's) shows it.
if [[ $status -ne 0 && -f Testing/Temporary/LastTestsFailed.log ]]; then
  while IFS=: read -r _ name; do
    echo "==== $name: the end of its output"
    awk -v n="$name" 'index($0, "Testing: " n) && $NF == n { on = 1; next } on && index($0, "\"" n "\" end time") { on = 0 } on' \
      Testing/Temporary/LastTest.log | tail -40
  done < Testing/Temporary/LastTestsFailed.log
fi
printf 'wall\t%d\n' "$SECONDS" >>"$KILN_TIMINGS"
python3 ../scripts/suite_report.py --phases "$KILN_TIMINGS" --junit Testing/suite.xml \
  --tests Testing/suite_tests.json --source .. || { [[ $status -ne 0 ]] || status=1; }
exit "$status"
