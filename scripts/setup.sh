#!/usr/bin/env bash
# Sets kiln up on a fresh Debian 12 machine: installs the system packages it needs
# (scripts/install_deps.sh says which and why), then configures and builds `kiln` and the
# libraries it loads into build/.
# Idempotent: when everything is in place it takes a few seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# KILN_DEPS=test (scripts/test.sh) also installs what only the tests need.
bash scripts/install_deps.sh ${KILN_DEPS:-}

BUILD_DIR=${KILN_BUILD_DIR:-build}
JOBS=${KILN_JOBS:-$(nproc)}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
else
  # Configure again (under a second): what the test packages or a late uPlot fetch brought
  # (chromium, clang, Python, uPlot) is looked for at configure time.
  cmake "$BUILD_DIR" >/dev/null
fi
# Only what `kiln train` needs (the program, its libraries, the example plugins); scripts/test.sh
# builds the rest (tests, benchmarks). KILN_BUILD_TARGET=all builds everything.
ninja -C "$BUILD_DIR" -j "$JOBS" "${KILN_BUILD_TARGET:-kiln_runtime}" | grep -v '^\[' || true
test -x "$BUILD_DIR/bin/kiln"
