#!/usr/bin/env bash
# The GPU check (issue "GPUs"): kiln's CUDA tests, the README models' accuracy and wall time on the
# GPU, and the GPU speed bench (kiln against PyTorch Lightning and the raw loop), as one JSON.
#
# The lent GPU machines (../.library/device) have CUDA's driver, torch 2.11.0+cu130 (kiln's pinned
# LibTorch), Lightning and nvidia-smi, but none of kiln's other libraries and no network, and a call
# carries at most 64 MiB. So the check travels as a build made here, in two back-to-back calls (the
# machine keeps what the first unpacked while it stays warm, 30 s):
#   here:    scripts/gpu_check.sh pack     # .gpu/sys.txz (kiln's non-torch system libraries, 55 MB),
#                                          # .gpu/kiln.txz (kiln installed and stripped, with the
#                                          # CUDA test binary), .gpu/fashion-mnist (the data, 31 MB)
#   call 1:  bash scripts/gpu_check.sh unpack && bash scripts/gpu_check.sh tests
#            carry: .gpu/sys.txz .gpu/kiln.txz data/text/mobydick
#            the CUDA tests (tests/cuda, `ctest -L cuda`'s binary), mobydick_gpt's accuracy, then
#            bench/gpu_speed.sh for the GPT (kiln eager and with CUDA graphs, Lightning, the raw loop)
#   call 2:  bash scripts/gpu_check.sh bench
#            carry: .gpu/fashion-mnist data/text/mobydick
#            fashion_mnist's accuracy (eager and with trainer.cuda_graphs), `kiln serve` on the GPU
#            against the CPU, then bench/gpu_speed.sh for the CNN
#   or, for fine-tuning, sharding and recommendation (issues 54, 55, 56), one call:
#   call:    bash scripts/gpu_check.sh unpack && bash scripts/gpu_check.sh models
#            carry: .gpu/sys.txz .gpu/kiln.txz data/text/mobydick
#            the CUDA tests (fsdp on the GPU, with CPU offload, among them) while the click data is
#            generated, then bench/lora_speed.sh (kiln's LoRA step against Hugging Face's Trainer
#            with peft, float32 and bf16-mixed), clicks_dlrm on the machine's CPU (the AUC to match)
#            and bench/dlrm_speed.sh on the GPU (kiln against the DLRM reference's recipe)
# Each writes $OUT/gpu_check_tests.json, gpu_check_bench.json or gpu_check_models.json
# (./gpu-check-out without $OUT) and a log per step; a step that fails is recorded and the rest
# still run.
# tests-local, bench-local and models-local run the same steps against this checkout's build and
# .venv (on a machine without a GPU, with ACCELERATOR=cpu GRAPHS=0 and short runs, they check the
# script itself).
# ROUNDS [2]: the speed bench's rounds; GRAPHS [1]: kiln also with trainer.cuda_graphs=true.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
mode=${1:-}
SYS=/opt/kiln-sys

pack() {
  set -e
  local build=${BUILD:-build} stage=.gpu/stage
  rm -rf .gpu && mkdir -p "$stage/prefix/bin" "$stage/sys"
  grep -qxF '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  cmake --install "$build" --prefix "$ROOT/$stage/prefix" > /dev/null
  cp "$build/bin/cuda_test" "$build/bin/speech_cli_test" "$stage/prefix/bin/"
  find "$stage/prefix" -type f \( -name '*.so*' -o -path '*/bin/*' \) -exec strip --strip-unneeded {} + 2> /dev/null || true
  rm -rf "$stage/prefix/include"
  # The system libraries kiln's libraries and the test need, less LibTorch's, CUDA's and glibc's
  # (the GPU machine has those).
  for f in "$stage"/prefix/lib/*.so "$stage"/prefix/lib/kiln/plugins/*.so "$stage"/prefix/bin/*_test; do ldd "$f"; done |
    awk '$3 ~ /^\// && !seen[$1]++ {print $3}' |
    grep -v -E '/(\.venv|torch|nvidia)/|/usr/local/cuda|/libkiln_|/(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
    xargs -r cp -L -t "$stage/sys/"
  tar -C "$stage" -cf - sys | xz -T2 -6 > .gpu/sys.txz
  tar -C "$stage" -cf - prefix | xz -T2 -6 > .gpu/kiln.txz
  mkdir -p .gpu/fashion-mnist && cp /usr/share/datasets/fashion-mnist/*.gz .gpu/fashion-mnist/
  rm -rf "$stage"
  du -b .gpu/sys.txz .gpu/kiln.txz .gpu/fashion-mnist
}

now() { date +%s.%N; }
# step NAME COMMAND...: runs it with its output in $out/NAME.log, records exit code and seconds
# (124: it ran past STEP_TIMEOUT, 300 s).
step() {
  local name=$1; shift
  local t0; t0=$(now)
  if declare -F "$1" > /dev/null; then
    "$@" > "$out/$name.log" 2>&1  # a function of this script (it bounds its own waits)
  else
    timeout "${STEP_TIMEOUT:-300}" "$@" > "$out/$name.log" 2>&1
  fi
  local rc=$?
  local secs; secs=$(awk "BEGIN {printf \"%.1f\", $(now) - $t0}")
  echo "$name: exit $rc, $secs s" | tee -a "$out/steps.txt"
  printf '{"step": "%s", "exit": %d, "seconds": %s}\n' "$name" "$rc" "$secs" >> "$out/steps.jsonl"
  [[ -z ${LOGS_TGZ:-} ]] || save_logs
  return 0
}

# With LOGS_TGZ set (the models mode, whose steps leave more files than a device call brings back),
# the logs so far as one tarball there, replaced after each step (written aside, then renamed).
save_logs() {
  tar -C "$out" -czf "$LOGS_TGZ.$BASHPID" . && mv -f "$LOGS_TGZ.$BASHPID" "$LOGS_TGZ"
}

# The value of `key: number` in a run's test_metrics.yaml.
metric() { sed -n "s|^$2: \([-0-9.e]*\)$|\1|p" "$1/test_metrics.yaml" 2>/dev/null | head -1; }

setup_out() {
  out=${OUT:-$ROOT/gpu-check-out}
  mkdir -p "$out" && : > "$out/steps.txt" && : > "$out/steps.jsonl"
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "no nvidia-smi"
    python3 -c 'import torch, pytorch_lightning as pl; print("torch", torch.__version__, "lightning", pl.__version__)' 2>&1
    nproc
  } > "$out/machine.txt"
}

# gpu_check.json: the machine, the steps' exit codes and times, and what the steps measured.
write_json() {
  local name=$1; shift
  {
    echo "{"
    echo "  \"machine\": \"$(head -1 "$out/machine.txt" | tr -d '"')\","
    echo "  \"software\": \"$(sed -n 2p "$out/machine.txt" | tr -d '"')\","
    for kv in "$@"; do echo "  \"${kv%%=*}\": ${kv#*=},"; done
    echo "  \"steps\": [$(paste -sd, "$out/steps.jsonl")]"
    echo "}"
  } > "$out/$name"
  cat "$out/steps.txt" "$out/$name"
}

# serve_answers KILN RUN DEVICE OUT: `kiln serve` of RUN with serve.device=DEVICE answers 64 test images
# (scripts/python/serve_probe.py), written to OUT.
serve_answers() {
  local port=$((20000 + RANDOM % 20000))
  "$1" serve run_dir="$2" serve.device="$3" serve.port=$port &
  local pid=$!
  "$KILN_PYTHON" scripts/python/serve_probe.py $port 64 $pid > "$4"
  local rc=$?
  kill $pid; wait $pid 2> /dev/null
  return $rc
}

# The CUDA tests (ctest -L cuda's binary) and mobydick_gpt's accuracy, side by side.
tests_steps() {
  local kiln=$1 cuda_test=$2 runs; runs=$(mktemp -d)
  setup_out
  step cuda_tests env KILN_TEST_KILN="$kiln" "$cuda_test" --gtest_output=xml:"$out/cuda_test.xml" &
  # The speech models (keyword spotting, CTC recognition with its decoding) train on the GPU:
  # their CLI tests pick it by trainer.accelerator=auto.
  [[ -z ${SPEECH_TEST:-} ]] || step speech_tests env KILN_TEST_KILN="$kiln" "$SPEECH_TEST" \
    --gtest_filter='SpeechCliTest.KeywordSpotterTrainsTestsAndLabelsWavFilesButNotMp3:SpeechCliTest.CtcRecognizerTrainsReportsCerAndWerAndTranscribesWavFiles' &
  step mobydick_gpt "$kiln" train experiment=mobydick_gpt trainer.accelerator="${ACCELERATOR:-cuda}" \
    hydra.run.dir="$runs/gpt" ${GPT_OVERRIDES:-} &
  wait
  cp "$runs/gpt/test_metrics.yaml" "$out/gpt_test_metrics.yaml" 2> /dev/null
  step gpu_speed_gpt env KILN="$kiln" DEVICE="${ACCELERATOR:-cuda}" MODELS=gpt ROUNDS="${ROUNDS:-2}" \
    KILN_GRAPHS="${GRAPHS:-1}" GPU_SPEED_JSON="$out/gpu_speed_gpt.json" bash bench/gpu_speed.sh
  write_json gpu_check_tests.json "cuda_tests=\"$(junit_line "$out/cuda_test.xml")\"" \
    "mobydick_gpt_test_bpc=\"$(metric "$runs/gpt" test/bpc)\"" \
    "speed_gpt=$(cat "$out/gpu_speed_gpt.json" 2> /dev/null || echo null)"
  rm -rf "$runs"
}

# fashion_mnist's accuracy and wall time, then the speed bench alone on the GPU.
bench_steps() {
  local kiln=$1 runs; runs=$(mktemp -d)
  setup_out
  step fashion_mnist "$kiln" train experiment=fashion_mnist trainer.accelerator="${ACCELERATOR:-cuda}" \
    hydra.run.dir="$runs/fashion" ${FASHION_OVERRIDES:-}
  cp "$runs/fashion/test_metrics.yaml" "$out/fashion_test_metrics.yaml" 2> /dev/null
  # The same job with the training step replayed from CUDA graphs.
  step fashion_mnist_graphs "$kiln" train experiment=fashion_mnist trainer.accelerator="${ACCELERATOR:-cuda}" \
    trainer.cuda_graphs="$([[ ${GRAPHS:-1} == 1 ]] && echo true || echo false)" hydra.run.dir="$runs/fashion_graphs" ${FASHION_OVERRIDES:-}
  step serve_gpu serve_answers "$kiln" "$runs/fashion" "${ACCELERATOR:-cuda}" "$out/serve_gpu.json"
  step serve_cpu serve_answers "$kiln" "$runs/fashion" cpu "$out/serve_cpu.json"
  local serve_diff
  serve_diff=$("$KILN_PYTHON" -c 'import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
d = max(abs(x - y) for p, q in zip(a["probabilities"], b["probabilities"]) for x, y in zip(p, q))
print(json.dumps({"answers": len(a["classes"]), "same_classes": a["classes"] == b["classes"], "max_probability_difference": d}))' \
    "$out/serve_gpu.json" "$out/serve_cpu.json" 2> /dev/null || echo null)
  # Where a step's host time goes with the graphs (the simple profiler's phases), for the note.
  step profile_cnn_graphs "$kiln" train experiment=fashion_mnist trainer.accelerator="${ACCELERATOR:-cuda}" \
    trainer.cuda_graphs="$([[ ${GRAPHS:-1} == 1 ]] && echo true || echo false)" trainer.max_epochs=2 \
    trainer.limit_train_batches=400 trainer.profiler=simple test=false hydra.run.dir="$runs/profile"
  step gpu_speed_cnn env KILN="$kiln" DEVICE="${ACCELERATOR:-cuda}" MODELS=cnn ROUNDS="${ROUNDS:-2}" \
    KILN_GRAPHS="${GRAPHS:-1}" GPU_SPEED_JSON="$out/gpu_speed_cnn.json" bash bench/gpu_speed.sh
  write_json gpu_check_bench.json "fashion_mnist_test_acc=\"$(metric "$runs/fashion" test/acc)\"" \
    "fashion_mnist_graphs_test_acc=\"$(metric "$runs/fashion_graphs" test/acc)\"" \
    "serve_gpu_against_cpu=$serve_diff" \
    "speed_cnn=$(cat "$out/gpu_speed_cnn.json" 2> /dev/null || echo null)"
  rm -rf "$runs"
}

# The CUDA tests, then the LoRA step and clicks_dlrm on the GPU against their references (issues 54
# and 56). CLICK_ROWS [1000000] rows of click data (TABLE [100000] rows per table, bench/dlrm_speed.sh's
# size); ROUNDS [2] for both benches; LORA_PRECISIONS ["32 bf16-mixed"].
models_steps() {
  local kiln=$1 cuda_test=$2 runs; runs=$(mktemp -d)
  local clicks=$runs/clicks table=${TABLE:-100000} device=${ACCELERATOR:-cuda}
  # What comes back: gpu_check_models.json, steps.txt and logs.tgz (every step's log); the steps
  # write in $runs/out.
  local final=${OUT:-$ROOT/gpu-check-out}
  mkdir -p "$final" && rm -f "$final/logs.tgz"
  OUT=$runs/out setup_out
  export LOGS_TGZ=$final/logs.tgz
  STEP_TIMEOUT=${CUDA_TESTS_TIMEOUT:-200} step cuda_tests env KILN_TEST_KILN="$kiln" "$cuda_test" \
    --gtest_output=xml:"$out/cuda_test.xml" &
  # Meanwhile, on the CPU: the click data, its rows parsed for the Python sides (cached beside it),
  # and the AUC the GPU's run is held to: the same job on this machine's CPU, on the same rows.
  {
    step clicks_data "$KILN_PYTHON" scripts/make_clicks_data.py --out "$clicks" --rows "${CLICK_ROWS:-1000000}"
    step clicks_parse "$KILN_PYTHON" bench/dlrm_reference.py --train "$clicks/train.tsv" --test "$clicks/test.tsv" \
      --max-rows 0 --num-embeddings "$table" --prepare
    step clicks_dlrm_cpu "$kiln" train experiment=clicks_dlrm trainer.accelerator=cpu logger=null \
      data.train="$clicks/train.tsv" data.test="$clicks/test.tsv" data.num_embeddings_per_feature="$table" \
      hydra.run.dir="$runs/dlrm_cpu"
  } &
  wait
  step lora_speed env KILN="$kiln" DEVICE="$device" ROUNDS="${ROUNDS:-2}" \
    PRECISIONS="${LORA_PRECISIONS:-32 bf16-mixed}" bash bench/lora_speed.sh
  step dlrm_speed env KILN="$kiln" DEVICE="$device" DATA="$clicks" TABLE="$table" ROUNDS="${ROUNDS:-2}" \
    IMPLS="${DLRM_IMPLS:-reference_sgd reference_rowwise}" FLOORS="${DLRM_FLOORS:-0}" LOCK="$runs/lock" \
    bash bench/dlrm_speed.sh
  local lora dlrm
  lora=$(grep 'median: ' "$out/lora_speed.log" | json_lines)
  dlrm=$(sed -n '/^medians:/,$p' "$out/dlrm_speed.log" | json_lines)
  write_json gpu_check_models.json \
    "cuda_tests=\"$(junit_line "$out/cuda_test.xml")\"" \
    "clicks_teacher=$(cat "$clicks/teacher.json" 2> /dev/null || echo null)" \
    "clicks_dlrm_cpu_test_auc=\"$(metric "$runs/dlrm_cpu" test/auc)\"" \
    "lora_speed=[$lora]" "dlrm_speed=[$dlrm]"
  save_logs
  cp "$out/gpu_check_models.json" "$out/steps.txt" "$final/"
  rm -rf "$runs"
}

# The lines of stdin as a JSON list's items (quotes and backslashes dropped).
json_lines() { tr -d '"\\' | awk 'NR > 1 {printf ", "} {printf "\"%s\"", $0}'; }

# "tests=... failures=... skipped=N" of a gtest XML file.
junit_line() {
  local line skipped
  line=$(grep -o 'tests="[0-9]*" failures="[0-9]*" disabled="[0-9]*" errors="[0-9]*"' "$1" 2> /dev/null | head -1)
  skipped=$(grep -c '<skipped' "$1" 2> /dev/null)
  echo "${line//\"/} skipped=${skipped:-0}"
}

# Call 1 on the GPU machine: the system libraries to /opt/kiln-sys, kiln to /tmp/kiln, and
# wrappers that run kiln and its test with them (Python keeps the machine's own libraries).
unpack() {
  for f in .gpu/sys.txz .gpu/kiln.txz; do
    [[ -f $f ]] || { echo "gpu_check: $f is missing: run scripts/gpu_check.sh pack here and carry it" >&2; exit 2; }
  done
  rm -rf "$SYS" /tmp/kiln && mkdir -p "$SYS" /tmp/kiln
  tar -C "$SYS" --strip-components=1 -xJf .gpu/sys.txz && tar -C /tmp/kiln -xJf .gpu/kiln.txz || exit 2
  local torch_lib
  torch_lib=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') || exit 2
  for program in kiln cuda_test speech_cli_test; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec /tmp/kiln/prefix/bin/%s "$@"\n' "/tmp/kiln/prefix/lib:$SYS:$torch_lib" "$program" \
      > /tmp/kiln/$program
    chmod +x /tmp/kiln/$program
  done
  echo "unpacked $(ls "$SYS" | wc -l) system libraries to $SYS and kiln to /tmp/kiln"
}

unpacked() {
  [[ -x /tmp/kiln/kiln ]] || { echo "gpu_check: /tmp/kiln is missing: this machine is not the one 'unpack' ran on" >&2; exit 2; }
}

fashion_data() {
  [[ -d .gpu/fashion-mnist ]] || { echo "gpu_check: .gpu/fashion-mnist is missing: carry it" >&2; exit 2; }
  mkdir -p /usr/share/datasets/fashion-mnist && cp .gpu/fashion-mnist/*.gz /usr/share/datasets/fashion-mnist/
}

export KILN_PYTHON=${KILN_PYTHON:-python3}
case $mode in
  pack) pack ;;
  unpack) unpack ;;
  tests) unpacked; SPEECH_TEST=/tmp/kiln/speech_cli_test tests_steps /tmp/kiln/kiln /tmp/kiln/cuda_test ;;
  bench) unpacked; fashion_data; bench_steps /tmp/kiln/kiln ;;
  models) unpacked; models_steps /tmp/kiln/kiln /tmp/kiln/cuda_test ;;
  tests-local) KILN_PYTHON=${KILN_PYTHON_LOCAL:-$ROOT/.venv/bin/python} tests_steps "$ROOT/build/bin/kiln" "$ROOT/build/bin/cuda_test" ;;
  bench-local) KILN_PYTHON=${KILN_PYTHON_LOCAL:-$ROOT/.venv/bin/python} bench_steps "$ROOT/build/bin/kiln" ;;
  models-local) KILN_PYTHON=${KILN_PYTHON_LOCAL:-$ROOT/.venv/bin/python} models_steps "$ROOT/build/bin/kiln" "$ROOT/build/bin/cuda_test" ;;
  *) echo "usage: scripts/gpu_check.sh pack|unpack|tests|bench|models|tests-local|bench-local|models-local" >&2; exit 2 ;;
esac
