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

for model in $models; do
  unit=samples/s; [[ $model == gpt ]] && unit=tokens/s
  echo "== $model ($unit, $threads threads)"
  printf '%-6s %10s %10s %10s %10s   %s\n' round kiln_32 kiln_bf16 py_32 py_bf16 \
    "kiln_bf16/kiln_32 kiln_bf16/py_bf16 py_bf16/py_32 kiln_32/py_32"
  r_kk=() r_kp=() r_pp=() r_32=()
  for ((r = 1; r <= rounds; r++)); do
    k32=$(kiln_model_rate "$model" 32)
    k16=$(kiln_model_rate "$model" bf16-mixed)
    p32=$(raw_loop_rate "$model")
    p16=$(raw_loop_rate "$model" --bf16)
    r_kk+=("$(ratio "$k16" "$k32")") r_kp+=("$(ratio "$k16" "$p16")") r_pp+=("$(ratio "$p16" "$p32")")
    r_32+=("$(ratio "$k32" "$p32")")
    printf '%-6s %10.1f %10.1f %10.1f %10.1f   %17s %17s %13s %13s\n' "$r" "$k32" "$k16" "$p32" "$p16" \
      "${r_kk[-1]}" "${r_kp[-1]}" "${r_pp[-1]}" "${r_32[-1]}"
  done
  echo "$model medians: kiln bf16 / kiln 32 $(printf '%s\n' "${r_kk[@]}" | median)x (target 2)," \
    "kiln bf16 / Python bf16 $(printf '%s\n' "${r_kp[@]}" | median)x (target 1.2)," \
    "Python bf16 / Python 32 $(printf '%s\n' "${r_pp[@]}" | median)x, kiln 32 / Python 32 $(printf '%s\n' "${r_32[@]}" | median)x"
done
