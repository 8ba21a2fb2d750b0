#!/usr/bin/env bash
# Tables larger than one worker's memory train when sharded across workers. The limit is the
# shell's `ulimit -v` (RLIMIT_AS: the address space each process may map, inherited by the workers
# kiln starts), LIMIT_MB per process. The model is experiment=clicks_dlrm with ROWS rows in each of
# its 26 tables (float32, 16 wide: 26 * ROWS * 64 bytes whole). One worker must hold the tables
# whole; WORLD workers each build and keep only their pieces (trainer.table_sharding=SHARDING), so
# no process ever maps a whole table. Each run trains STEPS steps of 512 rows on data from
# scripts/make_clicks_data.py. Then the WORLD workers resume from their sharded checkpoint for 5
# more steps under the same limit: each reads only the rows of its pieces, straight from the
# files into its parameters (KILN=another build to compare). Prints each run's exit status, the last line of its error
# if it failed, and every rank's table, model-state and peak-memory lines.
#   bench/tables_memory.sh          # ROWS=2000000 WORLD=2 LIMIT_MB=3000 STEPS=20 SHARDING=row_wise
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rows=${ROWS:-2000000} world=${WORLD:-2} limit=${LIMIT_MB:-3000} steps=${STEPS:-20}
sharding=${SHARDING:-row_wise}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
.venv/bin/python scripts/make_clicks_data.py --out "$work/clicks" --rows 20000 --test-rows 1000 >/dev/null
echo "26 tables of $rows x 16 floats ($((26 * rows * 64 / 1048576)) MB whole); ulimit -v $((limit * 1024)) (${limit} MB) per process"
kiln=${KILN:-build/bin/kiln}
for workers in 1 "$world" resume; do
  rc=0 resume=()
  if [[ $workers == resume ]]; then
    workers=$world resume=(ckpt_path="$work/run$world/checkpoints/last.ckpt" hydra.run.dir="$work/resumed")
    steps=$((steps + 5))
  fi
  (ulimit -v $((limit * 1024)); exec "$kiln" train experiment=clicks_dlrm paths.data_dir="$work" \
    hydra.run.dir="$work/run$workers" data.num_embeddings_per_feature="$rows" \
    trainer.devices="$workers" trainer.table_sharding="$sharding" data.batch_size=$((512 / workers)) \
    trainer.max_steps="$steps" trainer.limit_val_batches=0 trainer.num_sanity_val_steps=0 test=false \
    logger=null trainer.enable_progress_bar=false "${resume[@]}") > "$work/$workers${resume:+r}.out" 2>&1 || rc=$?
  out=$work/$workers${resume:+r}.out logs=$work/run$workers
  [[ -z ${resume:-} ]] || logs=$work/resumed
  echo "== $workers worker(s)${resume:+, resumed from their sharded checkpoint}: exit $rc"
  [[ $rc -eq 0 ]] || grep "error:" "$out" | tail -1
  cat "$out" "$logs"/rank_*.log 2>/dev/null |
    grep -E "sharded tables|model state on this rank|peak resident memory" | sed 's/.*INFO\] - /  /' || true
done
