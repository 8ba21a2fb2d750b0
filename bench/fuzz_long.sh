#!/usr/bin/env bash
# Every libFuzzer target (or the TARGETs named) for MINUTES each (default 20), from the same seeds
# as the suite's bounded run (fuzz/run_fuzzers.sh, which lists the targets); prints each target's
# executions and peak RSS, and stops at the first crash, leak or timeout with the input in
# fuzz-artifacts/ (a finding fixed gets its input in fuzz/regressions/TARGET/).
#   bench/fuzz_long.sh [MINUTES [TARGET...]]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-20}
shift $(($# > 0 ? 1 : 0))
KILN_FUZZ_TARGETS="$*" KILN_FUZZ_SECONDS=$((minutes * 60)) exec bash fuzz/run_fuzzers.sh
