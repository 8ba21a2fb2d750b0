#!/usr/bin/env bash
# The include rule holds for this repository, and the checker catches a violation (an upward
# include, and LibTorch in a torch-free module) in a small tree made here.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
check="$here/check_includes.sh"

"$check"

tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/lib/config" "$tree/lib/trainer" "$tree/lib/base" "$tree/components/models" \
  "$tree/lib/weights" "$tree/lib/tuner" "$tree/lib/inference"
printf '#include "lib/trainer/trainer.h"\n' >"$tree/lib/config/node.cc"
printf '#include <torch/torch.h>\n#include "lib/base/files.h"\n' >"$tree/lib/config/yaml_io.cc"
printf '#include "lib/config/node.h"\n#include "components/models/mlp.h"\n' >"$tree/lib/trainer/trainer.cc"
printf '#include "lib/trainer/trainer.h"\n' >"$tree/components/models/mlp.cc"
printf '#include <torch/torch.h>\n' >"$tree/lib/base/torch_compat.h"
# The engine's ranks: weights < trainer < tuner < inference.
printf '#include "lib/trainer/task.h"\n' >"$tree/lib/weights/checkpoint.cc"
printf '#include "lib/weights/checkpoint.h"\n#include "lib/inference/predictor.h"\n' >"$tree/lib/tuner/lr_finder.cc"
printf '#include "lib/tuner/lr_finder.h"\n#include "lib/trainer/trainer.h"\n' >"$tree/lib/inference/predictor.cc"

set +e
out=$("$check" "$tree")
rc=$?
set -e
echo "$out"
fail() { echo "FAIL: $*"; exit 1; }
((rc == 1)) || fail "expected exit code 1 on the bad tree, got $rc"
grep -q '^lib/config/node.cc:1: lib/config includes lib/trainer/trainer.h' <<<"$out" || fail "upward include not named"
grep -q '^lib/config/yaml_io.cc:1: lib/config must not use LibTorch' <<<"$out" || fail "LibTorch include not named"
grep -q '^lib/trainer/trainer.cc:2: lib/trainer includes components/models/mlp.h' <<<"$out" || fail "lib -> components not named"
grep -q '^lib/weights/checkpoint.cc:1: lib/weights includes lib/trainer/task.h' <<<"$out" || fail "weights -> trainer not named"
grep -q '^lib/tuner/lr_finder.cc:2: lib/tuner includes lib/inference/predictor.h' <<<"$out" || fail "tuner -> inference not named"
grep -q 'include rule: 5 violation(s)' <<<"$out" || fail "expected exactly 5 violations (inference may include tuner and trainer, tuner weights)"
echo "include rule test: passed"
