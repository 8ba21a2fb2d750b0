#!/usr/bin/env bash
# Installs the Debian 12 packages kiln builds and runs with. Idempotent: when every package is
# already present it only runs one dpkg query and returns in well under a second.
#   install_deps.sh          what building kiln and training need (scripts/setup.sh, the README's
#                            first command)
#   install_deps.sh test     that and what only the tests, fuzzers and benchmarks need
#                            (scripts/test.sh): about half the download
set -euo pipefail

# Why each package is here:
#   build-essential cmake ninja-build ccache pkg-config  compiler, build system, build cache
#   python3 python3-venv                                 the project's virtual environment (.venv) that holds
#                                                        LibTorch: PyPI's torch, pinned (scripts/setup_venv.sh)
#   python3-dev                                          Python's headers: the `import kiln` extension (docs/python.md)
#   libgloo-dev                                          Gloo's headers, which c10d's ProcessGroupGloo.hpp includes
#                                                        and the torch wheel leaves out (its Gloo is built in)
#   libyaml-cpp-dev                                      YAML parsing for lib/config
#   libabsl-dev                                          absl::Status / StatusOr, strings, flat_hash_map
#   libtbb-dev                                           oneTBB: the parallel data loader
#   libopencv-dev                                        image_folder data module: decodes jpg/png/bmp/webp, resizes
#   libsentencepiece-dev                                 subword tokenizers (NLP tasks)
#   libsndfile1-dev                                      audio file reading (speech tasks)
#   libsoxr-dev                                          audio resampling to the configured rate (speech tasks)
#   libgtest-dev libgmock-dev                            the test suite (small; CMake configures the tests too)
#   zlib1g-dev                                           gzip-compressed IDX files
#   libarchive-dev libssl-dev                            tar shards (data=shards, kiln shard) and their SHA-256
#   libjpeg62-turbo-dev                                  libjpeg-turbo: JPEGs decoded only where the crop is
#   libpng-dev                                           libpng: PNGs decoded with their messages in kiln's log
#   nlohmann-json3-dev                                   JSON (safetensors headers)
#   dataset-fashion-mnist                                the default experiment's data
#   libcpp-httplib-dev                                   HTTP server of kiln dashboard
#   nodejs (unless a node is there)                      builds the NLP data sets from the pinned @stdlib tarballs
#                                                        (scripts/prepare_text_data.sh; no npm registry needed)
# Only for `test`:
#   clang libclang-rt-14-dev                             libFuzzer targets (-fsanitize=fuzzer)
#   clang-format                                         the tree's format check (tests/ci/format_test.sh)
#   (Python's torch, torchvision, Lightning, onnx, tensorboard and optuna come from PyPI into .venv:
#    scripts/setup_venv.sh test, at the torch version kiln builds against)
#   iproute2                                             network namespaces for the two-host data-parallel test
#   espeak-ng sox                                        speech data synthesis (scripts/prepare_speech_data.sh)
#   chromium                                             headless browser: the kiln report tests render pages in it
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  python3 python3-venv python3-dev libgloo-dev
  libyaml-cpp-dev libabsl-dev libtbb-dev libopencv-dev libsentencepiece-dev libsndfile1-dev libsoxr-dev
  libgtest-dev libgmock-dev zlib1g-dev nlohmann-json3-dev libarchive-dev libssl-dev libjpeg62-turbo-dev libpng-dev
  dataset-fashion-mnist
  libcpp-httplib-dev
)
case "${1:-}" in
  "") ;;
  test)
    PACKAGES+=(
      clang libclang-rt-14-dev clang-format
      iproute2 espeak-ng sox
      chromium
    )
    ;;
  *) echo "usage: install_deps.sh [test]" >&2; exit 2 ;;
esac

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
# A node from elsewhere (nodesource) would conflict with Debian's package: keep it.
command -v node >/dev/null || missing+=(nodejs)

# uPlot is for `kiln report` only: without it kiln builds and trains, and the report says how to
# get it, so a failed fetch (its one line says why) does not stop the setup.
fetch_web_deps() { "$(dirname "${BASH_SOURCE[0]}")/fetch_web_deps.sh" || true; }
if ((${#missing[@]} == 0)); then
  fetch_web_deps
  exit 0
fi

echo "kiln setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
SUDO=()
if [[ $(id -u) -ne 0 ]]; then SUDO=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "kiln setup: packages installed"
fetch_web_deps
