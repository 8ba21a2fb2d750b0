#!/usr/bin/env bash
# kiln's own precisions against each other, no Python reference: trainer.precision=32, bf16-mixed
# and bf16-true, one after the other in each round, training one epoch limited to a few batches
# (nothing else: no validation, test, callbacks or loggers); the ratios are taken within a round and
# their medians are the figures. Models:
#   cnn       experiment=fashion_mnist (batch 128, channels-last), 200 batches; samples/s
#   gpt       experiment=mobydick_gpt (batch 32 x 128 characters), 60 batches; tokens/s
#   resnet18  model=resnet18 on CIFAR-sized images (3 x 32 x 32, batch 64, channels-last, AdamW),
#             30 batches; the images are random bytes this script writes in CIFAR-10's binary
#             format (5,000 records; speed does not depend on their content); samples/s
#   spam      experiment=spam_transformer (batch 32 x 256 pieces), 20 batches; samples/s
#   ctc       experiment=sentences_ctc (conv front-end + 2-layer bidirectional LSTM), 20 batches of
#             16, no SortaGrad; samples/s. The clips are noise this script writes (400 WAVs at
#             16 kHz, 1.8 to 4.5 s like the spoken 4-12 word sentences of
#             scripts/prepare_speech_data.sh, with random 4-12 word transcripts); speed depends
#             on their lengths, not on what they say
#   kws       experiment=commands_kws (DS-CNN on log-mel features, its waveform and SpecAugment
#             augmentations on), 30 batches of 64; samples/s. The clips are 1 s of noise at
#             22050 Hz that this script writes (12 classes x 60 in train), like the clips of
#             scripts/prepare_speech_data.sh
# Needs the text data for gpt and spam (scripts/prepare_text_data.sh).
#   bench/bf16_ratio.sh                                   # MODELS="cnn gpt resnet18" ROUNDS=3 THREADS=2
#   MODELS="resnet18 spam" PRECISIONS="32 bf16-mixed" ROUNDS=2 bench/bf16_ratio.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source bench/common.sh
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
models=${MODELS:-cnn gpt resnet18}
read -r -a precisions <<< "${PRECISIONS:-32 bf16-mixed bf16-true}"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

# CIFAR-10's binary layout: per record one label byte, then 3 x 32 x 32 bytes (R, G, B planes).
make_cifar() {
  "${KILN_PYTHON:-.venv/bin/python}" - "$1" <<'EOF'
import os, random, sys
root = sys.argv[1]
os.makedirs(root, exist_ok=True)
rng = random.Random(0)
for name, records in [(f"data_batch_{i}.bin", 1000) for i in range(1, 6)] + [("test_batch.bin", 100)]:
    with open(os.path.join(root, name), "wb") as f:
        for _ in range(records):
            f.write(bytes([rng.randrange(10)]) + rng.randbytes(3072))
with open(os.path.join(root, "batches.meta.txt"), "w") as f:
    f.write("\n".join(f"class{i}" for i in range(10)) + "\n")
EOF
}

# A sentences_ctc data folder: ROOT/speech/sentences/{train,val,test}.jsonl of noise clips.
make_sentences() {
  "${KILN_PYTHON:-.venv/bin/python}" - "$1" <<'EOF'
import json, os, random, struct, sys, wave
root = os.path.join(sys.argv[1], "speech", "sentences")
rng = random.Random(0)
letters = "abcdefghijklmnopqrstuvwxyz"
def word():
    return "".join(rng.choice(letters) for _ in range(rng.randint(2, 7)))
lines = []
for split, count in [("train", 400), ("val", 16), ("test", 16)]:
    os.makedirs(os.path.join(root, split), exist_ok=True)
    with open(os.path.join(root, split + ".jsonl"), "w") as manifest:
        for i in range(count):
            seconds = rng.uniform(1.8, 4.5)
            frames = int(seconds * 16000)
            path = f"{split}/{i:05d}.wav"
            with wave.open(os.path.join(root, path), "wb") as w:
                w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
                w.writeframes(struct.pack(f"<{frames}h", *(int(rng.gauss(0, 3000)) for _ in range(frames))))
            text = " ".join(word() for _ in range(rng.randint(4, 12)))
            lines.append(text)
            manifest.write(json.dumps({"audio": path, "text": text, "duration": frames / 16000}) + "\n")
with open(os.path.join(root, "lm_text.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
EOF
}

# A commands_kws data folder: ROOT/speech/commands/{train,val,test}/LABEL/*.wav, 1 s noise clips.
make_commands() {
  "${KILN_PYTHON:-.venv/bin/python}" - "$1" <<'EOF'
import os, random, struct, sys, wave
root = os.path.join(sys.argv[1], "speech", "commands")
rng = random.Random(0)
labels = ["down", "go", "left", "no", "off", "on", "right", "silence", "stop", "unknown", "up", "yes"]
for split, count in [("train", 60), ("val", 2), ("test", 2)]:
    for label in labels:
        os.makedirs(os.path.join(root, split, label), exist_ok=True)
        for i in range(count):
            with wave.open(os.path.join(root, split, label, f"{i:04d}.wav"), "wb") as w:
                w.setnchannels(1); w.setsampwidth(2); w.setframerate(22050)
                w.writeframes(struct.pack("<22050h", *(int(rng.gauss(0, 3000)) for _ in range(22050))))
EOF
}

# rate MODEL PRECISION: samples/s (tokens/s for gpt).
rate() {
  local common=(trainer.num_threads="$threads" trainer.precision="$2")
  case $1 in
    cnn) kiln_epoch_rate "$work/kiln" experiment=fashion_mnist trainer.limit_train_batches=200 "${common[@]}" ;;
    gpt) kiln_epoch_rate "$work/kiln" experiment=mobydick_gpt trainer.max_steps=-1 trainer.max_time=null \
           trainer.limit_train_batches=60 "${common[@]}" | awk '{printf "%.1f", $1 * 128}' ;;
    resnet18) kiln_epoch_rate "$work/kiln" data=cifar10 data.root="$work/cifar" data.batch_size=64 \
           data.num_workers=0 model=resnet18 model.in_channels=3 task.num_classes=10 optimizer=adamw \
           trainer.channels_last=true trainer.limit_train_batches=30 "${common[@]}" ;;
    spam) kiln_epoch_rate "$work/kiln" experiment=spam_transformer trainer.limit_train_batches=20 "${common[@]}" ;;
    ctc) kiln_epoch_rate "$work/kiln" experiment=sentences_ctc paths.data_dir="$work/data" trainer.max_time=null \
           data.sortagrad_epochs=0 trainer.limit_train_batches=20 "${common[@]}" ;;
    kws) kiln_epoch_rate "$work/kiln" experiment=commands_kws paths.data_dir="$work/kws" \
           trainer.limit_train_batches=30 "${common[@]}" ;;
    *) echo "bf16_ratio: unknown model '$1' (cnn, gpt, resnet18, spam, ctc, kws)" >&2; exit 2 ;;
  esac
}

[[ " $models " == *" resnet18 "* ]] && make_cifar "$work/cifar"
[[ " $models " == *" ctc "* ]] && make_sentences "$work/data"
[[ " $models " == *" kws "* ]] && make_commands "$work/kws"
for model in $models; do
  echo "== $model ($threads threads; samples/s, tokens/s for gpt)"
  printf '%-6s' round; printf ' %12s' "${precisions[@]}"; printf '   ratios to %s\n' "${precisions[0]}"
  declare -A ratios=()
  for ((r = 1; r <= rounds; r++)); do
    rates=()
    for p in "${precisions[@]}"; do rates+=("$(rate "$model" "$p")"); done
    printf '%-6s' "$r"; printf ' %12s' "${rates[@]}"
    for ((i = 1; i < ${#precisions[@]}; i++)); do
      x=$(ratio "${rates[i]}" "${rates[0]}")
      ratios[$i]+="$x "
      printf '   %s %s' "${precisions[i]}" "$x"
    done
    echo
  done
  printf '%s medians:' "$model"
  for ((i = 1; i < ${#precisions[@]}; i++)); do
    printf ' %s / %s %sx;' "${precisions[i]}" "${precisions[0]}" "$(tr ' ' '\n' <<< "${ratios[$i]}" | grep . | median)"
  done
  echo
  unset ratios
done
