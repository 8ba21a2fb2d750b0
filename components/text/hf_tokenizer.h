// A Hugging Face tokenizer read from a model folder's tokenizer.json (and tokenizer_config.json /
// special_tokens_map.json for the special tokens), natively: byte-level BPE (GPT-2, Llama 3,
// Qwen2), WordPiece (BERT) and Unigram (Metaspace), with their normalizers, pre-tokenizers,
// decoders, post-processors and added tokens, giving the `tokenizers` library's ids. A component
// kiln does not read is refused in one line naming the file and the component.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "components/text/tokenizer.h"

namespace kiln::text {

class HfTokenizer {
 public:
  // Reads `dir`/tokenizer.json, and tokenizer_config.json and special_tokens_map.json where
  // they are there.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> LoadFolder(const std::string& dir);
  // From the texts of tokenizer.json and tokenizer_config.json ("" when absent); `source` names
  // the first in messages.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromJson(std::string_view tokenizer_json,
                                                               std::string_view config_json,
                                                               const std::string& source);
  ~HfTokenizer();

  // The ids the library's `encode(text, add_special_tokens)` gives; thread-safe.
  std::vector<int64_t> Encode(std::string_view text, bool add_special_tokens) const;
  // The library's `decode(ids, skip_special_tokens)`: unknown ids are left out.
  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const;
  // Every id is below it: the model's vocabulary and the added tokens.
  int64_t vocab_size() const;
  SpecialIds special_ids() const;
  // "BPE", "WordPiece" or "Unigram".
  const std::string& model_type() const;
  // The id of a token (model vocabulary or added), -1 when there is none.
  int64_t TokenToId(const std::string& token) const;

  struct Impl;

 private:
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::text
