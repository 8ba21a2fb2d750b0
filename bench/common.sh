# Shared by the training-speed benches (source it): kiln's allocator settings for the Python side,
# one kiln training run's samples/s, medians and ratios.

# What kiln's trainer sets for itself with mallopt (lib/trainer/process_settings.cc): blocks up to
# 32 MiB from the heap, no trimming. The Python references run with the same, so that a ratio
# measures kiln and not glibc's defaults.
KILN_TUNED_MALLOC=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967295

# kiln_epoch_rate OUT_DIR OVERRIDES...: trains one epoch with the overrides (nothing else: no test,
# callbacks or loggers) and prints the epoch's samples/s from the training log. With
# KILN_WARM_EPOCHS=N, N epochs run first and the one after them is measured (a GPU's warm-up:
# CUDA's context, cuBLAS/cuDNN handles and the first kernels' loading stay out of the figure).
kiln_epoch_rate() {
  local dir=$1; shift
  local warm=${KILN_WARM_EPOCHS:-0}
  "${KILN:-build/bin/kiln}" train hydra.run.dir="$dir" trainer.max_epochs=$((warm + 1)) trainer.limit_val_batches=0 \
    trainer.num_sanity_val_steps=0 test=false callbacks=none logger=null "$@" > "$dir.out" 2>&1 ||
    { cat "$dir.out" >&2; exit 1; }
  sed -n "s/.*epoch $warm: .*, \([0-9.]*\) samples\/s).*/\1/p" "$dir.out" | tail -1
}

# The Python of the references: the project's .venv, whose torch is kiln's LibTorch (same version,
# same kernels); scripts/setup_venv.sh test gives it torchvision and Lightning.
KILN_PYTHON=${KILN_PYTHON:-$PWD/.venv/bin/python}
# python_tuned ARGS...: $KILN_PYTHON ARGS with kiln's allocator settings; python_untuned: with
# glibc's defaults.
python_tuned() { GLIBC_TUNABLES=$KILN_TUNED_MALLOC "$KILN_PYTHON" "$@"; }
python_untuned() { env -u GLIBC_TUNABLES "$KILN_PYTHON" "$@"; }

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk "BEGIN {printf \"%.2f\", $1 / $2}"; }

# The README's two models as the speed benches run them ($work and $threads are the caller's):
# kiln_model_rate MODEL PRECISION [KILN]: kiln's samples/s (cnn: experiment=fashion_mnist, 200
# batches) or tokens/s (gpt: experiment=mobydick_gpt, 60 batches of 32 x 128 characters).
kiln_model_rate() {
  local KILN=${3:-${KILN:-build/bin/kiln}}
  case $1 in
    cnn) KILN=$KILN kiln_epoch_rate "$work/kiln" experiment=fashion_mnist trainer.limit_train_batches=200 \
           trainer.num_threads="$threads" trainer.precision="$2" ;;
    gpt) KILN=$KILN kiln_epoch_rate "$work/kiln" experiment=mobydick_gpt trainer.max_steps=-1 trainer.max_time=null \
           trainer.limit_train_batches=60 trainer.num_threads="$threads" trainer.precision="$2" |
           awk '{printf "%.1f", $1 * 128}' ;;
    llama) KILN=$KILN kiln_epoch_rate "$work/kiln" experiment=mobydick_llama trainer.max_steps=-1 trainer.max_time=null \
           trainer.limit_train_batches=60 trainer.num_threads="$threads" trainer.precision="$2" |
           awk '{printf "%.1f", $1 * 128}' ;;
  esac
}
# raw_loop_rate MODEL [--bf16]: the same model in the tuned raw PyTorch loop.
raw_loop_rate() {
  case $1 in
    cnn) python_tuned bench/pytorch_reference.py 20 200 tensors --channels-last ${2:-} ;;
    gpt) python_tuned bench/gpt_reference.py 60 "$threads" 32 128 128 4 4 512 ${2:-} ;;
    *) echo - ;;  # no raw loop for it
  esac
}
