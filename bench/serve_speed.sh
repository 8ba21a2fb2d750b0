#!/usr/bin/env bash
# Serving throughput and latency on loopback: `kiln serve` with dynamic batching, the same without
# batching (serve.max_batch=1), and the simplest Python server a user would write
# (bench/serve_reference.py: http.server threads + PyTorch, the weights from `kiln export`), for the
# Fashion-MNIST CNN (PNG bodies) and two spam classifiers (text bodies): spam_bow (a bag of
# embeddings, whose forward pass costs next to nothing) and spam_transformer (a 2-block Transformer
# over up to 256 SentencePiece pieces), at concurrency 1, 8 and 64. Each point is bench/serve_load
# (a C++ closed-loop client) for SECONDS seconds; requests/s, p50 and p99 latency in ms, and failed
# requests. After the no-batching points, the same server answers a malformed JSON body at
# concurrency 64 (`http_only`: a 400 before any decoding or model work), the HTTP ceiling that no
# batching can pass. The three servers take turns within each of ROUNDS rounds (this machine's speed drifts
# between minutes); the ratios are taken within a round, printed per round, and the median over
# rounds is the figure. The models are trained for a few steps only: speed does not depend on how
# well they classify. Server and client share the machine's cores.
# The Python server gets what PyTorch's inference and CPU performance guides tell a user to do:
# torch.inference_mode(), torch.set_num_threads, the CNN in channels-last (kiln serves it so:
# experiment=fashion_mnist sets trainer.channels_last), and glibc's allocator tuned as kiln tunes
# its own (lib/trainer/process_settings.cc: mmap threshold 32 MiB, no trimming) through
# GLIBC_TUNABLES. Its spam_transformer needs python3-sentencepiece (Debian's, the same 0.1.97 as
# the libsentencepiece kiln links); without it that model's Python column is skipped.
#   bench/serve_speed.sh            # ~6 min on 2 cores with the defaults
# Environment: KILN (build/bin/kiln), LOAD (build/bin/serve_load), SECONDS_PER_POINT (3), ROUNDS (3),
# MODELS ("cnn spam_bow spam_transformer"), THREADS (LibTorch threads of kiln; 2),
# PYTHON_THREADS (per Python request thread; 1), DELAY_MS (serve.max_delay_ms with batching; 0),
# MAX_BATCH (serve.max_batch with batching; 64), TRANSFORMER_MAX_BATCH (the same for
# spam_transformer; 16: its attention over 256 positions runs from cache up to batches of ~16 and
# slower than unbatched at 64, see docs/deploy.md), KILN_FASHION_MNIST, KILN_TEXT_DATA_DIR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
load=${LOAD:-build/bin/serve_load}
seconds=${SECONDS_PER_POINT:-3}
rounds=${ROUNDS:-3}
models=(${MODELS:-cnn spam_bow spam_transformer})
threads=${THREADS:-2}
# Python's request threads each run their own forward pass: with 2 intra-op threads each, 8 of
# them thrash (7 requests/s measured at concurrency 8), so by default each gets one.
python_threads=${PYTHON_THREADS:-1}
delay=${DELAY_MS:-0}
max_batch=${MAX_BATCH:-64}
transformer_max_batch=${TRANSFORMER_MAX_BATCH:-16}
fmnist=${KILN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
text=${KILN_TEXT_DATA_DIR:-data/text}
work=$(mktemp -d)
server_pid=
cleanup() { [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
[[ -f $text/spam/train.jsonl ]] || { echo "no spam data in $text (scripts/prepare_text_data.sh)" >&2; exit 1; }

# What PyTorch's CPU performance guide says of the allocator, as kiln sets it for itself.
python_malloc=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967295
has_sentencepiece=true
"${KILN_PYTHON:-.venv/bin/python}" -c 'import sentencepiece' 2> /dev/null || {
  has_sentencepiece=false
  echo "no python3-sentencepiece: spam_transformer runs without its Python server" >&2
}

echo "== training and exporting the models (a few steps each)"
for model in "${models[@]}"; do
  case $model in
    cnn) overrides=(experiment=fashion_mnist data.root="$fmnist") ;;
    spam_bow | spam_transformer) overrides=(experiment="$model" paths.data_dir="${text%/text}") ;;
    *) echo "unknown model $model (cnn, spam_bow, spam_transformer)" >&2; exit 1 ;;
  esac
  "$kiln" train "${overrides[@]}" trainer.max_steps=20 trainer.limit_val_batches=1 \
    trainer.num_sanity_val_steps=0 test=false hydra.run.dir="$work/$model" > "$work/train_$model.log" 2>&1
  "$kiln" export run_dir="$work/$model" hydra.run.dir="$work/$model/export" > /dev/null 2>&1
done
# The SentencePiece model the spam_transformer run trained (or found in its cache).
spm_model=$(grep -o 'pieces from [^ ]*\.model' "$work/train_spam_transformer.log" 2> /dev/null | head -1 | cut -d' ' -f3)
"${KILN_PYTHON:-.venv/bin/python}" - "$fmnist" "$text" "$work" <<'EOF'
import gzip, json, sys
import numpy as np
from PIL import Image
fmnist, text, work = sys.argv[1:]
images = np.frombuffer(gzip.open(fmnist + "/t10k-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 28, 28)
for i in range(64):
    Image.fromarray(images[i]).save(f"{work}/img{i}.png")
with open(text + "/spam/test.jsonl") as f:
    for i, line in zip(range(64), f):
        open(f"{work}/text{i}.txt", "w").write(json.loads(line)["text"])
EOF
printf '{' > "$work/malformed.json"
pngs=("$work"/img*.png)
texts=("$work"/text*.txt)

wait_ready() {  # URL
  for _ in $(seq 600); do curl -sf "$1" > /dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server did not become ready: $1" >&2; exit 1
}
start_kiln() {  # MODEL PORT OVERRIDES...
  local model=$1 port=$2; shift 2
  # Every load client is on 127.0.0.1: no per-client connection cap.
  "$kiln" serve run_dir="$work/$model" serve.port="$port" serve.threads="$threads" serve.access_log=null \
    serve.max_connections_per_client=0 hydra.run.dir="$work/serve_$port" "$@" > "$work/serve_$port.log" 2>&1 &
  server_pid=$!
  wait_ready "http://127.0.0.1:$port/readyz"
}
start_python() {  # MODEL PORT
  local model=$1 port=$2 extra=()
  case $model in
    spam_bow) extra=("$text/spam/train.jsonl") ;;
    spam_transformer) extra=("$spm_model") ;;
  esac
  GLIBC_TUNABLES=$python_malloc OMP_NUM_THREADS=$python_threads "${KILN_PYTHON:-.venv/bin/python}" bench/serve_reference.py \
    "$model" "$work/$model/export" "$port" "$python_threads" "${extra[@]}" > "$work/python_$port.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do grep -q ready "$work/python_$port.log" 2>/dev/null && return 0; sleep 0.1; done
  echo "python server did not start" >&2; cat "$work/python_$port.log" >&2; exit 1
}
stop_server() { kill -TERM "$server_pid"; wait "$server_pid" || true; server_pid=; }

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk "BEGIN {printf \"%.2f\", $1 / $2}"; }

port=18600
declare -A rps
printf '%-5s %-16s %-12s %4s %10s %9s %9s %6s\n' round model server c req/s p50_ms p99_ms failed
for ((r = 1; r <= rounds; r++)); do
  for model in "${models[@]}"; do
    if [[ $model == cnn ]]; then type=image/png; files=("${pngs[@]}"); else type=text/plain; files=("${texts[@]}"); fi
    servers=(kiln_batch kiln_nobatch python)
    [[ $model == spam_transformer && $has_sentencepiece == false ]] && servers=(kiln_batch kiln_nobatch)
    for server in "${servers[@]}"; do
      port=$((port + 1))
      case $server in
        kiln_batch)
          batch=$max_batch
          [[ $model == spam_transformer ]] && batch=$transformer_max_batch
          start_kiln "$model" "$port" serve.max_batch="$batch" serve.max_delay_ms="$delay" ;;
        kiln_nobatch) start_kiln "$model" "$port" serve.max_batch=1 ;;
        python) start_python "$model" "$port" ;;
      esac
      # The answer for the first input, as a check that every server runs the same model.
      curl -s -H "Content-Type: $type" --data-binary @"${files[0]}" "http://127.0.0.1:$port/v1/predict" |
        "${KILN_PYTHON:-.venv/bin/python}" -c 'import json,sys; p=json.load(sys.stdin)["predictions"][0]; print("   first answer: class %d p=%.5f" % (p["class_index"], p["probability"]))' \
        > "$work/answer_${model}_${server}_$r"
      for c in 1 8 64; do
        read -r q p50 p99 failed < <("$load" "$port" "$c" "$seconds" "$type" "${files[@]}")
        rps[$r,$model,$server,$c]=$q
        printf '%-5s %-16s %-12s %4s %10s %9s %9s %6s\n' "$r" "$model" "$server" "$c" "$q" "$p50" "$p99" "$failed"
      done
      if [[ $server == kiln_nobatch ]]; then
        # The same server answering a malformed JSON body (400 before any decoding or model work):
        # HTTP alone, the most requests/s any batching could reach.
        # serve_load's rate counts 200s only: here every answer is a 400, so the rate is those.
        read -r q p50 p99 failed < <("$load" "$port" 64 "$seconds" application/json "$work/malformed.json" 2>/dev/null)
        q=$(awk "BEGIN {printf \"%.1f\", $failed / $seconds}")
        rps[$r,$model,http_only,64]=$q
        printf '%-5s %-16s %-12s %4s %10s %9s %9s %6s\n' "$r" "$model" "http_only" 64 "$q" "$p50" "$p99" "$failed"
      fi
      stop_server
    done
    for server in "${servers[@]}"; do sed "s/first/$model $server first/" "$work/answer_${model}_${server}_$r"; done
  done
done

echo "== ratios of requests/s at concurrency 64: median over rounds (each round's)"
for model in "${models[@]}"; do
  vs_py=() vs_nb=() ceiling=()
  for ((r = 1; r <= rounds; r++)); do
    [[ -n ${rps[$r,$model,python,64]:-} ]] && vs_py+=("$(ratio "${rps[$r,$model,kiln_batch,64]}" "${rps[$r,$model,python,64]}")")
    vs_nb+=("$(ratio "${rps[$r,$model,kiln_batch,64]}" "${rps[$r,$model,kiln_nobatch,64]}")")
    ceiling+=("$(ratio "${rps[$r,$model,http_only,64]}" "${rps[$r,$model,kiln_nobatch,64]}")")
  done
  python_figure="n/a (no Python server)"
  ((${#vs_py[@]} > 0)) && python_figure="$(printf '%s\n' "${vs_py[@]}" | median) (${vs_py[*]})"
  printf '%-16s kiln(batching)/python: %s   batching/no batching: %s (%s)   HTTP only/no batching (the most batching could gain): %s (%s)\n' \
    "$model" "$python_figure" "$(printf '%s\n' "${vs_nb[@]}" | median)" "${vs_nb[*]}" \
    "$(printf '%s\n' "${ceiling[@]}" | median)" "${ceiling[*]}"
done
