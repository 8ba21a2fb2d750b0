#!/usr/bin/env bash
# Greedy generation, kiln against transformers' generate, tokens/s: a Llama made by transformers,
# SIZE=tiny (default; experiment=mobydick_llama's shape: 4 layers, hidden 128, 4 heads sharing 2
# key/value heads, vocabulary 128) or SIZE=small (4 layers, hidden 256, 8 heads sharing 4,
# vocabulary 32000: the output layer's weights dominate, read from memory at every token), 16-token
# prompts, NEW (default 64) new tokens, batch 1 and 8, float32 (and bf16 where the CPU has
# AVX-512 BF16), THREADS threads (default 2). ROUNDS rounds (default 3), each running every case
# on both sides in turn; prints each round's figures and the median ratio per case. The checksums
# of the generated ids are printed side by side: equal in float32 means the same tokens. Each side
# times CALLS generate calls (default 5) after a warm-up and reports the fastest, so that a
# stall of this machine in one 60 ms call does not decide the figure.
#   bench/generation_speed.sh            # after ninja -C build generation_speed
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${GENERATION_SPEED:-build/bin/generation_speed}
python=${PYTHON:-.venv/bin/python}
new=${NEW:-64}
threads=${THREADS:-2}
rounds=${ROUNDS:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
precisions=float32
grep -q -w avx512_bf16 /proc/cpuinfo && precisions="float32 bf16"
results="$dir/results.tsv"
for round in $(seq "$rounds"); do
  for batch in 1 8; do
    for precision in $precisions; do
      ref=$("$python" bench/generation_reference.py "$dir/model" "$batch" "$new" "$precision" "$threads" "${SIZE:-tiny}" 2>/dev/null | tail -1)
      ours=$("$bin" "$dir/model" "$dir/model/ids_$batch.safetensors" "$new" "$precision" "$threads" 2>/dev/null | tail -1)
      [ -n "$ref" ] && [ -n "$ours" ] || { echo "generation_speed.sh: a side failed (batch $batch, $precision)" >&2; exit 1; }
      echo "round $round batch $batch $precision: $ref $ours"
      printf '%s\t%s\t%s\t%s\n' "$batch" "$precision" \
        "$(echo "$ref" | sed 's/.*"tokens_per_s": \([0-9.]*\).*/\1/')" \
        "$(echo "$ours" | sed 's/.*"tokens_per_s": \([0-9.]*\).*/\1/')" >> "$results"
    done
  done
done
echo "median tokens/s (transformers, kiln) and kiln's ratio:"
"$python" - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    batch, precision, ref, ours = line.split()
    rows.setdefault((int(batch), precision), []).append((float(ref), float(ours)))
for (batch, precision), values in sorted(rows.items()):
    ref = statistics.median(v[0] for v in values)
    ours = statistics.median(v[1] for v in values)
    ratio = statistics.median(v[1] / v[0] for v in values)
    print(f"batch {batch} {precision}: transformers {ref:.0f}, kiln {ours:.0f} tokens/s, {ratio:.2f}x")
PY
