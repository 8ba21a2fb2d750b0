#!/usr/bin/env bash
# kiln report on many long runs: RUNS synthetic runs (default 100) of STEPS logged steps each
# (default 20,000; bench/report_runs.py writes them). Prints the time `kiln report` takes, the page's
# size, and the time to first render in headless Chromium: the page's own count of milliseconds
# from navigation start to the end of its renderer (data-ready-ms), and the whole browser process.
# Targets: under 1 s to generate, under 2 s to render.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
runs=${RUNS:-100}
steps=${STEPS:-20000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 bench/report_runs.py "$work/runs" "$runs" "$steps"
"$kiln" report "$work/runs" -o "$work/report.html" >/dev/null 2>&1  # warm the file cache
for i in 1 2 3; do
  start=$(date +%s%N)
  cpu=$( { /usr/bin/time -f '%U %S' "$kiln" report "$work/runs" -o "$work/report.html" 2>&1 >/dev/null; } | tail -1)
  end=$(date +%s%N)
  printf 'generate %d: %d runs x %d steps in %.3f s wall, %.2f s CPU (user+sys), page %.2f MB; load average %s\n' \
    "$i" "$runs" "$steps" "$(((end - start) / 1000000))e-3" "$(awk '{print $1 + $2}' <<<"$cpu")" \
    "$(stat -c %s "$work/report.html")e-6" "$(cut -d' ' -f1 /proc/loadavg)"
done
browser=$(command -v chromium || command -v chromium-browser || true)
if [[ -z "$browser" ]]; then
  echo "render: skipped (no chromium)"
  exit 0
fi
for i in 1 2 3; do
  start=$(date +%s%N)
  dom=$("$browser" --headless --no-sandbox --disable-gpu --user-data-dir="$work/profile" --dump-dom \
    "file://$work/report.html" 2>/dev/null)
  end=$(date +%s%N)
  ready=$(grep -o 'data-ready-ms="[0-9]*"' <<<"$dom" | grep -o '[0-9]*')
  errors=$(grep -o 'data-errors="[0-9]*"' <<<"$dom" | grep -o '[0-9]*')
  charts=$(grep -o 'data-charts="[0-9]*"' <<<"$dom" | grep -o '[0-9]*')
  printf 'render %d: first render %s ms after navigation start (%s charts, %s errors); chromium process %.2f s\n' \
    "$i" "$ready" "$charts" "$errors" "$(((end - start) / 1000000))e-3"
done
