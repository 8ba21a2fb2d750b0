"""transformers reading the tokenizer files kiln writes for its own tokenizers
(Tokenizer::HuggingFaceFiles, what `kiln export format=hf` puts beside a model): for each DIR,
AutoTokenizer.from_pretrained encodes every text of TEXTS (a JSON list) without special tokens and
decodes the ids leaving the specials out; both go to DIR/transformers.json as {"ids": [...],
"decoded": [...]}, and the tokenizer's class to stdout.

  check_kiln_tokenizers.py TEXTS DIR...
"""
import json
import os
import sys

from transformers import AutoTokenizer


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        texts = json.load(f)
    for folder in sys.argv[2:]:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        ids = [tokenizer(text, add_special_tokens=False).input_ids for text in texts]
        decoded = [tokenizer.decode(row, skip_special_tokens=True) for row in ids]
        with open(os.path.join(folder, "transformers.json"), "w", encoding="utf-8") as f:
            json.dump({"ids": ids, "decoded": decoded}, f)
        print(folder, type(tokenizer).__name__)


if __name__ == "__main__":
    main()
