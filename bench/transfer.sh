#!/usr/bin/env bash
# Issue 21's transfer measurement: pretrain on Fashion-MNIST classes 0-4 (experiment=fmnist_pretrain),
# then fine-tune on classes 5-9 from 100 images per class (experiment=fmnist_finetune) against the
# same recipe from scratch (same images, epochs and optimizer; nothing loaded, nothing frozen), for
# each seed in SEEDS (default "12345 1 2"; each seed draws another 500 training images, the same
# for both arms). Prints one line per run and the mean of each arm. Extra arguments are overrides
# for every run; FT_ARGS (a space-separated list) are overrides for the fine-tuned arm only.
#   bench/transfer.sh                    # the shipped recipe
#   SEEDS=12345 bench/transfer.sh model=cnn
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
seeds=${SEEDS:-12345 1 2}

test_acc() { sed -n 's/.*test: test\/acc \([0-9.]*\) .*/\1/p' "$1" | tail -1; }
wall() { sed -n 's/^real \([0-9.]*\)$/\1/p' "$1"; }
run() {  # run NAME OVERRIDES...: one training run, its log in $out/NAME.log
  local name=$1; shift
  { TIMEFORMAT='real %R'; time "$kiln" train hydra.run.dir="$out/$name" "$@"; } > "$out/$name.log" 2>&1 ||
    { tail -5 "$out/$name.log" >&2; exit 1; }
}

if [[ ! -f "$out/pre/checkpoints/last.ckpt" ]]; then
  run pre experiment=fmnist_pretrain "$@"
fi
printf 'pretrained on classes 0-4: test accuracy %s, %s s\n' "$(test_acc "$out/pre.log")" "$(wall "$out/pre.log")"

for seed in $seeds; do
  run "ft_$seed" experiment=fmnist_finetune model.init_from="$out/pre/checkpoints/last.ckpt" \
    seed="$seed" data.samples_seed="$seed" ${FT_ARGS:-} "$@"
  run "scratch_$seed" experiment=fmnist_finetune model.init_from=null \
    callbacks.backbone_finetuning=null seed="$seed" data.samples_seed="$seed" "$@"
  printf 'seed %s: fine-tuned %s (%s s), from scratch %s (%s s)\n' "$seed" \
    "$(test_acc "$out/ft_$seed.log")" "$(wall "$out/ft_$seed.log")" \
    "$(test_acc "$out/scratch_$seed.log")" "$(wall "$out/scratch_$seed.log")"
done
for arm in ft scratch; do
  for seed in $seeds; do test_acc "$out/${arm}_$seed.log"; done |
    awk -v arm="$arm" '{s += $1; n++} END {printf "%s mean: %.4f over %d seeds\n", arm, s / n, n}'
done
echo "runs in $out"
