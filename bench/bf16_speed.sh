#!/usr/bin/env bash
# bf16-mixed against float32, in kiln and in Python (the .venv's torch, torch.autocast on the
# CPU), on the README's two models: the Fashion-MNIST CNN (`experiment=fashion_mnist`: batch 128,
# channels-last; samples/s) and the Moby Dick GPT (`experiment=mobydick_gpt`: batch 32 x 128
# characters; tokens/s). Each round runs kiln 32, kiln bf16-mixed, Python float32 and Python bf16
# autocast, one after the other; the Python loops have kiln's allocator settings and memory format
# (bench/common.sh), so the ratios compare kiln with the same model tuned the same way. Ratios are
# taken within a round; the medians are the figures. Targets (issue 19): kiln bf16 >= 2x kiln 32
# and >= 1.2x Python bf16.
#   bench/bf16_speed.sh                        # MODELS="cnn gpt" ROUNDS=3 THREADS=2
#   MODELS=gpt ROUNDS=5 bench/bf16_speed.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/common.sh
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
models=${MODELS:-cnn gpt}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# kiln_rate MODEL PRECISION: samples/s (cnn) or tokens/s (gpt).
kiln_rate() {
  case $1 in
    cnn) kiln_epoch_rate "$work/kiln" experiment=fashion_mnist trainer.limit_train_batches=200 \
           trainer.num_threads="$threads" trainer.precision="$2" ;;
    gpt) kiln_epoch_rate "$work/kiln" experiment=mobydick_gpt trainer.max_steps=-1 trainer.max_time=null \
           trainer.limit_train_batches=60 trainer.num_threads="$threads" trainer.precision="$2" |
           awk '{printf "%.1f", $1 * 128}' ;;
  esac
}
# python_rate MODEL [--bf16]
python_rate() {
  case $1 in
    cnn) python_tuned bench/pytorch_reference.py 20 200 tensors --channels-last ${2:-} ;;
    gpt) python_tuned bench/gpt_reference.py 60 "$threads" 32 128 128 4 4 512 ${2:-} ;;
  esac
}

for model in $models; do
  unit=samples/s; [[ $model == gpt ]] && unit=tokens/s
  echo "== $model ($unit, $threads threads)"
  printf '%-6s %10s %10s %10s %10s   %s\n' round kiln_32 kiln_bf16 py_32 py_bf16 \
    "kiln_bf16/kiln_32 kiln_bf16/py_bf16 py_bf16/py_32 kiln_32/py_32"
  r_kk=() r_kp=() r_pp=() r_32=()
  for ((r = 1; r <= rounds; r++)); do
    k32=$(kiln_rate "$model" 32)
    k16=$(kiln_rate "$model" bf16-mixed)
    p32=$(python_rate "$model")
    p16=$(python_rate "$model" --bf16)
    r_kk+=("$(ratio "$k16" "$k32")") r_kp+=("$(ratio "$k16" "$p16")") r_pp+=("$(ratio "$p16" "$p32")")
    r_32+=("$(ratio "$k32" "$p32")")
    printf '%-6s %10.1f %10.1f %10.1f %10.1f   %17s %17s %13s %13s\n' "$r" "$k32" "$k16" "$p32" "$p16" \
      "${r_kk[-1]}" "${r_kp[-1]}" "${r_pp[-1]}" "${r_32[-1]}"
  done
  echo "$model medians: kiln bf16 / kiln 32 $(printf '%s\n' "${r_kk[@]}" | median)x (target 2)," \
    "kiln bf16 / Python bf16 $(printf '%s\n' "${r_kp[@]}" | median)x (target 1.2)," \
    "Python bf16 / Python 32 $(printf '%s\n' "${r_pp[@]}" | median)x, kiln 32 / Python 32 $(printf '%s\n' "${r_32[@]}" | median)x"
done
