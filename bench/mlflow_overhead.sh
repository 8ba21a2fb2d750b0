#!/usr/bin/env bash
# What the mlflow logger costs a training run that logs every step (docs/tracking.md): one epoch of
# experiment=fashion_mnist (422 optimizer steps, trainer.log_every_n_steps=1, no validation or test)
# with `logger=csv` and with `logger=[csv,mlflow]` against a local `mlflow server` from the .venv
# (SQLite, on a free loopback port), interleaved in ROUNDS rounds (default 3). Prints each pair's
# training seconds ("fit done") and whole-process seconds (the mlflow run's end included), their
# ratios, and the median ratio of the training seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kiln=${KILN:-build/bin/kiln}
python=${KILN_PYTHON:-$PWD/.venv/bin/python}
out=$(mktemp -d)
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid "$(dirname "$python")/mlflow" server --host 127.0.0.1 \
  --port "$port" --workers 1 --backend-store-uri "sqlite:///$out/mlflow.db" \
  --artifacts-destination "$out/artifacts" --serve-artifacts >"$out/server.log" 2>&1 &
server=$!
disown "$server"
trap 'kill -KILL -- -$server 2>/dev/null; rm -rf "$out"' EXIT
until curl -sf -o /dev/null "http://127.0.0.1:$port/health"; do
  kill -0 "$server" 2>/dev/null || { tail -5 "$out/server.log" >&2; exit 1; }
  sleep 0.2
done
run() {  # prints "FIT_SECONDS WALL_SECONDS"
  local start end fit
  start=$(date +%s.%N)
  fit=$("$kiln" train experiment=fashion_mnist trainer.max_epochs=1 trainer.limit_val_batches=0 \
    trainer.num_sanity_val_steps=0 trainer.log_every_n_steps=1 test=false callbacks=none hydra.run.dir="$out/run" \
    "$@" 2>&1 |
    sed -n 's/.*fit done:.* in \([0-9.]*\) s.*/\1/p')
  end=$(date +%s.%N)
  rm -rf "$out/run"
  echo "$fit $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')"
}
export MLFLOW_TRACKING_URI=http://127.0.0.1:$port MLFLOW_EXPERIMENT_NAME=overhead
ratios=()
for round in $(seq "${ROUNDS:-3}"); do
  read -r plain_fit plain_wall < <(run logger=csv)
  read -r ml_fit ml_wall < <(run 'logger=[csv,mlflow]')
  ratios+=("$(awk -v a="$ml_fit" -v b="$plain_fit" 'BEGIN { printf "%.4f", a / b }')")
  awk -v r="$round" -v pf="$plain_fit" -v mf="$ml_fit" -v pw="$plain_wall" -v mw="$ml_wall" \
    'BEGIN { printf "round %d: training csv %.2f s, csv+mlflow %.2f s, ratio %.3f; whole process %.2f s against %.2f s, ratio %.3f\n", r, pf, mf, mf / pf, pw, mw, mw / pw }'
done
printf '%s\n' "${ratios[@]}" | sort -g | awk '{ a[NR] = $1 } END { printf "median training ratio (csv+mlflow / csv): %.3f\n", a[int((NR + 1) / 2)] }'
