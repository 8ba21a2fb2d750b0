"""Hugging Face tokenizers for kiln's tokenizer tests, trained by the `tokenizers` library itself on
local text and saved as transformers saves them (PreTrainedTokenizerFast.save_pretrained:
tokenizer.json, tokenizer_config.json), with the library's own ids and decodes of every test text.

  make_tokenizers.py DIR [DATA_DIR]

DIR/texts.json: the test texts: every line of the Moby Dick and State of the Union test splits and
the first 300 spam test messages (from DATA_DIR, scripts/prepare_text_data.sh's data/text, where
present) and the Unicode text below, one entry per line. DIR/NAME/ for each tokenizer:
  gpt2        byte-level BPE, ByteLevel pre-tokenizer (GPT-2's regex), merges as "a b" strings,
              the file ASCII-only (\\u escapes, surrogate pairs for the emoji added token)
  llama3      byte-level BPE, Llama 3's Split regex, ignore_merges, <|begin_of_text|> template
  qwen2       byte-level BPE, NFC, Qwen2's Split regex
  llama2      BPE without pre-tokenizer: Prepend/Replace normalizers, byte fallback, fused unknowns,
              Replace/ByteFallback/Fuse/Strip decoders (Llama 2's tokenizer.json)
  bert        WordPiece, BertNormalizer (lowercase, accents stripped), [CLS] A [SEP]
  bert_cased  WordPiece, BertNormalizer without lowercase, BertProcessing
  unigram     Unigram, Metaspace (prepend always), <s> A </s>
  unigram_first  the same with prepend_scheme first, RobertaProcessing
and DIR/NAME/reference.json: ids (encode without special tokens), ids_special (with), decoded
(decode of ids_special skipping special tokens) and decoded_special (keeping them), per text.
"""
import json
import os
import sys

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)
from transformers import PreTrainedTokenizerFast

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

UNICODE_TEXT = """\
Café naïve résumé — coöperate, façade; Ångström Øresund Łódź Ţară.
Καλημέρα κόσμε! Привет, мир. Здравствуйте, товарищи.
مرحبا بالعالم ١٢٣٤ שלום עולם
नमस्ते दुनिया, क्षत्रिय। ภาษาไทย สวัสดี
你好，世界。日本語のテキストです。한국어 안녕하세요 𠀋𠂉 中文字符測試
Emoji: 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🙂🙃 ☕
Combining: e\u0301 a\u0308 o\u0302\u0323 A\u030a n\u0303 \u1e9b\u0323 Ǆ ǅ ǆ ß İstanbul ΣΑΣ
Whitespace:  two  spaces,\tTab\t\tTabs,   three   ,\u00a0nbsp\u3000ideographic\u2009thin
Digits: 0 12 345 6789 1234567 3.14159 -42 1e10 ٣٤٥ ①②③ ¼ ½
Contractions: I'm you're it's we'll they'd don't WE'LL THEY'D You'Re I'M 'ſ O'Neill rock'n'roll
Specials inside: hello <|endoftext|> world [CLS] x [SEP] <s>a</s> <|begin_of_text|>b<|im_end|>
Controls: a\x00b c\x07d e\u200bf g\ufeffh \ufffd replacement
Trailing spaces and newlines   
\r\nWindows line\r\n\r\nend
   leading spaces
\t\ttabs first
x
!!!??? ... --- *** ((( ))) [[ ]] {{ }} @@ ## $$ %% ^^ && __ ++ == || \\\\ // ~~ ``
"""

SPECIAL_LINES = [
    "",
    " ",
    "    ",
    "\n",
    "\n\n\n",
    " \n ",
    "a",
    " a",
    "a ",
    "<|endoftext|>",
    "<|endoftext|><|endoftext|>",
    " <|endoftext|> ",
    "[CLS][SEP][MASK] [mask] [UNK]",
    "<s></s><pad><unk>",
    "<|begin_of_text|>Hello<|end_of_text|>",
    "<|im_start|>user\nHi there<|im_end|>\n",
    "word<|sep|>word <|sep|> word",
    "robot\U0001F916robot \U0001F916 x",
    "The Moby-Dick whale; MOBY-DICK whales whale. Moby-Dickish",
    "a <mask> b  <mask>c <mask>",
    "Hello world" * 20,
    "x" * 150,
    "antidisestablishmentarianism " * 5,
]


def split_lines(data_dir, name, limit=None):
    path = os.path.join(data_dir or "", name)
    if not data_dir or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return f.read(limit).split("\n")


def spam_texts(data_dir, name, count):
    path = os.path.join(data_dir or "", name)
    if not data_dir or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for _, line in zip(range(count), f)]


def read_lines(data_dir):
    texts = split_lines(data_dir, "mobydick/test.txt") + split_lines(data_dir, "sotu/test.txt")
    texts += spam_texts(data_dir, "spam/test.jsonl", 300)
    texts += UNICODE_TEXT.split("\n")
    texts.append(UNICODE_TEXT)
    return texts + SPECIAL_LINES


def training_corpus(data_dir):
    return ([UNICODE_TEXT] * 20 + split_lines(data_dir, "mobydick/train.txt", 600_000) +
            split_lines(data_dir, "sotu/train.txt", 400_000) +
            spam_texts(data_dir, "spam/train.jsonl", 200))


def byte_level_bpe(corpus, specials, pre_tokenizer, normalizer=None, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=6000, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    return tok


def make(corpus):
    made = {}
    # GPT-2: the ByteLevel pre-tokenizer with its own regex; an added (not special) token.
    tok = byte_level_bpe(corpus, ["<|endoftext|>"],
                         pre_tokenizers.ByteLevel(add_prefix_space=False))
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens([AddedToken("<|sep|>", normalized=False, special=False),
                    AddedToken("\U0001F916", normalized=False, special=False)])
    made["gpt2"] = (tok, dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                              unk_token="<|endoftext|>"))

    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + [
        "<|reserved_special_token_%d|>" % i for i in range(4)]
    tok = byte_level_bpe(corpus, specials, pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), ignore_merges=True)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    made["llama3"] = (tok, dict(bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>"))

    tok = byte_level_bpe(corpus, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                         pre_tokenizers.Sequence([
                             pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
                             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
                         normalizer=normalizers.NFC())
    made["qwen2"] = (tok, dict(eos_token="<|im_end|>", pad_token="<|endoftext|>"))

    # Llama 2's tokenizer.json: no pre-tokenizer, spaces made ▁ by the normalizer, byte fallback for
    # characters outside the vocabulary (the <0xXX> tokens added to the model's vocab below).
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(corpus[:3000], trainer)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    tok = Tokenizer.from_str(json.dumps(data))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    made["llama2"] = (tok, dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>"))

    for name, lowercase in (("bert", True), ("bert_cased", False)):
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=6000, show_progress=False,
            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
        tok.train_from_iterator(corpus, trainer)
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        if lowercase:
            tok.post_processor = processors.TemplateProcessing(
                single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        else:
            tok.post_processor = processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
        if lowercase:  # matched on the normalized (lowercased) text
            tok.add_tokens([AddedToken("Moby-Dick", normalized=True, special=False)])
        else:  # only as a word of its own
            tok.add_tokens([AddedToken("whale", single_word=True, normalized=False)])
        made[name] = (tok, dict(unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                sep_token="[SEP]", mask_token="[MASK]"))

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
    tok.decoder = decoders.Metaspace(prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=6000, show_progress=False, unk_token="<unk>",
                                      special_tokens=["<pad>", "<unk>", "<s>", "</s>"])
    tok.train_from_iterator(corpus, trainer)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B </s>", special_tokens=[("<s>", bos), ("</s>", eos)])
    unigram_specials = dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>")
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    made["unigram"] = (tok, unigram_specials)
    first = Tokenizer.from_str(tok.to_str())
    first.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    first.decoder = decoders.Metaspace(prepend_scheme="first")
    first.post_processor = processors.RobertaProcessing(("</s>", eos), ("<s>", bos))
    made["unigram_first"] = (first, dict(unigram_specials, cls_token="<s>"))
    return made


def merges_as_strings(path):
    """GPT-2's older format: each merge one string "a b"."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                               for m in data["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=True)  # \\u escapes (surrogate pairs too), as old files


def main():
    out = sys.argv[1]
    data_dir = sys.argv[2] if len(sys.argv) > 2 else None
    texts = read_lines(data_dir)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "texts.json"), "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)
    for name, (tok, specials) in make(training_corpus(data_dir)).items():
        folder = os.path.join(out, name)
        PreTrainedTokenizerFast(tokenizer_object=tok, **specials).save_pretrained(folder)
        path = os.path.join(folder, "tokenizer.json")
        if name == "gpt2":
            merges_as_strings(path)
        ref = Tokenizer.from_file(path)  # what was saved, read back by the library
        plain = ref.encode_batch(texts, add_special_tokens=False)
        special = ref.encode_batch(texts, add_special_tokens=True)
        ids_special = [e.ids for e in special]
        reference = {
            "ids": [e.ids for e in plain],
            "ids_special": ids_special,
            "decoded": ref.decode_batch(ids_special, skip_special_tokens=True),
            "decoded_special": ref.decode_batch(ids_special, skip_special_tokens=False),
            "vocab_size": ref.get_vocab_size(with_added_tokens=True),
        }
        with open(os.path.join(folder, "reference.json"), "w", encoding="utf-8") as f:
            json.dump(reference, f)
    print("made", len(texts), "texts")


if __name__ == "__main__":
    main()
