#!/usr/bin/env bash
# The library and plugin story end to end, as a user outside this tree lives it:
#   1. `cmake --install` kiln into a temporary prefix, then move the prefix (it must be relocatable);
#   2. check the installed headers (exactly tests/install/public_headers.txt; what they include is
#      installed), build
#      a file that includes the whole public API <kiln/kiln.h>, the five docs/examples projects
#      and the tiny_convnet example plugin against it with find_package(Kiln), and run them
#      (each checks its own result);
#   3. `kiln train --plugin libtiny_convnet.so model=tiny_convnet` for a few steps with the
#      installed kiln, which must use its installed configs.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
data=${KILN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap '[[ -n "${KEEP:-}" ]] || rm -rf "$tmp"' EXIT

cmake --install "$build" --prefix "$tmp/staging" >/dev/null
mv "$tmp/staging" "$tmp/prefix"
prefix=$tmp/prefix
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi

configure_and_build() {  # SOURCE BUILD
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" >"$2.log" 2>&1 ||
    { cat "$2.log"; echo "FAIL: configuring $1 against the installed kiln"; exit 1; }
  cmake --build "$2" -j "${KILN_JOBS:-2}" >>"$2.log" 2>&1 || { cat "$2.log"; echo "FAIL: building $1"; exit 1; }
}

echo "== installed headers"
# Every kiln header an installed header includes is installed too.
missing=0
while IFS= read -r header; do
  while IFS= read -r included; do
    if [[ ! -f $prefix/include/kiln/$included && ! -f $prefix/include/$included ]]; then
      echo "FAIL: ${header#"$prefix/"} includes $included, which is not installed"; missing=1
    fi
  done < <(sed -n 's/^[ \t]*#[ \t]*include[ \t]*["<]\(\(lib\|components\|tasks\|kiln\)\/[^">]*\)[">].*/\1/p' "$header")
done < <(find "$prefix/include/kiln" -name '*.h')
[[ $missing == 0 ]] || exit 1
# Exactly the public headers: the face and what it includes (tests/install/public_headers.txt).
expected=$(grep -v '^#' "$src/tests/install/public_headers.txt" | sort)
installed=$(cd "$prefix/include/kiln" && find . -name '*.h' | sed 's|^\./||' | sort)
if [[ "$installed" != "$expected" ]]; then
  echo "FAIL: the installed headers differ from tests/install/public_headers.txt (< installed, > listed):"
  diff <(echo "$installed") <(echo "$expected") | grep '^[<>]'
  exit 1
fi
echo "$(wc -l <<<"$installed") public headers installed, as listed"
# The whole public API compiles on its own.
mkdir "$tmp/public_api"
printf '#include <kiln/kiln.h>\nint main() { return kiln::kExitOk; }\n' >"$tmp/public_api/main.cc"
printf 'cmake_minimum_required(VERSION 3.22)\nproject(public_api CXX)\nset(CMAKE_CXX_STANDARD 17)\nfind_package(Kiln REQUIRED)\nadd_executable(public_api main.cc)\ntarget_link_libraries(public_api PRIVATE Kiln::tasks)\n' \
  >"$tmp/public_api/CMakeLists.txt"
configure_and_build "$tmp/public_api" "$tmp/public_api_build"
"$tmp/public_api_build/public_api"

for example in plain_loop trainer_task compose_instantiate classify_image train_job; do
  configure_and_build "$src/docs/examples/$example" "$tmp/$example"
done
configure_and_build "$src/plugins/tiny_convnet" "$tmp/tiny_convnet"

echo "== plain_loop"
"$tmp/plain_loop/plain_loop" "$data" 300
echo "== trainer_task"
"$tmp/trainer_task/trainer_task" "$data"
echo "== compose_instantiate"
out=$("$tmp/compose_instantiate/compose_instantiate" "$prefix/share/kiln/configs" model=mlp 'model.hidden=[64]')
echo "$out"
# 784*64+64 + 64*10+10 parameters.
grep -q "built model 'mlp' with 50890 parameters" <<<"$out" || { echo "FAIL: compose_instantiate"; exit 1; }

echo "== train_job: kiln::Job from the installed configs, against the installed kiln train (bitwise)"
job_args=(model=mlp 'model.hidden=[16]' "data.root=$data" trainer.max_steps=20 trainer.num_threads=1
  trainer.limit_val_batches=2 trainer.num_sanity_val_steps=0 seed=5)
out=$(cd "$tmp" && "$tmp/train_job/train_job" "${job_args[@]}" "hydra.run.dir=$tmp/job_lib" 2>"$tmp/job_lib.log") ||
  { cat "$tmp/job_lib.log"; echo "FAIL: train_job"; exit 1; }
echo "$out"
grep -q "^test/acc 0\.[0-9]* in $tmp/job_lib$" <<<"$out" || { echo "FAIL: train_job printed '$out'"; exit 1; }
(cd "$tmp" && "$prefix/bin/kiln" train "${job_args[@]}" "hydra.run.dir=$tmp/job_cli" >"$tmp/job_cli.log" 2>&1) ||
  { cat "$tmp/job_cli.log"; echo "FAIL: kiln train for train_job"; exit 1; }
cmp "$tmp/job_lib/test_metrics.yaml" "$tmp/job_cli/test_metrics.yaml" ||
  { echo "FAIL: kiln::Job and kiln train tested differently"; exit 1; }

echo "== classify_image: kiln::Predictor on a model the installed kiln trains, against kiln predict"
mkdir "$tmp/classify"
(cd "$tmp/classify" && "$prefix/bin/kiln" train model=mlp 'model.hidden=[16]' "data.root=$data" trainer.max_steps=5 \
  trainer.limit_val_batches=1 trainer.num_sanity_val_steps=0 test=false hydra.run.dir=run > train.log 2>&1 &&
  "$prefix/bin/kiln" predict run_dir=run +prediction_writer=jsonl hydra.run.dir=predict > predict.log 2>&1) ||
  { cat "$tmp/classify"/*.log; echo "FAIL: training or predicting for classify_image"; exit 1; }
# The first test image as a PNG (lossless), written with Python's standard library (zlib).
python3 - "$data/t10k-images-idx3-ubyte.gz" "$tmp/classify/first.png" <<'PY'
import gzip, struct, sys, zlib
pixels = gzip.open(sys.argv[1]).read()[16:16 + 784]
raw = b"".join(b"\0" + pixels[28 * y:28 * y + 28] for y in range(28))
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 28, 28, 8, 0, 0, 0, 0)) + \
      chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
open(sys.argv[2], "wb").write(png)
PY
out=$("$tmp/classify_image/classify_image" "$tmp/classify/run" "$tmp/classify/first.png")
echo "$out"
expected=$(head -1 "$tmp/classify/predict/predictions.jsonl" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["class_index"])')
[[ $(awk '{print $(NF-1)}' <<<"$out") == "$expected" ]] ||  # "LABEL INDEX P"; labels may hold spaces
  { echo "FAIL: classify_image says '$out', kiln predict class $expected"; exit 1; }

echo "== installed kiln with the out-of-tree plugin"
plugin=$tmp/tiny_convnet/libtiny_convnet.so
mkdir "$tmp/work"
cd "$tmp/work"
"$prefix/bin/kiln" train --info searchpath | grep -q "path=file://$prefix/share/kiln/configs" ||
  { echo "FAIL: the installed kiln does not use its installed configs"; exit 1; }
listed=$("$prefix/bin/kiln" list model --plugin "$plugin" 2>&1) || true
grep -q "tiny_convnet  \[plugin tiny_convnet 1.0.0 ($plugin)\]" <<< "$listed" ||
  { echo "FAIL: kiln list does not show the plugin's model:"; echo "$listed"; exit 1; }
"$prefix/bin/kiln" train --plugin "$plugin" model=tiny_convnet "data.root=$data" trainer.max_steps=5 \
  trainer.limit_val_batches=2 trainer.num_sanity_val_steps=0 test=false hydra.run.dir=run
test -f run/checkpoints/last.ckpt || { echo "FAIL: no checkpoint after training with the plugin's model"; exit 1; }
grep -q "_target_: tiny_convnet" run/.hydra/config.yaml || { echo "FAIL: the run did not use tiny_convnet"; exit 1; }
echo "PASS: installed, relocated, built 5 examples + 1 plugin out of tree, classified with the Predictor, trained with the plugin"
