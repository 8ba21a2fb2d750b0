#!/usr/bin/env bash
# kiln's clicks_dlrm against the DLRM reference's recipe and TorchRec (issue 56), on the same
# generated Criteo-format rows, tables (hash modulo TABLE rows), MLPs, batch (512), one epoch and
# threads, interleaved: each round trains kiln, kiln_floor (tables of 1 row), reference_sgd,
# reference_rowwise, dense_floor and torchrec once (bench/dlrm_reference.py says what each is;
# dense_floor is the Python step without its tables). The floors bound the speed-up that any work
# on the embedding side can give. Per round: training samples/s and test AUC; then
# medians and kiln/them. kiln's samples/s is its epoch line's (the training loop; "fit done" adds
# the validation pass and the checkpoint); the Python ones time their training loop alone, the
# rows already parsed and in memory, with kiln's allocator settings (bench/common.sh).
# Targets: kiln's AUC within 0.002 of theirs, kiln's samples/s >= 2x theirs.
#   bench/dlrm_speed.sh     # DATA=/work/bench-data/clicks1m ROWS=1000000 MAX_ROWS=0 TABLE=100000
#                           # ROUNDS=3 THREADS=2 TORCHREC_PYTHON=.venv/bin/python LOCK=/tmp/kiln-cpu.lock
#                           # DEVICE=cpu IMPLS="reference_sgd reference_rowwise dense_floor" FLOORS=1
#                           # SPARSE_LR=0.1 (row-wise Adagrad's rate on every side: clicks_dlrm's)
# DEVICE=cuda (scripts/gpu_check.sh on a lent GPU): kiln with trainer.accelerator=cuda and the
# Python sides with --device cuda (batches copied from pinned host memory, the clock stopped after
# a synchronize); TorchRec is left out there (FBGEMM's CPU build). IMPLS picks the Python sides;
# FLOORS=0 leaves kiln_floor out (and the ceilings).
# TorchRec runs in TORCHREC_PYTHON (default: the .venv's, where scripts/setup_venv.sh test installs
# torchrec and fbgemm-gpu-cpu from scripts/python/test.txt); where it cannot import them the
# torchrec column is left out and the first lines say why. The data is generated when missing and
# parsed once before the rounds; the rounds hold LOCK (flock) so that nothing else runs meanwhile.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/common.sh
data=${DATA:-/work/bench-data/clicks1m}
rows=${ROWS:-1000000}
max_rows=${MAX_ROWS:-0}
table=${TABLE:-100000}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
torchrec_python=${TORCHREC_PYTHON:-$KILN_PYTHON}
device=${DEVICE:-cpu}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

[[ -f $data/train.tsv ]] || "$KILN_PYTHON" scripts/make_clicks_data.py --out "$data" --rows "$rows" >/dev/null
sparse_lr=${SPARSE_LR:-0.1}
files=(--train "$data/train.tsv" --test "$data/test.tsv" --max-rows "$max_rows" --num-embeddings "$table"
  --threads "$threads" --sparse-lr "$sparse_lr")
"$KILN_PYTHON" bench/dlrm_reference.py "${files[@]}" --prepare
read -r -a impls <<< "${IMPLS:-reference_sgd reference_rowwise dense_floor}"
torchrec_why=
if [[ $device != cpu ]]; then
  torchrec_why="DEVICE=$device: FBGEMM's CPU build trains on the CPU only"
elif "$torchrec_python" -c 'import fbgemm_gpu, torchrec' > "$work/torchrec.err" 2>&1; then
  impls+=(torchrec)
else
  torchrec_why=$(tail -n1 "$work/torchrec.err")
fi

# kiln_round DIR [ROWS]: "samples/s test_auc fit_done_samples/s" of one clicks_dlrm run, its
# tables of ROWS rows (default TABLE). kiln_floor is kiln with tables of 1 row: every lookup and
# update is still made, on a table that stays in the cache, so the rest of the step (MLPs,
# interaction, loss, Adam, loader, autograd) is what it measures.
kiln_round() {
  "${KILN:-build/bin/kiln}" train experiment=clicks_dlrm hydra.run.dir="$1" logger=null \
    data.train="$data/train.tsv" data.test="$data/test.tsv" data.max_rows="$max_rows" \
    data.num_embeddings_per_feature="${2:-$table}" optimizer.sparse_lr="$sparse_lr" trainer.num_threads="$threads" \
    trainer.accelerator="$device" > "$1.out" 2>&1 ||
    { cat "$1.out" >&2; exit 1; }
  local rate auc fit
  rate=$(sed -n 's/.*epoch 0: .*, \([0-9.]*\) samples\/s).*/\1/p' "$1.out" | tail -n1)
  auc=$(sed -n 's/.*test: .*test\/auc \([0-9.]*\).*/\1/p' "$1.out" | tail -n1)
  fit=$(sed -n 's/.*fit done: .* \([0-9]*\) samples in \([0-9.]*\) s.*/\1 \2/p' "$1.out" | awk '{printf "%.0f", $1 / $2}')
  echo "$rate $auc $fit"
}
# reference_round IMPL: "samples/s test_auc" of bench/dlrm_reference.py.
reference_round() {
  local python=$KILN_PYTHON
  [[ $1 != torchrec ]] || python=$torchrec_python
  GLIBC_TUNABLES=$KILN_TUNED_MALLOC "$python" bench/dlrm_reference.py --impl "$1" "${files[@]}" --device "$device" \
    2>"$work/$1.err" | sed -n 's/^RESULT .*samples_per_s=\([0-9.]*\) test_auc=\([0-9.]*\).*/\1 \2/p'
  [[ ${PIPESTATUS[0]} == 0 ]] || { cat "$work/$1.err" >&2; exit 1; }
}

exec {lock}>"${LOCK:-/tmp/kiln-cpu.lock}"
flock "$lock"
echo "== clicks_dlrm on $device, $data (max_rows $max_rows), tables 26 x $table, batch 512, one epoch, $threads threads, sparse lr $sparse_lr," \
  "torch $("$KILN_PYTHON" -c 'import torch; print(torch.__version__)')"
[[ -z $torchrec_why ]] || echo "torchrec: not run: $torchrec_why"
echo "round system samples/s test_auc" | awk '{printf "%-6s %-18s %12s %9s\n", $1, $2, $3, $4}'
for ((r = 1; r <= rounds; r++)); do
  read -r rate auc fit < <(kiln_round "$work/kiln$r")
  echo "$r kiln $rate $auc (fit done: $fit samples/s)" >> "$work/results"
  if [[ ${FLOORS:-1} == 1 ]]; then
    read -r rate auc fit < <(kiln_round "$work/kiln_floor$r" 1)
    echo "$r kiln_floor $rate $auc" >> "$work/results"
  fi
  for impl in "${impls[@]}"; do
    read -r rate auc < <(reference_round "$impl")
    echo "$r $impl $rate $auc" >> "$work/results"
  done
  awk -v r="$r" '$1 == r {printf "%-6s %-18s %12s %9s %s %s %s %s\n", $1, $2, $3, $4, $5, $6, $7, $8}' "$work/results"
done
flock -u "$lock"

column_of() { awk -v s="$1" -v c="$2" '$2 == s {print $c}' "$work/results" | median; }
k_rate=$(column_of kiln 3) k_auc=$(column_of kiln 4)
echo "medians: kiln $k_rate samples/s, test AUC $k_auc"
for impl in "${impls[@]}"; do
  rate=$(column_of "$impl" 3) auc=$(column_of "$impl" 4)
  echo "  $impl: $rate samples/s, test AUC $auc; kiln/$impl $(ratio "$k_rate" "$rate")x samples/s," \
    "AUC kiln - $impl $(awk "BEGIN {printf \"%+.4f\", $k_auc - $auc}")"
done
# The ceilings: with the same dense math, kiln's step can at best become kiln_floor's, so
# kiln_floor/them bounds what any work on kiln's embedding side can reach against them.
[[ ${FLOORS:-1} == 1 ]] || exit 0
floor=$(column_of kiln_floor 3)
echo "  kiln_floor (tables of 1 row): $floor samples/s; kiln/kiln_floor $(ratio "$k_rate" "$floor")x"
for impl in "${impls[@]}"; do
  [[ $impl != dense_floor ]] || continue
  echo "  ceiling over $impl (kiln_floor/$impl): $(ratio "$floor" "$(column_of "$impl" 3)")x"
done
