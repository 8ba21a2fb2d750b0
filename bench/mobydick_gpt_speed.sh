#!/usr/bin/env bash
# Training throughput (tokens/s) of the same GPT on Moby Dick characters: kiln (`experiment=mobydick_gpt`:
# 4 blocks, dim 128, 4 heads, MLP 512, block 128, batch 32, AdamW, clipping 1.0) against a plain
# PyTorch Python loop with the same model, batch, block and threads (bench/gpt_reference.py, Debian's
# the .venv's torch), both in float32 (trainer.precision=32; bf16 is bench/bf16_speed.sh's). Each run trains BATCHES batches (the first one included) and nothing else; the
# runs are interleaved in ROUNDS rounds and the ratio is taken within a round; the median is the
# figure. The Python loop runs with the glibc malloc settings kiln's trainer gives itself
# (GLIBC_TUNABLES in bench/common.sh, as lib/trainer/process_settings.cc sets them with mallopt): kiln/python is
# the headline; kiln against the same loop with glibc's defaults is printed on its own line as what
# kiln's automatic allocator tuning is worth to a user who would not tune it. Needs the prepared
# text data (scripts/prepare_text_data.sh).
#   bench/mobydick_gpt_speed.sh                     # THREADS=2 BATCHES=100 ROUNDS=3
#   THREADS=1 DIM=256 bench/mobydick_gpt_speed.sh    # another configuration
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/common.sh
batches=${BATCHES:-100}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
batch=${BATCH:-32} block=${BLOCK:-128} dim=${DIM:-128} depth=${DEPTH:-4} heads=${HEADS:-4} mlp=${MLP_DIM:-512}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

kiln_rate() {  # tokens/s
  kiln_epoch_rate "$work/kiln" experiment=mobydick_gpt trainer.max_steps=-1 trainer.max_time=null trainer.precision=32 \
    trainer.limit_train_batches="$batches" trainer.num_threads="$threads" data.batch_size="$batch" \
    data.block_size="$block" model.dim="$dim" model.depth="$depth" model.heads="$heads" model.mlp_dim="$mlp" |
    awk -v b="$block" '{printf "%.1f", $1 * b}'
}
reference=(bench/gpt_reference.py "$batches" "$threads" "$batch" "$block" "$dim" "$depth" "$heads" "$mlp")

echo "GPT dim $dim, $depth blocks, $heads heads, MLP $mlp; batch $batch x block $block tokens; $threads threads; $batches batches"
printf '%-6s %14s %16s %18s %8s %14s\n' round kiln_tok/s py_tuned_tok/s py_untuned_tok/s ratio kiln/untuned
ratios=() untuned=()
for ((r = 1; r <= rounds; r++)); do
  k=$(kiln_rate)
  p=$(python_tuned "${reference[@]}")
  u=$(python_untuned "${reference[@]}")
  ratios+=("$(ratio "$k" "$p")") untuned+=("$(ratio "$k" "$u")")
  printf '%-6s %14s %16s %18s %8s %14s\n' "$r" "$k" "$p" "$u" "${ratios[-1]}" "${untuned[-1]}"
done
echo "median kiln / the same loop in Python with kiln's allocator settings: $(printf '%s\n' "${ratios[@]}" | median)x  (the headline)"
echo "median kiln / the same loop with glibc's default allocator settings: $(printf '%s\n' "${untuned[@]}" | median)x  (kiln's automatic tuning included)"
