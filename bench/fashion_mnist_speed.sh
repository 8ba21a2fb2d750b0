#!/usr/bin/env bash
# Training throughput of the same CNN (conv 32 -> conv 64 with BatchNorm and max-pool, FC 128,
# FC 10; batch 128; AdamW; 2 threads) on Fashion-MNIST: kiln against a plain PyTorch Python loop
# with DataLoader (Debian's python3-torch), run here one after the other. Prints samples/s and
# the ratio against two Python references: the usual torchvision loop (FashionMNIST dataset,
# ToTensor, Normalize; the issue's baseline, target kiln >= 1.4x) and a hand-optimized loop that
# indexes decoded numpy arrays. This machine's speed drifts by tens of percent between minutes:
# compare ratios from one run, not absolute figures across runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
batches=${BATCHES:-300}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# kiln: one epoch of `batches` training batches, nothing else (no validation, test or checkpoints).
"$kiln" train experiment=fashion_mnist hydra.run.dir="$work/kiln" trainer.max_epochs=1 \
  trainer.limit_train_batches="$batches" trainer.limit_val_batches=0 trainer.num_sanity_val_steps=0 \
  trainer.num_threads=2 test=false callbacks=none logger=null data.num_workers=2 > "$work/kiln.out" 2>&1 ||
  { cat "$work/kiln.out"; exit 1; }
kiln_rate=$(sed -n 's/.*epoch 0: .*, \([0-9.]*\) samples\/s).*/\1/p' "$work/kiln.out" | tail -1)

torchvision_rate=$(/usr/bin/python3 bench/pytorch_reference.py 20 "$batches" torchvision)
numpy_rate=$(/usr/bin/python3 bench/pytorch_reference.py 20 "$batches" numpy)

printf 'kiln                                 %8.1f samples/s\n' "$kiln_rate"
printf 'PyTorch, torchvision dataset         %8.1f samples/s   kiln is %.2fx\n' "$torchvision_rate" \
  "$(awk "BEGIN {print $kiln_rate / $torchvision_rate}")"
printf 'PyTorch, hand-optimized numpy loader %8.1f samples/s   kiln is %.2fx\n' "$numpy_rate" \
  "$(awk "BEGIN {print $kiln_rate / $numpy_rate}")"
