#!/usr/bin/env bash
# Resource hygiene over a long run (docs/reliability.md): `kiln train experiment=fashion_mnist`
# for MINUTES (default 30) under trainer.max_time, validating every epoch and checkpointing every
# 300 steps; samples the process's RSS (VmRSS), its open file descriptors and its threads every
# 10 s, and prints them at 1, 5, 15 and MINUTES minutes with the growth after warm-up (the
# first minute). The training goes on into as many epochs as the time allows (max_epochs 1000), on
# one thread (trainer.num_threads=1), so that it can run beside other work.
#   bench/soak.sh [MINUTES] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
out=${2:-$(mktemp -d)}
K=${KILN_BINARY:-build/bin/kiln}
mkdir -p "$out"
"$K" train experiment=fashion_mnist trainer.num_threads=1 trainer.max_epochs=1000 trainer.max_time=$((minutes * 60)) \
  +callbacks.model_checkpoint.every_n_train_steps=300 callbacks.early_stopping=null test=false \
  hydra.run.dir="$out/run" > "$out/stdout" 2> "$out/stderr" &
pid=$!
start=$(date +%s)
echo "seconds rss_kib fds threads" > "$out/samples.txt"
while kill -0 "$pid" 2> /dev/null; do
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2> /dev/null || true)
  threads=$(awk '/^Threads/ {print $2}' "/proc/$pid/status" 2> /dev/null || true)
  fds=$(ls "/proc/$pid/fd" 2> /dev/null | wc -l)
  [[ -n $rss ]] && echo "$(($(date +%s) - start)) $rss $fds $threads" >> "$out/samples.txt"
  sleep 10
done
wait "$pid" || { echo "kiln train failed:"; tail -3 "$out/stderr"; exit 1; }
python3 - "$out/samples.txt" "$minutes" <<'PY'
import sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1]).read().split("\n")[1:] if l.strip()]
minutes = int(sys.argv[2])
def at(m):
    return min(rows, key=lambda r: abs(r[0] - m * 60))
print("minute  RSS (MiB)  fds  threads")
for m in sorted({1, 5, 15, minutes}):
    if m <= minutes:
        s, rss, fds, th = at(m)
        print(f"{s / 60:6.1f}  {rss / 1024:9.1f}  {fds:3d}  {th:7d}")
warm = [r for r in rows if r[0] >= 60]
first, last = warm[0], warm[-1]
print(f"after warm-up (minute 1 to {last[0] / 60:.1f}): RSS {first[1] / 1024:.1f} -> {last[1] / 1024:.1f} MiB "
      f"({(last[1] - first[1]) / first[1] * 100:+.2f}%), max {max(r[1] for r in warm) / 1024:.1f} MiB; "
      f"fds {min(r[2] for r in warm)}..{max(r[2] for r in warm)}; threads {min(r[3] for r in warm)}..{max(r[3] for r in warm)}")
PY
grep -E "fit done|epoch [0-9]+:" "$out/stderr" | tail -2 | cut -c1-160
echo "samples: $out/samples.txt"
