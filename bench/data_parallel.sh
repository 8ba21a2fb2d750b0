#!/usr/bin/env bash
# Data parallel on this machine: the Fashion-MNIST CNN (experiment=fashion_mnist) trained with a
# global batch of 128 by 1 worker with 2 threads, and by 2 workers (trainer.devices=2) with 1
# thread and batch 64 each, over c10d/Gloo on loopback. Prints samples/s of each, their ratio, the
# time per optimizer step, and what one blocking all-reduce of all gradients costs (kiln measures
# it when data parallel starts; in training it overlaps backward). On 2 cores the two workers
# share the cores the single worker uses, so expect no gain; the point is the cost of the
# communication. Runs are interleaved in ROUNDS rounds, ratios taken within a round.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
batches=${BATCHES:-300}   # optimizer steps (global batches) per run
rounds=${ROUNDS:-3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

run() {  # name, overrides...
  local name=$1; shift
  "$kiln" train experiment=fashion_mnist hydra.run.dir="$work/$name" trainer.max_epochs=1 trainer.precision=32 \
    trainer.limit_val_batches=0 trainer.num_sanity_val_steps=0 trainer.enable_progress_bar=false \
    test=false callbacks=none logger=null "$@" > "$work/$name.out" 2>&1 || { cat "$work/$name.out" >&2; exit 1; }
  sed -n 's/.*epoch 0: .*, \([0-9.]*\) samples\/s).*/\1/p' "$work/$name/train.log" | tail -1
}

ratio() { awk "BEGIN {printf \"%.2f\", $1 / $2}"; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

printf '%-6s %14s %14s %8s %12s %12s %14s\n' round "1x128 samp/s" "2x64 samp/s" ratio "1x ms/step" "2x ms/step" "allreduce ms"
ratios=()
for ((r = 1; r <= rounds; r++)); do
  one=$(run one data.batch_size=128 trainer.num_threads=2 trainer.limit_train_batches="$batches")
  two=$(run two data.batch_size=64 trainer.devices=2 trainer.num_threads=1 trainer.limit_train_batches="$batches")
  ar=$(sed -n 's/.*gradients takes \([0-9.]*\) ms.*/\1/p' "$work/two/train.log" | tail -1)
  ratios+=("$(ratio "$two" "$one")")
  printf '%-6s %14s %14s %8s %12.1f %12.1f %14s\n' "$r" "$one" "$two" "${ratios[-1]}" \
    "$(awk "BEGIN{print 128000/$one}")" "$(awk "BEGIN{print 128000/$two}")" "$ar"
done
printf 'median throughput ratio, 2 workers / 1 worker: %s\n' "$(printf '%s\n' "${ratios[@]}" | median)"
grep -h "data parallel:" "$work/two/train.log" | sed 's/.*- /model: /'
