#!/usr/bin/env bash
# data=criteo read into memory against read as a stream (data.stream=true): one epoch of
# experiment=clicks_dlrm on ROWS generated rows, in ROUNDS interleaved rounds (this machine's speed
# drifts), then the stream over the same file listed TIMES times over in one pattern
# (`data.train='{f,f,...}'`: TIMES x ROWS rows) to show that its memory does not grow with the
# data. Prints each run's samples/s (kiln's epoch line), fit time and peak resident memory
# (kiln's own line, the process's VmHWM), the whole run's wall time (with reading the files into
# memory, or counting them), and the stream/memory ratio of samples/s per round.
#   bench/criteo_stream.sh          # ROWS=1000000 ROUNDS=3 TIMES=4
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rows=${ROWS:-1000000} rounds=${ROUNDS:-3} times=${TIMES:-4}
kiln=${KILN:-build/bin/kiln}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
.venv/bin/python scripts/make_clicks_data.py --out "$work/clicks" --rows $((rows + 50000)) \
  --test-rows 1000 >/dev/null
head -n "$rows" "$work/clicks/train.tsv" > "$work/train.tsv"
tail -n 50000 "$work/clicks/train.tsv" > "$work/val.tsv"
rm "$work/clicks/train.tsv"
run() {  # NAME TRAIN-SPEC STREAM: prints samples/s, then the log's summary
  local start; start=$(date +%s.%N)
  "$kiln" train experiment=clicks_dlrm data.train="'$2'" data.val="$work/val.tsv" \
    data.test="$work/clicks/test.tsv" data.stream="$3" data.num_embeddings_per_feature=100000 \
    hydra.run.dir="$work/$1" test=false logger=null trainer.enable_progress_bar=false \
    > "$work/$1.out" 2>&1 || { tail -3 "$work/$1.out" >&2; return 1; }
  local rate fit
  rate=$(grep -o '[0-9]* samples/s' "$work/$1.out" | head -1 | cut -d' ' -f1)
  fit=$(grep -o 'fit done: .*' "$work/$1.out")
  echo "$1: $rate samples/s; $fit; whole run $(python3 -c "print('%.1f' % ($(date +%s.%N) - $start))") s" >&2
  echo "$rate"
}
echo "$rows rows of training data; batches of 512; $(nproc) cores"
for round in $(seq 1 "$rounds"); do
  memory=$(run "memory$round" "$work/train.tsv" false)
  stream=$(run "stream$round" "$work/train.tsv" true)
  python3 -c "print('round $round: stream/memory samples/s = %.3f' % ($stream / $memory))"
done
spec=$(python3 -c "print('{' + ','.join(['$work/train.tsv'] * $times) + '}')")
run "stream_x$times" "$spec" true > /dev/null
