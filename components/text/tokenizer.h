// Tokenizers turn text into token ids and back, built by name from the `tokenizer` node of a text
// data module (Registry<Tokenizer>). kiln's tokenizers reserve the same special ids — pad 0, unk 1,
// bos 2, eos 3, cls 4 — which collation, models and tasks rely on; a pretrained tokenizer keeps
// its model's (special_ids()).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/registry/options.h"

namespace kiln::text {

struct SpecialTokens {
  static constexpr int64_t kPad = 0, kUnk = 1, kBos = 2, kEos = 3, kCls = 4;
  static constexpr int64_t kCount = 5;
  // A target that the language model's loss and metrics skip (PyTorch's and transformers'
  // ignore_index): the predictions of a prompt's tokens, padding. Never a token id, so that a
  // pretrained tokenizer's id 0 (GPT-2's "!") is learned like any other.
  static constexpr int64_t kIgnore = -100;
  // "<pad>", "<unk>", "<s>", "</s>", "<cls>" by id.
  static const char* Name(int64_t id);
};

// A tokenizer's special ids, -1 where it has none. kiln's own tokenizers reserve SpecialTokens';
// a pretrained one (`pretrained`) keeps its model's, which index the pretrained embedding rows.
// sep ends a classified text (BERT's [SEP], RoBERTa's </s>); kiln's tokenizers have none.
struct SpecialIds {
  int64_t pad = SpecialTokens::kPad, unk = SpecialTokens::kUnk, bos = SpecialTokens::kBos,
          eos = SpecialTokens::kEos, cls = SpecialTokens::kCls, sep = -1;
};

// The vocab_size option of every tokenizer: more ids than the special tokens take.
OptionCheck MoreThanSpecialTokens();

class Tokenizer {
 public:
  static constexpr const char* kKind = "tokenizer";
  virtual ~Tokenizer() = default;

  // Learns the vocabulary from the training texts; a tokenizer given a model file ignores them.
  // `corpus_name` names the texts in messages. Called once before Encode.
  virtual absl::Status Fit(const std::vector<std::string>& texts,
                           const std::string& corpus_name) = 0;
  // Whether Fit reads the training texts; false for one that comes whole from a file (a
  // pretrained folder's, a given SentencePiece model), which then needs no training data at all
  // (`kiln predict model.pretrained=DIR` generates without any).
  virtual bool LearnsFromTexts() const { return true; }
  // Token ids of `text`, without specials; thread-safe after Fit.
  virtual std::vector<int64_t> Encode(std::string_view text) const = 0;
  // The text of `ids`; special ids are left out.
  virtual std::string Decode(const std::vector<int64_t>& ids) const = 0;
  // The size of the id space (the model's embedding rows): every id is below it.
  virtual int64_t vocab_size() const = 0;
  // Identifies the vocabulary (a stable hash of it), so a checkpoint can tell whether it was
  // trained with this tokenizer; 0 before Fit.
  virtual uint64_t fingerprint() const = 0;
  // One line for logs: kind, vocabulary, where it came from.
  virtual std::string Describe() const = 0;
  // The ids of its special tokens: SpecialTokens' unless the tokenizer came with its own.
  virtual SpecialIds special_ids() const { return {}; }
  // The files with which transformers' AutoTokenizer.from_pretrained reads this tokenizer, by
  // name (tokenizer.json, tokenizer_config.json, ...), for `kiln export format=hf`; empty for a
  // tokenizer that has no Hugging Face form. After Fit.
  virtual absl::StatusOr<std::map<std::string, std::string>> HuggingFaceFiles() const {
    return std::map<std::string, std::string>();
  }

  // Encode over many texts in parallel (oneTBB), in order.
  std::vector<std::vector<int64_t>> EncodeAll(const std::vector<std::string>& texts) const;
};

// FNV-1a 64: a hash that stays the same across runs, builds and machines (cache keys,
// fingerprints).
uint64_t StableHash(std::string_view bytes, uint64_t seed = 14695981039346656037ULL);

// The number of Unicode code points of valid UTF-8 `text`.
int64_t CountCodePoints(std::string_view text);

}  // namespace kiln::text
