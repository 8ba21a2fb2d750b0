#!/usr/bin/env bash
# A short, reproducible fuzzing run (fixed seed and run count) of the fuzz targets: the override
# parser and composition, seeded from the Hydra conformance cases (shared and
# tests/config/hydra_cases), and the tar shard reader, seeded with tars that `tar` writes. Exits 77 (skipped)
# when the fuzzers were not built.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${KILN_FUZZ_BIN:-$root/build-fuzz/bin}
cases=$root/../shared/conformance/hydra
if [[ ! -x $bin/override_parser_fuzzer || ! -x $bin/compose_fuzzer ]]; then
  echo "fuzzers not built (scripts/test.sh builds them into build-fuzz/)"; exit 77
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/override" "$work/compose"
n=0
own=$root/tests/config/hydra_cases
for f in "$cases"/*/case.yaml "$own"/*/case.yaml; do
  sed -n '/^overrides:/,/^[a-z_]*:/p' "$f" | sed -n 's/^- //p' | while IFS= read -r line; do
    n=$((n + 1)); printf '%s' "$line" > "$work/override/$(basename "$(dirname "$f")")_$n"
  done
done
# Inputs that once found bugs stay in the seed set.
cp "$root"/fuzz/regressions/override_parser/* "$work/override/" 2>/dev/null || true
cp "$root"/fuzz/regressions/compose/* "$work/compose/" 2>/dev/null || true
for f in "$cases"/*/conf/*.yaml "$cases"/*/conf/*/*.yaml "$own"/*/conf/*.yaml; do
  [[ -f $f ]] && cp "$f" "$work/compose/$(echo "$f" | md5sum | cut -c1-12).yaml"
done
# Tar shards as `tar` writes them (ustar, pax, gzip), for the shard reader.
mkdir -p "$work/shard" "$work/shard_src/d"
(cd "$work/shard_src" && printf abc > a.jpg && printf 3 > a.cls && printf hello > b.txt && printf 1 > b.cls &&
  printf x > d/c.seg.png && tar -cf "$work/shard/plain.tar" a.jpg a.cls b.txt b.cls d &&
  tar --format=pax -cf "$work/shard/pax.tar" a.jpg a.cls && tar -czf "$work/shard/gz.tar.gz" a.jpg b.txt)
cp "$root"/fuzz/regressions/shard_reader/* "$work/shard/" 2>/dev/null || true
artifacts=${KILN_FUZZ_ARTIFACTS:-$(dirname "$bin")/../fuzz-artifacts}
mkdir -p "$artifacts"
common=(-seed=1 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/")
# The override parser is cheap per input; composition writes and reads files.
specs=(override_parser:${KILN_FUZZ_OVERRIDE_RUNS:-400000} compose:${KILN_FUZZ_COMPOSE_RUNS:-20000})
# The shard reader when it was built (it needs libarchive and OpenSSL).
[[ -x $bin/shard_reader_fuzzer ]] && specs+=(shard_reader:${KILN_FUZZ_SHARD_RUNS:-300000})
for spec in "${specs[@]}"; do
  target=${spec%%:*} runs=${spec##*:}
  corpus=$work/${target%_parser}
  [[ $target == shard_reader ]] && corpus=$work/shard
  budget="$runs runs"
  [[ -n ${KILN_FUZZ_SECONDS:-} ]] && budget="${KILN_FUZZ_SECONDS} s"
  echo "== $target: $(ls "$corpus" | wc -l) seeds, $budget"
  status=0
  # KILN_FUZZ_SECONDS (bench/fuzz_long.sh): each target for that long instead of a run count.
  limit=-runs=$runs
  [[ -n ${KILN_FUZZ_SECONDS:-} ]] && limit=-max_total_time=$KILN_FUZZ_SECONDS
  (cd "$work" && "$bin/${target}_fuzzer" "${common[@]}" "$limit" "$corpus") > "$work/$target.log" 2>&1 || status=$?
  grep -aE "stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY|Done" "$work/$target.log" || true
  if [[ $status -ne 0 ]]; then
    echo "$target failed (exit $status); the input that failed is in $artifacts"
    exit 1
  fi
done
echo "fuzzing finished: no crash, leak or timeout"
