#!/usr/bin/env bash
# experiment=fashion_mnist's data path: its transforms (to_tensor, normalize) are deterministic, so
# the data module applies them once at setup and gathers each batch with one index_select
# (data.precompute_mb, docs/data.md); the reference is the per-sample path, data.precompute_mb=0
# (Get + to_tensor + normalize per sample, then stack). One epoch limited to 200 batches of 128,
# both ways one after the other in each round, for each precision; the figure is the median of the
# per-round ratios (samples/s precomputed / per-sample).
#   bench/data_precompute.sh                    # ROUNDS=3 PRECISIONS="32 bf16-mixed" THREADS=2
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/common.sh
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
read -r -a precisions <<< "${PRECISIONS:-32 bf16-mixed}"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

for precision in "${precisions[@]}"; do
  ratios=()
  for ((r = 1; r <= rounds; ++r)); do
    run() {
      kiln_epoch_rate "$work/kiln" experiment=fashion_mnist trainer.limit_train_batches=200 \
        trainer.num_threads="$threads" trainer.precision="$precision" "$@"
    }
    per_sample=$(run data.precompute_mb=0)
    precomputed=$(run)
    ratios+=("$(ratio "$precomputed" "$per_sample")")
    echo "precision=$precision round $r: per-sample $per_sample, precomputed $precomputed samples/s (x${ratios[-1]})"
  done
  echo "precision=$precision: precomputed / per-sample median x$(printf '%s\n' "${ratios[@]}" | median)"
done
