#!/usr/bin/env bash
# Activation checkpointing (issue 54): a llama training step with and without
# model.activation_checkpointing, interleaved in rounds: the process's peak resident memory (the
# training log's "peak resident memory") and the time per step, the log's fit time over the steps.
# The model is experiment=mobydick_llama at a longer context, where activations dominate:
# data.block_size=512 x data.batch_size=16, STEPS steps, float32 unless PRECISION says otherwise.
# Peak memory counts the whole process: LibTorch, the data and the model's weights besides the
# activations (a run of 0 steps shows that floor).
#   bench/activation_checkpointing.sh     # ROUNDS=3 STEPS=6 PRECISION=32 THREADS=2
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds=${ROUNDS:-3}
steps=${STEPS:-6}
precision=${PRECISION:-32}
threads=${THREADS:-2}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
[[ -f data/text/mobydick/train.txt ]] || bash scripts/prepare_text_data.sh >/dev/null

# one ON: "PEAK_MB SECONDS_PER_STEP" of a run with model.activation_checkpointing=ON
one() {
  "${KILN:-build/bin/kiln}" train experiment=mobydick_llama model.activation_checkpointing="$1" \
    data.block_size=512 model.max_positions=512 data.batch_size=16 trainer.max_steps="$steps" \
    trainer.max_time=null trainer.limit_val_batches=0 trainer.num_sanity_val_steps=0 test=false \
    callbacks=none logger=null trainer.precision="$precision" trainer.num_threads="$threads" \
    hydra.run.dir="$work/run" > "$work/out" 2>&1 || { cat "$work/out" >&2; exit 1; }
  sed -n 's/.*fit done: .* in \([0-9.]*\) s; peak resident memory \([0-9]*\) MB.*/\2 \1/p' "$work/out" |
    awk -v steps="$steps" '{printf "%d %.3f", $1, $2 / steps}'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "== llama, block 512 x batch 16, $steps steps, precision $precision, $threads threads"
printf '%-6s %14s %14s %14s %14s\n' round peak_MB_plain peak_MB_ckpt s/step_plain s/step_ckpt
mem_ratio=() time_ratio=()
for ((r = 1; r <= rounds; r++)); do
  read -r m0 t0 <<< "$(one false)"
  read -r m1 t1 <<< "$(one true)"
  mem_ratio+=("$(awk "BEGIN {printf \"%.3f\", $m1 / $m0}")")
  time_ratio+=("$(awk "BEGIN {printf \"%.3f\", $t1 / $t0}")")
  printf '%-6s %14s %14s %14s %14s\n' "$r" "$m0" "$m1" "$t0" "$t1"
done
echo "medians: peak memory with/without $(printf '%s\n' "${mem_ratio[@]}" | median), step time with/without $(printf '%s\n' "${time_ratio[@]}" | median)"
