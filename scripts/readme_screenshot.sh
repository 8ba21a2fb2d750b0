#!/usr/bin/env bash
# Draws the README's picture, docs/images/report.png: two short runs of experiment=fashion_mnist
# at two learning rates, `kiln report` of them, and the page as headless Chromium draws it (the
# flags of tests/app/report_test.cc). Run it again after a change to the report page and commit
# the picture. KILN names the binary (default build/bin/kiln), OUT the picture; about 20 s on 2
# cores. It refuses to write a picture of a page that reported errors or drew no chart.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
out=${OUT:-docs/images/report.png}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome-stable || true)
if [[ -z "$browser" ]]; then
  echo "readme_screenshot.sh: chromium is not installed (apt-get install chromium)" >&2
  exit 1
fi
work=$(mktemp -d /tmp/kiln-readme.XXXXXX)
trap 'rm -rf "$work"' EXIT

# 4 epochs of 50 batches, validated every 10 (early stopping off, so both runs go the distance),
# a point logged every 2 steps: enough for curves, a few seconds a run.
for lr in 0.002 0.02; do
  if ! "$kiln" train experiment=fashion_mnist optimizer.lr=$lr trainer.max_epochs=4 \
    trainer.limit_train_batches=50 trainer.val_check_interval=10 trainer.limit_val_batches=5 \
    trainer.limit_test_batches=20 trainer.log_every_n_steps=2 '~callbacks.early_stopping' \
    hydra.run.dir="$work/runs/lr_$lr" >"$work/train.log" 2>&1; then
    tail -5 "$work/train.log" >&2
    echo "readme_screenshot.sh: kiln train failed (log above)" >&2
    exit 1
  fi
done
"$kiln" report "$work/runs" -o "$work/report.html" --title "kiln report: two runs of experiment=fashion_mnist"

page="file://$work/report.html"
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$work/profile")
dom=$("$browser" "${flags[@]}" --dump-dom "$page" 2>/dev/null)
errors=$(grep -o 'data-errors="[0-9]*"' <<<"$dom" | grep -o '[0-9]*' || true)
charts=$(grep -o 'data-charts="[0-9]*"' <<<"$dom" | grep -o '[0-9]*' || true)
if [[ "$errors" != 0 || -z "$charts" || "$charts" == 0 ]]; then
  echo "readme_screenshot.sh: the page rendered with errors=${errors:-?} and charts=${charts:-?}; no picture written" >&2
  exit 1
fi
# 1280 wide, and tall enough for the runs table, the runs compared and the first run's curves.
"$browser" "${flags[@]}" --window-size=1280,2020 --screenshot="$work/report.png" "$page" \
  >"$work/chromium.log" 2>&1 || { tail -3 "$work/chromium.log" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
cp "$work/report.png" "$out"
echo "$out: $(($(stat -c %s "$out") / 1024)) KB, $charts charts, no errors"
