#!/usr/bin/env bash
# Runs TEST_BINARY with gtest FILTER against the ASan+UBSan kiln that scripts/test.sh builds in
# build-fuzz/ (KILN_TEST_KILN; tests/support/process.cc), LeakSanitizer on: every kiln the tests
# start must exit as they expect, so a leak (LSan's exit code 23), a memory error or undefined
# behaviour fails the test with the sanitizer's report in its output. Exits 77 (skipped) when that
# kiln was not built.
#   tests/lsan/run.sh TEST_BINARY FILTER
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kiln=${KILN_ASAN_KILN:-$root/build-fuzz/bin/kiln}
if [[ ! -x $kiln ]]; then
  echo "the ASan kiln was not built ($kiln; scripts/test.sh builds it)"; exit 77
fi
export KILN_TEST_KILN=$kiln
# intercept_tls_get_addr=0: clang 14's LeakSanitizer keeps its own list of the dynamic TLS blocks
# that __tls_get_addr hands out and scans them at exit; with LibTorch 2.11's libraries loaded, an
# entry of that list can point at a small unmapped address, and LSan's tracer dies scanning it
# ("Tracer caught signal 11", exit 1) before any report. Without the interception the blocks
# are still found: glibc allocates them with malloc and the thread's static TLS points at them.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:intercept_tls_get_addr=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/fuzz/lsan_suppressions.txt:print_suppressions=0}
exec "$1" --gtest_filter="$2"
