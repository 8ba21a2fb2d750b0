// libFuzzer target: Hugging Face tokenizer.json files (components/text/hf_tokenizer.cc). An input
// that starts with '{' is a tokenizer.json: read, then used to encode and decode a few texts and
// every id; any other input is text, encoded and decoded by each of the small tokenizers below
// (byte-level BPE with GPT-2's and Llama 3's regexes, WordPiece with BertNormalizer, Unigram with
// Metaspace and byte fallback, WordLevel as kiln's own tokenizers export), which are also the
// seeds.
#include <string>
#include <vector>

#include "components/text/hf_tokenizer.h"
#include "fuzz/fuzz_input.h"

namespace {

const char* const kTokenizers[] = {
    // GPT-2 style: ByteLevel with its regex, "a b" merges, an added token, ByteLevel decoder.
    R"({"added_tokens": [{"id": 9, "content": "<|endoftext|>", "special": true, "normalized": false},
        {"id": 10, "content": "\ud83e\udd16", "special": false, "normalized": true, "lstrip": true}],
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true, "use_regex": true},
      "post_processor": {"type": "ByteLevel"},
      "decoder": {"type": "ByteLevel"},
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "\u0120": 2, "\u0120a": 3, "ab": 4,
        "\u0120ab": 5, "c": 6, "'": 7, "s": 8}, "merges": ["\u0120 a", "a b", "\u0120a b"]}})",
    // Llama 3 style: Split with its regex, ByteLevel without, a template, ignore_merges.
    R"({"added_tokens": [{"id": 0, "content": "<|begin_of_text|>", "special": true}],
      "normalizer": {"type": "NFC"},
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
         "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
      "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [0]}}},
      "decoder": {"type": "ByteLevel"},
      "model": {"type": "BPE", "ignore_merges": true, "vocab": {"<|begin_of_text|>": 0, "a": 1,
        "b": 2, "ab": 3, "\u0120": 4, "\u0120ab": 5}, "merges": [["a", "b"], ["\u0120", "ab"]]}})",
    // BERT: BertNormalizer, BertPreTokenizer, WordPiece, BertProcessing.
    R"({"added_tokens": [{"id": 0, "content": "[UNK]", "special": true},
        {"id": 1, "content": "[CLS]", "special": true}, {"id": 2, "content": "[SEP]", "special": true}],
      "normalizer": {"type": "BertNormalizer", "lowercase": true, "strip_accents": null},
      "pre_tokenizer": {"type": "BertPreTokenizer"},
      "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
      "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
      "model": {"type": "WordPiece", "unk_token": "[UNK]", "max_input_chars_per_word": 8,
        "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "a": 3, "##b": 4, "e": 5, ",": 6, "##a": 7}}})",
    // Unigram with Metaspace and byte fallback, a Llama 2 style decoder chain.
    R"({"added_tokens": [{"id": 1, "content": "<s>", "special": true}],
      "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"},
      "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 1]},
      "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
      "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": true, "vocab": [["<unk>", 0.0],
        ["<s>", 0.0], ["</s>", 0.0], ["\u2581", -2.0], ["a", -1.5], ["\u2581a", -1.0],
        ["<0xC3>", -5.0], ["<0xA9>", -5.0], ["b", -3.0], ["ab", -2.5]]}})",
    // kiln's own whitespace tokenizer as it exports (Tokenizer::HuggingFaceFiles): WordLevel,
    // ASCII-lowercasing Replace normalizers, Split on ASCII whitespace runs, removed.
    R"({"added_tokens": [{"id": 0, "content": "<pad>", "special": true, "normalized": false},
        {"id": 1, "content": "<unk>", "special": true, "normalized": false}],
      "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"String": "A"}, "content": "a"},
        {"type": "Replace", "pattern": {"String": "B"}, "content": "b"}]},
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[\\x09-\\x0D\\x20]+"},
        "behavior": "Removed", "invert": false},
      "decoder": null,
      "model": {"type": "WordLevel", "unk_token": "<unk>",
        "vocab": {"<pad>": 0, "<unk>": 1, "ab": 2, "a": 3, "c's": 4}}})",
};

void Exercise(const kiln::text::HfTokenizer& tokenizer, const std::string& text) {
  for (bool specials : {false, true}) {
    std::vector<int64_t> ids = tokenizer.Encode(text, specials);
    for (int64_t id : ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) __builtin_trap();
    }
    (void)tokenizer.Decode(ids, specials);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (kiln::fuzz::SeedDir() == nullptr) return 0;
  int n = 0;
  for (const char* json : kTokenizers) {
    kiln::fuzz::WriteSeed("tokenizer" + std::to_string(n++) + ".json", json);
  }
  kiln::fuzz::WriteSeed("text.txt", "Hi, I'm ab ab\u00e9 \t\n\n  c's 123456 \xff\xfe <s>");
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  if (!input.empty() && input[0] == '{') {
    auto tokenizer = kiln::text::HfTokenizer::FromJson(input, "", "fuzz/tokenizer.json");
    if (!tokenizer.ok()) return 0;
    for (const char* text : {"", " ab a b, caf\xc3\xa9 \xf0\x9f\xa4\x96 <s> [CLS]", "\xff\xc3"}) {
      Exercise(**tokenizer, text);
    }
    std::vector<int64_t> every;
    for (int64_t id = -2; id < std::min<int64_t>((*tokenizer)->vocab_size() + 2, 4096); ++id) {
      every.push_back(id);
    }
    (void)(*tokenizer)->Decode(every, false);
    (void)(*tokenizer)->Decode(every, true);
    (void)(*tokenizer)->special_ids();
    return 0;
  }
  static const auto* tokenizers = [] {
    auto* all = new std::vector<std::unique_ptr<kiln::text::HfTokenizer>>();
    for (const char* json : kTokenizers) {
      auto t = kiln::text::HfTokenizer::FromJson(json, "", "seed/tokenizer.json");
      if (!t.ok()) __builtin_trap();  // the built-in tokenizers must load
      all->push_back(*std::move(t));
    }
    return all;
  }();
  for (const auto& t : *tokenizers) Exercise(*t, input);
  return 0;
}
