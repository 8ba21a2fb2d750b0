#!/usr/bin/env bash
# A model too large for data parallel under a per-worker memory limit trains under the same limit
# with trainer.strategy=fsdp. The limit is the shell's `ulimit -v` (RLIMIT_AS: the address space
# each process may map, inherited by the workers kiln starts), LIMIT_MB per process. The model is
# the GPT of experiment=mobydick_gpt made large (DIM, DEPTH; about 12 * DEPTH * DIM^2 parameters,
# float32, AdamW): with data parallel every worker holds parameters, gradients and AdamW's two
# moments whole (16 bytes a parameter); with FULL_SHARD over WORLD workers, 1/WORLD of each plus
# one gathered block. Each run trains STEPS steps. Prints each run's exit status, the last line of
# its error if it failed, and every rank's "model state on this rank" and peak memory lines.
# OPTIMIZER=sgd trains with plain SGD (no momentum: no state), so that a model whose parameters
# alone exceed the limit fits in pieces (fsdp builds each block whole, then keeps its rows).
# EXTRA adds overrides to both runs (model.activation_checkpointing=true).
# STRATEGIES (default "ddp fsdp") picks the runs: a model whose ddp run needs more than this
# machine's memory should only run under a limit. KILN (default build/bin/kiln) runs another build
# (with LD_LIBRARY_PATH at its libraries, which the workers inherit): an A/B of two commits.
#   bench/fsdp_memory.sh                        # DIM=1024 DEPTH=8 WORLD=2 LIMIT_MB=3000 STEPS=3
#   DIM=1536 DEPTH=12 WORLD=4 LIMIT_MB=1400 OPTIMIZER=sgd bench/fsdp_memory.sh   # 1.36 GB whole
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dim=${DIM:-1024} depth=${DEPTH:-8} world=${WORLD:-2} limit=${LIMIT_MB:-3000} steps=${STEPS:-3}
optimizer=()
[[ ${OPTIMIZER:-adamw} == sgd ]] && optimizer=(optimizer=sgd optimizer.momentum=0 optimizer.nesterov=false "~optimizer.betas")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
echo "GPT dim $dim, $depth blocks ($((12 * depth * dim * dim / 1000000))M parameters in the blocks, $((48 * depth * dim * dim / 1000000)) MB); $world workers; ${OPTIMIZER:-adamw}; ulimit -v $((limit * 1024)) (${limit} MB) per process"
for strategy in ${STRATEGIES:-ddp fsdp}; do
  rc=0
  (ulimit -v $((limit * 1024)); exec "${KILN:-build/bin/kiln}" train experiment=mobydick_gpt hydra.run.dir="$work/$strategy" \
    trainer.devices="$world" trainer.strategy="$strategy" trainer.max_steps="$steps" trainer.max_time=null \
    trainer.precision=32 trainer.limit_val_batches=0 trainer.num_sanity_val_steps=0 test=false callbacks=none \
    logger=null trainer.enable_progress_bar=false model.dim="$dim" model.depth="$depth" model.heads=16 \
    model.mlp_dim=$((4 * dim)) data.batch_size=2 data.block_size=64 ${optimizer[@]+"${optimizer[@]}"} ${EXTRA:-}) \
    > "$work/$strategy.out" 2>&1 || rc=$?
  echo "== $strategy: exit $rc"
  [[ $rc -eq 0 ]] || grep "error:" "$work/$strategy.out" | tail -1
  cat "$work/$strategy.out" "$work/$strategy"/rank_*.log 2>/dev/null |
    grep -E "model state on this rank|peak resident memory|fsdp:" | sed 's/.*INFO\] - /  /' || true
done
