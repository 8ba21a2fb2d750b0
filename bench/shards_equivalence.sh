#!/usr/bin/env bash
# Text and speech from shards train exactly what they train from files: `kiln shard` writes the
# splits of experiment=mobydick_gpt (text_corpus) and experiment=commands_kws (audio_folder), each
# experiment trains once from the files and once from the shards (same seed), and the exported
# weights are compared tensor by tensor (the safetensors metadata names the checkpoint, so the
# files differ there). Prints each run's test line, wall time and peak RSS. About 9 minutes.
#   scripts/prepare_text_data.sh && scripts/prepare_speech_data.sh && bench/shards_equivalence.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
K=${KILN_BINARY:-build/bin/kiln}
O=${1:-$(mktemp -d)}
mkdir -p "$O/runs"
same_weights() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
    return {k: (v['dtype'], v['shape'], b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]) for k, v in h.items()}
a, b = load(sys.argv[1]), load(sys.argv[2])
same = a.keys() == b.keys() and all(a[k] == b[k] for k in a)
print(f"{len(a)} tensors, {sum(len(v[2]) for v in a.values())} bytes: {'bitwise equal' if same else 'DIFFERENT'}")
sys.exit(0 if same else 1)
PY
}
for exp in mobydick_gpt commands_kws; do
  $K shard experiment=$exp shard.out="$O/$exp" hydra.run.dir="$O/runs/${exp}_shard" > /dev/null 2>&1
  echo "== $exp: shards $(du -sh "$O/$exp" | cut -f1)"
  for v in files shards; do
    extra=()
    if [[ $v == shards ]]; then
      for s in train val test; do
        [[ $exp == mobydick_gpt ]] && extra+=("data.$s=[$O/$exp/$s.index.json]") || extra+=("data.$s=$O/$exp/$s.index.json")
      done
    fi
    /usr/bin/time -f "$exp from $v: %e s, peak RSS %M KB" $K train experiment=$exp "${extra[@]}" \
      hydra.run.dir="$O/runs/${exp}_$v" 2>&1 | grep -E "\] - test: | KB$" | cut -c1-160
    $K export ckpt_path="$O/runs/${exp}_$v/checkpoints/last.ckpt" hydra.run.dir="$O/runs/${exp}_${v}_export" > /dev/null 2>&1
  done
  echo -n "$exp weights: "
  same_weights "$O/runs/${exp}_files_export/model.safetensors" "$O/runs/${exp}_shards_export/model.safetensors"
done
