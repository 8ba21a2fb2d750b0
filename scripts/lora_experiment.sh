#!/usr/bin/env bash
# The LoRA experiment of issue 54 (docs/finetuning.md#the-lora-experiment):
#   1. pretrain experiment=mobydick_llama (a small Llama on Moby Dick, character by character) and
#      export it as a Hugging Face folder: the base;
#   2. fine-tune the base onto the State of the Union addresses twice, for the same steps: with
#      LoRA adapters on every projection (the base frozen), and fully (every weight trains);
#   3. measure, on each held-out text, the bits per character of the base and of each fine-tune
#      (its export): the new text's before and after, and Moby Dick's after (what was forgotten).
# Prints a table and writes it to OUT/results.md. Every kiln call is a README-style command.
#   scripts/lora_experiment.sh   # PRETRAIN_STEPS=1500 STEPS=300 RANK=8 LORA_LR=0.003 FULL_LR=0.001 OUT=outputs/lora_experiment
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
out=${OUT:-outputs/lora_experiment}
steps=${STEPS:-300}
targets=${TARGETS:-q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj}
rank=${RANK:-8}
[[ -f data/text/sotu/train.txt ]] || bash scripts/prepare_text_data.sh >/dev/null
mkdir -p "$out"

run() {  # run NAME ARGS...: one kiln command, its log in OUT/NAME.log; prints its wall seconds
  local name=$1; shift
  local start=$SECONDS
  "$kiln" "$@" > "$out/$name.log" 2>&1 || { echo "lora_experiment: $name failed:" >&2; tail -5 "$out/$name.log" >&2; exit 1; }
  echo $((SECONDS - start))
}
bpc() {  # bpc FOLDER TEXT: a Hugging Face folder's bits per character on TEXT
  "$kiln" test experiment=pretrained_lm model.pretrained="$1" "data.test=[$2]" \
    hydra.run.dir="$out/eval" logger=null 2>/dev/null | sed -n 's/^test\/bpc: //p' | awk '{printf "%.4f", $1}'
}
sotu=data/text/sotu/val.txt moby=data/text/mobydick/val.txt

pretrain_s=$(run pretrain train experiment=mobydick_llama hydra.run.dir="$out/pretrain" trainer.max_steps="${PRETRAIN_STEPS:-1500}" test=false)
run export_base export run_dir="$out/pretrain" format=hf hydra.run.dir="$out/base" >/dev/null

finetune() {  # finetune NAME LR [LORA]: STEPS steps on the State of the Union, exported merged
  local name=$1 lr=$2; shift 2
  local s
  s=$(run "$name" train experiment=pretrained_lm model.pretrained="$out/base" "$@" \
    "data.train=[data/text/sotu/train.txt]" "data.val=[$sotu]" trainer.max_steps="$steps" \
    trainer.max_time=null trainer.max_epochs=100 trainer.limit_val_batches=0 trainer.num_sanity_val_steps=0 \
    optimizer.lr="$lr" scheduler=cosine scheduler.warmup_steps=20 logger=null test=false \
    hydra.run.dir="$out/$name")
  run "export_$name" export run_dir="$out/$name" format=hf hydra.run.dir="$out/${name}_hf" >/dev/null
  echo "$s"
}
lora_s=$(finetune lora "${LORA_LR:-0.003}" "model.lora={r:$rank,alpha:$((2 * rank)),target_modules:[$targets]}")
full_s=$(finetune full "${FULL_LR:-0.001}")
trained=$(sed -n 's/.*model.lora: adapters of rank [0-9]* on [0-9]* layers; \([0-9]* of [0-9]*\) parameters train.*/\1/p' "$out/lora.log" | tail -1)

{
  echo "| model | State of the Union val bpc | Moby Dick val bpc | trains | wall time |"
  echo "| --- | --- | --- | --- | --- |"
  echo "| base (mobydick_llama) | $(bpc "$out/base" "$sotu") | $(bpc "$out/base" "$moby") | every weight | ${pretrain_s} s |"
  echo "| LoRA r $rank, $steps steps | $(bpc "$out/lora_hf" "$sotu") | $(bpc "$out/lora_hf" "$moby") | $trained | ${lora_s} s |"
  echo "| full fine-tune, $steps steps | $(bpc "$out/full_hf" "$sotu") | $(bpc "$out/full_hf" "$moby") | every weight | ${full_s} s |"
} | tee "$out/results.md"
