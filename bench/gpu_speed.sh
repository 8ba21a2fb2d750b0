#!/usr/bin/env bash
# kiln against PyTorch Lightning and the raw PyTorch loop on one CUDA GPU: bench/lightning_speed.sh's
# comparison (the same two models, data, optimizers and precisions) with the model and optimizer on
# the GPU and the data in host memory, each batch pinned and copied over per step (kiln's trainer,
# Lightning's pin_memory DataLoader + batch_to_device, and the raw loops all do that).
#   cnn: experiment=fashion_mnist (batch 128, channels-last; samples/s)
#   gpt: experiment=mobydick_gpt (batch 32 x 128 characters; tokens/s)
# kiln: build/bin/kiln (or $KILN) with trainer.accelerator=cuda, trainer.limit_train_batches=
# KILN_CNN_BATCHES / KILN_GPT_BATCHES (default CNN_STEPS / GPT_STEPS); its figure is its log's epoch
# samples/s, so its own first steps (cuDNN/cuBLAS set-up, lazy kernel loading) are inside it (an
# epoch is at most 421 cnn / ~270 gpt batches). Lightning: bench/lightning_reference.py --device cuda
# (accelerator gpu, devices 1, precision 32-true / bf16-mixed). Raw loop: bench/pytorch_reference.py
# tensors and bench/gpt_reference.py --device cuda. The Python sides skip CNN_WARMUP / GPT_WARMUP
# steps and time CNN_STEPS / GPT_STEPS, with torch.cuda.synchronize() at both ends. Each round runs
# every system once per model and precision, one after the other; ratios are taken within a round,
# and the medians are the figures.
# Busy columns: nvidia-smi's utilization.gpu sampled every 100 ms while the run executes, i.e. the
# share of each sample period in which a kernel ran, averaged over the samples from the first
# non-zero one (the GPU's first use) to the end of the run, so it includes warm-up, and process
# start-up after the first kernel; "n/a" without nvidia-smi or on the CPU.
# Environment (defaults in brackets):
#   DEVICE [cuda]  cuda, or cpu to test this script on a machine without a GPU (kiln then gets
#                  trainer.accelerator=cpu); pick the GPU with CUDA_VISIBLE_DEVICES
#   ROUNDS [3]  MODELS [cnn gpt]  PRECISIONS [32 bf16-mixed]  THREADS [8 on cuda, 2 on cpu]
#   CNN_WARMUP [50] CNN_STEPS [400]  GPT_WARMUP [20] GPT_STEPS [200]  KILN_CNN_BATCHES KILN_GPT_BATCHES
#   KILN_PYTHON [.venv/bin/python; python3 on a machine without the .venv]  KILN [build/bin/kiln]
#   KILN_GPU_OVERRIDES  more kiln overrides, split on spaces (e.g. "trainer.cudnn_benchmark=true")
#   KILN_GRAPHS [0]     1: each round also runs kiln with trainer.cuda_graphs=true (columns graphs,
#                       graphs/lightning, busy_graphs)
#   MATMUL_PRECISION    highest|high|medium: --matmul-precision for the references and
#                       trainer.matmul_precision for kiln (default: neither, i.e. highest)
#   FASHION_MNIST_ROOT  the IDX files' folder [/usr/share/datasets/fashion-mnist] (kiln: data.root)
#   KILN_DATA_DIR       the folder with text/mobydick/ [data] (kiln: paths.data_dir)
#   GPU_SPEED_JSON      write every row and the medians to this JSON file (rewritten after each round)
#   KILN_PYTHON=python3 bench/gpu_speed.sh
#   DEVICE=cpu ROUNDS=1 CNN_WARMUP=5 CNN_STEPS=20 GPT_WARMUP=2 GPT_STEPS=5 bench/gpu_speed.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/common.sh
device=${DEVICE:-cuda}
case $device in
  cuda) threads=${THREADS:-8} ;;
  cpu) threads=${THREADS:-2} ;;
  *) echo "gpu_speed.sh: DEVICE is cuda or cpu, not $device (pick a GPU with CUDA_VISIBLE_DEVICES)" >&2; exit 1 ;;
esac
rounds=${ROUNDS:-3}
models=${MODELS:-cnn gpt}
precisions=${PRECISIONS:-32 bf16-mixed}
cnn_warmup=${CNN_WARMUP:-50} cnn_steps=${CNN_STEPS:-400}
gpt_warmup=${GPT_WARMUP:-20} gpt_steps=${GPT_STEPS:-200}
kiln_cnn_batches=${KILN_CNN_BATCHES:-$cnn_steps} kiln_gpt_batches=${KILN_GPT_BATCHES:-$gpt_steps}
matmul=${MATMUL_PRECISION:-}
json=${GPU_SPEED_JSON:-}
read -ra kiln_gpu_overrides <<< "${KILN_GPU_OVERRIDES:-}"
graphs=${KILN_GRAPHS:-0}
text=${KILN_DATA_DIR:-data}/text/mobydick/train.txt
busy_pid=
work=$(mktemp -d)
trap '[[ -z $busy_pid ]] || kill "$busy_pid" 2>/dev/null; rm -rf "$work"' EXIT

[[ -f ${FASHION_MNIST_ROOT:-/usr/share/datasets/fashion-mnist}/train-images-idx3-ubyte.gz || " $models " != *" cnn "* ]] ||
  { echo "gpu_speed.sh: no Fashion-MNIST in ${FASHION_MNIST_ROOT:-/usr/share/datasets/fashion-mnist} (set FASHION_MNIST_ROOT)" >&2; exit 1; }
if [[ " $models " == *" gpt "* && ! -f $text ]]; then
  if [[ -n "${KILN_DATA_DIR:-}" ]] || ! bash scripts/prepare_text_data.sh >/dev/null; then
    echo "gpu_speed.sh: no $text (scripts/prepare_text_data.sh, or set KILN_DATA_DIR)" >&2; exit 1
  fi
fi

# kiln's options for every run, then the caller's.
kiln_common=(trainer.accelerator="$device" trainer.num_threads="$threads")
[[ -z $matmul ]] || kiln_common+=(trainer.matmul_precision="$matmul")
[[ -z "${FASHION_MNIST_ROOT:-}" ]] || kiln_cnn_data=(data.root="$FASHION_MNIST_ROOT")
[[ -z "${KILN_DATA_DIR:-}" ]] || kiln_gpt_data=(paths.data_dir="$KILN_DATA_DIR")
# The references' options for every run.
py_common=(--device "$device")
[[ -z $matmul ]] || py_common+=(--matmul-precision "$matmul")

bf16_flag() { [[ $1 == bf16-mixed ]] && echo --bf16 || true; }
# check_rate NAME VALUE: a run that printed no number stops the bench.
check_rate() { [[ $2 =~ ^[0-9.]+$ ]] || { echo "gpu_speed.sh: $1 gave no rate ('$2')" >&2; exit 1; }; }

# kiln's figure is its second epoch's (KILN_WARM_EPOCHS=1 for bench/common.sh's kiln_epoch_rate),
# so that its warm-up stays out of it as the references' warm-up steps stay out of theirs.
export KILN_WARM_EPOCHS=1

# kiln_model_rate's variant for this bench (bench/common.sh): the GPU accelerator, the step counts
# above and the caller's overrides. kiln_gpu_model_rate MODEL PRECISION [OVERRIDE...].
kiln_gpu_model_rate() {
  case $1 in
    cnn) kiln_epoch_rate "$work/kiln" experiment=fashion_mnist trainer.limit_train_batches="$kiln_cnn_batches" \
           trainer.precision="$2" ${kiln_cnn_data[@]+"${kiln_cnn_data[@]}"} "${kiln_common[@]}" \
           ${kiln_gpu_overrides[@]+"${kiln_gpu_overrides[@]}"} "${@:3}" ;;
    gpt) kiln_epoch_rate "$work/kiln" experiment=mobydick_gpt trainer.max_steps=-1 trainer.max_time=null \
           trainer.limit_train_batches="$kiln_gpt_batches" trainer.precision="$2" \
           ${kiln_gpt_data[@]+"${kiln_gpt_data[@]}"} "${kiln_common[@]}" \
           ${kiln_gpu_overrides[@]+"${kiln_gpu_overrides[@]}"} "${@:3}" | awk '{printf "%.1f", $1 * 128}' ;;
  esac
}
# Lightning's and the raw loop's messages go to a file, shown if the run fails.
lightning_gpu_rate() {
  case $1 in
    cnn) python_tuned bench/lightning_reference.py cnn "$cnn_warmup" "$cnn_steps" "$threads" --channels-last \
           $(bf16_flag "$2") "${py_common[@]}" ;;
    gpt) python_tuned bench/lightning_reference.py gpt "$gpt_warmup" "$gpt_steps" "$threads" 32 128 128 4 4 512 \
           "$text" $(bf16_flag "$2") "${py_common[@]}" ;;
  esac 2>"$work/python.err" | tail -n1
  [[ ${PIPESTATUS[0]} == 0 ]] || { cat "$work/python.err" >&2; exit 1; }
}
raw_gpu_rate() {
  case $1 in
    cnn) python_tuned bench/pytorch_reference.py "$cnn_warmup" "$cnn_steps" tensors --channels-last \
           --threads "$threads" $(bf16_flag "$2") "${py_common[@]}" ;;
    gpt) python_tuned bench/gpt_reference.py "$gpt_steps" "$threads" 32 128 128 4 4 512 "$text" \
           --warmup "$gpt_warmup" $(bf16_flag "$2") "${py_common[@]}" ;;
  esac 2>"$work/python.err" | tail -n1
  [[ ${PIPESTATUS[0]} == 0 ]] || { cat "$work/python.err" >&2; exit 1; }
}

# The GPU's busy share: busy_start before a run, busy_stop after it prints the mean utilization.gpu
# over the samples from the first non-zero one on (n/a where nothing could be sampled).
smi=()
if [[ $device == cuda ]] && command -v nvidia-smi >/dev/null 2>&1; then
  gpu=${CUDA_VISIBLE_DEVICES:-0}; gpu=${gpu%%,*}
  if nvidia-smi -i "$gpu" --query-gpu=name --format=csv,noheader >/dev/null 2>&1; then
    smi=(nvidia-smi -i "$gpu")
  elif nvidia-smi --query-gpu=name --format=csv,noheader >/dev/null 2>&1; then
    smi=(nvidia-smi)
  fi
fi
busy_start() {
  busy_pid=
  [[ ${#smi[@]} -gt 0 ]] || return 0
  "${smi[@]}" --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 >"$work/busy" 2>/dev/null &
  busy_pid=$!
}
busy_stop() {
  if [[ -z $busy_pid ]]; then busy=n/a; return; fi
  kill "$busy_pid" 2>/dev/null || true
  wait "$busy_pid" 2>/dev/null || true
  busy_pid=
  busy=$(awk '$1 ~ /^[0-9.]+$/ && (on || $1 > 0) {on = 1; s += $1; n++}
              END {if (n) printf "%.1f", s / n; else print "n/a"}' "$work/busy")
}

# med: the median of the numbers on stdin, n/a where there are none.
med() { { grep -E '^[0-9.]+$' || true; } | median | awk 'NF {print; found = 1} END {if (!found) print "n/a"}'; }
pct() { [[ $1 == n/a ]] && echo n/a || echo "$1%"; }
row() { awk '{printf "%-6s", $1; for (i = 2; i <= NF; i++) printf " %14s", $i; print ""}'; }

torch_version=$("$KILN_PYTHON" -c 'import torch; print(torch.__version__)')
lightning_version=$("$KILN_PYTHON" -c 'import pytorch_lightning as pl; print(pl.__version__)' 2>/dev/null || echo missing)
gpu_name=cpu
if [[ $device == cuda ]]; then
  gpu_name=$("$KILN_PYTHON" -c 'import torch; print(torch.cuda.get_device_name())' 2>/dev/null || echo unknown)
fi
echo "# $device ($gpu_name), torch $torch_version, Lightning $lightning_version, $threads threads," \
     "kiln overrides: ${KILN_GPU_OVERRIDES:-none}, matmul precision: ${matmul:-default}"
# write_json: every row and median so far into $GPU_SPEED_JSON (rewritten after each round, so that
# a run cut short still leaves what it measured).
write_json() {
  [[ -n $json ]] || return 0
  GS_DEVICE=$device GS_GPU=$gpu_name GS_TORCH=$torch_version GS_LIGHTNING=$lightning_version GS_THREADS=$threads \
  GS_ROUNDS=$rounds GS_CNN="$cnn_warmup $cnn_steps $kiln_cnn_batches" GS_GPT="$gpt_warmup $gpt_steps $kiln_gpt_batches" \
  GS_OVERRIDES=${KILN_GPU_OVERRIDES:-} GS_MATMUL=$matmul "$KILN_PYTHON" - "$rows" "$medians" "$json" <<'EOF'
import json, os, sys

def num(s):
    try:
        return float(s)
    except ValueError:
        return None  # n/a

keys = ["kiln", "lightning", "raw", "kiln_over_lightning", "kiln_over_raw", "busy_kiln", "busy_lightning", "busy_raw",
        "kiln_graphs", "graphs_over_lightning", "busy_graphs"]
rows, medians = [], []
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    rows.append({"model": f[0], "precision": f[1], "unit": f[2], "round": int(f[3]),
                 **{k: num(v) for k, v in zip(keys, f[4:])}})
for line in open(sys.argv[2]):
    f = line.rstrip("\n").split("\t")
    medians.append({"model": f[0], "precision": f[1], "unit": f[2], **{k: num(v) for k, v in zip(keys, f[3:])}})
e = os.environ
cnn, gpt = (list(map(int, e[k].split())) for k in ("GS_CNN", "GS_GPT"))
meta = {"device": e["GS_DEVICE"], "gpu": e["GS_GPU"], "torch": e["GS_TORCH"], "lightning": e["GS_LIGHTNING"],
        "threads": int(e["GS_THREADS"]), "rounds": int(e["GS_ROUNDS"]),
        "cnn_warmup": cnn[0], "cnn_steps": cnn[1], "kiln_cnn_batches": cnn[2],
        "gpt_warmup": gpt[0], "gpt_steps": gpt[1], "kiln_gpt_batches": gpt[2],
        "kiln_overrides": e["GS_OVERRIDES"], "matmul_precision": e["GS_MATMUL"] or None,
        "busy": "nvidia-smi utilization.gpu (%), sampled every 100 ms during each run, "
                "mean from the first non-zero sample on; null: not sampled"}
with open(sys.argv[3], "w") as out:
    json.dump({"meta": meta, "rows": rows, "medians": medians}, out, indent=1)
    out.write("\n")
EOF
}

rows=$work/rows.tsv medians=$work/medians.tsv
: >"$rows"; : >"$medians"
for model in $models; do
  unit=samples/s; [[ $model == gpt ]] && unit=tokens/s
  for precision in $precisions; do
    if [[ $model == cnn ]]; then
      steps="kiln $kiln_cnn_batches batches; Python $cnn_warmup + $cnn_steps timed"
    else
      steps="kiln $kiln_gpt_batches batches; Python $gpt_warmup + $gpt_steps timed"
    fi
    echo "== $model $precision ($unit; $steps; busy: GPU utilization %)"
    echo "round kiln lightning raw kiln/lightning kiln/raw busy_kiln busy_lightning busy_raw graphs graphs/lightning busy_graphs" | row
    r_k=() r_l=() r_p=() r_kl=() r_kr=() b_k=() b_l=() b_p=() r_g=() r_gl=() b_g=()
    for ((r = 1; r <= rounds; r++)); do
      busy_start; k=$(kiln_gpu_model_rate "$model" "$precision"); busy_stop; kb=$busy
      check_rate kiln "$k"
      busy_start; l=$(lightning_gpu_rate "$model" "$precision"); busy_stop; lb=$busy
      check_rate Lightning "$l"
      busy_start; p=$(raw_gpu_rate "$model" "$precision"); busy_stop; pb=$busy
      check_rate "the raw loop" "$p"
      g=n/a gl=n/a gb=n/a
      if [[ $graphs == 1 ]]; then
        busy_start; g=$(kiln_gpu_model_rate "$model" "$precision" trainer.cuda_graphs=true); busy_stop; gb=$busy
        check_rate "kiln with CUDA graphs" "$g"
        gl=$(ratio "$g" "$l")
      fi
      r_k+=("$k") r_l+=("$l") r_p+=("$p") r_kl+=("$(ratio "$k" "$l")") r_kr+=("$(ratio "$k" "$p")")
      b_k+=("$kb") b_l+=("$lb") b_p+=("$pb") r_g+=("$g") r_gl+=("$gl") b_g+=("$gb")
      line="$r $k $l $p ${r_kl[-1]} ${r_kr[-1]} $kb $lb $pb $g $gl $gb"
      echo "$line" | row
      printf '%s\t%s\t%s\t%s\n' "$model" "$precision" "$unit" "${line// /$'\t'}" >>"$rows"
      write_json
    done
    m=()
    for values in r_k r_l r_p r_kl r_kr b_k b_l b_p r_g r_gl b_g; do
      declare -n v=$values
      m+=("$(printf '%s\n' "${v[@]}" | med)")
      unset -n v
    done
    printf '%s\t%s\t%s\t%s\n' "$model" "$precision" "$unit" "$(IFS=$'\t'; echo "${m[*]}")" >>"$medians"
    echo "$model $precision medians: kiln ${m[0]}, Lightning ${m[1]}, raw loop ${m[2]} $unit;" \
         "kiln/Lightning ${m[3]}x, kiln/raw loop ${m[4]}x; GPU busy kiln $(pct "${m[5]}"), Lightning $(pct "${m[6]}"), raw loop $(pct "${m[7]}");" \
         "kiln with CUDA graphs ${m[8]} $unit, ${m[9]}x Lightning, GPU busy $(pct "${m[10]}")"
    write_json
  done
done
[[ -z $json ]] || echo "wrote $json"
