#!/usr/bin/env bash
# What the mlflow logger costs a training run that logs every step (docs/tracking.md): one epoch of
# experiment=fashion_mnist (422 optimizer steps, trainer.log_every_n_steps=1, no validation or test)
# with `logger=csv` and with `logger=[csv,mlflow]` against a local `mlflow server` from the .venv
# (SQLite, on a free loopback port), interleaved in ROUNDS rounds (default 3). Prints each pair's
# training seconds ("fit done") and whole-process seconds (the mlflow run's end included), their
# ratios, the kiln process's CPU seconds (user + system, its sender thread included: what the
# client costs, apart from the server), the server's CPU seconds during the mlflow run (what it
# takes from training on a shared machine), and the median ratios. EPOCHS=N trains N epochs a run.
# SERVER_NICE=19 runs the server at the lowest CPU priority: on this two-core machine the server
# otherwise takes its CPU from the training threads, which a tracking server on its own machine
# does not.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
python=${KILN_PYTHON:-$PWD/.venv/bin/python}
out=$(mktemp -d)
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid nice -n "${SERVER_NICE:-0}" "$(dirname "$python")/mlflow" server --host 127.0.0.1 \
  --port "$port" --workers 1 --backend-store-uri "sqlite:///$out/mlflow.db" \
  --artifacts-destination "$out/artifacts" --serve-artifacts >"$out/server.log" 2>&1 &
server=$!
disown "$server"
trap 'kill -KILL -- -$server 2>/dev/null; rm -rf "$out"' EXIT
until curl -sf -o /dev/null "http://127.0.0.1:$port/health"; do
  kill -0 "$server" 2>/dev/null || { tail -5 "$out/server.log" >&2; exit 1; }
  sleep 0.2
done
run() {  # prints "FIT_SECONDS WALL_SECONDS CPU_SECONDS" (CPU: the kiln process's user + system)
  local start end fit cpu
  start=$(date +%s.%N)
  /usr/bin/time -f 'cpu %U %S' -o "$out/time" "$kiln" train experiment=fashion_mnist \
    trainer.max_epochs="${EPOCHS:-1}" trainer.limit_val_batches=0 trainer.num_sanity_val_steps=0 \
    trainer.log_every_n_steps=1 test=false callbacks=none hydra.run.dir="$out/run" "$@" \
    >"$out/log" 2>&1
  end=$(date +%s.%N)
  fit=$(sed -n 's/.*fit done:.* in \([0-9.]*\) s.*/\1/p' "$out/log")
  cpu=$(awk '/^cpu/ { print $2 + $3 }' "$out/time")
  rm -rf "$out/run"
  echo "$fit $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }') $cpu"
}
export MLFLOW_TRACKING_URI=http://127.0.0.1:$port MLFLOW_EXPERIMENT_NAME=overhead
server_cpu() {  # CPU seconds the server's processes have used so far (its workers included)
  local pid ticks=0 stat
  for pid in $(ps -o pid= -s "$server"); do
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    stat=${stat##*) }  # the fields after the command name: utime and stime are the 12th and 13th
    read -r -a f <<<"$stat"
    ticks=$((ticks + f[11] + f[12]))
  done
  awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
}
ratios=()
cpu_ratios=()
for round in $(seq "${ROUNDS:-3}"); do
  read -r plain_fit plain_wall plain_cpu < <(run logger=csv)
  before=$(server_cpu)
  read -r ml_fit ml_wall ml_cpu < <(run 'logger=[csv,mlflow]')
  served=$(awk -v a="$before" -v b="$(server_cpu)" 'BEGIN { printf "%.2f", b - a }')
  ratios+=("$(awk -v a="$ml_fit" -v b="$plain_fit" 'BEGIN { printf "%.4f", a / b }')")
  cpu_ratios+=("$(awk -v a="$ml_cpu" -v b="$plain_cpu" 'BEGIN { printf "%.4f", a / b }')")
  awk -v r="$round" -v pf="$plain_fit" -v mf="$ml_fit" -v pw="$plain_wall" -v mw="$ml_wall" \
    -v pc="$plain_cpu" -v mc="$ml_cpu" -v sc="$served" \
    'BEGIN { printf "round %d: training csv %.2f s, csv+mlflow %.2f s, ratio %.3f; whole process %.2f s against %.2f s, ratio %.3f; kiln CPU %.2f s against %.2f s, ratio %.3f; server CPU %.2f s\n", r, pf, mf, mf / pf, pw, mw, mw / pw, pc, mc, mc / pc, sc }'
done
median() { sort -g | awk '{ a[NR] = $1 } END { printf "%.3f", a[int((NR + 1) / 2)] }'; }
echo "median training ratio (csv+mlflow / csv): $(printf '%s\n' "${ratios[@]}" | median)"
echo "median kiln CPU ratio (csv+mlflow / csv): $(printf '%s\n' "${cpu_ratios[@]}" | median)"
