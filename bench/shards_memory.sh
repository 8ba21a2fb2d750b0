#!/usr/bin/env bash
# Peak RSS of one training epoch read from shards as the data set grows: the JPEG set's shards
# (bench/jpeg_speed.sh writes them) listed 1, 4 and 16 times over in an index, so the epoch streams
# 1x, 4x and 16x the bytes (random-resized-crop 224 + flip + normalize, batches of 128, 2 threads).
# Memory should not grow with the data: the reader keeps shuffle_buffer samples and the loader's
# look-ahead, whatever the shards hold.
#   bench/shards_memory.sh [DATA_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-/work/data-bench/jpeg10k}
index=$data/shards/train.index.json
[[ -f $index ]] || { echo "no $index: run bench/jpeg_speed.sh first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
transforms='{train: [{_target_: random_resized_crop, size: 224}, {_target_: horizontal_flip},
  {_target_: to_tensor}, {_target_: normalize, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}]}'
for times in 1 4 16; do
  # The same shards `times` times over (absolute URLs), as one bigger data set.
  python3 - "$index" "$times" "$work/x$times.index.json" <<'PY'
import json, os, sys
index, times, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = json.load(open(index))
base = os.path.dirname(os.path.abspath(index))
shards = [dict(s, url=os.path.join(base, s["url"])) for s in data["shards"]] * times
json.dump(dict(data, shards=shards, samples=sum(s["samples"] for s in shards)), open(out, "w"))
PY
  gb=$(python3 -c "import json; d=json.load(open('$work/x$times.index.json')); print(round(sum(s['bytes'] for s in d['shards'])/1e9, 2))")
  /usr/bin/time -f "%M" -o "$work/rss" build/bin/jpeg_loader_speed \
    "{_target_: shards, train_shards: $work/x$times.index.json, batch_size: 128, num_workers: 2, shuffle_buffer: 1000, transforms: $transforms}" \
    1000000 1 > "$work/out"
  echo "x$times: $gb GB of shards, $(sed -n 's/images_per_s=\([0-9.]*\).*/\1/p' "$work/out") images/s, peak RSS $(( $(cat "$work/rss") / 1024 )) MiB"
done
