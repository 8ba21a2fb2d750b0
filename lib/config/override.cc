#include "lib/config/override.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::config {
namespace {

bool IsIdStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsIdChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}
bool IsWs(char c) { return c == ' ' || c == '\t'; }
bool IsDigitChar(char c) { return c >= '0' && c <= '9'; }

// Characters a backslash escapes in unquoted values.
bool IsEscapable(char c) {
  return c == '\\' || c == ',' || c == ' ' || c == '\t' || c == '(' || c == ')' || c == '[' ||
         c == ']' || c == '{' || c == '}' || c == ':' || c == '=';
}

// Unquoted characters beyond letters, digits and '_' (Hydra 1.3's UNQUOTED_CHAR and COLON).
bool IsUnquotedChar(char c) {
  static const std::string kChars = "/-\\+.$%*@?|:";
  return kChars.find(c) != std::string::npos;
}

bool IsAscii(char c) { return static_cast<unsigned char>(c) < 0x80; }

// The length of the UTF-8 character that starts at s[i] (1 for a stray byte).
size_t Utf8Length(absl::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
  return i + n <= s.size() ? n : 1;
}

// Characters (not bytes) before s[i], so a column matches what the user sees.
size_t CharsBefore(absl::string_view s, size_t i) {
  size_t count = 0;
  for (size_t p = 0; p < i && p < s.size(); p += Utf8Length(s, p)) ++count;
  return count;
}

// INT_UNSIGNED: '0' | [1-9] ('_'? DIGIT)*
size_t MatchIntUnsigned(absl::string_view s, size_t p) {
  if (p >= s.size() || !IsDigitChar(s[p])) return absl::string_view::npos;
  if (s[p] == '0') return p + 1;
  ++p;
  while (p < s.size()) {
    if (IsDigitChar(s[p])) {
      ++p;
    } else if (s[p] == '_' && p + 1 < s.size() && IsDigitChar(s[p + 1])) {
      p += 2;
    } else {
      break;
    }
  }
  return p;
}

// DIGIT ('_'? DIGIT)*
size_t MatchDigits(absl::string_view s, size_t p) {
  if (p >= s.size() || !IsDigitChar(s[p])) return absl::string_view::npos;
  ++p;
  while (p < s.size()) {
    if (IsDigitChar(s[p])) {
      ++p;
    } else if (s[p] == '_' && p + 1 < s.size() && IsDigitChar(s[p + 1])) {
      p += 2;
    } else {
      break;
    }
  }
  return p;
}

std::string StripUnderscores(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c != '_') out += c;
  }
  return out;
}

// The typed value of a whole unquoted token, following the override lexer: INT, FLOAT, BOOL,
// NULL; nullptr when the text is not exactly one such token.
NodePtr TypedToken(absl::string_view s) {
  if (absl::EqualsIgnoreCase(s, "null")) return Node::Null();
  if (absl::EqualsIgnoreCase(s, "true")) return Node::Bool(true);
  if (absl::EqualsIgnoreCase(s, "false")) return Node::Bool(false);
  size_t p = 0;
  bool negative = false;
  if (p < s.size() && (s[p] == '+' || s[p] == '-')) negative = s[p++] == '-';
  absl::string_view body = s.substr(p);
  if (absl::EqualsIgnoreCase(body, "inf")) {
    return Node::Float(negative ? -std::numeric_limits<double>::infinity()
                                : std::numeric_limits<double>::infinity());
  }
  if (absl::EqualsIgnoreCase(body, "nan"))
    return Node::Float(std::numeric_limits<double>::quiet_NaN());
  size_t int_end = MatchIntUnsigned(body, 0);
  if (int_end == body.size()) {
    // Of any size: Hydra's INT is Python's int, so 2**64 stays an integer.
    return Node::Integer(absl::StrCat(negative ? "-" : "", StripUnderscores(body)));
  }
  // POINT_FLOAT: INT_UNSIGNED '.' | INT_UNSIGNED? '.' DIGIT ('_'? DIGIT)*
  size_t q = int_end == absl::string_view::npos ? 0 : int_end;
  bool is_float = false;
  if (q < body.size() && body[q] == '.') {
    size_t frac_end = MatchDigits(body, q + 1);
    if (frac_end != absl::string_view::npos) {
      q = frac_end;
      is_float = true;
    } else if (int_end != absl::string_view::npos) {
      q = q + 1;
      is_float = true;
    }
  } else if (int_end == absl::string_view::npos) {
    return nullptr;
  }
  // EXPONENT_FLOAT: ... [eE] [+-]? DIGIT ('_'? DIGIT)*  (leading zeros allowed: 1e-07)
  if (q < body.size() && (body[q] == 'e' || body[q] == 'E')) {
    size_t r = q + 1;
    if (r < body.size() && (body[r] == '+' || body[r] == '-')) ++r;
    size_t exp_end = MatchDigits(body, r);
    if (exp_end == absl::string_view::npos) return nullptr;
    q = exp_end;
    is_float = true;
  }
  if (!is_float || q != body.size()) return nullptr;
  double v = std::strtod(StripUnderscores(body).c_str(), nullptr);
  return Node::Float(negative ? -v : v);
}

struct Element {
  bool is_sweep = false;
  OverrideValue value;
  Sweep sweep;
};

class OverrideParser {
 public:
  OverrideParser(absl::string_view text, absl::string_view whole, size_t offset)
      : s_(text), whole_(whole), offset_(offset) {}

  // After an item of a list, a dictionary or a function's arguments: ',' (consumed; another item
  // follows: false) or `close` (consumed: true). Anything else fails with `missing` at the end of
  // the input, else with `expected`.
  absl::StatusOr<bool> ItemSeparator(char close, const std::string& missing,
                                     const std::string& expected) {
    SkipWs();
    if (Peek() == ',') {
      ++pos_;
      return false;
    }
    if (Peek() == close) {
      ++pos_;
      return true;
    }
    return Fail(AtEnd() ? missing : expected);
  }

  absl::Status Fail(const std::string& what) const {
    size_t column = CharsBefore(whole_, offset_ + pos_) + 1;
    size_t near_end = pos_;
    for (int chars = 0; chars < 12 && near_end < s_.size(); ++chars) {
      near_end += Utf8Length(s_, near_end);
    }
    std::string near = pos_ < s_.size()
                           ? absl::StrCat(" near '", s_.substr(pos_, near_end - pos_), "'")
                           : std::string(" at the end");
    return absl::InvalidArgumentError(
        absl::StrCat("invalid override '", whole_, "': ", what, " (column ", column, near, ")"));
  }

  // Hydra's override lexer takes only ASCII outside quotes and ${...} (LexerNoViableAltException).
  absl::Status FailNonAscii() const {
    return Fail(
        absl::StrCat("unquoted non-ASCII character '", s_.substr(pos_, Utf8Length(s_, pos_)),
                     "'; Hydra's override grammar takes only ASCII outside quotes, so quote the "
                     "string ('...' or \"...\")"));
  }

  bool AtEnd() const { return pos_ >= s_.size(); }
  char Peek() const { return AtEnd() ? '\0' : s_[pos_]; }
  void SkipWs() {
    while (!AtEnd() && IsWs(s_[pos_])) ++pos_;
  }

  // value: element | element (',' element)+
  absl::StatusOr<Element> ParseTopValue() {
    SkipWs();
    if (AtEnd()) {
      Element e;
      e.value.node = Node::String("");
      return e;
    }
    auto first = ParseElement(",");
    if (!first.ok()) return first.status();
    SkipWs();
    if (AtEnd()) return first;
    if (Peek() != ',') return Fail("unexpected character");
    Element sweep;
    sweep.is_sweep = true;
    sweep.sweep.kind = SweepKind::kChoice;
    if (first->is_sweep) return Fail("a sweep function cannot be part of a comma-separated sweep");
    sweep.sweep.choices.push_back(first->value);
    while (Peek() == ',') {
      ++pos_;
      SkipWs();
      auto next = ParseElement(",");
      if (!next.ok()) return next.status();
      if (next->is_sweep) return Fail("a sweep function cannot be part of a comma-separated sweep");
      sweep.sweep.choices.push_back(next->value);
      SkipWs();
    }
    if (!AtEnd()) return Fail("unexpected character");
    return sweep;
  }

  // element: primitive | list | dict | function. `terminators` end a primitive here.
  absl::StatusOr<Element> ParseElement(absl::string_view terminators) {
    // Lists, dicts and function calls recurse; a bound keeps hostile input from exhausting the
    // stack.
    if (depth_ >= kMaxDepth)
      return Fail(absl::StrCat("values nested deeper than ", kMaxDepth, " levels"));
    ++depth_;
    auto result = ParseElementAtDepth(terminators);
    --depth_;
    return result;
  }

  absl::StatusOr<Element> ParseElementAtDepth(absl::string_view terminators) {
    SkipWs();
    if (AtEnd()) return Fail("missing value");
    char c = Peek();
    if (c == '[') return ParseList();
    if (c == '{') return ParseDict();
    if (IsIdStart(c)) {
      size_t save = pos_;
      size_t p = pos_;
      while (p < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[p])) || s_[p] == '_'))
        ++p;
      size_t name_end = p;
      while (p < s_.size() && IsWs(s_[p])) ++p;
      if (p < s_.size() && s_[p] == '(') {
        std::string name(s_.substr(save, name_end - save));
        pos_ = p + 1;
        return ParseFunction(name, save);
      }
    }
    return ParsePrimitive(terminators);
  }

  absl::StatusOr<Element> ParseList() {
    ++pos_;  // '['
    SkipWs();
    Element e;
    e.value.node = Node::List();
    if (Peek() == ']') {
      ++pos_;
      return e;
    }
    while (true) {
      auto item = ParseElement(",]");
      if (!item.ok()) return item.status();
      if (item->is_sweep) return Fail("a sweep cannot be a list item");
      e.value.node->Append(item->value.node);
      auto closed =
          ItemSeparator(']', "missing ']' to close the list", "expected ',' or ']' in list");
      if (!closed.ok()) return closed.status();
      if (*closed) return e;
    }
  }

  absl::StatusOr<Element> ParseDict() {
    ++pos_;  // '{'
    SkipWs();
    Element e;
    e.value.node = Node::Map();
    if (Peek() == '}') {
      ++pos_;
      return e;
    }
    while (true) {
      SkipWs();
      size_t key_start = pos_;
      std::string key;
      bool plain = true;       // no escapes: may be a bool, int or float key
      size_t escaped_end = 0;  // the key's length after its last escaped character
      while (!AtEnd() && Peek() != ':' && Peek() != ',' && Peek() != '}') {
        char c = Peek();
        if (c == '\\' && pos_ + 1 < s_.size() && IsEscapable(s_[pos_ + 1])) {
          key += s_[pos_ + 1];
          pos_ += 2;
          plain = false;
          escaped_end = key.size();
          continue;
        }
        if (!IsAscii(c)) return FailNonAscii();
        if (!(IsIdChar(c) || IsWs(c) || (IsUnquotedChar(c) && c != ':'))) {
          return Fail("unexpected character in dictionary key");
        }
        key += c;
        ++pos_;
      }
      // Trailing whitespace is dropped, escaped whitespace kept: Hydra's {x\ :1} has the key "x ".
      while (key.size() > escaped_end && IsWs(key.back())) key.pop_back();
      if (key.empty()) {
        pos_ = key_start;
        return Fail("missing dictionary key");
      }
      if (Peek() != ':') return Fail("expected ':' after dictionary key");
      // Hydra types a key as it types a value: {1:a} has the int key 1, {true:a} the bool key.
      if (NodePtr typed = plain ? TypedToken(key) : nullptr) {
        if (typed->is_null()) {
          pos_ = key_start;
          return Fail("a dictionary key cannot be null");
        }
        key = TypedKey(*typed);
      }
      ++pos_;
      auto value = ParseElement(",}");
      if (!value.ok()) return value.status();
      if (value->is_sweep) return Fail("a sweep cannot be a dictionary value");
      e.value.node->Set(key, value->value.node);
      auto closed =
          ItemSeparator('}', "missing '}' to close the dictionary", "expected ',' or '}'");
      if (!closed.ok()) return closed.status();
      if (*closed) return e;
    }
  }

  absl::StatusOr<Element> ParseQuoted() {
    char quote = Peek();
    size_t start = pos_;
    ++pos_;
    std::string out;
    while (true) {
      if (AtEnd()) {
        pos_ = start;
        return Fail(absl::StrCat("unterminated quoted string (missing closing ",
                                 std::string(1, quote), ")"));
      }
      char c = Peek();
      if (c == '\\') {
        size_t run = 0;
        while (pos_ + run < s_.size() && s_[pos_ + run] == '\\') ++run;
        if (pos_ + run < s_.size() && s_[pos_ + run] == quote) {
          out.append(run / 2, '\\');
          pos_ += run;
          if (run % 2 == 1) {
            out += quote;
            ++pos_;
          }
          continue;
        }
        out.append(run, '\\');
        pos_ += run;
        continue;
      }
      if (c == quote) {
        ++pos_;
        break;
      }
      out += c;
      ++pos_;
    }
    Element e;
    e.value.node = Node::String(out);
    e.value.quote = quote;
    e.value.quoted_text = std::string(s_.substr(start, pos_ - start));
    return e;
  }

  absl::StatusOr<Element> ParsePrimitive(absl::string_view terminators) {
    SkipWs();
    if (Peek() == '\'' || Peek() == '"') {
      auto quoted = ParseQuoted();
      if (!quoted.ok()) return quoted;
      SkipWs();
      if (!AtEnd() && terminators.find(Peek()) == absl::string_view::npos) {
        return Fail("a quoted string must stand alone (quote the whole value)");
      }
      return quoted;
    }
    std::string text;   // the value with escapes applied
    std::string raw;    // as written, to type single tokens
    bool plain = true;  // no escapes, no interpolation: may be typed
    size_t start = pos_;
    while (!AtEnd()) {
      char c = Peek();
      if (terminators.find(c) != absl::string_view::npos) break;
      if (c == '\\' && pos_ + 1 < s_.size() && IsEscapable(s_[pos_ + 1])) {
        text += s_[pos_ + 1];
        absl::StrAppend(&raw, s_.substr(pos_, 2));
        pos_ += 2;
        plain = false;
        continue;
      }
      if (c == '$' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '{') {
        size_t depth = 0;
        size_t p = pos_;
        for (; p < s_.size(); ++p) {
          if (s_[p] == '{') ++depth;
          if (s_[p] == '}' && --depth == 0) break;
        }
        if (p >= s_.size()) return Fail("unterminated interpolation (missing '}')");
        absl::StrAppend(&text, s_.substr(pos_, p + 1 - pos_));
        absl::StrAppend(&raw, s_.substr(pos_, p + 1 - pos_));
        pos_ = p + 1;
        plain = false;
        continue;
      }
      if (c == ')' || c == ']' || c == '}')
        return Fail(absl::StrCat("unexpected '", std::string(1, c), "'"));
      if (c == '(' || c == '[' || c == '{')
        return Fail(absl::StrCat("unexpected '", std::string(1, c), "'"));
      if (c == '=') return Fail("unexpected '=' (quote the value or escape it as \\=)");
      if (c == '\'' || c == '"') return Fail("unexpected quote inside an unquoted value");
      if (!IsAscii(c)) return FailNonAscii();
      if (!(IsIdChar(c) || IsWs(c) || IsUnquotedChar(c))) {
        return Fail(absl::StrCat("unexpected character '", std::string(1, c), "'"));
      }
      text += c;
      raw += c;
      ++pos_;
    }
    // Leading whitespace was skipped; escaped trailing whitespace belongs to the value, only
    // literal trailing whitespace is trimmed.
    size_t raw_trail = raw.size();
    while (raw_trail > 0 && IsWs(raw[raw_trail - 1]) &&
           !(raw_trail >= 2 && raw[raw_trail - 2] == '\\')) {
      --raw_trail;
    }
    if (raw_trail == 0) {
      pos_ = start;
      return Fail("missing value");
    }
    text.resize(text.size() - (raw.size() - raw_trail));
    Element e;
    if (plain) {
      absl::string_view token(raw.data(), raw_trail);
      NodePtr typed = TypedToken(token);
      e.value.node = typed ? typed : Node::String(text);
    } else {
      e.value.node = Node::String(text);
    }
    return e;
  }

  struct Arg {
    std::string name;  // empty for positional
    Element value;
  };

  absl::StatusOr<Element> ParseFunction(const std::string& name, size_t name_pos) {
    std::vector<Arg> args;
    SkipWs();
    if (Peek() == ')') {
      ++pos_;
    } else {
      while (true) {
        SkipWs();
        Arg arg;
        // argName: ID '='
        size_t p = pos_;
        if (IsIdStart(Peek())) {
          while (p < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[p])) || s_[p] == '_'))
            ++p;
          size_t id_end = p;
          while (p < s_.size() && IsWs(s_[p])) ++p;
          if (p < s_.size() && s_[p] == '=') {
            arg.name = std::string(s_.substr(pos_, id_end - pos_));
            pos_ = p + 1;
          }
        }
        auto value = ParseElement(",)");
        if (!value.ok()) return value.status();
        arg.value = *std::move(value);
        args.push_back(std::move(arg));
        auto closed = ItemSeparator(')', absl::StrCat("missing ')' to close ", name, "("),
                                    "expected ',' or ')' in function arguments");
        if (!closed.ok()) return closed.status();
        if (*closed) break;
      }
    }
    size_t end = pos_;
    pos_ = name_pos;
    auto result = ApplyFunction(name, std::move(args));
    if (result.ok()) pos_ = end;
    return result;
  }

  // A Hydra override function (choice, range, interval, glob, sort, shuffle, tag and the casts
  // int, float, str, bool) applied to its parsed arguments; each family has its own method.
  absl::StatusOr<Element> ApplyFunction(const std::string& name, std::vector<Arg> args) {
    if (name == "choice") return Choice(args);
    if (name == "range") return Range(args);
    if (name == "interval") return Interval(args);
    if (name == "glob") return Glob(args);
    if (name == "sort" || name == "shuffle") return SortOrShuffle(name, args);
    if (name == "tag") return Tag(args);
    if (name == "int" || name == "float" || name == "str" || name == "bool")
      return CastCall(name, args);
    return Fail(absl::StrCat("unknown function '", name,
                             "' (known: choice, range, interval, glob, sort, shuffle, tag, int, "
                             "float, str, bool)"));
  }

  // The argument named `arg_name`, else the positional one at `position`; nullptr if neither.
  static Arg* Named(std::vector<Arg>& args, const std::string& arg_name, size_t position) {
    for (auto& a : args) {
      if (a.name == arg_name) return &a;
    }
    size_t index = 0;
    for (auto& a : args) {
      if (!a.name.empty()) continue;
      if (index++ == position) return &a;
    }
    return nullptr;
  }

  static Element Sweep(SweepKind kind) {
    Element e;
    e.is_sweep = true;
    e.sweep.kind = kind;
    return e;
  }

  static bool IsZeroStep(const Node& step) { return NumberValue(step) == 0; }

  absl::StatusOr<Element> Choice(std::vector<Arg>& args) {
    Element e = Sweep(SweepKind::kChoice);
    for (auto& a : args) {
      if (!a.name.empty()) return Fail(absl::StrCat("choice() takes no argument '", a.name, "'"));
      if (a.value.is_sweep) return Fail("choice() arguments cannot be sweeps");
      e.sweep.choices.push_back(a.value.value);
    }
    if (e.sweep.choices.empty()) return Fail("choice() needs at least one value");
    return e;
  }

  absl::StatusOr<Element> Range(std::vector<Arg>& args) {
    Element e = Sweep(SweepKind::kRange);
    Arg* start = Named(args, "start", 0);
    Arg* stop = Named(args, "stop", 1);
    Arg* step = Named(args, "step", 2);
    if (start != nullptr && stop == nullptr && step == nullptr && start->name.empty()) {
      stop = start;
      start = nullptr;
    }
    auto number = [&](Arg* a, NodePtr fallback, NodePtr* out) -> absl::Status {
      if (a == nullptr) {
        *out = fallback;
        return absl::OkStatus();
      }
      NodeKind k = a->value.is_sweep ? NodeKind::kNull : a->value.value.node->kind();
      if (k != NodeKind::kInt && k != NodeKind::kFloat)
        return Fail("range() arguments must be numbers");
      if (a->value.value.node->is_big_int()) return Fail("range() arguments must be within int64");
      *out = a->value.value.node;
      return absl::OkStatus();
    };
    if (stop == nullptr) return Fail("range() needs a stop value");
    if (auto st = number(start, Node::Int(0), &e.sweep.range_start); !st.ok()) return st;
    if (auto st = number(stop, nullptr, &e.sweep.range_stop); !st.ok()) return st;
    if (auto st = number(step, Node::Int(1), &e.sweep.range_step); !st.ok()) return st;
    if (IsZeroStep(*e.sweep.range_step)) return Fail("range() step must not be zero");
    return e;
  }

  absl::StatusOr<Element> Interval(std::vector<Arg>& args) {
    Element e = Sweep(SweepKind::kInterval);
    Arg* low = Named(args, "start", 0);
    Arg* high = Named(args, "end", 1);
    if (low == nullptr || high == nullptr || low->value.is_sweep || high->value.is_sweep) {
      return Fail("interval() needs a start and an end");
    }
    // Hydra's interval() is over floats; int(interval(a,b)) makes it an interval of integers.
    for (auto [arg, bound] :
         {std::pair{low, &e.sweep.interval_low}, std::pair{high, &e.sweep.interval_high}}) {
      const Node& n = *arg->value.value.node;
      if (n.kind() != NodeKind::kInt && n.kind() != NodeKind::kFloat)
        return Fail("interval() bounds must be numbers");
      *bound = Node::Float(NumberValue(n));
    }
    return e;
  }

  absl::StatusOr<Element> Glob(std::vector<Arg>& args) {
    Element e = Sweep(SweepKind::kGlob);
    auto strings = [&](Arg* a, std::vector<std::string>* out) -> absl::Status {
      if (a == nullptr) return absl::OkStatus();
      if (a->value.is_sweep) return Fail("glob() takes strings or lists of strings");
      const Node& n = *a->value.value.node;
      if (n.kind() == NodeKind::kString) {
        out->push_back(n.as_string());
      } else if (n.is_list()) {
        for (const auto& item : n.items()) {
          if (item->kind() != NodeKind::kString) return Fail("glob() patterns must be strings");
          out->push_back(item->as_string());
        }
      } else {
        return Fail("glob() patterns must be strings");
      }
      return absl::OkStatus();
    };
    Arg* include = Named(args, "include", 0);
    if (include == nullptr) return Fail("glob() needs a pattern");
    if (auto st = strings(include, &e.sweep.glob_include); !st.ok()) return st;
    if (auto st = strings(Named(args, "exclude", 1), &e.sweep.glob_exclude); !st.ok()) return st;
    return e;
  }

  absl::StatusOr<Element> SortOrShuffle(const std::string& name, std::vector<Arg>& args) {
    Element e;
    bool reverse = false;
    std::vector<Arg> rest;
    for (auto& a : args) {
      if (a.name == "reverse" && name == "sort") {
        if (a.value.is_sweep || a.value.value.node->kind() != NodeKind::kBool) {
          return Fail("sort(reverse=...) must be true or false");
        }
        reverse = a.value.value.node->as_bool();
      } else if (!a.name.empty() && a.name != "sweep" && a.name != "list") {
        return Fail(absl::StrCat(name, "() takes no argument '", a.name, "'"));
      } else {
        rest.push_back(std::move(a));
      }
    }
    if (rest.size() == 1 && rest[0].value.is_sweep) {
      e = std::move(rest[0].value);
    } else if (rest.size() == 1 && rest[0].value.value.node->is_list()) {
      // sort([3,1,2]) is a value: the sorted list.
      e = std::move(rest[0].value);
      auto& items = e.value.node->mutable_items();
      if (name == "shuffle") {
        std::shuffle(items.begin(), items.end(), std::mt19937(std::random_device{}()));
      } else {
        auto st = SortNodes(&items, reverse);
        if (!st.ok()) return st;
      }
      return e;
    } else {
      e.is_sweep = true;
      e.sweep.kind = SweepKind::kChoice;
      for (auto& a : rest) {
        if (a.value.is_sweep) return Fail(absl::StrCat(name, "() takes values or one sweep"));
        e.sweep.choices.push_back(a.value.value);
      }
    }
    if (name == "sort") {
      e.sweep.sort = true;
      e.sweep.sort_reverse = reverse;
    } else {
      e.sweep.shuffle = true;
    }
    return e;
  }

  absl::StatusOr<Element> Tag(std::vector<Arg>& args) {
    if (args.empty() || !args.back().value.is_sweep)
      return Fail("tag() needs a sweep as its last argument");
    Element tagged = std::move(args.back().value);
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      // A sweep argument has no node: check that before reading one.
      const NodePtr& tag = args[i].value.value.node;
      if (args[i].value.is_sweep || !tag || tag->kind() != NodeKind::kString)
        return Fail("tag() takes strings, then a sweep");
      tagged.sweep.tags.push_back(tag->as_string());
    }
    return tagged;
  }

  // int(x), int(value=x), or int(a,b,...), which casts the choice a,b,... (Hydra); a range or an
  // interval casts its bounds.
  absl::StatusOr<Element> CastCall(const std::string& name, std::vector<Arg>& args) {
    // Hydra: int(x), int(value=x), or int(a,b,...) which casts the choice a,b,...
    Element value;
    if (args.size() == 1 && (args[0].name.empty() || args[0].name == "value")) {
      value = std::move(args[0].value);
    } else if (args.size() > 1 && std::all_of(args.begin(), args.end(), [](const Arg& a) {
                 return a.name.empty() && !a.value.is_sweep;
               })) {
      value.is_sweep = true;
      value.sweep.kind = SweepKind::kChoice;
      for (auto& a : args) value.sweep.choices.push_back(a.value.value);
    } else {
      return Fail(absl::StrCat(name, "() takes one value, or several to cast as a choice"));
    }
    auto cast = [&](OverrideValue* v) -> absl::Status {
      auto converted = Cast(name, *v->node);
      if (!converted.ok()) return converted.status();
      v->node = *converted;
      v->quote = '\0';
      return absl::OkStatus();
    };
    if (value.is_sweep) {
      if (value.sweep.kind == SweepKind::kRange) {
        // Hydra casts a range's start, stop and step, and only to int or float.
        if (name != "int" && name != "float")
          return Fail("a range can only be cast to int or float");
        for (NodePtr* bound :
             {&value.sweep.range_start, &value.sweep.range_stop, &value.sweep.range_step}) {
          auto converted = Cast(name, **bound);
          if (!converted.ok()) return converted.status();
          *bound = *converted;
        }
        if (IsZeroStep(*value.sweep.range_step)) return Fail("range() step must not be zero");
        return value;
      }
      if (value.sweep.kind == SweepKind::kInterval && (name == "int" || name == "float")) {
        for (NodePtr* bound : {&value.sweep.interval_low, &value.sweep.interval_high}) {
          auto converted = Cast(name, **bound);
          if (!converted.ok()) return converted.status();
          *bound = *converted;
        }
        return value;
      }
      if (value.sweep.kind != SweepKind::kChoice) {
        return Fail(absl::StrCat(name, "() can only cast choices and ranges"));
      }
      for (auto& c : value.sweep.choices) {
        if (auto st = cast(&c); !st.ok()) return st;
      }
    } else if (auto st = cast(&value.value); !st.ok()) {
      return st;
    }
    return value;
  }

  absl::StatusOr<NodePtr> Cast(const std::string& type, const Node& n) {
    if (n.is_list()) {
      NodePtr out = Node::List();
      for (const auto& item : n.items()) {
        auto c = Cast(type, *item);
        if (!c.ok()) return c;
        out->Append(*c);
      }
      return out;
    }
    if (n.is_map()) {
      NodePtr out = Node::Map();
      for (const auto& [k, v] : n.entries()) {
        auto c = Cast(type, *v);
        if (!c.ok()) return c;
        out->Set(k, *c);
      }
      return out;
    }
    // Hydra's casts assert a value is a number, bool or string: null cannot be cast.
    if (n.is_null()) return Fail(absl::StrCat("cannot convert null with ", type, "()"));
    if (type == "str") {
      if (n.kind() == NodeKind::kBool) return Node::String(n.as_bool() ? "true" : "false");
      return Node::String(PythonStr(n));
    }
    if (type == "int") {
      if (n.kind() == NodeKind::kInt) return n.Clone();
      if (n.kind() == NodeKind::kFloat && std::isfinite(n.as_float())) {
        // Python's int(): toward zero, of any size (%.0f writes an integral double exactly).
        char digits[400];
        std::snprintf(digits, sizeof(digits), "%.0f", std::trunc(n.as_float()));
        return Node::Integer(digits);
      }
      if (n.kind() == NodeKind::kBool) return Node::Int(n.as_bool() ? 1 : 0);
      if (n.kind() == NodeKind::kString) {
        NodePtr t = TypedToken(n.as_string());
        if (t && t->kind() == NodeKind::kInt) return t;
      }
    } else if (type == "float") {
      if (n.kind() == NodeKind::kInt) return Node::Float(NumberValue(n));
      if (n.kind() == NodeKind::kFloat) return Node::Float(n.as_float());
      if (n.kind() == NodeKind::kBool) return Node::Float(n.as_bool() ? 1.0 : 0.0);
      if (n.kind() == NodeKind::kString) {
        NodePtr t = TypedToken(n.as_string());
        if (t && t->kind() == NodeKind::kFloat) return t;
        if (t && t->kind() == NodeKind::kInt) return Node::Float(NumberValue(*t));
      }
    } else if (type == "bool") {
      if (n.kind() == NodeKind::kBool) return Node::Bool(n.as_bool());
      if (n.kind() == NodeKind::kInt) return Node::Bool(n.is_big_int() || n.as_int() != 0);
      if (n.kind() == NodeKind::kFloat) return Node::Bool(n.as_float() != 0);
      if (n.kind() == NodeKind::kString) {
        NodePtr t = TypedToken(n.as_string());
        if (t && t->kind() == NodeKind::kBool) return t;
      }
    }
    return Fail(absl::StrCat("cannot convert ", ScalarText(n), " with ", type, "()"));
  }

  static std::string ScalarText(const Node& n) { return NodeToOverrideString(n); }

  absl::Status SortNodes(std::vector<NodePtr>* items, bool reverse) {
    bool numbers = std::all_of(items->begin(), items->end(), [](const NodePtr& n) {
      return n->kind() == NodeKind::kInt || n->kind() == NodeKind::kFloat;
    });
    bool strings = std::all_of(items->begin(), items->end(),
                               [](const NodePtr& n) { return n->kind() == NodeKind::kString; });
    if (!numbers && !strings) return Fail("sort() needs all numbers or all strings");
    auto value = [](const NodePtr& n) { return NumberValue(*n); };
    std::stable_sort(items->begin(), items->end(), [&](const NodePtr& a, const NodePtr& b) {
      bool less = numbers ? value(a) < value(b) : a->as_string() < b->as_string();
      bool greater = numbers ? value(b) < value(a) : b->as_string() < a->as_string();
      return reverse ? greater : less;
    });
    return absl::OkStatus();
  }

  size_t pos() const { return pos_; }

 private:
  static constexpr int kMaxDepth = 100;
  absl::string_view s_;
  absl::string_view whole_;
  size_t offset_;
  size_t pos_ = 0;
  int depth_ = 0;
};

absl::Status ValidateKey(absl::string_view key, absl::string_view whole) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("invalid override '", whole, "': ", what));
  };
  if (key.empty()) return fail("missing key before '='");
  absl::string_view group = key;
  absl::string_view package;
  size_t at = key.find('@');
  if (at != absl::string_view::npos) {
    group = key.substr(0, at);
    package = key.substr(at + 1);
    if (package.find('@') != absl::string_view::npos) return fail("more than one '@' in the key");
  }
  // Hydra's KEY_SPECIAL allows '$' in dotted keys and packages (`$x.y=1`); group paths with
  // '/' are plain IDs.
  auto valid_segment = [](absl::string_view seg, bool dollar_allowed) {
    if (seg.empty()) return false;
    for (char c : seg) {
      if (!IsIdChar(c) && !(c == '$' && dollar_allowed)) return false;
    }
    return true;
  };
  if (group.empty()) return fail("missing key before '@'");
  bool slashes = group.find('/') != absl::string_view::npos;
  char separator = slashes ? '/' : '.';
  if (slashes && group.find('.') != absl::string_view::npos) {
    return fail(absl::StrCat("key '", key, "' mixes '/' and '.'"));
  }
  size_t start = 0;
  while (start <= group.size()) {
    size_t end = group.find(separator, start);
    absl::string_view seg = group.substr(start, end == absl::string_view::npos ? end : end - start);
    if (!valid_segment(seg, !slashes)) return fail(absl::StrCat("invalid key '", key, "'"));
    if (end == absl::string_view::npos) break;
    start = end + 1;
  }
  if (!package.empty()) {
    start = 0;
    while (start <= package.size()) {
      size_t end = package.find('.', start);
      absl::string_view seg =
          package.substr(start, end == absl::string_view::npos ? end : end - start);
      if (!valid_segment(seg, true))
        return fail(absl::StrCat("invalid package in key '", key, "'"));
      if (end == absl::string_view::npos) break;
      start = end + 1;
    }
  }
  return absl::OkStatus();
}

std::string EscapeSpecialCharacters(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (IsEscapable(c)) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string Override::KeyElement() const {
  std::string prefix;
  switch (type) {
    case OverrideType::kAdd: prefix = "+"; break;
    case OverrideType::kForceAdd: prefix = "++"; break;
    case OverrideType::kDelete: prefix = "~"; break;
    case OverrideType::kChange: break;
  }
  return prefix + GroupKey();
}

std::string Override::GroupKey() const {
  return package.has_value() ? key_or_group + "@" + *package : key_or_group;
}

absl::StatusOr<Override> ParseOverride(absl::string_view text) {
  Override o;
  o.input_line = std::string(text);
  size_t p = 0;
  if (text.substr(0, 2) == "++") {
    o.type = OverrideType::kForceAdd;
    p = 2;
  } else if (!text.empty() && text[0] == '+') {
    o.type = OverrideType::kAdd;
    p = 1;
  } else if (!text.empty() && text[0] == '~') {
    o.type = OverrideType::kDelete;
    p = 1;
  }
  size_t eq = text.find('=', p);
  absl::string_view key = text.substr(p, eq == absl::string_view::npos ? eq : eq - p);
  if (auto st = ValidateKey(key, text); !st.ok()) return st;
  size_t at = key.find('@');
  o.key_or_group = std::string(key.substr(0, at));
  if (at != absl::string_view::npos) o.package = std::string(key.substr(at + 1));
  if (eq == absl::string_view::npos) {
    if (o.type != OverrideType::kDelete) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid override '", text, "': expected key=value (or +key=value, ++key=value, ~key)"));
    }
    return o;
  }
  absl::string_view value_text = text.substr(eq + 1);
  if (o.type == OverrideType::kDelete &&
      value_text.find_first_not_of(" \t") == absl::string_view::npos) {
    return o;
  }
  OverrideParser parser(value_text, text, eq + 1);
  auto element = parser.ParseTopValue();
  if (!element.ok()) return element.status();
  o.has_value = true;
  if (element->is_sweep) {
    o.sweep = std::move(element->sweep);
  } else {
    o.value = std::move(element->value);
  }
  // Hydra checks a deleted key's value only when the value is not None: `~a=null` is `~a`.
  if (o.is_delete() && !o.is_sweep() && o.value.node->is_null() && o.value.quote == '\0') {
    o.has_value = false;
    o.value = OverrideValue();
  }
  return o;
}

absl::StatusOr<OverrideValue> ParseOverrideValue(absl::string_view text) {
  OverrideParser parser(text, text, 0);
  auto element = parser.ParseElement("");
  if (!element.ok()) return element.status();
  parser.SkipWs();
  if (!parser.AtEnd()) return parser.Fail("unexpected text after the value");
  if (element->is_sweep) return parser.Fail("a sweep is not a value");
  return element->value;
}

std::string NodeToOverrideString(const Node& node) {
  switch (node.kind()) {
    case NodeKind::kNull: return "null";
    // As Hydra writes a value back (str() of the Python value): True, 1e-07, 1e+22.
    case NodeKind::kBool: return node.as_bool() ? "True" : "False";
    case NodeKind::kInt: return node.int_text();
    case NodeKind::kFloat: return PythonFloatRepr(node.as_float());
    case NodeKind::kString: {
      const std::string& s = node.as_string();
      // A string that would read back as another type, or would not parse, is quoted.
      auto reparsed = ParseOverrideValue(EscapeSpecialCharacters(s));
      bool same = reparsed.ok() && reparsed->node->kind() == NodeKind::kString &&
                  reparsed->node->as_string() == s;
      if (same && !s.empty()) return EscapeSpecialCharacters(s);
      char quote =
          s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
      // Inside quotes only backslashes right before a quote (or the closing one) are escapes,
      // so those runs are doubled.
      std::string out(1, quote);
      size_t backslashes = 0;
      for (char c : s) {
        if (c == '\\') {
          ++backslashes;
          continue;
        }
        out.append(c == quote ? 2 * backslashes : backslashes, '\\');
        backslashes = 0;
        if (c == quote) out += '\\';
        out += c;
      }
      out.append(2 * backslashes, '\\');
      return out + quote;
    }
    case NodeKind::kList: {
      std::vector<std::string> parts;
      for (const auto& item : node.items()) parts.push_back(NodeToOverrideString(*item));
      return "[" + absl::StrJoin(parts, ",") + "]";
    }
    case NodeKind::kMap: {
      std::vector<std::string> parts;
      for (const auto& [k, v] : node.entries()) {
        parts.push_back(EscapeSpecialCharacters(KeyText(k)) + ":" + NodeToOverrideString(*v));
      }
      return "{" + absl::StrJoin(parts, ",") + "}";
    }
  }
  return "";
}

std::string OverrideValueToString(const OverrideValue& value) {
  if (value.quote != '\0' && !value.quoted_text.empty()) return value.quoted_text;
  return NodeToOverrideString(*value.node);
}

}  // namespace kiln::config
