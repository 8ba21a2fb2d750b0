#!/usr/bin/env bash
# Training throughput of the same CNN (conv 32 -> conv 64 with BatchNorm and max-pool, FC 128,
# FC 10; batch 128; AdamW; 2 threads) on Fashion-MNIST: kiln (`experiment=fashion_mnist`:
# channels-last convolutions, loading on the training thread) against plain PyTorch Python loops
# (Debian's python3-torch; bench/pytorch_reference.py), both in float32 (trainer.precision=32:
# the experiment's `auto` would pick bf16-mixed on a CPU with AVX-512 BF16; bf16 is
# bench/bf16_speed.sh's). Prints samples/s and ratios.
#
# The headline is kiln against the fastest plain loop given what kiln gives itself: the whole
# training set in one tensor in memory, channels-last, and kiln's glibc malloc settings
# (GLIBC_TUNABLES in bench/common.sh; kiln applies them in lib/trainer/process_settings.cc, and PyTorch's own
# CPU performance guide tells Python users to tune the allocator). Two more columns say what a
# user who tunes nothing gets: the same loop with glibc's defaults (the difference is what kiln's
# automatic allocator tuning is worth, reported on its own line, not as kiln's speed-up) and the
# usual torchvision loop (FashionMNIST dataset, ToTensor, Normalize, DataLoader with 2 workers).
# This machine's speed drifts by tens of percent between minutes, so the runs are interleaved in
# ROUNDS rounds and each ratio is taken within a round; the median is the figure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/common.sh
batches=${BATCHES:-300}
rounds=${ROUNDS:-3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

kiln_rate() { kiln_epoch_rate "$work/kiln" experiment=fashion_mnist trainer.limit_train_batches="$batches" trainer.num_threads=2 trainer.precision=32; }

printf '%-6s %10s %12s %12s %12s   %s\n' round kiln py_tuned py_untuned torchvision \
  "kiln/py_tuned py_tuned/py_untuned kiln/torchvision"
r_head=() r_malloc=() r_tv=()
for ((r = 1; r <= rounds; r++)); do
  k=$(kiln_rate)
  pt=$(python_tuned bench/pytorch_reference.py 20 "$batches" tensors --channels-last)
  pu=$(python_untuned bench/pytorch_reference.py 20 "$batches" tensors --channels-last)
  tv=$(python_untuned bench/pytorch_reference.py 20 "$batches" torchvision 2)
  r_head+=("$(ratio "$k" "$pt")") r_malloc+=("$(ratio "$pt" "$pu")") r_tv+=("$(ratio "$k" "$tv")")
  printf '%-6s %10.1f %12.1f %12.1f %12.1f   %13s %19s %16s\n' "$r" "$k" "$pt" "$pu" "$tv" \
    "${r_head[-1]}" "${r_malloc[-1]}" "${r_tv[-1]}"
done
echo "median kiln / the same loop in Python with kiln's allocator settings and channels-last: $(printf '%s\n' "${r_head[@]}" | median)x  (the headline)"
echo "median worth of kiln's automatic allocator tuning (Python tuned / untuned): $(printf '%s\n' "${r_malloc[@]}" | median)x"
echo "median kiln / the usual untuned torchvision loop: $(printf '%s\n' "${r_tv[@]}" | median)x  (what a user who tunes nothing sees)"
