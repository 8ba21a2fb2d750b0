#!/usr/bin/env bash
# Training throughput (tokens/s) of the same GPT on Moby Dick characters: kiln (`experiment=mobydick_gpt`:
# 4 blocks, dim 128, 4 heads, MLP 512, block 128, batch 32, AdamW, clipping 1.0) against a plain
# PyTorch Python loop with the same model, batch, block and threads (bench/gpt_reference.py, Debian's
# python3-torch). Each run trains BATCHES batches (the first one included) and nothing else; the
# runs are interleaved in ROUNDS rounds and the ratio is taken within a round; the median is the
# figure. Needs the prepared text data (scripts/prepare_text_data.sh).
#   bench/mobydick_gpt_speed.sh                     # THREADS=2 BATCHES=100 ROUNDS=3
#   THREADS=1 DIM=256 bench/mobydick_gpt_speed.sh    # another configuration
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
batches=${BATCHES:-100}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
batch=${BATCH:-32} block=${BLOCK:-128} dim=${DIM:-128} depth=${DEPTH:-4} heads=${HEADS:-4} mlp=${MLP_DIM:-512}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

kiln_rate() {
  "$kiln" train experiment=mobydick_gpt hydra.run.dir="$work/kiln" trainer.max_epochs=1 trainer.max_steps=-1 \
    trainer.max_time=null trainer.limit_train_batches="$batches" trainer.limit_val_batches=0 \
    trainer.num_sanity_val_steps=0 trainer.num_threads="$threads" test=false callbacks=none logger=null \
    data.batch_size="$batch" data.block_size="$block" model.dim="$dim" model.depth="$depth" model.heads="$heads" \
    model.mlp_dim="$mlp" > "$work/kiln.out" 2>&1 || { cat "$work/kiln.out" >&2; exit 1; }
  sed -n 's/.*epoch 0: .*, \([0-9.]*\) samples\/s).*/\1/p' "$work/kiln.out" | tail -1 | awk -v b="$block" '{printf "%.1f", $1 * b}'
}
python_rate() {
  /usr/bin/python3 bench/gpt_reference.py "$batches" "$threads" "$batch" "$block" "$dim" "$depth" "$heads" "$mlp"
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "GPT dim $dim, $depth blocks, $heads heads, MLP $mlp; batch $batch x block $block tokens; $threads threads; $batches batches"
printf '%-6s %14s %14s %8s\n' round kiln_tok/s python_tok/s ratio
ratios=()
for ((r = 1; r <= rounds; r++)); do
  k=$(kiln_rate)
  p=$(python_rate)
  ratio=$(awk "BEGIN {printf \"%.2f\", $k / $p}")
  ratios+=("$ratio")
  printf '%-6s %14s %14s %8s\n' "$r" "$k" "$p" "$ratio"
done
echo "median kiln/python: $(printf '%s\n' "${ratios[@]}" | median)"
