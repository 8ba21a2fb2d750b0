#!/usr/bin/env bash
# A short, reproducible fuzzing run (fixed seed and run count) of every libFuzzer target, each from
# seeds that are real files: the Hydra conformance cases for the config fuzzers, tars that `tar`
# writes, files that kiln's own writers write (each target's LLVMFuzzerInitialize with
# KILN_FUZZ_WRITE_SEEDS), small files built here (IDX, CIFAR, text data, ledgers, HTTP requests,
# a plugin), and every input in fuzz/regressions/TARGET/. Exits 77 (skipped) when the fuzzers were
# not built; a target that was not built (no LibTorch, no cpp-httplib, ...) is named and passed over.
#   KILN_FUZZ_TARGETS="idx cifar"  only these targets (names as in the table below)
#   KILN_FUZZ_SECONDS=N            each target for N seconds instead of its run count (bench/fuzz_long.sh)
#   KILN_FUZZ_RUNS_SCALE=F         every run count times F (e.g. 0.1 for a smoke run)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${KILN_FUZZ_BIN:-$root/build-fuzz/bin}
cases=$root/../shared/conformance/hydra
own=$root/tests/config/hydra_cases

# target  seed generator  runs (the suite's bounded run: about 160 s in all, alone on 2 cores)
# [libFuzzer flags for this target]. Every seed is the same bytes on every machine (no random
# bytes, times or paths in them), so that with -seed=1 a run mutates the same way everywhere.
table=(
  "override_parser  seed_override_parser  200000"
  "compose          seed_compose          12000"
  "shard_reader     seed_shard_reader     150000"
  "idx              seed_idx              20000"
  "cifar            seed_cifar            8000"
  "image_decode     seed_written          2000"
  "jpeg_crop        seed_written          2000"
  "safetensors      seed_written          8000"
  "peft_adapter     seed_peft_adapter     5000"
  "checkpoint       seed_written          1000"
  "sharded_checkpoint seed_written        5000"
  "plugin_manifest  seed_plugin_manifest  10000"
  "audio            seed_audio            500"
  "labelled_text    seed_labelled_text    5000"
  "audio_manifest   seed_audio_manifest   5000"
  "criteo           seed_criteo           30000"
  "sentencepiece_model seed_written       3000"
  "hf_tokenizer     seed_written          3000"
  "hf_config        seed_written          3000"
  "sweep_ledger     seed_sweep_ledger     2000"
  "serve_request    seed_serve_request    20000"
)

seed_override_parser() {
  local n=0 f line
  for f in "$cases"/*/case.yaml "$own"/*/case.yaml; do
    while IFS= read -r line; do
      n=$((n + 1)); printf '%s' "$line" > "$1/$(basename "$(dirname "$f")")_$n"
    done < <(sed -n '/^overrides:/,/^[a-z_]*:/p' "$f" | sed -n 's/^- //p')
  done
}
seed_compose() {
  local f
  for f in "$cases"/*/conf/*.yaml "$cases"/*/conf/*/*.yaml "$own"/*/conf/*.yaml; do
    [[ -f $f ]] && cp "$f" "$1/$(echo "$f" | md5sum | cut -c1-12).yaml"
  done
}
# Tar shards as `tar` writes them (ustar, pax, gzip), with fixed times and owners.
seed_shard_reader() {
  local src=$work/shard_src
  local fixed=(--mtime=@1700000000 --owner=0 --group=0 --numeric-owner --sort=name)
  mkdir -p "$src/d"
  (cd "$src" && printf abc > a.jpg && printf 3 > a.cls && printf hello > b.txt && printf 1 > b.cls &&
    printf x > d/c.seg.png && tar "${fixed[@]}" -cf "$1/plain.tar" a.jpg a.cls b.txt b.cls d &&
    tar "${fixed[@]}" --format=pax --pax-option=delete=atime,delete=ctime -cf "$1/pax.tar" a.jpg a.cls &&
    tar "${fixed[@]}" -cf - a.jpg b.txt | gzip -n > "$1/gz.tar.gz")
}
# N bytes that look random and are the same everywhere.
fixed_bytes() { python3 -c 'import random, sys; random.seed(1); sys.stdout.buffer.write(random.randbytes(int(sys.argv[1])))' "$1"; }
# Files from kiln's own writers (the target's LLVMFuzzerInitialize).
seed_written() {
  KILN_FUZZ_WRITE_SEEDS=$1 "$bin/${target}_fuzzer" > "$work/$target.seeds.log" 2>&1
}
# IDX: 2 images of 4x4 and their 2 labels, raw and gzip.
seed_idx() {
  { printf '\0\0\010\003\0\0\0\002\0\0\0\004\0\0\0\004'; fixed_bytes 32; } > "$1/images.idx3"
  printf '\0\0\010\001\0\0\0\002\007\001' > "$1/labels.idx1"
  gzip -nc "$1/images.idx3" > "$1/images.idx3.gz"
}
# Criteo click data: two good lines (one with empty fields, a negative count, upper-case hex), a
# bad label, a short line, a line without its label; plain and gzip.
seed_criteo() {
  local ints hashes good
  ints=$(printf '\t%s' 1 2 3 4 5 6 7 8 9 10 11 12 13)
  hashes=$(for i in $(seq 1 26); do printf '\t%08x' "$((i * 2654435761 % 4294967296))"; done)
  good="1$ints$hashes"
  { printf '%s\n' "$good"
    printf '%s\r\n' "$good" | sed 's/^1\t1\t2/0\t\t-2/; s/\t9e3779b1\t3c6ef362/\tDEADBEEF\t/'; } > "$1/good.tsv"
  { printf '%s\n' "$good" | sed 's/^1/7/'; printf '1\t2\t3\n'; printf '%s\n' "${good#1?}"; } > "$1/bad.tsv"
  gzip -nc "$1/good.tsv" > "$1/good.tsv.gz"
}
# CIFAR: 2 CIFAR-10 records (label, 3072 bytes), 1 CIFAR-100 record (coarse, fine, 3072), gzip.
seed_cifar() {
  { printf '\003'; fixed_bytes 3072; printf '\011'; head -c 3072 /dev/zero; } > "$1/cifar10.bin"
  { printf '\004\052'; fixed_bytes 3072; } > "$1/cifar100.bin"
  gzip -nc "$1/cifar10.bin" > "$1/cifar10.bin.gz"
}
# A plugin's manifest as KILN_PLUGIN writes it: the library, and its .kiln_plugin section alone.
seed_plugin_manifest() {
  local cxx=${CXX:-c++}
  command -v "$cxx" > /dev/null || cxx=clang++
  printf '%s\n' '#include "lib/registry/plugin.h"' 'static void Register(kiln::Registrar&) {}' \
    'KILN_PLUGIN("seed_plugin", "1.2.3", Register, "")' > "$work/plugin.cc"
  if (cd "$work" && "$cxx" -std=c++17 -shared -fPIC -O0 -I"$root" -I"$bin/../generated" plugin.cc \
      -o libseed_plugin.so 2> plugin.log); then
    strip -o "$1/libseed_plugin.so" "$work/libseed_plugin.so" 2> /dev/null || cp "$work/libseed_plugin.so" "$1/"
    objcopy --only-section=.kiln_plugin "$work/libseed_plugin.so" "$1/section_only.so" 2> /dev/null || true
  fi
  printf '\177ELF\002\001\001' > "$1/elf_header_only"
}
seed_audio() {
  seed_written "$1"
  if command -v sox > /dev/null; then
    sox -R -n -r 8000 -c 1 "$1/tone.flac" synth 0.01 sine 440
    sox -R -n -r 16000 -c 2 "$1/tone.ogg" synth 0.02 sine 300 2> /dev/null || true
    sox -R -n -r 8000 -c 1 -e u-law "$1/ulaw.wav" synth 0.005 sine 440
  fi
}
# Text data: the first byte picks the format (0 jsonl, 1 csv, 2 tsv; +4 label field "category",
# +8 labels optional, +16 also as plain text and lines, +32 a JSONL record may be a conversation's
# [text, trained] segments), the rest is the file.
seed_labelled_text() {
  printf '\000{"text": "a good film", "label": "pos"}\n\n{"text": "bad", "label": "neg"}\n' > "$1/labelled.jsonl"
  printf '\001text,label\n"quoted, ""with"" comma",pos\nplain,neg\n' > "$1/labelled.csv"
  printf '\002text\tlabel\nhello there\tx\r\nbye\ty\n' > "$1/labelled.tsv"
  printf '\015category,text\nsport,"multi\nline"\n' > "$1/category.csv"
  printf '\030{"text": "\\u00fcn\\u00efcode \\ud83d\\ude00"}\n{"text": "no label"}\n' > "$1/unlabelled.jsonl"
  printf '\040{"segments": [["<s>user: hi ", false], ["hello</s>", true]]}\n{"text": "q", "label": "a"}\n{"messages": []}\n' > "$1/segments.jsonl"
}
# Audio manifests: the first byte says whether transcripts are needed (+0) or not (+1), bad lines
# fail (+0) or are skipped (+2); the rest is the file.
seed_audio_manifest() {
  printf '\000{"audio": "a.wav", "text": "hello there", "duration": 1.5}\n\n{"audio": "/abs/b.flac", "text": "bye"}\n' > "$1/manifest.jsonl"
  printf '\003{"audio": "c.wav"}\n{"audio": 3}\nnot json\n{"audio": "d.wav", "duration": "long"}\n' > "$1/skip.jsonl"
}
# adapter_config.json as kiln's export and PEFT's save_pretrained write it (a list of last names;
# all-linear saved as full names), the all-linear string, a regular expression, DoRA, rsLoRA with
# an alpha_pattern, ranks by pattern (regular-expression keys), regular expressions with
# lookahead, exclusions and a refused Python-only group.
seed_peft_adapter() {
  printf '%s\n' '{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 8, "lora_alpha": 16,' \
    '"lora_dropout": 0.05, "target_modules": ["q_proj", "v_proj"], "bias": "none",' \
    '"modules_to_save": null, "use_dora": false, "use_rslora": false}' > "$1/kiln.json"
  printf '%s\n' '{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules":' \
    '["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"],' \
    '"modules_to_save": ["classifier", "score"], "bias": "lora_only"}' > "$1/full_names.json"
  printf '%s\n' '{"peft_type": "LORA", "r": 2, "lora_alpha": 2.5, "target_modules": "ALL-linear"}' > "$1/all_linear.json"
  printf '%s\n' '{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": ".*\\.(q|v)_proj"}' > "$1/regex.json"
  printf '%s\n' '{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "use_dora": true, "target_modules": ["q"]}' > "$1/dora.json"
  printf '%s\n' '{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "use_rslora": true, "target_modules": ["q"],' \
    '"alpha_pattern": {"q": 4}, "rank_pattern": {}, "lora_bias": false, "exclude_modules": null}' > "$1/patterns.json"
  printf '%s\n' '{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": ["q", "v"],' \
    '"rank_pattern": {"^model.q": 4, "v": 1, "layers\\.[0-9]\\.q": 3}, "alpha_pattern": {"q": 2.5}}' > "$1/rank_pattern.json"
  printf '%s\n' '{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": ["q", "v"],' \
    '"layers_to_transform": [0, 2], "layers_pattern": ["layers", "h"]}' > "$1/layers.json"
  printf '%s\n' '{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": "model\\.layers\\.(1|11)\\.(?!o_)[a-z]{1,4}_proj",' \
    '"exclude_modules": ".*(gate|k)_proj", "rank_pattern": {"layers\\.1\\..*": 3, "lm_head|q": 2}}' > "$1/regex_lookahead.json"
  printf '%s\n' '{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": "(?P<x>q)_proj"}' > "$1/regex_python.json"
  printf '%s\n' '{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": ["q"],' \
    '"trainable_token_indices": [3, 5, 128000]}' > "$1/tokens.json"
  printf '%s\n' '{"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": ["q"],' \
    '"trainable_token_indices": {"embed_tokens": [0, 7]}}' > "$1/tokens_named.json"
}
# A ledger as AppendLedger writes it, with a line cut short by a killed process.
seed_sweep_ledger() {
  printf '%s\n' "- {job: 0, status: ok, seconds: 1.500, overrides: ['lr=0.1', 'hydra.sweep.dir=x'], dir: 'outputs/lr=0.1', message: ''}" \
    "- {job: 1, status: failed, seconds: 0.250, overrides: ['lr=0.2'], dir: '', message: 'exit 3: it''s broken'}" \
    "- {job: 1, status: ok, seconds: 2.000, overrides: ['lr=0.2'], dir: '', message: ''}" \
    "- {job: 3, status: ok, seconds: 9.1, overrides: [], dir: " > "$1/ledger.yaml"
}
# Requests to kiln serve: JSON texts and base64, a multipart form, a raw body, chunked.
seed_serve_request() {
  local body='{"inputs": ["a text", {"b64": "aGVsbG8="}]}'
  printf 'POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
    ${#body} "$body" > "$1/json"
  body='{"input": "one"}'
  printf 'POST /v1/predict HTTP/1.1\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s' \
    ${#body} "$body" > "$1/json_input"
  body=$(printf -- '--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\nContent-Type: image/png\r\n\r\nPNGDATA\r\n--XyZ\r\nContent-Disposition: form-data; name="t"\r\n\r\ntext\r\n--XyZ--\r\n')
  printf 'POST /v1/predict HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: %d\r\n\r\n%s' \
    ${#body} "$body" > "$1/multipart"
  printf 'POST /v1/predict HTTP/1.1\r\nContent-Type: audio/wav\r\nContent-Length: 4\r\n\r\nRIFF' > "$1/raw"
  printf 'POST /v1/predict HTTP/1.1\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n' > "$1/chunked"
  printf 'GET /healthz HTTP/1.1\r\n\r\n' > "$1/get"
  body='{"model": "m", "prompt": ["Call me", "It was"], "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "stop": ["\n"], "stream": true, "stream_options": {"include_usage": true}, "n": 1}'
  printf 'POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
    ${#body} "$body" > "$1/completions"
}

selected=${KILN_FUZZ_TARGETS:-}
selected=${selected//,/ }
rows=() built=0
for row in "${table[@]}"; do
  read -r target _ _ <<< "$row"
  if [[ -n $selected && " $selected " != *" $target "* ]]; then continue; fi
  rows+=("$row")
  [[ -x $bin/${target}_fuzzer ]] && built=$((built + 1))
done
for name in $selected; do
  printf '%s\n' "${table[@]}" | grep -q "^$name " || { echo "unknown fuzz target '$name'"; exit 2; }
done
if [[ $built -eq 0 ]]; then
  echo "fuzzers not built (scripts/test.sh builds them into build-fuzz/)"; exit 77
fi

work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
artifacts=${KILN_FUZZ_ARTIFACTS:-$(dirname "$bin")/../fuzz-artifacts}
mkdir -p "$artifacts"
# UBSan's findings stop a run as ASan's do (by default it reports and goes on).
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# Leaks inside libraries kiln cannot fix (LibTorch), each explained in the file.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/fuzz/lsan_suppressions.txt}
common=(-seed=1 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/")
summary=()
for row in "${rows[@]}"; do
  read -r target seeder runs extra <<< "$row"
  if [[ ! -x $bin/${target}_fuzzer ]]; then
    echo "== $target: not built, passed over"; continue
  fi
  corpus=$work/$target
  mkdir -p "$corpus"
  "$seeder" "$corpus"
  # Inputs that once found bugs stay in the seed set.
  cp "$root"/fuzz/regressions/"$target"/* "$corpus/" 2>/dev/null || true
  runs=$(awk -v r="$runs" -v s="${KILN_FUZZ_RUNS_SCALE:-1}" 'BEGIN { printf "%d", r * s < 1 ? 1 : r * s }')
  limit=-runs=$runs budget="$runs runs"
  if [[ -n ${KILN_FUZZ_SECONDS:-} ]]; then
    limit=-max_total_time=$KILN_FUZZ_SECONDS budget="${KILN_FUZZ_SECONDS} s"
  fi
  echo "== $target: $(ls "$corpus" | wc -l) seeds, $budget"
  status=0 start=$SECONDS
  # shellcheck disable=SC2086  # extra: flags, split on spaces
  (cd "$work" && "$bin/${target}_fuzzer" "${common[@]}" ${extra:-} "$limit" "$corpus") > "$work/$target.log" 2>&1 || status=$?
  grep -aE "stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY|Done" "$work/$target.log" || true
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$target.log" | tail -1)
  rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$work/$target.log" | tail -1)
  summary+=("$(printf '%-20s %12s executions %6s MB peak RSS %6d s' "$target" "${execs:-?}" "${rss:-?}" $((SECONDS - start)))")
  if [[ $status -ne 0 ]]; then
    grep -aE "ERROR|SUMMARY|what\(\)|Test unit written| in (kiln|LLVMFuzzer)" "$work/$target.log" | head -40 || true
    echo "$target failed (exit $status); the input that failed is in $artifacts"
    exit 1
  fi
done
printf '%s\n' "${summary[@]}"
echo "fuzzing finished: no crash, leak or timeout"
