#!/usr/bin/env bash
# SentencePiece training time and encoding throughput on the spam training split (27 MB, 4836
# messages), for the unigram and the BPE model of configs/tokenizer/ (vocab 8000), on THREADS
# threads (default 2). Needs the prepared text data (scripts/prepare_text_data.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${TOKENIZER_SPEED:-build/bin/tokenizer_speed}
threads=${THREADS:-2}
for type in unigram bpe; do
  "$bin" data/text/spam/train.jsonl "$type" "${VOCAB:-8000}" "$threads"
done
