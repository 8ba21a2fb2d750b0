#!/usr/bin/env bash
# The library and plugin story end to end, as a user outside this tree lives it:
#   1. `cmake --install` kiln into a temporary prefix, then move the prefix (it must be relocatable);
#   2. build the three docs/examples projects and the tiny_convnet example plugin against it
#      with find_package(Kiln), and run them (each checks its own result);
#   3. `kiln train --plugin libtiny_convnet.so model=tiny_convnet` for a few steps with the
#      installed kiln, which must use its installed configs.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
data=${KILN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

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

for example in plain_loop trainer_task compose_instantiate; do
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
echo "PASS: installed, relocated, built 3 examples + 1 plugin out of tree, trained with the plugin"
