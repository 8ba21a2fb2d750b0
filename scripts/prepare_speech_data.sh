#!/usr/bin/env bash
# Prepares kiln's speech datasets (docs/data.md) by synthesizing speech with espeak-ng and mixing
# in noise with sox (both Debian packages), with fixed seeds:
#   commands/{train,val,test}/LABEL/*.wav   keyword spotting: yes no up down left right on off stop
#                                           go, "unknown" (other words) and "silence" (noise only),
#                                           1 s clips at espeak's 22050 Hz, mono, 16-bit
#   sentences/{train,val,test}/*.wav        recognition: Moby Dick sentences (from
#   sentences/{train,val,test}.jsonl          scripts/prepare_text_data.sh), one manifest line each:
#                                           {"audio": PATH, "text": ..., "duration": SECONDS}
#   sentences/lm_text.txt                   every sentence of the book's training part, normalized
#                                           like the transcripts, one per line (for a decoding LM)
#   speakers.tsv                            every speaker (accent + voice variant) and its split
#   MANIFEST                                every output file with its sha256
# A speaker is an espeak-ng English accent with a voice variant. Speakers are split by variant:
# the variants of the val and test speakers are never heard in training, in any accent.
# Every clip gets its own speed, pitch, start offset and noise (white, pink or brown, at a level
# drawn per clip), all from the seed.
#
# Usage: scripts/prepare_speech_data.sh [--force] [--small]
#   --small   a few speakers and sentences only (for tests)
# Environment:
#   KILN_SPEECH_DATA_DIR  output folder (default: <repo>/data/speech)
#   KILN_SPEECH_SEED      seed (default: 1234)
#   KILN_JOBS             parallel synthesis processes (default: every core)
# Idempotent: when the outputs match their MANIFEST it does nothing (--force rebuilds).
# Exit codes: 0 ok; 1 usage or internal error; 2 espeak-ng or sox missing; 3 no sentence text.
set -euo pipefail

die() { echo "prepare_speech_data: error: $2" >&2; exit "$1"; }

force=0 small=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --small) small=1 ;;
    -h|--help) sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die 1 "unknown argument '$arg' (try --help)" ;;
  esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${KILN_SPEECH_DATA_DIR:-$repo/data/speech}"
seed="${KILN_SPEECH_SEED:-1234}"
jobs="${KILN_JOBS:-$(nproc)}"
[[ "$seed" =~ ^[0-9]+$ ]] || die 1 "KILN_SPEECH_SEED must be a non-negative integer, got '$seed'"
command -v espeak-ng >/dev/null || die 2 "espeak-ng not found (apt-get install espeak-ng)"
command -v sox >/dev/null || die 2 "sox not found (apt-get install sox)"
command -v soxi >/dev/null || die 2 "soxi not found (apt-get install sox)"

t0=$(date +%s)
# The outputs depend on the seed, the size and this script (and espeak-ng's version).
header="# seed $seed small $small script $(sha256sum < "${BASH_SOURCE[0]}" | cut -c1-16) $(espeak-ng --version | cut -d' ' -f4)"
manifest_ok() {
  [[ -f "$out/MANIFEST" ]] || return 1
  [[ "$(head -1 "$out/MANIFEST")" == "$header" ]] || return 1
  (cd "$out" && tail -n +2 MANIFEST | sha256sum --check --quiet --strict >/dev/null 2>&1)
}
if (( ! force )) && manifest_ok; then
  echo "prepare_speech_data: $out is up to date (every file matches its MANIFEST); nothing to do"
  exit 0
fi

# --- sentence text ---------------------------------------------------------------------------
text_dir="${KILN_TEXT_DATA_DIR:-$repo/data/text}"
if [[ ! -f "$text_dir/mobydick/train.txt" ]]; then
  bash "$repo/scripts/prepare_text_data.sh" >&2 || die 3 "no Moby Dick text: scripts/prepare_text_data.sh failed"
fi

# --- speakers --------------------------------------------------------------------------------
accents=(en-gb en-us en-gb-scotland en-gb-x-gbclan en-gb-x-rp en-gb-x-gbcwmd en-029)
variant_dir="$(espeak-ng --version | sed -n 's/.*Data at: //p')/voices/!v"
[[ -d "$variant_dir" ]] || die 2 "espeak-ng's voice variants are missing ($variant_dir)"
mapfile -t variants < <(ls "$variant_dir" | grep -v ' ' | LC_ALL=C sort)
if (( small )); then accents=(en-us en-gb); variants=(m1 m3 f2 f4 klatt croak whisper m7); fi

# Bash reseeds $RANDOM in every subshell, so every draw happens in this shell, never in $(...).
RANDOM=$seed
for ((i = ${#variants[@]} - 1; i > 0; i--)); do
  j=$((RANDOM % (i + 1))); t=${variants[i]}; variants[i]=${variants[j]}; variants[j]=$t
done
n=${#variants[@]}
n_test=$(( n * 15 / 100 > 1 ? n * 15 / 100 : 1 ))
n_val=$(( n * 10 / 100 > 1 ? n * 10 / 100 : 1 ))

rm -rf "$out.tmp"
mkdir -p "$out.tmp"
plan="$out.tmp/plan.tsv"   # kind split label text voice speed pitch offset noise level path
: > "$plan"
declare -A speakers_of
{
  printf 'split\taccent\tvariant\n'
  for ((v = 0; v < n; v++)); do
    split=train
    ((v < n_test)) && split=test
    ((v >= n_test && v < n_test + n_val)) && split=val
    for accent in "${accents[@]}"; do
      printf '%s\t%s\t%s\n' "$split" "$accent" "${variants[v]}"
      speakers_of[$split]+="$accent+${variants[v]} "
    done
  done
} > "$out.tmp/speakers.tsv"

commands=(yes no up down left right on off stop go)
others=(bed bird cat dog happy house marvin sheila tree wow zero one two three four five six seven
        eight nine learn follow forward backward visual)
noises=(whitenoise pinknoise brownnoise)
clip_params() { # sets $params: "speed pitch offset noise level" of one clip
  printf -v params '%d\t%d\t0.%02d\t%s\t0.%03d' $((130 + RANDOM % 81)) $((25 + RANDOM % 51)) $((1 + RANDOM % 29)) \
    "${noises[RANDOM % 3]}" $((2 + RANDOM % 29))
}
for split in train val test; do
  for voice in ${speakers_of[$split]}; do
    tag=${voice//+/_}
    for word in "${commands[@]}"; do
      clip_params
      printf 'cmd\t%s\t%s\t%s\t%s\t%s\tcommands/%s/%s/%s_%s.wav\n' "$split" "$word" "$word" "$voice" \
        "$params" "$split" "$word" "$tag" "$word" >> "$plan"
    done
    for k in 0 1; do
      word=${others[RANDOM % ${#others[@]}]}
      clip_params
      printf 'cmd\t%s\tunknown\t%s\t%s\t%s\tcommands/%s/unknown/%s_%s_%d.wav\n' "$split" "$word" "$voice" \
        "$params" "$split" "$tag" "$word" "$k" >> "$plan"
    done
    clip_params
    printf 'silence\t%s\tsilence\t-\t%s\t%s\tcommands/%s/silence/%s.wav\n' "$split" "$voice" "$params" \
      "$split" "$tag" >> "$plan"
  done
done

# Sentences of 4 to 12 words, lower case, letters and apostrophes only; train text from the
# training part of the book, val and test text from its held-out parts.
normalized() { # file: its sentences, one per line, as the transcripts are written
  tr '\n' ' ' < "$1" | tr '.!?;' '\n\n\n\n' | tr 'A-Z' 'a-z' | sed "s/[^a-z' ]/ /g; s/  */ /g; s/^ //; s/ $//" |
    awk 'NF >= 1'
}
sentences() { # file count
  normalized "$1" | awk 'NF >= 4 && NF <= 12' |
    awk -v seed="$seed" 'BEGIN {srand(seed)} {print rand() "\t" $0}' |
    LC_ALL=C sort -k1,1 | cut -f2 | head -n "$2"
}
declare -A sentence_count=([train]=4000 [val]=100 [test]=200)
(( small )) && sentence_count=([train]=12 [val]=4 [test]=4)
for split in train val test; do
  read -r -a voices <<< "${speakers_of[$split]}"
  i=0
  while IFS= read -r line; do
    voice=${voices[RANDOM % ${#voices[@]}]}
    clip_params
    printf 'sentence\t%s\t-\t%s\t%s\t%s\tsentences/%s/%05d.wav\n' "$split" "$line" "$voice" "$params" \
      "$split" "$i" >> "$plan"
    i=$((i + 1))
  done < <(sentences "$text_dir/mobydick/$split.txt" "${sentence_count[$split]}")
done

# --- synthesis -------------------------------------------------------------------------------
synth() { # one plan line
  IFS=$'\t' read -r kind split label text voice speed pitch offset noise level path <<< "$1"
  local dest="$OUT_TMP/$path" speech="$OUT_TMP/$path.speech.wav"
  mkdir -p "$(dirname "$dest")"
  if [[ "$kind" == silence ]]; then
    sox -R -n -r 22050 -c 1 -b 16 "$dest" synth 1 "$noise" vol "$(awk "BEGIN{print $level * 4}")"
    return
  fi
  espeak-ng -v "$voice" -s "$speed" -p "$pitch" -w "$speech" "$text"
  local length=1
  if [[ "$kind" == sentence ]]; then
    length=$(awk "BEGIN{print $(soxi -D "$speech") + $offset + 0.2}")
  fi
  # Shift the start, pad or cut to the clip's length, then mix noise of the same length.
  # (-V1: sox warns "pads not applied" for pads that trim then removes, wrongly.)
  sox -V1 -R "$speech" -r 22050 -c 1 -b 16 "$speech.shifted.wav" pad "$offset" "$length" trim 0 "$length"
  sox -R -n -r 22050 -c 1 -b 16 "$speech.noise.wav" synth "$length" "$noise" vol "$level"
  sox -R -m "$speech.shifted.wav" "$speech.noise.wav" -b 16 "$dest"
  rm -f "$speech" "$speech.shifted.wav" "$speech.noise.wav"
}
export -f synth
export OUT_TMP="$out.tmp"
clips=$(wc -l < "$plan")
tr '\n' '\0' < "$plan" | xargs -0 -P "$jobs" -I{} bash -c 'synth "$1"' _ {} ||
  die 1 "synthesis failed"

# --- manifests -------------------------------------------------------------------------------
json() { sed 's/\\/\\\\/g; s/"/\\"/g' <<< "$1"; }
for split in train val test; do
  : > "$out.tmp/sentences/$split.jsonl"
  while IFS=$'\t' read -r kind s label text voice speed pitch offset noise level path; do
    [[ "$kind" == sentence && "$s" == "$split" ]] || continue
    printf '{"audio": "%s", "text": "%s", "duration": %s}\n' "${path#sentences/}" "$(json "$text")" \
      "$(soxi -D "$out.tmp/$path")" >> "$out.tmp/sentences/$split.jsonl"
  done < "$plan"
done
rm -f "$plan"
# Every sentence of the book's training part (any length), for a decoding language model.
normalized "$text_dir/mobydick/train.txt" > "$out.tmp/sentences/lm_text.txt"
{
  echo "$header"
  (cd "$out.tmp" && find . -type f ! -name MANIFEST -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
} > "$out.tmp/MANIFEST"
rm -rf "$out"
mv "$out.tmp" "$out"
for split in train val test; do
  echo "prepare_speech_data: $split: $(find "$out/commands/$split" -name '*.wav' | wc -l) command clips, $(wc -l < "$out/sentences/$split.jsonl") sentences, $(awk -F'\t' -v s="$split" '$1 == s' "$out/speakers.tsv" | wc -l) speakers"
done
echo "prepare_speech_data: $clips clips in $out in $(( $(date +%s) - t0 )) s"
