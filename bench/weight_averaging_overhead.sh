#!/usr/bin/env bash
# The time weight_averaging's EMA adds per optimizer step on experiment=fashion_mnist: one epoch
# (422 steps) without and with `+callbacks.ema` (decay 0.999), interleaved in ROUNDS rounds (default
# 3), validation once, no test; prints each pair's training seconds (the "fit done" line) and the ratio.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fit_seconds() {  # the seconds in "fit done: ... samples in 9.9 s"
  "$kiln" train experiment=fashion_mnist trainer.max_epochs=1 trainer.precision=32 test=false \
    hydra.run.dir="$out/run" "$@" 2>&1 | sed -n 's/.*fit done:.* in \([0-9.]*\) s.*/\1/p'
  rm -rf "$out/run"
}
for round in $(seq "${ROUNDS:-3}"); do
  plain=$(fit_seconds)
  ema=$(fit_seconds +callbacks.ema._target_=weight_averaging +callbacks.ema.decay=0.999)
  awk -v r="$round" -v p="$plain" -v e="$ema" \
    'BEGIN { printf "round %d: without %.2f s, with EMA %.2f s, ratio %.3f (%.2f ms per step added)\n", r, p, e, e / p, (e - p) * 1000 / 422 }'
done
