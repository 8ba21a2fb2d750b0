// tokenizer.json read natively. The pipeline is the `tokenizers` library's: added tokens split out
// (first those matched on the raw text, then, after normalizing, those matched on normalized
// text), the normalizer, the pre-tokenizer (pieces), the model on each piece, the post-processor
// when special tokens are asked for; decoding maps ids to tokens and runs the decoder chain.
// The library's regexes (Oniguruma) are not reimplemented: the patterns GPT-2, Llama 3 and Qwen2
// use are recognized by their exact text and matched by hand (MatchKnownPattern).
#include "components/text/hf_tokenizer.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "components/text/unicode.h"
#include "lib/base/files.h"

namespace kiln::text {
// Its own namespace: a unity build compiles the text sources as one unit.
namespace hf_json {

using nlohmann::json;
using U32 = std::u32string;

namespace {

// A refusal while reading: the caller turns it into one line naming the file.
struct Refusal {
  std::string message;
};

[[noreturn]] void Refuse(std::string message) { throw Refusal{std::move(message)}; }

std::string TypeOf(const json& j, const char* what) {
  if (!j.is_object()) Refuse(absl::StrCat(what, " is not an object"));
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) Refuse(absl::StrCat(what, " has no \"type\""));
  return it->get<std::string>();
}

[[noreturn]] void Unsupported(const char* what, const std::string& type, const char* supported) {
  Refuse(absl::StrCat(what, " type '", type, "' is not one kiln reads (it reads ", supported, ")"));
}

std::string Utf8(const U32& s) { return unicode::EncodeUtf8(s); }
U32 Chars(std::string_view s) { return unicode::DecodeUtf8(s); }

// A piece of text on its way to the model; `at_start`: it begins at the input's first character
// (Metaspace's prepend_scheme "first" looks at that).
struct Piece {
  U32 text;
  bool at_start = false;
};

// ------------------------------------------------------------------------------------------------
// Splitting, as the library's NormalizedString::split: `matches` are [start, end) spans in order.

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior ParseBehavior(const json& j) {
  const std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  Refuse(absl::StrCat("split behavior '", b, "' is not one kiln reads"));
}

void SplitPiece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                Behavior behavior, std::vector<Piece>* out) {
  struct Span {
    size_t start, end;
    bool is_match;
  };
  std::vector<Span> spans;
  size_t last = 0;
  for (const auto& m : matches) {
    if (m.first > last) spans.push_back({last, m.first, false});
    spans.push_back({m.first, m.second, true});
    last = m.second;
  }
  if (last < piece.text.size()) spans.push_back({last, piece.text.size(), false});
  std::vector<Span> kept;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (auto s : spans) kept.push_back({s.start, s.end, false});
      break;
    case Behavior::kRemoved: kept = spans; break;
    case Behavior::kContiguous:
      for (const auto& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.start, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const auto& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.start, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().start = it->start;
        } else {
          kept.push_back({it->start, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const auto& s : kept) {
    if (s.is_match || s.end <= s.start) continue;
    out->push_back({piece.text.substr(s.start, s.end - s.start), piece.at_start && s.start == 0});
  }
}

// Every occurrence of `needle` in `text`, left to right, not overlapping.
std::vector<std::pair<size_t, size_t>> FindAll(const U32& text, const U32& needle) {
  std::vector<std::pair<size_t, size_t>> out;
  if (needle.empty()) return out;
  for (size_t i = text.find(needle); i != U32::npos; i = text.find(needle, i + needle.size())) {
    out.emplace_back(i, i + needle.size());
  }
  return out;
}

// ------------------------------------------------------------------------------------------------
// The known regexes.

enum class KnownPattern { kGpt2, kLlama3, kQwen2, kEveryChar, kAsciiWhitespace };

const char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// kiln's own tokenizers' (Tokenizer::HuggingFaceFiles): every code point, and runs of \t \n \v
// \f \r and space.
const char kEveryCharPattern[] = R"([\s\S])";
const char kAsciiWhitespacePattern[] = R"([\x09-\x0D\x20]+)";

bool IsOtherChar(char32_t c) {
  return !unicode::IsWhitespace(c) && !unicode::IsLetter(c) && !unicode::IsNumber(c);
}
bool IsNewline(char32_t c) { return c == '\r' || c == '\n'; }

template <typename Pred>
size_t RunEnd(const U32& s, size_t i, Pred pred) {
  while (i < s.size() && pred(s[i])) ++i;
  return i;
}

// The contraction alternatives ('s|'t|'re|'ve|'m|'ll|'d): the length matched at `i`, or 0.
size_t MatchContraction(const U32& s, size_t i, bool ignore_case) {
  if (s[i] != '\'' || i + 1 >= s.size()) return 0;
  auto is = [&](size_t k, char lower) {
    if (k >= s.size()) return false;
    const char32_t c = s[k];
    if (c == static_cast<char32_t>(lower)) return true;
    if (!ignore_case) return false;
    // Oniguruma's case folding: upper case, and the long s (U+017F) folds to s.
    return c == static_cast<char32_t>(lower - 32) || (lower == 's' && c == 0x17F);
  };
  if (is(i + 1, 's') || is(i + 1, 't') || is(i + 1, 'm') || is(i + 1, 'd')) return 2;
  if ((is(i + 1, 'r') && is(i + 2, 'e')) || (is(i + 1, 'v') && is(i + 2, 'e')) ||
      (is(i + 1, 'l') && is(i + 2, 'l')))
    return 3;
  return 0;
}

// \s+(?!\S) then \s+ at `i` (a whitespace character).
size_t MatchWhitespace(const U32& s, size_t i) {
  const size_t end = RunEnd(s, i, unicode::IsWhitespace);
  if (end == s.size() || end - i == 1) return end - i;
  return end - i - 1;
}

// The length of the pattern's match at `i` (every character starts a match of these patterns, so
// the matches tile the text).
size_t MatchKnownPattern(KnownPattern pattern, const U32& s, size_t i) {
  const char32_t c = s[i];
  const bool has_next = i + 1 < s.size();
  if (pattern == KnownPattern::kGpt2) {
    if (size_t n = MatchContraction(s, i, false)) return n;
    for (auto pred : {unicode::IsLetter, unicode::IsNumber, IsOtherChar}) {
      if (c == ' ' && has_next && pred(s[i + 1])) return RunEnd(s, i + 1, pred) - i;
      if (pred(c)) return RunEnd(s, i, pred) - i;
    }
    return MatchWhitespace(s, i);
  }
  if (size_t n = MatchContraction(s, i, true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!IsNewline(c) && !unicode::IsLetter(c) && !unicode::IsNumber(c) && has_next &&
      unicode::IsLetter(s[i + 1]))
    return RunEnd(s, i + 1, unicode::IsLetter) - i;
  if (unicode::IsLetter(c)) return RunEnd(s, i, unicode::IsLetter) - i;
  // \p{N}{1,3} (Llama 3) or \p{N} (Qwen2)
  if (unicode::IsNumber(c)) {
    const size_t most = pattern == KnownPattern::kLlama3 ? 3 : 1;
    size_t k = i;
    while (k < s.size() && k - i < most && unicode::IsNumber(s[k])) ++k;
    return k - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  if (c == ' ' && has_next && IsOtherChar(s[i + 1]))
    return RunEnd(s, RunEnd(s, i + 1, IsOtherChar), IsNewline) - i;
  if (IsOtherChar(c)) return RunEnd(s, RunEnd(s, i, IsOtherChar), IsNewline) - i;
  // \s*[\r\n]+: up to the last line break of the whitespace run
  const size_t end = RunEnd(s, i, unicode::IsWhitespace);
  for (size_t k = end; k > i; --k) {
    if (IsNewline(s[k - 1])) return k - i;
  }
  return MatchWhitespace(s, i);
}

std::vector<std::pair<size_t, size_t>> KnownPatternMatches(KnownPattern pattern, const U32& s) {
  std::vector<std::pair<size_t, size_t>> out;
  if (pattern == KnownPattern::kEveryChar) {
    for (size_t i = 0; i < s.size(); ++i) out.emplace_back(i, i + 1);
    return out;
  }
  if (pattern == KnownPattern::kAsciiWhitespace) {
    auto ascii_space = [](char32_t c) { return c == ' ' || (c >= 0x09 && c <= 0x0D); };
    for (size_t i = 0; i < s.size();) {
      if (!ascii_space(s[i])) {
        ++i;
        continue;
      }
      const size_t end = RunEnd(s, i, ascii_space);
      out.emplace_back(i, end);
      i = end;
    }
    return out;
  }
  for (size_t i = 0; i < s.size();) {
    const size_t n = MatchKnownPattern(pattern, s, i);
    out.emplace_back(i, i + n);
    i += n;
  }
  return out;
}

KnownPattern ParseKnownPattern(const std::string& regex) {
  if (regex == kGpt2Pattern) return KnownPattern::kGpt2;
  if (regex == kLlama3Pattern) return KnownPattern::kLlama3;
  if (regex == kQwen2Pattern) return KnownPattern::kQwen2;
  if (regex == kEveryCharPattern) return KnownPattern::kEveryChar;
  if (regex == kAsciiWhitespacePattern) return KnownPattern::kAsciiWhitespace;
  Refuse(absl::StrCat("pre_tokenizer Split's regex ", json(regex).dump(),
                      " is not one kiln reads (it reads the GPT-2, Llama 3 and Qwen2 patterns, and "
                      "those of kiln's own char and whitespace tokenizers)"));
}

// ------------------------------------------------------------------------------------------------
// Byte-level: every byte as a printable character (GPT-2's bytes_to_unicode).

const std::vector<char32_t>& ByteToChar() {
  static const auto* table = [] {
    auto* t = new std::vector<char32_t>(256);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      (*t)[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return *table;
}

const std::unordered_map<char32_t, unsigned char>& CharToByte() {
  static const auto* table = [] {
    auto* t = new std::unordered_map<char32_t, unsigned char>();
    for (int b = 0; b < 256; ++b)
      (*t)[ByteToChar()[static_cast<size_t>(b)]] = static_cast<unsigned char>(b);
    return t;
  }();
  return *table;
}

// ------------------------------------------------------------------------------------------------
// Normalizers.

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Apply(U32* s) const = 0;
};

class SequenceNormalizer : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> steps;
  void Apply(U32* s) const override {
    for (const auto& n : steps) n->Apply(s);
  }
};

bool IsChineseChar(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void StripAccents(U32* s) {
  U32 d = unicode::Nfd(*s);
  s->clear();
  for (char32_t c : d) {
    if (!unicode::IsMarkNonspacing(c)) s->push_back(c);
  }
}

void Lowercase(U32* s) {
  U32 out;
  out.reserve(s->size());
  for (char32_t c : *s) unicode::AppendLowercase(c, &out);
  *s = std::move(out);
}

class BertNormalizer : public Normalizer {
 public:
  bool clean_text = true, chinese_chars = true, strip_accents = true, lowercase = true;
  void Apply(U32* s) const override {
    if (clean_text || chinese_chars) {
      U32 out;
      out.reserve(s->size());
      for (char32_t c : *s) {
        if (clean_text) {
          if (c == 0 || c == 0xFFFD || (c != '\t' && c != '\n' && c != '\r' && unicode::IsOther(c)))
            continue;
          if (unicode::IsWhitespace(c)) c = ' ';
        }
        if (chinese_chars && IsChineseChar(c)) {
          out.push_back(' ');
          out.push_back(c);
          out.push_back(' ');
        } else {
          out.push_back(c);
        }
      }
      *s = std::move(out);
    }
    if (strip_accents) StripAccents(s);
    if (lowercase) Lowercase(s);
  }
};

class FunctionNormalizer : public Normalizer {
 public:
  explicit FunctionNormalizer(void (*f)(U32*)) : f_(f) {}
  void Apply(U32* s) const override { f_(s); }

 private:
  void (*f_)(U32*);
};

class ReplaceNormalizer : public Normalizer {
 public:
  U32 pattern, content;
  void Apply(U32* s) const override {
    if (pattern.empty()) return;
    U32 out;
    size_t last = 0;
    for (const auto& m : FindAll(*s, pattern)) {
      out.append(*s, last, m.first - last);
      out += content;
      last = m.second;
    }
    out.append(*s, last, U32::npos);
    *s = std::move(out);
  }
};

class PrependNormalizer : public Normalizer {
 public:
  U32 prepend;
  void Apply(U32* s) const override {
    if (!s->empty()) s->insert(0, prepend);
  }
};

class StripNormalizer : public Normalizer {
 public:
  bool left = false, right = false;
  void Apply(U32* s) const override {
    size_t b = 0, e = s->size();
    if (left) {
      while (b < e && unicode::IsWhitespace((*s)[b])) ++b;
    }
    if (right) {
      while (e > b && unicode::IsWhitespace((*s)[e - 1])) --e;
    }
    *s = s->substr(b, e - b);
  }
};

// The string of a Replace/Split pattern: {"String": s} only ({"Regex": ...} is refused).
U32 StringPattern(const json& pattern, const char* what) {
  if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string())
    return Chars(pattern["String"].get<std::string>());
  Refuse(absl::StrCat(what, " pattern ", pattern.dump(),
                      " is not one kiln reads (it reads {\"String\": ...} patterns)"));
}

std::unique_ptr<Normalizer> ParseNormalizer(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = TypeOf(j, "normalizer");
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceNormalizer>();
    for (const auto& step : j.at("normalizers")) {
      if (auto n = ParseNormalizer(step)) seq->steps.push_back(std::move(n));
    }
    return seq;
  }
  if (type == "BertNormalizer") {
    auto n = std::make_unique<BertNormalizer>();
    n->clean_text = j.value("clean_text", true);
    n->chinese_chars = j.value("handle_chinese_chars", true);
    n->lowercase = j.value("lowercase", true);
    const json accents = j.value("strip_accents", json());
    n->strip_accents = accents.is_null() ? n->lowercase : accents.get<bool>();
    return n;
  }
  if (type == "Lowercase") return std::make_unique<FunctionNormalizer>(Lowercase);
  if (type == "StripAccents") return std::make_unique<FunctionNormalizer>(StripAccents);
  if (type == "NFD")
    return std::make_unique<FunctionNormalizer>([](U32* s) { *s = unicode::Nfd(*s); });
  if (type == "NFC")
    return std::make_unique<FunctionNormalizer>([](U32* s) { *s = unicode::Nfc(*s); });
  if (type == "Replace") {
    auto n = std::make_unique<ReplaceNormalizer>();
    n->pattern = StringPattern(j.at("pattern"), "normalizer Replace's");
    n->content = Chars(j.at("content").get<std::string>());
    return n;
  }
  if (type == "Prepend") {
    auto n = std::make_unique<PrependNormalizer>();
    n->prepend = Chars(j.at("prepend").get<std::string>());
    return n;
  }
  if (type == "Strip") {
    auto n = std::make_unique<StripNormalizer>();
    n->left = j.value("strip_left", false);
    n->right = j.value("strip_right", false);
    return n;
  }
  Unsupported("normalizer", type,
              "BertNormalizer, Lowercase, StripAccents, NFD, NFC, Replace, Prepend, Strip, "
              "Sequence");
}

// ------------------------------------------------------------------------------------------------
// Pre-tokenizers.

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void Apply(std::vector<Piece>* pieces) const = 0;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  void Apply(std::vector<Piece>* pieces) const override {
    for (const auto& p : steps) p->Apply(pieces);
  }
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  bool add_prefix_space = true, use_regex = true;
  void Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> split;
    for (Piece& p : *pieces) {
      if (add_prefix_space && !p.text.empty() && p.text[0] != ' ') p.text.insert(0, 1, ' ');
      if (use_regex) {
        SplitPiece(p, KnownPatternMatches(KnownPattern::kGpt2, p.text), Behavior::kIsolated,
                   &split);
      } else if (!p.text.empty()) {
        split.push_back(std::move(p));
      }
    }
    const auto& byte_to_char = ByteToChar();
    for (Piece& p : split) {
      const std::string bytes = Utf8(p.text);
      p.text.clear();
      for (unsigned char b : bytes) p.text.push_back(byte_to_char[b]);
    }
    *pieces = std::move(split);
  }
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  std::optional<KnownPattern> regex;
  U32 literal;
  Behavior behavior = Behavior::kIsolated;
  void Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> split;
    for (const Piece& p : *pieces) {
      SplitPiece(p, regex ? KnownPatternMatches(*regex, p.text) : FindAll(p.text, literal),
                 behavior, &split);
    }
    *pieces = std::move(split);
  }
};

// Splits each piece on the characters `is_delimiter` accepts, each one its own match.
template <typename Pred>
void SplitOnChars(std::vector<Piece>* pieces, Pred is_delimiter, Behavior behavior) {
  std::vector<Piece> split;
  for (const Piece& p : *pieces) {
    std::vector<std::pair<size_t, size_t>> matches;
    for (size_t i = 0; i < p.text.size(); ++i) {
      if (is_delimiter(p.text[i])) matches.emplace_back(i, i + 1);
    }
    SplitPiece(p, matches, behavior, &split);
  }
  *pieces = std::move(split);
}

class BertPreTokenizer : public PreTokenizer {
 public:
  void Apply(std::vector<Piece>* pieces) const override {
    SplitOnChars(pieces, unicode::IsWhitespace, Behavior::kRemoved);
    SplitOnChars(
        pieces,
        [](char32_t c) {
          return (c < 0x80 && c > ' ' && c < 0x7F && !std::isalnum(static_cast<int>(c))) ||
                 unicode::IsPunctuation(c);
        },
        Behavior::kIsolated);
  }
};

class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  void Apply(std::vector<Piece>* pieces) const override {
    SplitOnChars(pieces, unicode::IsWhitespace, Behavior::kRemoved);
  }
};

enum class PrependScheme { kAlways, kFirst, kNever };

PrependScheme ParsePrependScheme(const json& j) {
  if (j.contains("prepend_scheme")) {
    const std::string s = j.at("prepend_scheme").get<std::string>();
    if (s == "always") return PrependScheme::kAlways;
    if (s == "first") return PrependScheme::kFirst;
    if (s == "never") return PrependScheme::kNever;
    Refuse(absl::StrCat("Metaspace prepend_scheme '", s, "' is not one kiln reads"));
  }
  return j.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

char32_t ParseReplacement(const json& j) {
  const U32 r = Chars(j.value("replacement", std::string("\xE2\x96\x81")));
  if (r.size() != 1) Refuse("Metaspace replacement is not one character");
  return r[0];
}

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  char32_t replacement = 0x2581;
  PrependScheme scheme = PrependScheme::kAlways;
  bool split = true;
  void Apply(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    for (Piece& p : *pieces) {
      std::replace(p.text.begin(), p.text.end(), U' ', replacement);
      const bool prepend =
          scheme == PrependScheme::kAlways || (scheme == PrependScheme::kFirst && p.at_start);
      if (prepend && !p.text.empty() && p.text[0] != replacement) p.text.insert(0, 1, replacement);
      if (split) {
        std::vector<std::pair<size_t, size_t>> matches;
        for (size_t i = 0; i < p.text.size(); ++i) {
          if (p.text[i] == replacement) matches.emplace_back(i, i + 1);
        }
        SplitPiece(p, matches, Behavior::kMergedWithNext, &out);
      } else if (!p.text.empty()) {
        out.push_back(std::move(p));
      }
    }
    *pieces = std::move(out);
  }
};

std::unique_ptr<PreTokenizer> ParsePreTokenizer(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = TypeOf(j, "pre_tokenizer");
  if (type == "Sequence") {
    auto seq = std::make_unique<SequencePreTokenizer>();
    for (const auto& step : j.at("pretokenizers")) {
      if (auto p = ParsePreTokenizer(step)) seq->steps.push_back(std::move(p));
    }
    return seq;
  }
  if (type == "ByteLevel") {
    auto p = std::make_unique<ByteLevelPreTokenizer>();
    p->add_prefix_space = j.value("add_prefix_space", true);
    p->use_regex = j.value("use_regex", true);
    return p;
  }
  if (type == "Split") {
    if (j.value("invert", false))
      Refuse("pre_tokenizer Split with invert: true is not one kiln reads");
    auto p = std::make_unique<SplitPreTokenizer>();
    const json& pattern = j.at("pattern");
    if (pattern.is_object() && pattern.contains("Regex")) {
      p->regex = ParseKnownPattern(pattern["Regex"].get<std::string>());
    } else {
      p->literal = StringPattern(pattern, "pre_tokenizer Split's");
    }
    p->behavior = ParseBehavior(j.at("behavior"));
    return p;
  }
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  if (type == "Metaspace") {
    auto p = std::make_unique<MetaspacePreTokenizer>();
    p->replacement = ParseReplacement(j);
    p->scheme = ParsePrependScheme(j);
    p->split = j.value("split", true);
    return p;
  }
  Unsupported("pre_tokenizer", type,
              "ByteLevel, Split, BertPreTokenizer, WhitespaceSplit, Metaspace, Sequence");
}

// ------------------------------------------------------------------------------------------------
// Models.

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-tokenized piece (UTF-8).
  virtual void Tokenize(const std::string& word, std::vector<int64_t>* ids) const = 0;

  int64_t TokenToId(const std::string& token) const {
    auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }
  const std::string* IdToToken(int64_t id) const {
    if (id < 0 || id >= static_cast<int64_t>(tokens_.size()) || !has_[static_cast<size_t>(id)])
      return nullptr;
    return &tokens_[static_cast<size_t>(id)];
  }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }

 protected:
  void Add(const std::string& token, int64_t id) {
    if (id < 0 || id > (int64_t{1} << 26))
      Refuse(absl::StrCat("model vocab id ", id, " is out of range"));
    vocab_[token] = id;
    if (id >= static_cast<int64_t>(tokens_.size())) {
      tokens_.resize(static_cast<size_t>(id) + 1);
      has_.resize(static_cast<size_t>(id) + 1);
    }
    tokens_[static_cast<size_t>(id)] = token;
    has_[static_cast<size_t>(id)] = true;
  }
  void AddVocabObject(const json& vocab) {
    if (!vocab.is_object()) Refuse("model vocab is not an object of token: id");
    for (const auto& [token, id] : vocab.items()) Add(token, id.get<int64_t>());
  }
  int64_t RequireId(const std::string& token, const char* what) const {
    const int64_t id = TokenToId(token);
    if (id < 0) Refuse(absl::StrCat("model ", what, " '", token, "' is not in the vocabulary"));
    return id;
  }

  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> tokens_;
  std::vector<bool> has_;
};

std::optional<std::string> OptionalString(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  return it->get<std::string>();
}

// Byte-fallback tokens "<0xAB>" of `s`'s bytes; false when the vocabulary lacks one.
bool ByteFallbackIds(const Model& model, const std::string& s, std::vector<int64_t>* ids) {
  std::vector<int64_t> bytes;
  for (unsigned char b : s) {
    const int64_t id = model.TokenToId(absl::StrFormat("<0x%02X>", b));
    if (id < 0) return false;
    bytes.push_back(id);
  }
  ids->insert(ids->end(), bytes.begin(), bytes.end());
  return true;
}

class BpeModel : public Model {
 public:
  explicit BpeModel(const json& j) {
    if (j.contains("dropout") && !j["dropout"].is_null() && j["dropout"].get<double>() > 0)
      Refuse("model BPE with dropout is not one kiln reads (it encodes deterministically)");
    AddVocabObject(j.at("vocab"));
    unk_ = OptionalString(j, "unk_token");
    prefix_ = OptionalString(j, "continuing_subword_prefix");
    suffix_ = OptionalString(j, "end_of_word_suffix");
    fuse_unk_ = j.value("fuse_unk", false);
    byte_fallback_ = j.value("byte_fallback", false);
    ignore_merges_ = j.value("ignore_merges", false);
    if (unk_) unk_id_ = RequireId(*unk_, "unk_token");
    const json& merges = j.at("merges");
    if (!merges.is_array()) Refuse("model BPE merges is not a list");
    const size_t prefix_len = prefix_ ? prefix_->size() : 0;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const json& m = merges[rank];
      std::string a, b;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          Refuse(absl::StrCat("model BPE merge ", m.dump(), " is not two tokens"));
        a = s.substr(0, space);
        b = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        Refuse(absl::StrCat("model BPE merge ", m.dump(), " is not two tokens"));
      }
      const int64_t a_id = RequireId(a, "merge token");
      const int64_t b_id = RequireId(b, "merge token");
      const std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : "");
      const int64_t new_id = RequireId(merged, "merged token");
      merges_[Key(a_id, b_id)] = {static_cast<int64_t>(rank), new_id};
    }
  }

  void Tokenize(const std::string& word, std::vector<int64_t>* ids) const override {
    if (word.empty()) return;
    if (ignore_merges_) {
      if (int64_t id = TokenToId(word); id >= 0) {
        ids->push_back(id);
        return;
      }
    }
    struct Symbol {
      int64_t id;
      std::ptrdiff_t prev, next;
      bool alive;
    };
    std::vector<Symbol> symbols;
    std::optional<std::pair<int64_t, size_t>> unk;  // pending unknown (id, bytes)
    auto add = [&](int64_t id) {
      const auto n = static_cast<std::ptrdiff_t>(symbols.size());
      symbols.push_back({id, n - 1, n + 1, true});
    };
    const U32 chars = Chars(word);
    for (size_t i = 0; i < chars.size(); ++i) {
      std::string s;
      unicode::AppendUtf8(chars[i], &s);
      const size_t bytes = s.size();
      if (i > 0 && prefix_) s = *prefix_ + s;
      if (i + 1 == chars.size() && suffix_) s += *suffix_;
      if (int64_t id = TokenToId(s); id >= 0) {
        if (unk) add(unk->first);
        unk.reset();
        add(id);
        continue;
      }
      if (byte_fallback_) {
        std::vector<int64_t> fallback;
        if (ByteFallbackIds(*this, s, &fallback)) {
          for (int64_t id : fallback) add(id);
          continue;
        }
      }
      if (unk_) {
        if (unk && fuse_unk_) {
          unk->second += bytes;
        } else {
          if (unk) add(unk->first);
          unk = std::make_pair(unk_id_, bytes);
        }
      }
    }
    if (unk) add(unk->first);
    if (!symbols.empty()) symbols.back().next = -1;

    struct Merge {
      int64_t rank;
      std::ptrdiff_t pos;
      int64_t new_id;
      bool operator<(const Merge& o) const {  // the lowest rank, then the leftmost, on top
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    std::priority_queue<Merge> queue;
    auto push = [&](std::ptrdiff_t pos) {
      if (pos < 0 || symbols[static_cast<size_t>(pos)].next < 0) return;
      const Symbol& left = symbols[static_cast<size_t>(pos)];
      auto it = merges_.find(Key(left.id, symbols[static_cast<size_t>(left.next)].id));
      if (it != merges_.end()) queue.push({it->second.first, pos, it->second.second});
    };
    for (size_t i = 0; i + 1 < symbols.size(); ++i) push(static_cast<std::ptrdiff_t>(i));
    while (!queue.empty()) {
      const Merge top = queue.top();
      queue.pop();
      Symbol& left = symbols[static_cast<size_t>(top.pos)];
      if (!left.alive || left.next < 0) continue;
      Symbol& right = symbols[static_cast<size_t>(left.next)];
      auto it = merges_.find(Key(left.id, right.id));
      if (it == merges_.end() || it->second.second != top.new_id) continue;
      left.id = top.new_id;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
      push(left.prev);
      push(top.pos);
    }
    for (const Symbol& s : symbols) {
      if (s.alive) ids->push_back(s.id);
    }
  }

 private:
  static uint64_t Key(int64_t a, int64_t b) {
    return (static_cast<uint64_t>(a) << 32) | static_cast<uint64_t>(b);
  }
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> merges_;  // (rank, new id)
  std::optional<std::string> unk_, prefix_, suffix_;
  int64_t unk_id_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
};

class WordPieceModel : public Model {
 public:
  explicit WordPieceModel(const json& j) {
    AddVocabObject(j.at("vocab"));
    unk_id_ = RequireId(j.value("unk_token", std::string("[UNK]")), "unk_token");
    prefix_ = j.value("continuing_subword_prefix", std::string("##"));
    max_chars_ = j.value("max_input_chars_per_word", int64_t{100});
  }

  void Tokenize(const std::string& word, std::vector<int64_t>* ids) const override {
    if (unicode::DecodeUtf8(word).size() > static_cast<size_t>(max_chars_)) {
      ids->push_back(unk_id_);
      return;
    }
    std::vector<int64_t> pieces;
    size_t start = 0;
    while (start < word.size()) {
      size_t end = word.size();
      int64_t found = -1;
      while (start < end) {
        std::string sub = word.substr(start, end - start);
        if (start > 0) sub = prefix_ + sub;
        if (int64_t id = TokenToId(sub); id >= 0) {
          found = id;
          break;
        }
        // One character shorter.
        do {
          --end;
        } while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
      }
      if (found < 0) {
        ids->push_back(unk_id_);
        return;
      }
      pieces.push_back(found);
      start = end;
    }
    ids->insert(ids->end(), pieces.begin(), pieces.end());
  }

 private:
  int64_t unk_id_ = -1, max_chars_ = 100;
  std::string prefix_;
};

class UnigramModel : public Model {
 public:
  explicit UnigramModel(const json& j) {
    const json& vocab = j.at("vocab");
    if (!vocab.is_array()) Refuse("model Unigram vocab is not a list of [piece, score]");
    scores_.reserve(vocab.size());
    for (size_t i = 0; i < vocab.size(); ++i) {
      const json& entry = vocab[i];
      if (!entry.is_array() || entry.size() != 2)
        Refuse("model Unigram vocab is not a list of [piece, score]");
      const std::string piece = entry[0].get<std::string>();
      const double score = entry[1].get<double>();
      Add(piece, static_cast<int64_t>(i));
      scores_.push_back(score);
      min_score_ = std::min(min_score_, score);
      max_piece_bytes_ = std::max(max_piece_bytes_, piece.size());
    }
    if (j.contains("unk_id") && !j["unk_id"].is_null()) {
      unk_id_ = j["unk_id"].get<int64_t>();
      if (unk_id_ < 0 || unk_id_ >= static_cast<int64_t>(scores_.size()))
        Refuse("model Unigram unk_id is not an id of its vocabulary");
    }
    byte_fallback_ = j.value("byte_fallback", false);
  }

  void Tokenize(const std::string& s, std::vector<int64_t>* ids) const override {
    if (s.empty()) return;
    // Viterbi over byte positions, as the library's encode_optimized (ties keep the first).
    struct Best {
      int64_t id = -1;
      std::ptrdiff_t start = -1;
      double score = 0;
    };
    const size_t n = s.size();
    std::vector<Best> best(n + 1);
    best[0].start = 0;
    const double unk_score = min_score_ - 10.0;
    size_t start = 0;
    while (start < n) {
      const auto lead = static_cast<unsigned char>(s[start]);
      size_t char_len = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      char_len = std::min(char_len, n - start);
      const double here = best[start].score;
      bool has_single = false;
      for (size_t len = 1; len <= max_piece_bytes_ && start + len <= n; ++len) {
        auto it = vocab_.find(s.substr(start, len));
        if (it == vocab_.end()) continue;
        const double candidate = here + scores_[static_cast<size_t>(it->second)];
        Best& target = best[start + len];
        if (target.start < 0 || candidate > target.score) {
          target = {it->second, static_cast<std::ptrdiff_t>(start), candidate};
        }
        if (len == char_len) has_single = true;
      }
      if (!has_single) {
        Best& target = best[start + char_len];
        const double candidate = here + unk_score;
        if (target.start < 0 || candidate > target.score) {
          target = {unk_id_, static_cast<std::ptrdiff_t>(start), candidate};
        }
      }
      start += char_len;
    }
    // Back from the end, consecutive unknowns fused into one.
    std::vector<std::string> pieces;
    std::string unknown;
    size_t end = n;
    while (end > 0) {
      const Best& node = best[end];
      if (node.start < 0) break;  // unreachable with valid UTF-8
      const auto from = static_cast<size_t>(node.start);
      std::string piece = s.substr(from, end - from);
      if (unk_id_ >= 0 && node.id == unk_id_) {
        unknown = piece + unknown;
      } else {
        if (!unknown.empty()) pieces.push_back(std::move(unknown));
        unknown.clear();
        pieces.push_back(std::move(piece));
      }
      end = from;
    }
    if (!unknown.empty()) pieces.push_back(std::move(unknown));
    std::reverse(pieces.begin(), pieces.end());
    for (const std::string& piece : pieces) {
      if (int64_t id = TokenToId(piece); id >= 0) {
        ids->push_back(id);
      } else if (byte_fallback_ && ByteFallbackIds(*this, piece, ids)) {
      } else if (unk_id_ >= 0) {
        ids->push_back(unk_id_);
      }
    }
  }

 private:
  std::vector<double> scores_;
  double min_score_ = 0;
  size_t max_piece_bytes_ = 0;
  int64_t unk_id_ = -1;
  bool byte_fallback_ = false;
};

// WordLevel: each piece whole, or the unknown token (kiln's own char and whitespace tokenizers
// export as one).
class WordLevelModel : public Model {
 public:
  explicit WordLevelModel(const json& j) {
    AddVocabObject(j.at("vocab"));
    unk_id_ = RequireId(j.value("unk_token", std::string("<unk>")), "unk_token");
  }
  void Tokenize(const std::string& word, std::vector<int64_t>* ids) const override {
    const int64_t id = TokenToId(word);
    ids->push_back(id >= 0 ? id : unk_id_);
  }

 private:
  int64_t unk_id_ = -1;
};

std::unique_ptr<Model> ParseModel(const json& j, std::string* type) {
  if (!j.is_object()) Refuse("model is not an object");
  if (j.contains("type")) {
    *type = j.at("type").get<std::string>();
  } else if (j.contains("merges")) {
    *type = "BPE";
  } else if (j.contains("vocab") && j["vocab"].is_array()) {
    *type = "Unigram";
  } else if (j.contains("max_input_chars_per_word")) {
    *type = "WordPiece";
  }
  if (*type == "BPE") return std::make_unique<BpeModel>(j);
  if (*type == "WordPiece") return std::make_unique<WordPieceModel>(j);
  if (*type == "Unigram") return std::make_unique<UnigramModel>(j);
  if (*type == "WordLevel") return std::make_unique<WordLevelModel>(j);
  Unsupported("model", *type, "BPE, WordPiece, Unigram, WordLevel");
}

// ------------------------------------------------------------------------------------------------
// Decoders: each rewrites the token strings (the library's decode_chain); the text is their
// concatenation.

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void Apply(std::vector<std::string>* tokens) const = 0;
};

class SequenceDecoder : public Decoder {
 public:
  std::vector<std::unique_ptr<Decoder>> steps;
  void Apply(std::vector<std::string>* tokens) const override {
    for (const auto& d : steps) d->Apply(tokens);
  }
};

class ByteLevelDecoder : public Decoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    const auto& char_to_byte = CharToByte();
    std::string bytes;
    for (const std::string& token : *tokens) {
      std::string mapped;
      bool ok = true;
      for (char32_t c : Chars(token)) {
        auto it = char_to_byte.find(c);
        if (it == char_to_byte.end()) {
          ok = false;
          break;
        }
        mapped.push_back(static_cast<char>(it->second));
      }
      bytes += ok ? mapped : token;
    }
    *tokens = {Utf8(Chars(bytes))};
  }
};

void ReplaceAll(std::string* s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t last = 0;
  for (size_t i = s->find(from); i != std::string::npos; i = s->find(from, i + from.size())) {
    out.append(*s, last, i - last);
    out += to;
    last = i + from.size();
  }
  out.append(*s, last, std::string::npos);
  *s = std::move(out);
}

class WordPieceDecoder : public Decoder {
 public:
  std::string prefix = "##";
  bool cleanup = true;
  void Apply(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      if (i != 0) {
        if (t.compare(0, prefix.size(), prefix) == 0) {
          t.erase(0, prefix.size());
        } else {
          t.insert(0, " ");
        }
      }
      if (cleanup) {
        for (const auto& [from, to] :
             std::vector<std::pair<const char*, const char*>>{{" .", "."},
                                                              {" ?", "?"},
                                                              {" !", "!"},
                                                              {" ,", ","},
                                                              {" ' ", "'"},
                                                              {" n't", "n't"},
                                                              {" 'm", "'m"},
                                                              {" do not", " don't"},
                                                              {" 's", "'s"},
                                                              {" 've", "'ve"},
                                                              {" 're", "'re"}}) {
          ReplaceAll(&t, from, to);
        }
      }
    }
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  char32_t replacement = 0x2581;
  PrependScheme scheme = PrependScheme::kAlways;
  void Apply(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      U32 out;
      for (char32_t c : Chars((*tokens)[i])) {
        if (c != replacement) {
          out.push_back(c);
        } else if (i != 0 || scheme == PrependScheme::kNever) {
          out.push_back(' ');
        }
      }
      (*tokens)[i] = Utf8(out);
    }
  }
};

class ReplaceDecoder : public Decoder {
 public:
  std::string pattern, content;
  void Apply(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) ReplaceAll(&t, pattern, content);
  }
};

class ByteFallbackDecoder : public Decoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (Utf8(Chars(pending)) == pending) {  // valid UTF-8
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending_count; ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
      pending_count = 0;
    };
    for (std::string& t : *tokens) {
      unsigned byte = 0;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
          std::isxdigit(static_cast<unsigned char>(t[3])) &&
          std::isxdigit(static_cast<unsigned char>(t[4])) &&
          sscanf(t.c_str() + 3, "%2x", &byte) == 1) {
        pending.push_back(static_cast<char>(byte));
        ++pending_count;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    *tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void Apply(std::vector<std::string>* tokens) const override {
    *tokens = {absl::StrJoin(*tokens, "")};
  }
};

class StripDecoder : public Decoder {
 public:
  char32_t content = ' ';
  size_t start = 0, stop = 0;
  void Apply(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) {
      U32 chars = Chars(t);
      size_t b = 0, e = chars.size();
      while (b < start && b < e && chars[b] == content) ++b;
      size_t stripped = 0;
      while (stripped < stop && e > b && chars[e - 1] == content) {
        --e;
        ++stripped;
      }
      t = Utf8(chars.substr(b, e - b));
    }
  }
};

std::unique_ptr<Decoder> ParseDecoder(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = TypeOf(j, "decoder");
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceDecoder>();
    for (const auto& step : j.at("decoders")) {
      if (auto d = ParseDecoder(step)) seq->steps.push_back(std::move(d));
    }
    return seq;
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "WordPiece") {
    auto d = std::make_unique<WordPieceDecoder>();
    d->prefix = j.value("prefix", std::string("##"));
    d->cleanup = j.value("cleanup", true);
    return d;
  }
  if (type == "Metaspace") {
    auto d = std::make_unique<MetaspaceDecoder>();
    d->replacement = ParseReplacement(j);
    d->scheme = ParsePrependScheme(j);
    return d;
  }
  if (type == "Replace") {
    auto d = std::make_unique<ReplaceDecoder>();
    d->pattern = Utf8(StringPattern(j.at("pattern"), "decoder Replace's"));
    d->content = j.at("content").get<std::string>();
    return d;
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    auto d = std::make_unique<StripDecoder>();
    const U32 content = Chars(j.at("content").get<std::string>());
    if (content.size() != 1) Refuse("decoder Strip's content is not one character");
    d->content = content[0];
    d->start = j.value("start", size_t{0});
    d->stop = j.value("stop", size_t{0});
    return d;
  }
  Unsupported("decoder", type,
              "ByteLevel, WordPiece, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence");
}

// ------------------------------------------------------------------------------------------------
// Post-processors: the special tokens around one sequence (add_special_tokens).

struct PostProcessor {
  std::vector<int64_t> before, after;
  bool templated = false;  // false: the ids pass unchanged
};

void ParsePostProcessor(const json& j, PostProcessor* out) {
  if (j.is_null()) return;
  const std::string type = TypeOf(j, "post_processor");
  if (type == "Sequence") {
    for (const auto& step : j.at("processors")) ParsePostProcessor(step, out);
    return;
  }
  if (type == "ByteLevel") return;  // offsets only
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    out->before = {j.at("cls").at(1).get<int64_t>()};
    out->after = {j.at("sep").at(1).get<int64_t>()};
    out->templated = true;
    return;
  }
  if (type == "TemplateProcessing") {
    const json& specials = j.value("special_tokens", json::object());
    out->before.clear();
    out->after.clear();
    bool seen_sequence = false;
    for (const json& piece : j.at("single")) {
      if (piece.contains("Sequence")) {
        if (piece["Sequence"].value("id", std::string("A")) != "A")
          Refuse("post_processor TemplateProcessing's single template names a sequence but A");
        seen_sequence = true;
        continue;
      }
      const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
      if (!specials.contains(name))
        Refuse(absl::StrCat("post_processor TemplateProcessing names special token '", name,
                            "' that its special_tokens lack"));
      for (const json& id : specials.at(name).at("ids")) {
        (seen_sequence ? out->after : out->before).push_back(id.get<int64_t>());
      }
    }
    out->templated = true;
    return;
  }
  Unsupported("post_processor", type,
              "TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence");
}

struct AddedToken {
  int64_t id = -1;
  std::string content;
  U32 match;            // what is looked for: the content, normalized where `normalized`
  std::string decoded;  // what it decodes to: `match` (the library's id_to_token)
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

AddedToken ParseAddedToken(const json& j, int64_t id) {
  AddedToken t;
  t.id = id;
  t.content = j.at("content").get<std::string>();
  t.single_word = j.value("single_word", false);
  t.lstrip = j.value("lstrip", false);
  t.rstrip = j.value("rstrip", false);
  t.special = j.value("special", false);
  t.normalized = j.value("normalized", !t.special);
  return t;
}

// `message` on one line (the JSON parser quotes what it read last, line breaks included).
std::string OneLine(std::string message) {
  std::replace_if(
      message.begin(), message.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return message;
}

// A segment of the input: text for the model, or one added token.
struct Segment {
  U32 text;
  int64_t added_id = -1;
  bool at_start = false;
};

bool IsWordChar(char32_t c) { return unicode::IsLetter(c) || unicode::IsNumber(c) || c == '_'; }

}  // namespace

struct Pipeline {
  std::string source, model_type;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<Decoder> decoder;
  PostProcessor post;
  std::vector<AddedToken> added;
  std::unordered_map<int64_t, size_t> added_by_id;
  std::unordered_map<std::string, int64_t> added_by_content;
  SpecialIds special;

  // Splits out the added tokens with normalized == `normalized` from the text segments.
  void SplitAdded(std::vector<Segment>* segments, bool normalized) const {
    std::unordered_map<char32_t, std::vector<const AddedToken*>> by_first;
    for (const AddedToken& t : added) {
      if (t.normalized == normalized && !t.match.empty()) by_first[t.match[0]].push_back(&t);
    }
    if (by_first.empty()) return;
    std::vector<Segment> out;
    for (Segment& seg : *segments) {
      if (seg.added_id >= 0) {
        out.push_back(std::move(seg));
        continue;
      }
      const U32& s = seg.text;
      size_t emitted = 0;  // the end of the last match
      size_t i = 0;
      auto push_text = [&](size_t from, size_t to) {
        if (to > from) out.push_back({s.substr(from, to - from), -1, seg.at_start && from == 0});
      };
      while (i < s.size()) {
        const AddedToken* found = nullptr;
        if (auto it = by_first.find(s[i]); it != by_first.end()) {
          for (const AddedToken* t : it->second) {
            if ((found == nullptr || t->match.size() > found->match.size()) &&
                s.compare(i, t->match.size(), t->match) == 0)
              found = t;
          }
        }
        if (found == nullptr) {
          ++i;
          continue;
        }
        size_t start = i, stop = i + found->match.size();
        i = stop;
        if (found->single_word &&
            ((start > 0 && IsWordChar(s[start - 1])) || (stop < s.size() && IsWordChar(s[stop]))))
          continue;
        if (found->lstrip) {
          while (start > emitted && unicode::IsWhitespace(s[start - 1])) --start;
        }
        if (found->rstrip) {
          while (stop < s.size() && unicode::IsWhitespace(s[stop])) ++stop;
          i = stop;
        }
        push_text(emitted, start);
        out.push_back({U32(), found->id, false});
        emitted = stop;
      }
      push_text(emitted, s.size());
    }
    *segments = std::move(out);
  }

  std::vector<int64_t> Encode(std::string_view text, bool add_special_tokens) const {
    std::vector<Segment> segments;
    segments.push_back({Chars(text), -1, true});
    SplitAdded(&segments, false);
    if (normalizer) {
      for (Segment& seg : segments) {
        if (seg.added_id < 0) normalizer->Apply(&seg.text);
      }
    }
    SplitAdded(&segments, true);
    std::vector<int64_t> ids;
    if (add_special_tokens && post.templated) ids = post.before;
    for (Segment& seg : segments) {
      if (seg.added_id >= 0) {
        ids.push_back(seg.added_id);
        continue;
      }
      if (seg.text.empty()) continue;
      std::vector<Piece> pieces;
      pieces.push_back({std::move(seg.text), seg.at_start});
      if (pre_tokenizer) pre_tokenizer->Apply(&pieces);
      for (const Piece& p : pieces) model->Tokenize(Utf8(p.text), &ids);
    }
    if (add_special_tokens && post.templated)
      ids.insert(ids.end(), post.after.begin(), post.after.end());
    return ids;
  }

  std::string Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
    std::vector<std::string> tokens;
    for (int64_t id : ids) {
      const std::string* token = nullptr;
      if (auto it = added_by_id.find(id); it != added_by_id.end()) {
        token = &added[it->second].decoded;
      } else {
        token = model->IdToToken(id);
      }
      if (token == nullptr) continue;
      if (skip_special_tokens) {
        auto it = added_by_content.find(*token);
        if (it != added_by_content.end() && added[added_by_id.at(it->second)].special) continue;
      }
      tokens.push_back(*token);
    }
    if (!decoder) return absl::StrJoin(tokens, " ");
    decoder->Apply(&tokens);
    return absl::StrJoin(tokens, "");
  }

  int64_t TokenToId(const std::string& token) const {
    if (auto it = added_by_content.find(token); it != added_by_content.end()) return it->second;
    return model->TokenToId(token);
  }

  void AddToken(AddedToken t) {
    if (t.id < 0 || t.id > (int64_t{1} << 26))
      Refuse(absl::StrCat("added token id ", t.id, " is out of range"));
    t.match = Chars(t.content);
    if (t.normalized && normalizer) normalizer->Apply(&t.match);
    t.decoded = Utf8(t.match);
    if (auto it = added_by_id.find(t.id); it != added_by_id.end()) {
      added[it->second] = t;
    } else {
      added_by_id[t.id] = added.size();
      added.push_back(t);
    }
    added_by_content[t.content] = t.id;
  }

  // A special token named by tokenizer_config.json / special_tokens_map.json: a string or an
  // AddedToken object ({"content": ...}).
  int64_t SpecialId(const json& config, const char* key) const {
    auto it = config.find(key);
    if (it == config.end() || it->is_null()) return -2;  // not named here
    std::string content;
    if (it->is_string()) {
      content = it->get<std::string>();
    } else if (it->is_object() && it->contains("content")) {
      content = it->at("content").get<std::string>();
    } else {
      return -2;
    }
    return TokenToId(content);
  }

  void ReadSpecials(const json& config) {
    if (!config.is_object()) return;
    auto set = [&](int64_t* field, const char* key) {
      if (*field != -1) return;  // the first file that names it decides
      const int64_t id = SpecialId(config, key);
      if (id != -2) *field = id;
    };
    set(&special.pad, "pad_token");
    set(&special.unk, "unk_token");
    set(&special.bos, "bos_token");
    set(&special.eos, "eos_token");
    set(&special.cls, "cls_token");
    set(&special.sep, "sep_token");
  }

  absl::Status Load(std::string_view tokenizer_json, std::string_view config_json,
                    const std::string& path) {
    source = path;
    special = {-1, -1, -1, -1, -1, -1};
    std::string where = source;
    try {
      const json root = json::parse(tokenizer_json);
      if (!root.is_object()) Refuse("is not a JSON object");
      if (!root.contains("model")) Refuse("has no \"model\" (is it a tokenizer.json?)");
      model = ParseModel(root.at("model"), &model_type);
      normalizer = ParseNormalizer(root.value("normalizer", json()));
      pre_tokenizer = ParsePreTokenizer(root.value("pre_tokenizer", json()));
      decoder = ParseDecoder(root.value("decoder", json()));
      ParsePostProcessor(root.value("post_processor", json()), &post);
      for (const json& t : root.value("added_tokens", json::array())) {
        AddToken(ParseAddedToken(t, t.at("id").get<int64_t>()));
      }
      if (!config_json.empty()) {
        where = "tokenizer_config.json";
        const json config = json::parse(config_json);
        if (!config.is_object()) Refuse("is not a JSON object");
        // Added tokens transformers keeps in the config only.
        if (config.contains("added_tokens_decoder")) {
          for (const auto& [id, t] : config.at("added_tokens_decoder").items()) {
            const int64_t n = std::stoll(id);
            if (!added_by_id.count(n)) AddToken(ParseAddedToken(t, n));
          }
        }
        ReadSpecials(config);
      }
    } catch (const Refusal& r) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", OneLine(r.message)));
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": not a tokenizer kiln can read: ", OneLine(e.what())));
    }
    return absl::OkStatus();
  }

  // special_tokens_map.json's text: names what tokenizer_config.json did not.
  absl::Status LoadSpecialTokensMap(std::string_view text, const std::string& path) {
    const json map = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (map.is_discarded())
      return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
    try {
      ReadSpecials(map);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", OneLine(e.what())));
    }
    return absl::OkStatus();
  }
};

}  // namespace hf_json

struct HfTokenizer::Impl : hf_json::Pipeline {};

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::~HfTokenizer() = default;

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromJson(std::string_view tokenizer_json,
                                                                   std::string_view config_json,
                                                                   const std::string& source) {
  auto impl = std::make_unique<Impl>();
  if (absl::Status s = impl->Load(tokenizer_json, config_json, source); !s.ok()) return s;
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::LoadFolder(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  auto text = ReadFileToString(path);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat(
        dir,
        " holds no tokenizer.json: a pretrained tokenizer is a folder that the tokenizers "
        "library or transformers' save_pretrained wrote"));
  }
  if (!text.ok()) return text.status();
  std::string config;
  const std::string config_path = dir + "/tokenizer_config.json";
  if (auto c = ReadFileToString(config_path); c.ok()) {
    config = *std::move(c);
  } else if (!absl::IsNotFound(c.status())) {
    return c.status();
  }
  auto tokenizer = FromJson(*text, config, path);
  if (!tokenizer.ok()) {
    std::string message(tokenizer.status().message());
    if (message.rfind("tokenizer_config.json:", 0) == 0) message = dir + "/" + message;
    return absl::Status(tokenizer.status().code(), message);
  }
  // special_tokens_map.json names what tokenizer_config.json did not.
  const std::string map_path = dir + "/special_tokens_map.json";
  if (auto m = ReadFileToString(map_path); m.ok()) {
    if (absl::Status s = (*tokenizer)->impl_->LoadSpecialTokensMap(*m, map_path); !s.ok()) return s;
  } else if (!absl::IsNotFound(m.status())) {
    return m.status();
  }
  return tokenizer;
}

std::vector<int64_t> HfTokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  return impl_->Encode(text, add_special_tokens);
}

std::string HfTokenizer::Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  return impl_->Decode(ids, skip_special_tokens);
}

int64_t HfTokenizer::vocab_size() const {
  int64_t n = impl_->model->size();
  for (const auto& t : impl_->added) n = std::max(n, t.id + 1);
  return n;
}

SpecialIds HfTokenizer::special_ids() const {
  SpecialIds s = impl_->special;
  if (s.unk < 0) s.unk = -1;
  return s;
}

const std::string& HfTokenizer::model_type() const { return impl_->model_type; }

int64_t HfTokenizer::TokenToId(const std::string& token) const { return impl_->TokenToId(token); }

}  // namespace kiln::text
