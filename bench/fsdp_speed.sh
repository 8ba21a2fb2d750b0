#!/usr/bin/env bash
# Fully sharded training on this machine, against PyTorch's FSDP2 (fully_shard) in Python: the GPT
# of experiment=mobydick_gpt (4 blocks, dim 128, 4 heads, MLP 512, block 128; dropout off) at WORLD
# workers over Gloo on loopback, each worker BATCH sequences per step and the cores shared among the
# workers, AdamW, clipping at 1.0, float32. kiln runs trainer.strategy=fsdp with FULL_SHARD, each
# block a unit (the default); the reference (bench/fsdp_reference.py) shards each block and the
# root with fully_shard. Prints global tokens/s of each and their ratio, and the largest peak
# resident memory among the workers of each (kiln: the "fit done" lines of every rank's log; the
# reference: getrusage in each rank). kiln's data parallel (trainer.strategy=ddp) runs beside them
# for scale. The runs are interleaved in ROUNDS rounds, ratios taken within a round; the median is
# the figure. Then the losses of both over 50 steps from the same weights and blocks
# (bench/fsdp2_losses.py). Needs the prepared text data (scripts/prepare_text_data.sh).
#   bench/fsdp_speed.sh                         # WORLD=2 BATCH=16 STEPS=60 ROUNDS=3
#   WORLD=4 BATCH=8 bench/fsdp_speed.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/common.sh
world=${WORLD:-2} batch=${BATCH:-16} steps=${STEPS:-60} rounds=${ROUNDS:-3} warmup=${WARMUP:-5}
block=${BLOCK:-128} dim=${DIM:-128} depth=${DEPTH:-4} heads=${HEADS:-4} mlp=${MLP_DIM:-512}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

kiln_run() {  # strategy -> "tokens/s peak_MB"
  local dir="$work/kiln_$1"
  rm -rf "$dir"
  local rate
  rate=$(KILN_WARM_EPOCHS=1 kiln_epoch_rate "$dir" experiment=mobydick_gpt trainer.max_steps=-1 trainer.max_time=null \
    trainer.precision=32 trainer.devices="$world" trainer.strategy="$1" trainer.limit_train_batches="$steps" \
    data.batch_size="$batch" data.block_size="$block" model.dim="$dim" model.depth="$depth" model.heads="$heads" \
    model.mlp_dim="$mlp" model.dropout=0.0)
  local peak
  peak=$(cat "$dir.out" "$dir"/rank_*.log 2>/dev/null | sed -n 's/.*peak resident memory \([0-9]*\) MB.*/\1/p' | sort -g | tail -1)
  echo "$(awk -v r="$rate" -v b="$block" 'BEGIN {printf "%.1f", r * b}') $peak"
}
reference=(bench/fsdp_reference.py "$world" "$steps" "$warmup" "$batch" "$block" "$dim" "$depth" "$heads" "$mlp")

echo "GPT dim $dim, $depth blocks, $heads heads, MLP $mlp; $world workers x batch $batch x block $block; $steps timed steps"
printf '%-6s %14s %14s %14s %8s %12s %12s %12s\n' round kiln_fsdp_tok/s fsdp2_tok/s kiln_ddp_tok/s ratio kiln_peakMB fsdp2_peakMB ddp_peakMB
ratios=() mems=()
for ((r = 1; r <= rounds; r++)); do
  read -r k kmem < <(kiln_run fsdp)
  read -r p pmem ploss < <(cd bench && GLIBC_TUNABLES=$KILN_TUNED_MALLOC "$KILN_PYTHON" fsdp_reference.py "${reference[@]:1}" ../data/text/mobydick/train.txt)
  read -r d dmem < <(kiln_run ddp)
  ratios+=("$(ratio "$k" "$p")") mems+=("$(ratio "$kmem" "$pmem")")
  printf '%-6s %14s %14s %14s %8s %12s %12s %12s\n' "$r" "$k" "$p" "$d" "${ratios[-1]}" "$kmem" "$pmem" "$dmem"
done
echo "median kiln fsdp / PyTorch FSDP2 tokens/s: $(printf '%s\n' "${ratios[@]}" | median)x"
echo "median kiln / FSDP2 peak resident memory per worker: $(printf '%s\n' "${mems[@]}" | median)x"
grep -h "fsdp:\|model state on this rank" "$work/kiln_fsdp.out" | sed 's/.*- //'
grep -h "model state on this rank" "$work/kiln_ddp.out" | sed 's/.*- /ddp /'
# The same model, batch and workers take the same steps in both (bench/fsdp2_losses.py): rank 0's
# losses over 50 steps from the same initial weights and blocks, against FSDP2 and PyTorch's DDP.
BATCH=$batch BLOCK=$block DIM=$dim DEPTH=$depth HEADS=$heads MLP_DIM=$mlp \
  GLIBC_TUNABLES=$KILN_TUNED_MALLOC "$KILN_PYTHON" bench/fsdp2_losses.py "$world" 50 | tail -1
