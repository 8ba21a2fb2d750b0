#!/usr/bin/env bash
# How long `kiln train --cfg job` takes to compose and print the default config (target < 50 ms;
# Hydra needs ~110 ms plus ~0.4 s of imports for a config of this size), next to the cost of
# starting any process (`true`) and of a kiln command that loads LibTorch (`kiln list`).
# Also what a plugin adds to `kiln train --cfg job` (target < 20 ms): kiln reads the plugin's
# manifest and config folder without loading the library (and so without LibTorch).
# Prints the median of N runs of each, in milliseconds, and their ratios.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
runs=${RUNS:-40}

median_ms() {
  local times=()
  for ((i = 0; i < runs; i++)); do
    local start end
    start=$(date +%s%N)
    "$@" >/dev/null 2>&1
    end=$(date +%s%N)
    times+=($(((end - start) / 1000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)]/1000}'
}

floor=$(median_ms true)
compose=$(median_ms "$kiln" train --cfg job)
experiment=$(median_ms "$kiln" train --cfg job --resolve experiment=fashion_mnist trainer.max_epochs=3)
plugin_dir=${PLUGIN_DIR:-build/lib/kiln/plugins}
with_plugin=$(median_ms "$kiln" train --cfg job --plugin "$plugin_dir/libtiny_convnet.so" model=tiny_convnet)
without_plugin=$(median_ms "$kiln" train --cfg job model=cnn)
runs=5 torch=$(median_ms "$kiln" list)
printf 'process start (true)                          %7.1f ms\n' "$floor"
printf 'kiln train --cfg job                          %7.1f ms  (%.1fx process start)\n' "$compose" "$(awk "BEGIN {print $compose / $floor}")"
printf 'kiln train --cfg job --resolve experiment=... %7.1f ms\n' "$experiment"
printf 'kiln train --cfg job model=cnn                %7.1f ms\n' "$without_plugin"
printf '  ... --plugin libtiny_convnet.so model=tiny_convnet %7.1f ms  (plugin adds %.1f ms; target < 20)\n' \
  "$with_plugin" "$(awk "BEGIN {print $with_plugin - $without_plugin}")"
printf 'kiln list (loads LibTorch)                    %7.1f ms  (%.0fx kiln --cfg job)\n' "$torch" "$(awk "BEGIN {print $torch / $compose}")"
