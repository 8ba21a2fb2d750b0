#!/usr/bin/env bash
# Sets kiln up on a fresh Debian 12 machine: installs the system packages it needs
# (scripts/install_deps.sh says which and why), LibTorch (PyPI's torch, pinned) into the project's
# virtual environment .venv (scripts/setup_venv.sh), then configures and builds `kiln` and the
# libraries it loads into build/. With CUDA's toolkit on the machine the build includes CUDA
# (KILN_CUDA=OFF builds for the CPU alone).
# Idempotent: when everything is in place it takes a few seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

source scripts/timing.sh

# A first setup writes about 6 GB (the venv's torch and test packages 2-3, pip's downloads while it
# installs, the build 2): on a fuller disk say so in one line, before pip or the compiler fails
# half-way. KILN_SETUP_NEED_GB changes the figure (0 skips the check).
if [[ ! -d .venv || ! -f "${KILN_BUILD_DIR:-build}/build.ninja" ]]; then
  need_gb=${KILN_SETUP_NEED_GB:-6}
  read -r free_kb mount < <(df -Pk . | awk 'NR == 2 { print $4, $6 }')
  if ((free_kb < need_gb * 1024 * 1024)); then
    echo "kiln setup: $((free_kb / 1024 / 1024)) GB free on $mount, a first setup needs about $need_gb GB;" \
      "free some space (KILN_SETUP_NEED_GB=0 tries anyway)" >&2
    exit 1
  fi
fi

# KILN_DEPS=test (scripts/test.sh) also installs what only the tests need.
timed "Debian packages" bash scripts/install_deps.sh ${KILN_DEPS:-}

# The venv's torch and the CUDA libraries it links that the system lacks: the tests' Python needs
# all of them; kiln built with CUDA those of libtorch_cuda; kiln for the CPU only two small ones.
venv_mode=cpu
if [[ "${KILN_CUDA:-AUTO}" != OFF ]] && { command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; }; then
  venv_mode=cuda
fi
[[ "${KILN_DEPS:-}" != test ]] || venv_mode=test
timed "Python packages" bash scripts/setup_venv.sh "$venv_mode"

BUILD_DIR=${KILN_BUILD_DIR:-build}
JOBS=${KILN_JOBS:-$(nproc)}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_CUDA="${KILN_CUDA:-AUTO}" >/dev/null
else
  # Configure again (under a second): what the test packages or a late uPlot fetch brought
  # (chromium, clang, Python, uPlot) is looked for at configure time.
  cmake "$BUILD_DIR" >/dev/null
fi
# Only what `kiln train` needs (the program, its libraries, the example plugins); scripts/test.sh
# builds the rest (tests, benchmarks). KILN_BUILD_TARGET=all builds everything.
build() { ninja -C "$BUILD_DIR" -j "$JOBS" "${KILN_BUILD_TARGET:-kiln_runtime}" | grep -v '^\[' || true; }
timed "build ($BUILD_DIR)" build
test -x "$BUILD_DIR/bin/kiln"
