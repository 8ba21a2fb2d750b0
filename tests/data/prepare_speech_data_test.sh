#!/usr/bin/env bash
# End-to-end test of scripts/prepare_speech_data.sh --small (docs/data.md): synthesizes the small
# speech sets twice (in parallel and with one process) from a few sentences written here, and
# checks that both are identical, complete, split by unseen voices, and that a third run is a no-op.
# Usage: tests/data/prepare_speech_data_test.sh [SOURCE_DIR]
# Exits 77 (ctest's skip) when espeak-ng or sox is missing.
set -euo pipefail

src="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/../..}" && pwd)"
script="$src/scripts/prepare_speech_data.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v espeak-ng >/dev/null || { echo "SKIP: espeak-ng is not installed"; exit 77; }
command -v sox >/dev/null || { echo "SKIP: sox is not installed"; exit 77; }

tmp="$(mktemp -d "${TMPDIR:-/tmp}/kiln-speech-data-test.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export KILN_TEXT_DATA_DIR="$tmp/text"
mkdir -p "$tmp/text/mobydick"
for split in train val test; do
  for i in 1 2 3 4 5 6; do echo "Call me Ishmael number $i of the $split part. Some years ago, never mind how long."; done \
    > "$tmp/text/mobydick/$split.txt"
done

KILN_SPEECH_DATA_DIR="$tmp/a" bash "$script" --small > "$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; fail "first run"; }
KILN_SPEECH_DATA_DIR="$tmp/b" KILN_JOBS=1 bash "$script" --small > "$tmp/b.log" 2>&1 || { cat "$tmp/b.log"; fail "second run"; }
cmp -s "$tmp/a/MANIFEST" "$tmp/b/MANIFEST" || fail "two runs with the same seed differ: $(diff "$tmp/a/MANIFEST" "$tmp/b/MANIFEST" | head -5)"
grep -q "sox WARN\|error" "$tmp/a.log" && fail "warnings or errors: $(grep -m3 'WARN\|error' "$tmp/a.log")"

d="$tmp/a"
for split in train val test; do
  for label in yes no up down left right on off stop go unknown silence; do
    n=$(find "$d/commands/$split/$label" -name '*.wav' | wc -l)
    (( n > 0 )) || fail "no $split clips of '$label'"
  done
  lines=$(wc -l < "$d/sentences/$split.jsonl")
  (( lines == $( [[ $split == train ]] && echo 12 || echo 4) )) || fail "$split.jsonl has $lines lines"
  while IFS= read -r line; do
    audio=$(sed -n 's/.*"audio": "\([^"]*\)".*/\1/p' <<< "$line")
    [[ -f "$d/sentences/$audio" ]] || fail "manifest names a missing file: $line"
    [[ "$line" =~ \"text\":\ \"[a-z\ \']+\" ]] || fail "bad text: $line"
    [[ "$line" =~ \"duration\":\ [0-9.]+\} ]] || fail "bad duration: $line"
  done < "$d/sentences/$split.jsonl"
done
# The LM text: every sentence of the training part, normalized, and none of val's or test's.
lm="$d/sentences/lm_text.txt"
[[ "$(wc -l < "$lm")" == 12 ]] || fail "lm_text.txt has $(wc -l < "$lm") lines, not 12"
grep -qv "^[a-z' ]*$" "$lm" && fail "lm_text.txt has unnormalized text: $(grep -m1 -v "^[a-z' ]*$" "$lm")"
grep -qx "some years ago never mind how long" "$lm" || fail "lm_text.txt misses a training sentence"
grep -q "val part\|test part" "$lm" && fail "lm_text.txt has held-out text"
for f in $(find "$d/commands" -name '*.wav' | head -40); do
  [[ "$(soxi -D "$f")" == 1.000000 ]] || fail "$f is not 1 s long"
  [[ "$(soxi -r "$f")" == 22050 && "$(soxi -c "$f")" == 1 ]] || fail "$f is not 22050 Hz mono"
done
# Voices of val and test are never heard in training.
train_variants=$(awk -F'\t' '$1 == "train" {print $3}' "$d/speakers.tsv" | sort -u)
for split in val test; do
  for v in $(awk -F'\t' -v s=$split '$1 == s {print $3}' "$d/speakers.tsv" | sort -u); do
    grep -qx "$v" <<< "$train_variants" && fail "variant $v is in train and $split"
    ls "$d/commands/train/yes" | grep -q "_$v"_ && fail "a training clip uses $split variant $v"
  done
done

KILN_SPEECH_DATA_DIR="$tmp/a" bash "$script" --small > "$tmp/c.log" 2>&1
grep -q "up to date" "$tmp/c.log" || fail "a third run did not see the outputs as up to date: $(cat "$tmp/c.log")"
echo "prepare_speech_data: deterministic, complete, split by unseen voices"
