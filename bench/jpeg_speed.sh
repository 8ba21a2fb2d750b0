#!/usr/bin/env bash
# The JPEG input pipeline, images/s: random-resized-crop 224 + horizontal flip + normalize into
# batches of 128 on 2 loader threads/workers, for
#   torchvision  ImageFolder + DataLoader (PIL, 2 worker processes; the .venv's torchvision, same torch)
#   kiln image_folder  (one file per sample)
#   kiln shards        (the same images as WebDataset tars written by `kiln shard`, 256 MB each)
# on the photo-like set of bench/make_jpeg_set.py (10,000 images around 400x300), interleaved in
# rounds (this machine's speed drifts), with each kiln figure's ratio to torchvision's median.
#   bench/jpeg_speed.sh [DATA_DIR] [ROUNDS] [BATCHES]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
data=${1:-/work/data-bench/jpeg10k}
rounds=${2:-3}
batches=${3:-40}
[[ -d $data/train ]] || "$KILN_PYTHON" bench/make_jpeg_set.py "$data"
shards=$data/shards
if [[ ! -f $shards/train.index.json ]]; then
  build/bin/kiln shard data=image_folder data.root="$data/train" data.val_fraction=0 data.test_root=null \
    shard.out="$shards" 'shard.splits=[train]' > /dev/null
fi
transforms='{train: [{_target_: random_resized_crop, size: 224}, {_target_: horizontal_flip},
  {_target_: to_tensor}, {_target_: normalize, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}]}'
folder="{_target_: image_folder, root: $data/train, val_fraction: 0, batch_size: 128, num_workers: 2, transforms: $transforms}"
sharded="{_target_: shards, train_shards: $shards/train.index.json, batch_size: 128, num_workers: 2, transforms: $transforms}"
tv=(); folder_rates=(); shard_rates=()
for ((r = 0; r < rounds; r++)); do
  tv+=("$(python_tuned bench/jpeg_torchvision.py "$data" --batches "$batches" --rounds 1 | sed -n 's/.*images_per_s=\([0-9.]*\).*/\1/p')")
  folder_rates+=("$(build/bin/jpeg_loader_speed "$folder" "$batches" 1 | sed -n 's/images_per_s=\([0-9.]*\).*/\1/p')")
  shard_rates+=("$(build/bin/jpeg_loader_speed "$sharded" "$batches" 1 | sed -n 's/images_per_s=\([0-9.]*\).*/\1/p')")
  echo "round $r: torchvision ${tv[-1]}  kiln image_folder ${folder_rates[-1]}  kiln shards ${shard_rates[-1]} images/s"
done
tv_median=$(printf '%s\n' "${tv[@]}" | median)
folder_median=$(printf '%s\n' "${folder_rates[@]}" | median)
shard_median=$(printf '%s\n' "${shard_rates[@]}" | median)
echo "median images/s: torchvision $tv_median, kiln image_folder $folder_median ($(ratio "$folder_median" "$tv_median")x)," \
     "kiln shards $shard_median ($(ratio "$shard_median" "$tv_median")x)"
