#include "lib/config/yaml_io.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/files.h"

namespace kiln::config {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Digits and underscores from `pos`; returns the end. `digit` decides what a digit is.
template <typename Pred>
size_t SkipDigits(absl::string_view s, size_t pos, Pred digit) {
  while (pos < s.size() && (digit(s[pos]) || s[pos] == '_')) ++pos;
  return pos;
}

std::string WithoutUnderscores(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c != '_') out += c;
  }
  return out;
}

bool MatchesNull(absl::string_view s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

int MatchesBool(absl::string_view s) {  // 1 true, 0 false, -1 neither
  static const std::set<absl::string_view> kTrue = {"yes",  "Yes", "YES", "true", "True",
                                                    "TRUE", "on",  "On",  "ON"};
  static const std::set<absl::string_view> kFalse = {"no",    "No",  "NO",  "false", "False",
                                                     "FALSE", "off", "Off", "OFF"};
  if (kTrue.count(s)) return 1;
  if (kFalse.count(s)) return 0;
  return -1;
}

// Sexagesimal "1:30:15" part after the leading digits: (:[0-5]?[0-9])+
size_t SkipSexagesimal(absl::string_view s, size_t pos) {
  size_t start = pos;
  while (pos < s.size() && s[pos] == ':') {
    size_t p = pos + 1;
    if (p < s.size() && IsDigit(s[p])) {
      if (p + 1 < s.size() && IsDigit(s[p + 1])) {
        if (s[p] > '5') return start == pos ? start : pos;
        p += 2;
      } else {
        p += 1;
      }
    } else {
      break;
    }
    pos = p;
  }
  return pos;
}

double ParseSexagesimal(absl::string_view s) {
  double value = 0;
  size_t start = 0;
  while (start <= s.size()) {
    size_t colon = s.find(':', start);
    std::string part = WithoutUnderscores(s.substr(start, colon - start));
    value = value * 60 + std::strtod(part.c_str(), nullptr);
    if (colon == absl::string_view::npos) break;
    start = colon + 1;
  }
  return value;
}

// A natural number of any size, built digit by digit (for YAML's non-decimal ints beyond int64).
class Natural {
 public:
  // *this = *this * factor + addend
  void MulAdd(uint32_t factor, uint32_t addend) {
    uint64_t carry = addend;
    for (uint32_t& limb : limbs_) {
      uint64_t v = static_cast<uint64_t>(limb) * factor + carry;
      limb = static_cast<uint32_t>(v % kBase);
      carry = v / kBase;
    }
    while (carry > 0) {
      limbs_.push_back(static_cast<uint32_t>(carry % kBase));
      carry /= kBase;
    }
  }
  std::string Decimal() const {
    if (limbs_.empty()) return "0";
    std::string out = std::to_string(limbs_.back());
    for (size_t i = limbs_.size() - 1; i-- > 0;) {
      std::string part = std::to_string(limbs_[i]);
      out += std::string(9 - part.size(), '0') + part;
    }
    return out;
  }

 private:
  static constexpr uint64_t kBase = 1000000000;  // nine decimal digits per limb
  std::vector<uint32_t> limbs_;                  // least significant first
};

int DigitValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// YAML 1.1 int (PyYAML): binary, octal, decimal, hex, sexagesimal, of any size (Python's int has
// no bound, and OmegaConf keeps 2**64 an int). Null where `s` is no int.
NodePtr MatchInt(absl::string_view s) {
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  absl::string_view body = s.substr(i);
  if (body.empty()) return nullptr;
  auto in_base = [&](absl::string_view digits, uint32_t base) -> NodePtr {
    Natural n;
    bool any = false;
    for (char c : digits) {
      if (c == '_') continue;
      n.MulAdd(base, static_cast<uint32_t>(DigitValue(c)));
      any = true;
    }
    if (!any) return nullptr;
    return Node::Integer(absl::StrCat(negative ? "-" : "", n.Decimal()));
  };
  if (body.size() > 2 && body[0] == '0' && body[1] == 'b') {
    absl::string_view rest = body.substr(2);
    if (SkipDigits(rest, 0, [](char c) { return c == '0' || c == '1'; }) != rest.size())
      return nullptr;
    return in_base(rest, 2);
  }
  if (body.size() > 2 && body[0] == '0' && body[1] == 'x') {
    absl::string_view rest = body.substr(2);
    if (SkipDigits(rest, 0, [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }) !=
        rest.size())
      return nullptr;
    return in_base(rest, 16);
  }
  if (body == "0") return Node::Int(0);
  if (body[0] == '0') {
    absl::string_view rest = body.substr(1);
    if (SkipDigits(rest, 0, [](char c) { return c >= '0' && c <= '7'; }) != rest.size())
      return nullptr;
    return in_base(rest, 8);
  }
  if (body[0] < '1' || body[0] > '9') return nullptr;
  size_t end = SkipDigits(body, 1, IsDigit);
  if (end == body.size())
    return Node::Integer(absl::StrCat(negative ? "-" : "", WithoutUnderscores(body)));
  size_t sexa_end = SkipSexagesimal(body, end);
  if (sexa_end != end && sexa_end == body.size()) {
    // Base 60: the first part in decimal, then each part after a colon is a digit below 60.
    Natural n;
    bool first = true;
    for (absl::string_view part : absl::StrSplit(body, ':')) {
      if (first) {
        for (char c : part) {
          if (c != '_') n.MulAdd(10, static_cast<uint32_t>(c - '0'));
        }
        first = false;
      } else {
        n.MulAdd(60, static_cast<uint32_t>(std::stoi(WithoutUnderscores(part))));
      }
    }
    return Node::Integer(absl::StrCat(negative ? "-" : "", n.Decimal()));
  }
  return nullptr;
}

// OmegaConf's float resolver (PyYAML's plus exponents without a dot, like 1e3).
bool MatchesFloat(absl::string_view s, double* out) {
  if (s == ".nan" || s == ".NaN" || s == ".NAN") {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  absl::string_view body = s.substr(i);
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    *out = negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
    return true;
  }
  if (body.empty()) return false;
  auto exponent_end = [&](size_t p, bool sign_required) -> size_t {
    if (p >= body.size() || (body[p] != 'e' && body[p] != 'E')) return absl::string_view::npos;
    ++p;
    if (p < body.size() && (body[p] == '+' || body[p] == '-')) {
      ++p;
    } else if (sign_required) {
      return absl::string_view::npos;
    }
    size_t start = p;
    while (p < body.size() && IsDigit(body[p])) ++p;
    return p == start ? absl::string_view::npos : p;
  };
  auto convert = [&]() {
    std::string text = WithoutUnderscores(body);
    double v = std::strtod(text.c_str(), nullptr);
    *out = negative ? -v : v;
    return true;
  };
  if (body[0] == '.') {
    if (negative || s[0] == '+') return false;  // \.[0-9_]+ has no sign
    size_t p = SkipDigits(body, 1, IsDigit);
    if (p == 1) return false;
    if (p == body.size()) return convert();
    size_t e = exponent_end(p, /*sign_required=*/true);
    return e == body.size() ? convert() : false;
  }
  if (!IsDigit(body[0])) return false;
  size_t p = SkipDigits(body, 1, IsDigit);
  if (p < body.size() && body[p] == '.') {
    size_t q = SkipDigits(body, p + 1, IsDigit);
    if (q == body.size()) return convert();
    size_t e = exponent_end(q, /*sign_required=*/false);
    return e == body.size() ? convert() : false;
  }
  if (p < body.size() && (body[p] == 'e' || body[p] == 'E')) {
    size_t e = exponent_end(p, /*sign_required=*/false);
    return e == body.size() ? convert() : false;
  }
  size_t sexa_end = SkipSexagesimal(body, p);
  if (sexa_end != p && sexa_end < body.size() && body[sexa_end] == '.') {
    if (SkipDigits(body, sexa_end + 1, IsDigit) != body.size()) return false;
    double v = ParseSexagesimal(body);
    *out = negative ? -v : v;
    return true;
  }
  return false;
}

// yaml-cpp 0.7 decodes the escapes "\N" (NEL, U+0085) and "\_" (no-break space, U+00A0) to the
// single bytes 0x85 and 0xA0, which are not UTF-8 (the compose fuzzer found "\_": kiln's own YAML
// output then did not read back). The input was checked to be UTF-8, so such a stray byte can only
// come from those escapes.
std::string FixLatin1Escapes(const std::string& s) {
  if (s.find('\x85') == std::string::npos && s.find('\xa0') == std::string::npos) return s;
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t length = c < 0x80           ? 1
                    : (c >> 5) == 0x6  ? 2
                    : (c >> 4) == 0xe  ? 3
                    : (c >> 3) == 0x1e ? 4
                                       : 0;
    if (length == 0) {  // a stray continuation byte: the NEL or the no-break space
      out += c == 0x85 ? "\xc2\x85" : c == 0xa0 ? "\xc2\xa0" : std::string(1, s[i]);
      continue;
    }
    out.append(s, i, length);
    i += length - 1;
  }
  return out;
}

class YamlConverter {
 public:
  YamlConverter(std::shared_ptr<const std::string> file, absl::string_view text)
      : file_(std::move(file)), text_(text) {}

  absl::StatusOr<NodePtr> Convert(const YAML::Node& y) {
    if (depth_ >= kMaxDepth)
      return Error(y, absl::StrCat("nested deeper than ", kMaxDepth, " levels"));
    ++depth_;
    auto result = ConvertAtDepth(y);
    --depth_;
    return result;
  }

 private:
  absl::StatusOr<NodePtr> ConvertAtDepth(const YAML::Node& y) {
    NodePtr out;
    switch (y.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null: out = Node::Null(); break;
      case YAML::NodeType::Scalar: {
        const std::string& tag = y.Tag();
        const std::string text = FixLatin1Escapes(y.Scalar());
        if (tag == "?" || tag.empty()) {
          // YAML 1.1 gives a plain `=` (the value key) and `<<` (the merge key, here not a key)
          // types PyYAML cannot build, so Hydra refuses them; quote them for the strings.
          if (text == "=" || text == "<<") {
            return Error(y, absl::StrCat("invalid YAML: a plain '", text, "' is YAML 1.1's ",
                                         text == "=" ? "value" : "merge",
                                         " indicator; quote it for the string"));
          }
          out = ResolvePlainScalar(text);
        } else if (tag == "!" || tag == "tag:yaml.org,2002:str") {
          if (tag == "!" && !QuoteClosed(y)) {
            return Error(y,
                         "invalid YAML: the quoted scalar that starts here is not closed before "
                         "the end of the file");
          }
          out = Node::String(text);
        } else if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
                   tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
          out = ResolvePlainScalar(text);
          if (tag == "tag:yaml.org,2002:float" && out->kind() == NodeKind::kInt) {
            out = Node::Float(NumberValue(*out));
          }
        } else {
          return UnknownTag(y);
        }
        break;
      }
      case YAML::NodeType::Sequence: {
        if (!KnownTag(y, "tag:yaml.org,2002:seq")) return UnknownTag(y);
        out = Node::List();
        for (const auto& item : y) {
          auto child = Convert(item);
          if (!child.ok()) return child.status();
          out->Append(*std::move(child));
        }
        break;
      }
      case YAML::NodeType::Map: {
        if (!KnownTag(y, "tag:yaml.org,2002:map")) return UnknownTag(y);
        NodePtr explicit_keys = Node::Map();
        std::vector<NodePtr> merged;  // YAML 1.1 merge keys (`<<: *base`), as PyYAML applies them
        for (const auto& kv : y) {
          if (!kv.first.IsScalar() && !kv.first.IsNull()) {
            return Error(kv.first, "mapping keys must be scalars");
          }
          auto child = Convert(kv.second);
          if (!child.ok()) return child.status();
          if (kv.first.Scalar() == "<<" && kv.first.Tag() == "?") {
            if ((*child)->is_map()) {
              merged.push_back(*child);
            } else if ((*child)->is_list() &&
                       std::all_of((*child)->items().begin(), (*child)->items().end(),
                                   [](const NodePtr& n) { return n->is_map(); })) {
              for (const auto& m : (*child)->items()) merged.push_back(m);
            } else {
              return Error(kv.second, "a merge key (<<) needs a mapping or a list of mappings");
            }
            continue;
          }
          auto key = KeyOf(kv.first);
          if (!key.ok()) return key.status();
          // OmegaConf's loader refuses a repeated string key; a repeated bool, int or float key
          // replaces the value, as a Python dict does.
          if (!IsTypedKey(*key) && explicit_keys->Contains(*key)) {
            return Error(kv.first, absl::StrCat("duplicate key '", *key, "'"));
          }
          // A null value has no position of its own (yaml-cpp marks the next token); use its key's.
          if (kv.second.IsNull() && !WrittenNull(kv.second))
            (*child)->set_source(SourceOf(kv.first));
          explicit_keys->Set(*key, *std::move(child));
        }
        if (merged.empty()) {
          out = explicit_keys;
        } else {
          // Merged keys come first; explicit keys win, and earlier merged mappings win over later.
          out = Node::Map();
          for (const auto& m : merged) {
            for (const auto& [k, v] : m->entries()) {
              if (!out->Contains(k) && !explicit_keys->Contains(k)) out->Set(k, v->Clone());
            }
          }
          for (const auto& [k, v] : explicit_keys->entries()) out->Set(k, v);
        }
        break;
      }
    }
    if (!out->source().known()) out->set_source(SourceOf(y));
    return out;
  }

  // A mapping key as OmegaConf keeps it: a plain (or tagged) bool, int or float stays typed
  // (`on:` is the key True, `1:` the key 1), anything else is a string.
  absl::StatusOr<std::string> KeyOf(const YAML::Node& y) {
    auto value = Convert(y);
    if (!value.ok()) return value.status();
    if ((*value)->is_null()) {
      return Error(y, "a mapping key cannot be null (quote it for a string key)");
    }
    return (*value)->kind() == NodeKind::kString ? (*value)->as_string() : TypedKey(**value);
  }

  // Whether a collection is untagged or carries its own standard tag (`!!map`, `!!seq`).
  static bool KnownTag(const YAML::Node& y, absl::string_view standard) {
    const std::string& tag = y.Tag();
    return tag.empty() || tag == "?" || tag == "!" || tag == standard;
  }

  // A tag PyYAML's safe loader has no constructor for (`!model {name: cnn}`, `!!python/tuple`):
  // Hydra refuses the file with the loader's message, and so does kiln, rather than dropping the
  // tag and composing something its author did not mean.
  absl::Status UnknownTag(const YAML::Node& y) const {
    return Error(y, absl::StrCat("could not determine a constructor for the tag '", y.Tag(), "'"));
  }

  Source SourceOf(const YAML::Node& y) const {
    const YAML::Mark mark = y.Mark();
    if (mark.line < 0) return Source::File(file_, 0, 0);
    return Source::File(file_, mark.line + 1, mark.column + 1);
  }

  absl::Status Error(const YAML::Node& y, const std::string& message) const {
    const YAML::Mark mark = y.Mark();
    return absl::InvalidArgumentError(
        absl::StrCat(*file_, ":", mark.line + 1, ":", mark.column + 1, ": ", message));
  }

  // Whether the quoted scalar `y` (marked at its opening quote) has its closing quote: yaml-cpp
  // ends one that runs into the end of the input there, where PyYAML (so Hydra) refuses it.
  bool QuoteClosed(const YAML::Node& y) const {
    int pos = y.Mark().pos;
    if (pos < 0 || static_cast<size_t>(pos) >= text_.size()) return true;
    const char quote = text_[static_cast<size_t>(pos)];
    if (quote != '"' && quote != '\'') return true;  // an explicit `!` tag, not a quote
    for (size_t i = static_cast<size_t>(pos) + 1; i < text_.size(); ++i) {
      if (quote == '"' && text_[i] == '\\') {
        ++i;  // an escape: the next character is not the end
      } else if (text_[i] == quote) {
        if (quote == '\'' && i + 1 < text_.size() && text_[i + 1] == '\'') {
          ++i;  // '' is a single quote inside
        } else {
          return true;
        }
      }
    }
    return false;
  }

  // Whether a null node was written (`~`, `null`) rather than left empty: yaml-cpp marks an
  // empty value at the next token.
  bool WrittenNull(const YAML::Node& y) const {
    int pos = y.Mark().pos;
    if (pos < 0 || static_cast<size_t>(pos) >= text_.size()) return false;
    absl::string_view rest = text_.substr(static_cast<size_t>(pos));
    for (absl::string_view word : {"~", "null", "Null", "NULL"}) {
      if (!absl::StartsWith(rest, word)) continue;
      if (rest.size() == word.size()) return true;
      char next = rest[word.size()];
      if (next == ' ' || next == '\t' || next == '\r' || next == '\n' || next == ',' ||
          next == '}' || next == ']' || next == '#') {
        return true;
      }
    }
    return false;
  }

  static constexpr int kMaxDepth = 200;
  std::shared_ptr<const std::string> file_;
  absl::string_view text_;
  int depth_ = 0;
};

// Length of the Python whitespace character (str.isspace) at `s[i]`, or 0.
size_t PythonSpaceAt(absl::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f)) return 1;
  absl::string_view rest = s.substr(i);
  for (absl::string_view space :
       {"\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005",
        "\u2006", "\u2007", "\u2008", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f",
        "\u3000"}) {
    if (absl::StartsWith(rest, space)) return space.size();
  }
  return 0;
}

absl::string_view PythonStripImpl(absl::string_view s) {
  size_t n = 0;
  while (!s.empty() && (n = PythonSpaceAt(s, 0)) > 0) s.remove_prefix(n);
  bool stripped = true;
  while (!s.empty() && stripped) {
    stripped = false;
    for (size_t len = 1; len <= 3 && len <= s.size(); ++len) {
      if (PythonSpaceAt(s, s.size() - len) == len) {
        s.remove_suffix(len);
        stripped = true;
        break;
      }
    }
  }
  return s;
}

// Python's digitpart: digits with single underscores between them. Returns the end, or `pos`.
size_t SkipDigitPart(absl::string_view s, size_t pos) {
  if (pos >= s.size() || !IsDigit(s[pos])) return pos;
  size_t p = pos + 1;
  while (p < s.size()) {
    if (IsDigit(s[p])) {
      ++p;
    } else if (s[p] == '_' && p + 1 < s.size() && IsDigit(s[p + 1])) {
      p += 2;
    } else {
      break;
    }
  }
  return p;
}

size_t SkipSign(absl::string_view s) { return !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0; }

// Whether Python's int(s) accepts the string (ASCII digits only; Python also takes other
// Unicode decimal digits).
bool PythonIntAccepts(absl::string_view text) {
  absl::string_view s = PythonStripImpl(text);
  size_t p = SkipSign(s);
  size_t end = SkipDigitPart(s, p);
  return end != p && end == s.size();
}

// Whether Python's float(s) accepts the string.
bool PythonFloatAccepts(absl::string_view text) {
  absl::string_view s = PythonStripImpl(text);
  size_t p = SkipSign(s);
  std::string word(s.substr(p));
  std::transform(word.begin(), word.end(), word.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (word == "inf" || word == "infinity" || word == "nan") return true;
  size_t q = SkipDigitPart(s, p);
  bool digits = q != p;
  if (q < s.size() && s[q] == '.') {
    size_t r = SkipDigitPart(s, q + 1);
    digits = digits || r != q + 1;
    q = r;
  }
  if (!digits) return false;
  if (q < s.size() && (s[q] == 'e' || s[q] == 'E')) {
    size_t e = q + 1 + SkipSign(s.substr(q + 1));
    size_t r = SkipDigitPart(s, e);
    if (r == e) return false;
    q = r;
  }
  return q == s.size();
}

// Whether PyYAML's Dumper (its YAML 1.1 resolvers, timestamps included) would read the plain
// scalar as something other than a string.
bool Yaml11ResolvesNonString(const std::string& s) {
  // The words are looked up; the regex (whose compilation costs ~1 ms, most of `kiln --cfg job`)
  // runs only for strings that start like a number, a timestamp or a YAML indicator, rare in
  // configs.
  static const auto* kWords = new std::set<std::string, std::less<>>{
      "yes",   "Yes",   "YES", "no", "No", "NO",  "true", "True", "TRUE", "false",
      "False", "FALSE", "on",  "On", "ON", "off", "Off",  "OFF",  "null", "Null",
      "NULL",  "~",     "",    "<<", "=",  "!",   "&",    "*"};
  if (kWords->count(s) > 0) return true;
  if (std::strchr("-+.0123456789", s[0]) == nullptr) return false;
  static const std::regex kPatterns(
      "[-+]?[0-9][0-9_]*\\.[0-9_]*([eE][-+][0-9]+)?"
      "|\\.[0-9][0-9_]*([eE][-+][0-9]+)?"
      "|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\\.[0-9_]*"
      "|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)"
      "|[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+"
      "|[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+"
      "|[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]"
      "|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?([Tt]|[ \\t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9]"
      "(\\.[0-9]*)?([ \\t]*(Z|[-+][0-9][0-9]?(:[0-9][0-9])?))?");
  return std::regex_match(s, kPatterns);
}

bool IsYamlBreak(absl::string_view s, size_t i) {
  return s[i] == '\n' || absl::StartsWith(s.substr(i), "\u0085") ||
         absl::StartsWith(s.substr(i), "\u2028") || absl::StartsWith(s.substr(i), "\u2029");
}

bool IsYamlSpaceOrBreak(absl::string_view s, size_t i) {
  return i >= s.size() || s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\0' ||
         IsYamlBreak(s, i);
}

// Whether PyYAML's emitter (allow_unicode) may write the string as a plain block scalar
// (Emitter.analyze_scalar). The bytes after the first are UTF-8 continuation or ASCII.
bool PlainAllowedInBlock(absl::string_view s) {
  if (absl::StartsWith(s, "---") || absl::StartsWith(s, "...")) return false;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : 4;
    size_t next = std::min(s.size(), i + length);
    bool followed_by_space = IsYamlSpaceOrBreak(s, next);
    if (i == 0) {
      if (absl::string_view("#,[]{}&*!|>'\"%@`").find(c) != absl::string_view::npos) return false;
      if ((c == '?' || c == ':' || c == '-') && followed_by_space) return false;
    } else {
      if (c == ':' && followed_by_space) return false;
      if (c == '#' &&
          (s[i - 1] == ' ' || s[i - 1] == '\t' || s[i - 1] == '\r' || IsYamlBreak(s, i - 1) ||
           (i >= 2 && IsYamlBreak(s, i - 2)) || (i >= 3 && IsYamlBreak(s, i - 3)))) {
        return false;
      }
    }
    if (IsYamlBreak(s, i)) return false;  // line breaks: never plain
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) return false;  // tab and other special characters
    } else {
      // Printable Unicode is fine with allow_unicode; C1 controls, BOM and U+FFFE/F are not.
      uint32_t cp = 0;
      if (length == 2 && next - i == 2) cp = ((c & 0x1f) << 6) | (s[i + 1] & 0x3f);
      if (length == 3 && next - i == 3) {
        cp = ((c & 0x0f) << 12) | ((s[i + 1] & 0x3f) << 6) | (s[i + 2] & 0x3f);
      }
      if (length == 4) cp = 0x10000;
      bool printable =
          (cp >= 0xa0 && cp <= 0xd7ff) || (cp >= 0xe000 && cp <= 0xfffd) || cp >= 0x10000;
      if (!printable || cp == 0xfeff) return false;
    }
    bool space = c == ' ';
    if (space && (i == 0 || next == s.size())) return false;  // leading or trailing space
    i = next;
  }
  return true;
}

// Whether OmegaConf.to_yaml writes the string quoted: OmegaConf quotes what YAML or Python
// would read as a bool, int or float (`y`, `1_000`, `inf`, `1e3`); PyYAML quotes what its YAML
// 1.1 resolvers would retype (`2024-01-05`, `~`, `0o17`, `=`, `<<`) and what cannot be plain
// (`a: b`, ` a`, `#a`, line breaks). kiln also quotes whatever its own reader would retype.
bool NeedsQuotes(const std::string& s) {
  if (s.empty()) return true;
  static const std::set<absl::string_view> kOmegaConfBools = {
      "y",    "Y",    "yes",   "Yes",   "YES",   "n",  "N",  "no", "No",  "NO",  "true",
      "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF"};
  if (kOmegaConfBools.count(s) || PythonIntAccepts(s) || PythonFloatAccepts(s)) return true;
  if (Yaml11ResolvesNonString(s) || !PlainAllowedInBlock(s)) return true;
  return ResolvePlainScalar(s)->kind() != NodeKind::kString;
}

// The code point of the UTF-8 sequence at `s[i]` (input is valid UTF-8) and its length.
uint32_t CodePointAt(absl::string_view s, size_t i, size_t* length) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  *length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : 4;
  if (i + *length > s.size()) {
    *length = 1;
    return c;
  }
  if (*length == 1) return c;
  uint32_t cp = c & (0xff >> (*length + 1));
  for (size_t k = 1; k < *length; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  return cp;
}

// What PyYAML cannot write literally: control characters (but newline), DEL, C1 controls,
// the BOM and U+FFFE/U+FFFF. Such strings are double-quoted with escapes.
bool IsSpecialCodePoint(uint32_t cp) {
  if (cp == '\n') return false;
  return cp < 0x20 || (cp >= 0x7f && cp < 0xa0 && cp != 0x85) || cp == 0xfeff || cp == 0xfffe ||
         cp == 0xffff;
}

// YAML 1.1's other line breaks (NEL, LS, PS): PyYAML folds them inside single quotes, which a
// YAML 1.2 reader reads differently, so kiln writes them as escapes ("\N", "\L", "\P").
bool IsOtherLineBreak(uint32_t cp) { return cp == 0x85 || cp == 0x2028 || cp == 0x2029; }

std::string QuoteString(const std::string& s) {
  bool needs_double = false;
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    uint32_t cp = CodePointAt(s, i, &n);
    if (IsSpecialCodePoint(cp) || IsOtherLineBreak(cp)) needs_double = true;
  }
  // Line breaks also go double-quoted ("\n"); PyYAML folds them inside single quotes, which
  // reads back the same.
  if (s.find('\n') != std::string::npos) needs_double = true;
  if (!needs_double) {
    std::string out = "'";
    for (char c : s) {
      out += c;
      if (c == '\'') out += '\'';
    }
    return out + "'";
  }
  std::string out = "\"";
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    uint32_t cp = CodePointAt(s, i, &n);
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case 0x85: out += "\\x85"; break;  // yaml-cpp 0.7 reads "\N" as a bare byte 0x85
      case 0x2028: out += "\\L"; break;
      case 0x2029: out += "\\P"; break;
      default:
        if (IsSpecialCodePoint(cp)) {
          char buf[12];
          std::snprintf(buf, sizeof(buf), cp <= 0xff ? "\\x%02X" : "\\u%04X", cp);
          out += buf;
        } else {
          out.append(s, i, n);
        }
    }
  }
  return out + "\"";
}

std::string KeyToYaml(const std::string& key) {
  if (IsTypedKey(key)) return ScalarToYaml(*KeyValue(key));
  return NeedsQuotes(key) ? QuoteString(key) : key;
}

void Emit(const Node& node, int indent, std::string* out);

void EmitValueAfterKey(const Node& value, int indent, std::string* out) {
  if (value.is_container() && value.size() > 0) {
    *out += "\n";
    // Lists under a key sit at the key's indentation (PyYAML's default).
    Emit(value, value.is_list() ? indent : indent + 2, out);
  } else {
    *out += " " + ScalarToYaml(value) + "\n";
  }
}

void Emit(const Node& node, int indent, std::string* out) {
  const std::string pad(indent, ' ');
  if (node.is_map()) {
    for (const auto& [key, value] : node.entries()) {
      std::string k = KeyToYaml(key);
      // Implicit keys are limited to 1024 characters; longer ones need YAML's explicit "? key".
      *out += k.size() > 1000 ? pad + "? " + k + "\n" + pad + ":" : pad + k + ":";
      EmitValueAfterKey(*value, indent, out);
    }
  } else if (node.is_list()) {
    for (const auto& item : node.items()) {
      *out += pad + "-";
      if (item->is_container() && item->size() > 0) {
        // The first line of a nested block shares the dash's line.
        std::string nested;
        Emit(*item, indent + 2, &nested);
        *out += " " + nested.substr(indent + 2);
      } else {
        *out += " " + ScalarToYaml(*item) + "\n";
      }
    }
  } else {
    *out += pad + ScalarToYaml(node) + "\n";
  }
}

std::string FlowToYaml(const Node& node) {
  if (node.is_map()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : node.entries()) {
      if (!first) out += ", ";
      first = false;
      out += KeyToYaml(k) + ": " + FlowToYaml(*v);
    }
    return out + "}";
  }
  if (node.is_list()) {
    std::string out = "[";
    for (size_t i = 0; i < node.items().size(); ++i) {
      if (i > 0) out += ", ";
      out += FlowToYaml(*node.items()[i]);
    }
    return out + "]";
  }
  if (node.kind() == NodeKind::kString) {
    const std::string& s = node.as_string();
    bool flow_unsafe = s.find_first_of(",[]{}?:") != std::string::npos;
    return NeedsQuotes(s) || flow_unsafe ? QuoteString(s) : s;
  }
  return ScalarToYaml(node);
}

}  // namespace

NodePtr ResolvePlainScalar(absl::string_view text) {
  if (MatchesNull(text)) return Node::Null();
  int b = MatchesBool(text);
  if (b >= 0) return Node::Bool(b == 1);
  if (NodePtr i = MatchInt(text)) return i;
  double f = 0;
  if (MatchesFloat(text, &f)) return Node::Float(f);
  return Node::String(std::string(text));
}

// YAML allows tab, newline and carriage return but no other control characters, and must be
// valid UTF-8 (PyYAML refuses such files too).
absl::Status CheckCharacters(absl::string_view text, const std::string& file) {
  int line = 1, column = 1;
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    size_t length = 1;
    bool ok = true;
    if (c < 0x80) {
      ok = c >= 0x20 || c == '\t' || c == '\n' || c == '\r';
      ok = ok && c != 0x7f;
    } else {
      length = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
      ok = length != 0 && i + length <= text.size() && c != 0xc0 && c != 0xc1 && c <= 0xf4;
      for (size_t k = 1; ok && k < length; ++k) {
        ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      }
      // The second byte's range rules out overlong forms (E0 80 8A would be a newline),
      // surrogates and code points beyond U+10FFFF, which Python's decoder refuses too.
      unsigned char second = ok ? static_cast<unsigned char>(text[i + 1]) : 0;
      if (ok && c == 0xe0) ok = second >= 0xa0;
      if (ok && c == 0xed) ok = second <= 0x9f;
      if (ok && c == 0xf0) ok = second >= 0x90;
      if (ok && c == 0xf4) ok = second <= 0x8f;
    }
    if (!ok) {
      char code[8];
      std::snprintf(code, sizeof(code), "0x%02x", c);
      return absl::InvalidArgumentError(
          absl::StrCat(file, ":", line, ":", column, ": invalid YAML: ",
                       c < 0x80 ? absl::StrCat("control character ", code, " is not allowed")
                                : absl::StrCat("invalid UTF-8 (byte ", code, ")")));
    }
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
    i += length;
  }
  return absl::OkStatus();
}

// Records where documents start; the events themselves are not needed.
class DocumentStarts : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
  std::vector<YAML::Mark> starts;
};

// A config file holds one document. Counting documents with a bound also avoids yaml-cpp 0.7's
// endless loop on some invalid input (a "document" that never advances; fixed upstream in 2024).
absl::Status CheckSingleDocument(const std::string& text, const std::string& file) {
  std::stringstream stream(text);
  YAML::Parser parser(stream);
  DocumentStarts handler;
  for (int i = 0; i < 2 && parser.HandleNextDocument(handler); ++i) {
  }
  if (handler.starts.size() < 2) return absl::OkStatus();
  const YAML::Mark& second = handler.starts[1];
  if (second.pos == handler.starts[0].pos) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ":", second.line + 1, ":", second.column + 1,
                     ": invalid YAML: the parser cannot continue here"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(file, ":", second.line + 1,
                   ": invalid YAML: expected a single document, found more "
                   "(separated by ---)"));
}

absl::StatusOr<NodePtr> ParseYaml(absl::string_view text, const std::string& file) {
  if (auto st = CheckCharacters(text, file); !st.ok()) return st;
  auto file_name = std::make_shared<const std::string>(file);
  YAML::Node root;
  try {
    if (auto st = CheckSingleDocument(std::string(text), file); !st.ok()) return st;
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ":", e.mark.line + 1, ":",
                                                   e.mark.column + 1, ": invalid YAML: ", e.msg));
  }
  YamlConverter converter(file_name, text);
  try {
    return converter.Convert(root);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ":", e.mark.line + 1, ":",
                                                   e.mark.column + 1, ": invalid YAML: ", e.msg));
  }
}

absl::StatusOr<NodePtr> LoadYamlFile(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  return ParseYaml(*text, path);
}

std::string ScalarToYaml(const Node& node) {
  switch (node.kind()) {
    case NodeKind::kNull: return "null";
    case NodeKind::kBool: return node.as_bool() ? "true" : "false";
    case NodeKind::kInt: return node.int_text();
    case NodeKind::kFloat: {
      double v = node.as_float();
      if (std::isnan(v)) return ".nan";
      if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
      std::string repr = PythonFloatRepr(v);
      // PyYAML: "1e-05" would read back as a string in YAML 1.1, so it writes "1.0e-05".
      if (repr.find('.') == std::string::npos && repr.find('e') != std::string::npos) {
        repr.insert(repr.find('e'), ".0");
      }
      return repr;
    }
    case NodeKind::kString: {
      const std::string& s = node.as_string();
      return NeedsQuotes(s) ? QuoteString(s) : s;
    }
    case NodeKind::kMap:
    case NodeKind::kList: return FlowToYaml(node);
  }
  return "";
}

std::string ToYaml(const Node& node) {
  if (node.is_container() && node.size() == 0) return node.is_map() ? "{}\n" : "[]\n";
  std::string out;
  Emit(node, 0, &out);
  return out;
}

namespace {

void CollectQuoted(const YAML::Node& y, const std::string& path, std::set<std::string>* out) {
  if (y.IsScalar()) {
    if (y.Tag() == "!") out->insert(path);
  } else if (y.IsSequence()) {
    for (size_t i = 0; i < y.size(); ++i) CollectQuoted(y[i], absl::StrCat(path, "[", i, "]"), out);
  } else if (y.IsMap()) {
    for (const auto& kv : y) {
      std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
      if (kv.first.Tag() == "!") out->insert(absl::StrCat(path, ":", key));
      CollectQuoted(kv.second, path.empty() ? key : absl::StrCat(path, ".", key), out);
    }
  }
}

}  // namespace

absl::StatusOr<std::set<std::string>> QuotedScalarPaths(absl::string_view text) {
  std::set<std::string> out;
  try {
    CollectQuoted(YAML::Load(std::string(text)), "", &out);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid YAML: ", e.msg));
  }
  return out;
}

absl::string_view PythonStrip(absl::string_view s) { return PythonStripImpl(s); }

}  // namespace kiln::config
