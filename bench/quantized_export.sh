#!/usr/bin/env bash
# Dynamic int8 against float32 TorchScript: for each trained run given, exports its last checkpoint
# twice (`kiln export format=torchscript`, with and without quantize=dynamic_int8) and measures both
# on the run's test split with quantized_speed: accuracy (classifier) or cross-entropy per token
# (language model), and inference time over the split, interleaved in ROUNDS rounds (default 3) on
# THREADS threads (default 1). Prints the speed-up and the metric's change.
#   bench/quantized_export.sh RUN_DIR [RUN_DIR ...]
# e.g. runs of experiment=spam_transformer and experiment=mobydick_gpt.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
bin=${QUANTIZED_SPEED:-build/bin/quantized_speed}
[ $# -ge 1 ] || { echo "usage: bench/quantized_export.sh RUN_DIR [RUN_DIR ...]" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for run in "$@"; do
  name=$(basename "$run")
  "$kiln" export run_dir="$run" format=torchscript hydra.run.dir="$out/$name-f32" >/dev/null
  "$kiln" export run_dir="$run" format=torchscript quantize=dynamic_int8 hydra.run.dir="$out/$name-int8" >/dev/null
  ls -l "$out/$name-f32/model.pt" "$out/$name-int8/model.pt" | awk '{print $5, $9}'
  "$bin" "$out/$name-f32" "$out/$name-int8" "${ROUNDS:-3}" "${THREADS:-1}"
done
