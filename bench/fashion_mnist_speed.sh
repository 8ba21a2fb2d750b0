#!/usr/bin/env bash
# Training throughput of the same CNN (conv 32 -> conv 64 with BatchNorm and max-pool, FC 128,
# FC 10; batch 128; AdamW; 2 threads) on Fashion-MNIST: kiln against a plain PyTorch Python loop
# with DataLoader (Debian's python3-torch). Prints samples/s and ratios against two Python
# references: the usual torchvision loop (FashionMNIST dataset, ToTensor, Normalize, DataLoader with
# 2 workers; the issue's baseline, target kiln >= 1.4x) and a hand-optimized loop that indexes
# decoded numpy arrays; and the torchvision loop once more with the DataLoader loading in the main
# process (num_workers=0), which is faster on 2 cores. kiln runs as `experiment=fashion_mnist`
# configures it (channels-last convolutions, loading on the training thread) and once more in
# NCHW order, to show what trainer.channels_last is worth. This machine's speed drifts by tens of percent between minutes, so the runs are
# interleaved in ROUNDS rounds and each ratio is taken within a round; the median is the figure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
batches=${BATCHES:-300}
rounds=${ROUNDS:-3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

kiln_rate() {  # extra overrides...
  # One epoch of `batches` training batches, nothing else (no validation, test or checkpoints).
  "$kiln" train experiment=fashion_mnist hydra.run.dir="$work/kiln" trainer.max_epochs=1 \
    trainer.limit_train_batches="$batches" trainer.limit_val_batches=0 trainer.num_sanity_val_steps=0 \
    trainer.num_threads=2 test=false callbacks=none logger=null "$@" > "$work/kiln.out" 2>&1 ||
    { cat "$work/kiln.out" >&2; exit 1; }
  sed -n 's/.*epoch 0: .*, \([0-9.]*\) samples\/s).*/\1/p' "$work/kiln.out" | tail -1
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk "BEGIN {printf \"%.2f\", $1 / $2}"; }

printf '%-6s %10s %10s %12s %12s %10s   %s\n' round kiln kiln_nchw torchvision tv_0workers numpy \
  "kiln/torchvision kiln/tv_0workers kiln/numpy kiln/kiln_nchw"
r_tv=() r_t0=() r_np=() r_cl=()
for ((r = 1; r <= rounds; r++)); do
  k=$(kiln_rate)
  tv=$(/usr/bin/python3 bench/pytorch_reference.py 20 "$batches" torchvision)
  kn=$(kiln_rate trainer.channels_last=false)
  np=$(/usr/bin/python3 bench/pytorch_reference.py 20 "$batches" numpy)
  t0=$(/usr/bin/python3 bench/pytorch_reference.py 20 "$batches" torchvision 0)
  r_tv+=("$(ratio "$k" "$tv")") r_t0+=("$(ratio "$k" "$t0")") r_np+=("$(ratio "$k" "$np")") r_cl+=("$(ratio "$k" "$kn")")
  printf '%-6s %10.1f %10.1f %12.1f %12.1f %10.1f   %16s %16s %10s %14s\n' "$r" "$k" "$kn" "$tv" "$t0" "$np" \
    "${r_tv[-1]}" "${r_t0[-1]}" "${r_np[-1]}" "${r_cl[-1]}"
done
printf 'median ratios: kiln is %sx the torchvision loop (target 1.4), %sx it with 0 workers, %sx the numpy loop; channels-last is worth %sx\n' \
  "$(printf '%s\n' "${r_tv[@]}" | median)" "$(printf '%s\n' "${r_t0[@]}" | median)" "$(printf '%s\n' "${r_np[@]}" | median)" \
  "$(printf '%s\n' "${r_cl[@]}" | median)"
