// The tokenizer base and the two vocabulary tokenizers learned by counting: `char` (Unicode code
// points) and `whitespace` (words split on whitespace).
#include "components/text/tokenizer.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "components/text/utf8.h"
#include "lib/registry/registry.h"

namespace kiln::text {

const char* SpecialTokens::Name(int64_t id) {
  static const char* kNames[] = {"<pad>", "<unk>", "<s>", "</s>", "<cls>"};
  return id >= 0 && id < kCount ? kNames[id] : "";
}

std::vector<std::vector<int64_t>> Tokenizer::EncodeAll(
    const std::vector<std::string>& texts) const {
  std::vector<std::vector<int64_t>> out(texts.size());
  tbb::parallel_for(tbb::blocked_range<size_t>(0, texts.size(), 16),
                    [&](const tbb::blocked_range<size_t>& r) {
                      for (size_t i = r.begin(); i < r.end(); ++i) out[i] = Encode(texts[i]);
                    });
  return out;
}

uint64_t StableHash(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

int64_t CountCodePoints(std::string_view text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

OptionCheck MoreThanSpecialTokens() {
  return {absl::StrCat("more than ", SpecialTokens::kCount, " (the special tokens)"),
          GreaterThan(static_cast<double>(SpecialTokens::kCount)).accepts};
}

namespace {

// The Hugging Face files of a tokenizer with kiln's special ids (SpecialTokens, 0-4):
// tokenizer.json with the specials as added tokens and the given `model`, `normalizer`,
// `pre_tokenizer` and `decoder` (tokenizers' JSON; null where there is none), tokenizer_config.json
// (PreTrainedTokenizerFast, no clean-up of spaces around punctuation) and special_tokens_map.json.
std::map<std::string, std::string> HfFilesWithKilnSpecials(
    const nlohmann::ordered_json& model, const nlohmann::ordered_json& normalizer,
    const nlohmann::ordered_json& pre_tokenizer, const nlohmann::ordered_json& decoder) {
  using Json = nlohmann::ordered_json;
  Json added = Json::array(), specials = Json::object();
  const char* roles[] = {"pad_token", "unk_token", "bos_token", "eos_token", "cls_token"};
  for (int64_t id = 0; id < SpecialTokens::kCount; ++id) {
    added.push_back({{"id", id},
                     {"content", SpecialTokens::Name(id)},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
    specials[roles[id]] = SpecialTokens::Name(id);
  }
  const Json tokenizer = {
      {"version", "1.0"},          {"truncation", nullptr},    {"padding", nullptr},
      {"added_tokens", added},     {"normalizer", normalizer}, {"pre_tokenizer", pre_tokenizer},
      {"post_processor", nullptr}, {"decoder", decoder},       {"model", model}};
  Json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                 {"clean_up_tokenization_spaces", false}};
  config.update(specials);
  return {{"tokenizer.json", tokenizer.dump(2) + "\n"},
          {"tokenizer_config.json", config.dump(2) + "\n"},
          {"special_tokens_map.json", specials.dump(2) + "\n"}};
}

// A vocabulary of strings counted in the training texts: the most frequent first (ties in byte
// order), at most vocab_size - 5 of them, each seen at least min_frequency times.
class CountedVocabulary : public Tokenizer {
 public:
  CountedVocabulary(int64_t vocab_size, int64_t min_frequency)
      : vocab_size_(vocab_size), min_frequency_(min_frequency) {}

  absl::Status Fit(const std::vector<std::string>& texts, const std::string& corpus_name) override {
    // Counted per thread, merged in a fixed order: the vocabulary does not depend on timing.
    const size_t chunks = std::min<size_t>(texts.size(), 64);
    std::vector<std::unordered_map<std::string, int64_t>> partial(std::max<size_t>(chunks, 1));
    tbb::parallel_for(size_t{0}, partial.size(), [&](size_t c) {
      for (size_t i = c; i < texts.size(); i += partial.size()) {
        for (std::string_view unit : Split(texts[i])) ++partial[c][std::string(unit)];
      }
    });
    std::unordered_map<std::string, int64_t> counts;
    for (auto& p : partial) {
      for (auto& [unit, n] : p) counts[unit] += n;
    }
    std::vector<std::pair<std::string, int64_t>> ranked(counts.begin(), counts.end());
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    units_.clear();
    ids_.clear();
    for (const auto& [unit, n] : ranked) {
      if (static_cast<int64_t>(units_.size()) + SpecialTokens::kCount >= vocab_size_ ||
          n < min_frequency_)
        break;
      ids_[unit] = static_cast<int64_t>(units_.size()) + SpecialTokens::kCount;
      units_.push_back(unit);
    }
    if (units_.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(corpus_name, ": no ", UnitName(),
                       " to learn a vocabulary from (is the training text empty?)"));
    }
    fingerprint_ = StableHash(Kind());
    for (const auto& u : units_) fingerprint_ = StableHash(u, StableHash("\x1f", fingerprint_));
    fingerprint_ = StableHash(std::to_string(vocab_size_), fingerprint_);
    corpus_ = corpus_name;
    seen_ = static_cast<int64_t>(ranked.size());
    return absl::OkStatus();
  }

  std::vector<int64_t> Encode(std::string_view text) const override {
    std::vector<int64_t> out;
    for (std::string_view unit : Split(text)) {
      auto it = ids_.find(std::string(unit));
      out.push_back(it == ids_.end() ? SpecialTokens::kUnk : it->second);
    }
    return out;
  }

  std::string Decode(const std::vector<int64_t>& ids) const override {
    std::string out;
    bool first = true;
    for (int64_t id : ids) {
      if (id < SpecialTokens::kCount && id != SpecialTokens::kUnk) continue;
      if (!first) out += Separator();
      first = false;
      if (id == SpecialTokens::kUnk ||
          id - SpecialTokens::kCount >= static_cast<int64_t>(units_.size())) {
        out += "\xEF\xBF\xBD";  // U+FFFD
      } else {
        out += units_[static_cast<size_t>(id - SpecialTokens::kCount)];
      }
    }
    return out;
  }

  int64_t vocab_size() const override { return vocab_size_; }
  uint64_t fingerprint() const override { return fingerprint_; }
  // A WordLevel tokenizer.json (the specials as added tokens, then the units by id) with this
  // tokenizer's own splitting, normalizing and joining, and the specials named in
  // tokenizer_config.json.
  absl::StatusOr<std::map<std::string, std::string>> HuggingFaceFiles() const override {
    // Appended in id order without ordered_json's lookups (each a linear search: quadratic for a
    // 30k-word vocabulary); the set keeps the keys unique.
    nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
    auto& entries = static_cast<nlohmann::ordered_json::object_t::Container&>(
        vocab.get_ref<nlohmann::ordered_json::object_t&>());
    entries.reserve(units_.size() + SpecialTokens::kCount);
    std::unordered_set<std::string> seen;
    auto add = [&](const std::string& unit, int64_t id) {
      if (seen.insert(unit).second) entries.emplace_back(unit, nlohmann::ordered_json(id));
    };
    for (int64_t id = 0; id < SpecialTokens::kCount; ++id) add(SpecialTokens::Name(id), id);
    // A unit spelled like a special (a word "<s>" in the text) keeps the special's id: the added
    // token matches first in transformers too.
    for (size_t i = 0; i < units_.size(); ++i)
      add(units_[i], static_cast<int64_t>(i) + SpecialTokens::kCount);
    return HfFilesWithKilnSpecials(
        {{"type", "WordLevel"}, {"vocab", vocab}, {"unk_token", "<unk>"}}, HfNormalizer(),
        HfPreTokenizer(), HfDecoder());
  }
  std::string Describe() const override {
    return absl::StrCat(Kind(), " tokenizer: ", units_.size(), " ", UnitName(), " learned from ",
                        corpus_, " (of ", seen_, " distinct) + 5 specials, vocab_size ",
                        vocab_size_);
  }

 protected:
  virtual const char* Kind() const = 0;
  virtual const char* UnitName() const = 0;
  virtual const char* Separator() const = 0;
  virtual std::vector<std::string_view> Split(std::string_view text) const = 0;
  // tokenizer.json's normalizer, pre_tokenizer and decoder that do what Encode and Decode do.
  virtual nlohmann::ordered_json HfNormalizer() const { return nullptr; }
  virtual nlohmann::ordered_json HfPreTokenizer() const = 0;
  virtual nlohmann::ordered_json HfDecoder() const = 0;

 private:
  int64_t vocab_size_, min_frequency_;
  std::vector<std::string> units_;
  std::unordered_map<std::string, int64_t> ids_;
  uint64_t fingerprint_ = 0;
  std::string corpus_;
  int64_t seen_ = 0;
};

class CharTokenizer : public CountedVocabulary {
 public:
  using CountedVocabulary::CountedVocabulary;

 protected:
  const char* Kind() const override { return "char"; }
  const char* UnitName() const override { return "characters"; }
  const char* Separator() const override { return ""; }
  std::vector<std::string_view> Split(std::string_view text) const override {
    return SplitCodePoints(text);
  }
  // Every code point its own piece ([\s\S]: newlines too), joined with nothing between.
  nlohmann::ordered_json HfPreTokenizer() const override {
    return {{"type", "Split"},
            {"pattern", {{"Regex", "[\\s\\S]"}}},
            {"behavior", "Isolated"},
            {"invert", false}};
  }
  nlohmann::ordered_json HfDecoder() const override { return {{"type", "Fuse"}}; }
};

class WhitespaceTokenizer : public CountedVocabulary {
 public:
  WhitespaceTokenizer(int64_t vocab_size, int64_t min_frequency, bool lowercase)
      : CountedVocabulary(vocab_size, min_frequency), lowercase_(lowercase) {}

  std::vector<int64_t> Encode(std::string_view text) const override {
    if (!lowercase_) return CountedVocabulary::Encode(text);
    return CountedVocabulary::Encode(
        absl::AsciiStrToLower(absl::string_view(text.data(), text.size())));
  }
  absl::Status Fit(const std::vector<std::string>& texts, const std::string& corpus_name) override {
    if (!lowercase_) return CountedVocabulary::Fit(texts, corpus_name);
    std::vector<std::string> lower(texts.size());
    tbb::parallel_for(size_t{0}, texts.size(),
                      [&](size_t i) { lower[i] = absl::AsciiStrToLower(texts[i]); });
    return CountedVocabulary::Fit(lower, corpus_name);
  }

 protected:
  const char* Kind() const override { return lowercase_ ? "whitespace(lowercase)" : "whitespace"; }
  const char* UnitName() const override { return "words"; }
  const char* Separator() const override { return " "; }
  std::vector<std::string_view> Split(std::string_view text) const override {
    std::vector<std::string_view> words;
    size_t i = 0;
    while (i < text.size()) {
      i = text.find_first_not_of(" \t\n\r\f\v", i);
      if (i == std::string_view::npos) break;
      size_t end = text.find_first_of(" \t\n\r\f\v", i);
      if (end == std::string_view::npos) end = text.size();
      words.push_back(text.substr(i, end - i));
      i = end;
    }
    return words;
  }
  // ASCII letters lowercased one by one (not the Unicode Lowercase normalizer: kiln leaves other
  // letters as they are), words split on the same six ASCII whitespace characters, and joined
  // with a space (tokenizers' decode without a decoder).
  nlohmann::ordered_json HfNormalizer() const override {
    if (!lowercase_) return nullptr;
    nlohmann::ordered_json replaces = nlohmann::ordered_json::array();
    for (char c = 'A'; c <= 'Z'; ++c) {
      replaces.push_back({{"type", "Replace"},
                          {"pattern", {{"String", std::string(1, c)}}},
                          {"content", std::string(1, static_cast<char>(c - 'A' + 'a'))}});
    }
    return {{"type", "Sequence"}, {"normalizers", replaces}};
  }
  nlohmann::ordered_json HfPreTokenizer() const override {
    return {{"type", "Split"},
            {"pattern", {{"Regex", "[\\x09-\\x0D\\x20]+"}}},  // \t \n \v \f \r and space
            {"behavior", "Removed"},
            {"invert", false}};
  }
  nlohmann::ordered_json HfDecoder() const override { return nullptr; }

 private:
  bool lowercase_;
};

struct CharTokenizerOptions {
  int64_t vocab_size = 256;
  int64_t min_frequency = 1;
};

KILN_REGISTER_BOUND(
    Tokenizer, "char",
    "Character-level: one token per Unicode code point, the most frequent in the training split",
    OptionBinding<CharTokenizerOptions>()
        .Field("vocab_size", &CharTokenizerOptions::vocab_size,
               "id space incl. the 5 specials; rarer characters become <unk>",
               MoreThanSpecialTokens())
        .Field("min_frequency", &CharTokenizerOptions::min_frequency,
               "characters seen fewer times in training become <unk>"),
    [](const CharTokenizerOptions& o) -> absl::StatusOr<std::shared_ptr<Tokenizer>> {
      return std::make_shared<CharTokenizer>(o.vocab_size, o.min_frequency);
    });

struct WhitespaceTokenizerOptions {
  int64_t vocab_size = 30000;
  int64_t min_frequency = 2;
  bool lowercase = true;
};

KILN_REGISTER_BOUND(
    Tokenizer, "whitespace", "Words split on whitespace, the most frequent in the training split",
    OptionBinding<WhitespaceTokenizerOptions>()
        .Field("vocab_size", &WhitespaceTokenizerOptions::vocab_size,
               "id space incl. the 5 specials; rarer words become <unk>", MoreThanSpecialTokens())
        .Field("min_frequency", &WhitespaceTokenizerOptions::min_frequency,
               "words seen fewer times in training become <unk>")
        .Field("lowercase", &WhitespaceTokenizerOptions::lowercase,
               "lowercase ASCII letters first"),
    [](const WhitespaceTokenizerOptions& o) -> absl::StatusOr<std::shared_ptr<Tokenizer>> {
      return std::make_shared<WhitespaceTokenizer>(o.vocab_size, o.min_frequency, o.lowercase);
    });

}  // namespace
}  // namespace kiln::text
