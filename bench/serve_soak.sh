#!/usr/bin/env bash
# Load and faults: two `kiln serve` processes — the Fashion-MNIST CNN (PNG bodies) and a keyword
# spotter (commands_kws's DS-CNN, WAV bodies, trained on tone bursts this script writes) — take
# DURATION seconds of mixed valid and invalid traffic from CONCURRENCY client threads
# (bench/serve_soak.cc): every valid answer must equal `kiln predict`'s for the same file; every
# invalid request (malformed JSON, wrong field types, a PNG that is not one, a WAV whose header
# lies, a 100 MB body, a body that never finishes, a burst over serve.max_queue) must get its 4xx
# (or 503 with Retry-After) with a message. The servers' RSS is sampled every 5 s: growth after
# warm-up must stay under 10%. At the end both must answer /healthz and exit 0 on SIGTERM.
#   bench/serve_soak.sh                 # 10 minutes of load, ~11 minutes in all
#   DURATION=60 bench/serve_soak.sh     # a short check
# Environment: KILN (build/bin/kiln), SOAK (build/bin/serve_soak), DURATION (600), CONCURRENCY (64),
# WARMUP (60: when the reference RSS is taken), THREADS (LibTorch threads per server; 1),
# KILN_FASHION_MNIST. Exit 0 only when everything held.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
soak=${SOAK:-build/bin/serve_soak}
duration=${DURATION:-600}
concurrency=${CONCURRENCY:-64}
warmup=${WARMUP:-60}
threads=${THREADS:-1}
fmnist=${KILN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

echo "== data: 64 test images as PNG, tone-burst WAVs for 3 keywords, WAVs whose header lies"
"${KILN_PYTHON:-.venv/bin/python}" - "$fmnist" "$work" <<'EOF'
import gzip, os, struct, sys, wave
import numpy as np
from PIL import Image
fmnist, work = sys.argv[1:]
images = np.frombuffer(gzip.open(fmnist + "/t10k-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 28, 28)
os.makedirs(f"{work}/png")
for i in range(64):
    Image.fromarray(images[i]).save(f"{work}/png/{i:03d}.png")
def burst(path, hz, offset, rate=16000):  # 1 s: a tone from 0.2 s to 0.6 s in faint noise
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = np.random.default_rng(int(hz * 1000 + offset * 1e6))
    t = np.arange(rate) / rate
    x = np.where((t >= 0.2 + offset) & (t < 0.6 + offset), 0.4 * np.sin(2 * np.pi * hz * t), 0.0)
    x = x + 0.002 * (rng.random(rate) - 0.5)
    with wave.open(path, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(rate)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
classes = {"go": 400, "stop": 2500, "up": 1200}
for name, hz in classes.items():
    for split, n in (("train", 12), ("val", 3), ("test", 3)):
        for i in range(n):
            burst(f"{work}/speech/{split}/{name}/{i}.wav", hz, 0.02 * i + (0.01 if split != "train" else 0))
# The served WAVs: other pitches and offsets, at 16, 22.05 and 8 kHz (resampled by the pipeline).
for i, (name, hz) in enumerate(list(classes.items()) * 4):
    burst(f"{work}/wav/{i:03d}.wav", hz * (1 + 0.03 * (i // 3)), 0.03 * (i % 5), rate=[16000, 22050, 8000][i % 3])
b = open(f"{work}/wav/000.wav", "rb").read()
data = b.find(b"data")
os.makedirs(f"{work}/lies")
lies = {
    "data_size.wav": b[:data + 4] + struct.pack("<I", 4 * len(b)) + b[data + 8:],  # data chunk > file
    "truncated.wav": b[:len(b) // 2],  # the data chunk's size is that of the whole recording
    "rate_1hz.wav": b[:24] + struct.pack("<I", 1) + b[28:],
    "rate_0.wav": b[:24] + struct.pack("<I", 0) + b[28:],
    "channels_0.wav": b[:22] + struct.pack("<H", 0) + b[24:],
    "bits_0.wav": b[:34] + struct.pack("<H", 0) + b[36:],
    "no_data_chunk.wav": b[:data],
}
for name, content in lies.items():
    open(f"{work}/lies/{name}", "wb").write(content)
EOF

echo "== training the models (a few steps each) and kiln predict's answers"
"$kiln" train experiment=fashion_mnist data.root="$fmnist" trainer.max_steps=20 trainer.limit_val_batches=1 \
  trainer.num_sanity_val_steps=0 test=false hydra.run.dir="$work/cnn" > "$work/train_cnn.log" 2>&1
"$kiln" train experiment=commands_kws data.train="$work/speech/train" data.val="$work/speech/val" \
  data.test="$work/speech/test" data.classes=[go,stop,up] task.num_classes=3 task.filler_classes=[] \
  data.batch_size=8 data.waveform_transforms=null data.feature_transforms=null model.channels=16 model.blocks=1 \
  optimizer.lr=0.01 scheduler.warmup_steps=2 trainer.max_epochs=8 test=false hydra.run.dir="$work/kws" \
  > "$work/train_kws.log" 2>&1
"$kiln" predict run_dir="$work/cnn" +prediction_writer=jsonl hydra.run.dir="$work/predict_cnn" > /dev/null 2>&1
"$kiln" predict run_dir="$work/kws" +data.predict="$work/wav" +prediction_writer=jsonl \
  hydra.run.dir="$work/predict_kws" > /dev/null 2>&1
# kiln predict's rows: the CNN's in test-set order (the PNGs are test images 0..63), the
# spotter's by file.
"${KILN_PYTHON:-.venv/bin/python}" - "$work" > "$work/expected.tsv" <<'EOF'
import json, sys
work = sys.argv[1]
for i, line in zip(range(64), open(f"{work}/predict_cnn/predictions.jsonl")):
    r = json.loads(line)
    print(f"cnn\t{work}/png/{i:03d}.png\t{r['class_index']}\t{r['probability']!r}")
for line in open(f"{work}/predict_kws/predictions.jsonl"):
    r = json.loads(line)
    print(f"kws\t{r['path']}\t{r['class_index']}\t{r['probability']!r}")
EOF
echo "   $(grep -c ^cnn "$work/expected.tsv") images, $(grep -c ^kws "$work/expected.tsv") WAVs; kiln predict's" \
  "classes of the WAVs: $(grep ^kws "$work/expected.tsv" | cut -f3 | sort | uniq -c | tr -s ' ' | tr '\n' ' ')"

free_port() { "${KILN_PYTHON:-.venv/bin/python}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() {  # PORT
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$1/readyz" > /dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server on port $1 did not become ready" >&2; exit 1
}
# The spotter's queue holds 16 requests, so bursts of 64 overflow it; its threads take the 64
# workers' connections, the bursts and the stalled bodies at once. All the load comes from one
# address (127.0.0.1), so the per-client connection cap is off.
cnn_port=$(free_port)
"$kiln" serve run_dir="$work/cnn" serve.port="$cnn_port" serve.threads="$threads" serve.max_body_bytes=10485760 \
  serve.max_connections_per_client=0 serve.read_timeout_s=5 hydra.run.dir="$work/serve_cnn" > "$work/serve_cnn.log" 2>&1 &
cnn_pid=$!; pids+=("$cnn_pid")
kws_port=$(free_port)
"$kiln" serve run_dir="$work/kws" serve.port="$kws_port" serve.threads="$threads" serve.max_queue=16 \
  serve.http_threads=192 serve.max_connections_per_client=0 serve.read_timeout_s=5 hydra.run.dir="$work/serve_kws" > "$work/serve_kws.log" 2>&1 &
kws_pid=$!; pids+=("$kws_pid")
wait_ready "$cnn_port"
wait_ready "$kws_port"

echo "== ${duration} s at concurrency $concurrency (RSS reference at ${warmup} s)"
status=0
"$soak" cnn_port="$cnn_port" kws_port="$kws_port" cnn_pid="$cnn_pid" kws_pid="$kws_pid" expected="$work/expected.tsv" \
  lies="$work/lies" burst=64 seconds="$duration" concurrency="$concurrency" warmup_s="$warmup" rss_log="$work/rss.tsv" ||
  status=1

echo "== the servers' own counts (/metrics), then SIGTERM"
for port in "$cnn_port" "$kws_port"; do
  echo "   port $port: $(curl -s "http://127.0.0.1:$port/metrics" | grep '^kiln_requests_total' |
    sed 's/kiln_requests_total{code="\([0-9]*\)"} /\1:/' | tr '\n' ' ')"
done
for name in cnn kws; do
  pid=${name}_pid
  kill -TERM "${!pid}"
  code=0
  wait "${!pid}" || code=$?
  echo "   $name: exit $code after SIGTERM; access log $(wc -l < "$work/serve_$name/access.jsonl") lines"
  [[ $code == 0 ]] || status=1
done
pids=()
[[ $status == 0 ]] && echo "serve_soak.sh: PASS" || echo "serve_soak.sh: FAIL"
exit $status
