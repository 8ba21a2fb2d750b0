#include "lib/config/interpolation.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/config/override.h"
#include "lib/config/yaml_io.h"

namespace kiln::config {

// One `${...}` as the grammar read it (ScanInterpolation), for the evaluator: where it ends,
// and whether it is a key or a resolver call with its arguments. The views point into the text
// that was scanned.
struct InterpolationScan {
  size_t close = absl::string_view::npos;  // the index of its closing '}'
  absl::string_view body;                  // between "${" and that '}'
  bool resolver = false;                   // ${name:args} rather than ${key}
  absl::string_view name;                  // the resolver's name, trimmed
  // Its arguments, trimmed, as OmegaConf's sequence gives them: an element missing before or
  // after a comma is an empty one. None for `${name:}`.
  std::vector<absl::string_view> args;
};

namespace {

constexpr size_t kMaxInterpolatedLength = 1 << 20;

absl::string_view Trim(absl::string_view s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == absl::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

absl::StatusOr<std::string> StringArg(const ResolverCall& call, size_t index) {
  if (index >= call.args.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("resolver '", call.name, "' needs argument ", index + 1));
  }
  const Node& arg = *call.args[index];
  if (arg.kind() != NodeKind::kString) {
    return absl::InvalidArgumentError(absl::StrCat("resolver '", call.name, "': argument ",
                                                   index + 1, " must be a string, got ",
                                                   KindName(arg.kind())));
  }
  return arg.as_string();
}

std::chrono::system_clock::time_point ProcessStartTime() {
  static const auto start = std::chrono::system_clock::now();
  return start;
}

void RegisterBuiltins(ResolverRegistry* registry) {
  registry->Register("oc.env", [](const ResolverCall& call) -> absl::StatusOr<NodePtr> {
    auto name = StringArg(call, 0);
    if (!name.ok()) return name.status();
    if (const char* value = std::getenv(name->c_str())) return Node::String(value);
    // As OmegaConf 2.1+: an unset variable gives the default, converted with str() unless it is
    // null (`${oc.env:N,8}` is the string '8', `${oc.env:N,null}` is null).
    if (call.args.size() >= 2) {
      const Node& fallback = *call.args[1];
      if (fallback.is_null()) return Node::Null();
      return Node::String(PythonStr(fallback));
    }
    return absl::NotFoundError(absl::StrCat("environment variable '", *name, "' is not set"));
  });
  registry->Register("oc.select", [](const ResolverCall& call) -> absl::StatusOr<NodePtr> {
    auto key = StringArg(call, 0);
    if (!key.ok()) return key.status();
    auto found = call.interpolator->Select(*key, *call.path, /*resolve=*/true);
    if (!found.ok()) return found.status();
    if (*found == nullptr || (*found)->is_missing()) {
      if (call.args.size() >= 2) return call.args[1]->Clone();
      return Node::Null();
    }
    return *found;
  });
  registry->Register("oc.decode", [](const ResolverCall& call) -> absl::StatusOr<NodePtr> {
    if (!call.args.empty() && call.args[0]->is_null()) return Node::Null();
    auto text = StringArg(call, 0);
    if (!text.ok()) return text.status();
    // OmegaConf's element grammar keeps whitespace around a primitive, which makes it a
    // string (' 7 ' stays ' 7 '); before a list, dict or quoted string it is an error.
    absl::string_view trimmed = Trim(*text);
    if (trimmed.size() != text->size()) {
      if (!trimmed.empty() &&
          absl::string_view("[{'\"").find(trimmed[0]) == absl::string_view::npos) {
        return Node::String(*text);
      }
      return absl::InvalidArgumentError(
          absl::StrCat("oc.decode cannot decode '", *text, "': whitespace around a value"));
    }
    // OmegaConf's element grammar: no functions or casts (int(1)), unlike the override grammar.
    if (auto st = CheckElementSyntax(*text); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("oc.decode cannot decode '", *text, "': ", st.message()));
    }
    auto value = ParseOverrideValue(*text);
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("oc.decode cannot decode '", *text, "': ", value.status().message()));
    }
    return value->node;
  });
  // ${oc.create:{a: 1}}: a container from a dict, a list, or a YAML string (OmegaConf.create).
  registry->Register("oc.create", [](const ResolverCall& call) -> absl::StatusOr<NodePtr> {
    if (call.args.empty()) return absl::InvalidArgumentError("oc.create needs an argument");
    const NodePtr& arg = call.args[0];
    if (arg->is_container()) return arg->Clone();
    if (arg->kind() == NodeKind::kString) {
      auto parsed = ParseYaml(arg->as_string(), "<oc.create>");
      if (!parsed.ok()) return parsed.status();
      if ((*parsed)->is_container()) return *parsed;
    }
    return absl::InvalidArgumentError(absl::StrCat("oc.create needs a dict or a list, got ",
                                                   KindName(arg->kind()), " ", PythonStr(*arg)));
  });
  // ${oc.deprecated:new.key}: the value of another key (OmegaConf also warns; kiln does not).
  registry->Register("oc.deprecated", [](const ResolverCall& call) -> absl::StatusOr<NodePtr> {
    auto key = StringArg(call, 0);
    if (!key.ok()) return key.status();
    auto found = call.interpolator->Select(*key, {}, /*resolve=*/true);
    if (!found.ok()) return found.status();
    if (*found == nullptr) {
      return absl::NotFoundError(absl::StrCat("oc.deprecated: key '", *key, "' not found"));
    }
    return *found;
  });
  auto dict_part = [](bool keys) {
    return [keys](const ResolverCall& call) -> absl::StatusOr<NodePtr> {
      auto key = StringArg(call, 0);
      if (!key.ok()) return key.status();
      auto found = call.interpolator->Select(*key, *call.path, /*resolve=*/true);
      if (!found.ok()) return found.status();
      if (*found == nullptr || !(*found)->is_map()) {
        return absl::InvalidArgumentError(
            absl::StrCat(call.name, ": '", *key, "' is not a mapping"));
      }
      NodePtr out = Node::List();
      for (const auto& [k, v] : (*found)->entries()) {
        // OmegaConf's values are the interpolations ${key.k}, which miss a bool, int or float key.
        if (!keys && IsTypedKey(k)) {
          return absl::NotFoundError(
              absl::StrCat("interpolation key '", *key, ".", KeyText(k), "' not found"));
        }
        out->Append(keys ? KeyValue(k) : v);
      }
      return out;
    };
  };
  registry->Register("oc.dict.keys", dict_part(true));
  registry->Register("oc.dict.values", dict_part(false));
  registry->Register("now", [](const ResolverCall& call) -> absl::StatusOr<NodePtr> {
    auto format = StringArg(call, 0);
    if (!format.ok()) return format.status();
    std::time_t t = std::chrono::system_clock::to_time_t(ProcessStartTime());
    std::tm local{};
    localtime_r(&t, &local);
    char buf[256];
    size_t n = std::strftime(buf, sizeof(buf), format->c_str(), &local);
    return Node::String(std::string(buf, n));
  });
  registry->Register("hydra", [](const ResolverCall& call) -> absl::StatusOr<NodePtr> {
    auto key = StringArg(call, 0);
    if (!key.ok()) return key.status();
    Interpolator hydra(call.interpolator->hydra_root());
    auto found = hydra.Select("hydra." + *key, {}, /*resolve=*/true);
    if (!found.ok()) return found.status();
    if (*found == nullptr) {
      return absl::NotFoundError(absl::StrCat("'hydra.", *key, "' is not in the hydra config"));
    }
    return *found;
  });
}

// A recursive-descent reading of OmegaConf 2.1+'s grammar (OmegaConfGrammarLexer/Parser):
// top-level text, INTERPOLATION_MODE (keys and resolver names), VALUE_MODE (resolver arguments)
// and the quoted modes. It is the one scanner of interpolations: the syntax checks accept or
// refuse with it, and the evaluator (Interpolator) learns from it where each `${...}` ends and
// how a resolver's arguments split (ScanInterpolation).
class GrammarCheck {
 public:
  explicit GrammarCheck(absl::string_view s) : s_(s) {}

  // The interpolation at `dollar` (at "${"), recorded into `scan`.
  absl::Status Scan(size_t dollar, InterpolationScan* scan) {
    i_ = dollar;
    record_ = scan;
    return Interpolation();
  }

  // singleElement: element EOF (what oc.decode parses).
  absl::Status SingleElement() {
    if (AtEnd()) return Fail("nothing to decode");
    if (auto st = Element(); !st.ok()) return st;
    if (!AtEnd()) return Fail(absl::StrCat("unexpected '", Current(), "'"));
    return absl::OkStatus();
  }

  absl::Status Text() {
    while (i_ < s_.size()) {
      if (At("\\${")) {
        i_ += 3;
      } else if (At("\\\\")) {
        i_ += 2;
      } else if (At("${")) {
        if (auto st = Interpolation(); !st.ok()) return st;
      } else {
        ++i_;
      }
    }
    return absl::OkStatus();
  }

 private:
  bool At(absl::string_view t) const { return s_.substr(i_, t.size()) == t; }
  bool AtEnd() const { return i_ >= s_.size(); }
  char Peek() const { return AtEnd() ? '\0' : s_[i_]; }
  static bool IsWs(char c) { return c == ' ' || c == '\t'; }
  void SkipWs() {
    while (!AtEnd() && IsWs(s_[i_])) ++i_;
  }
  // WS? followed by `c`: consumes both when present.
  bool WsThen(char c) {
    size_t j = i_;
    while (j < s_.size() && IsWs(s_[j])) ++j;
    if (j < s_.size() && s_[j] == c) {
      i_ = j + 1;
      return true;
    }
    return false;
  }
  absl::Status Fail(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " at column ", std::min(i_, s_.size()) + 1));
  }
  static bool IsKeyChar(char c) {  // INTER_KEY: ~[\\{}()[\]:. \t'"]
    return absl::string_view("\\{}()[]:. \t'\"").find(c) == absl::string_view::npos;
  }
  static bool IsIdText(absl::string_view t) {  // ID: (CHAR|'_') (CHAR|DIGIT|'_')*
    if (t.empty() || !(std::isalpha(static_cast<unsigned char>(t[0])) || t[0] == '_')) return false;
    return std::all_of(t.begin(), t.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
  }

  // At "${": an interpolationNode or an interpolationResolver. The outermost one of a Scan is
  // recorded.
  absl::Status Interpolation() {
    if (++depth_ > 64) return Fail("interpolations nested too deeply");
    InterpolationScan* record = record_;
    record_ = nullptr;
    const size_t body = i_ + 2;
    auto done = [&](absl::Status st) {
      if (record != nullptr && st.ok()) {
        record->close = i_ - 1;
        record->body = s_.substr(body, record->close - body);
      }
      return st;
    };
    i_ += 2;
    SkipWs();
    const size_t name = i_;
    // The path before '}' or ':': DOTs, '[' key ']', and keys (one token each: a run of key
    // characters, or a nested interpolation).
    enum Piece { kDot, kBracketKey, kKey, kNested };
    std::vector<std::pair<Piece, absl::string_view>> pieces;
    while (true) {
      if (WsThen('}')) {
        --depth_;
        return done(CheckNode(pieces));
      }
      if (WsThen(':')) {
        if (record != nullptr) {
          record->resolver = true;
          record->name = Trim(s_.substr(name, i_ - 1 - name));
        }
        SkipWs();
        // ANTLR's parser (as OmegaConf runs it) lets `${:a}` through, though not `${:}`.
        if (pieces.empty() && WsThen('}')) return Fail("an interpolation needs a resolver name");
        if (!pieces.empty()) {
          if (auto st = CheckResolverName(pieces); !st.ok()) return st;
        }
        auto st = Sequence('}', record != nullptr ? &record->args : nullptr);
        --depth_;
        return done(st);
      }
      if (AtEnd()) return Fail("unterminated interpolation");
      if (Peek() == '.') {
        ++i_;
        pieces.push_back({kDot, {}});
      } else if (Peek() == '[') {
        ++i_;
        if (At("${")) {
          if (auto st = Interpolation(); !st.ok()) return st;
        } else {
          size_t start = i_;
          while (!AtEnd() && IsKeyChar(Peek())) ++i_;
          if (i_ == start) return Fail("expected a key inside [ ]");
        }
        if (Peek() != ']') return Fail("expected ']'");
        ++i_;
        pieces.push_back({kBracketKey, {}});
      } else if (At("${")) {
        if (auto st = Interpolation(); !st.ok()) return st;
        pieces.push_back({kNested, {}});
      } else if (IsKeyChar(Peek())) {
        size_t start = i_;
        while (!AtEnd() && IsKeyChar(Peek()) && !At("${")) ++i_;
        // INTER_KEY is greedy: "a${b}" lexes as "a$" then '{', which is an error.
        if (!AtEnd() && Peek() == '$') ++i_;
        pieces.push_back({kKey, s_.substr(start, i_ - start)});
        if (Peek() == '{') return Fail("unexpected '{'");
      } else {
        return Fail(absl::StrCat("unexpected '", Current(), "' in an interpolation"));
      }
    }
  }

  template <typename Pieces>
  absl::Status CheckNode(const Pieces& pieces) const {
    // DOT* (key | [key]) (. key | [key])*
    size_t k = 0;
    while (k < pieces.size() && pieces[k].first == 0 /*kDot*/) ++k;
    if (k == pieces.size()) return Fail("an interpolation needs a key");
    bool need_key = false;  // after a DOT that follows a key
    for (; k < pieces.size(); ++k) {
      int kind = pieces[k].first;
      if (kind == 0) {
        if (need_key) return Fail("two dots in a row in an interpolation key");
        need_key = true;
        continue;
      }
      if (kind == 1 && need_key) return Fail("a dot before '['");
      bool is_key = kind == 2 || kind == 3;
      if (is_key && !need_key && k > 0 && pieces[k - 1].first != 0) {
        return Fail("two keys without a dot between them");
      }
      need_key = false;
    }
    if (need_key) return Fail("an interpolation key ends with a dot");
    return absl::OkStatus();
  }

  template <typename Pieces>
  absl::Status CheckResolverName(const Pieces& pieces) const {
    // (interpolation | ID) (DOT (interpolation | ID))*
    for (size_t k = 0; k < pieces.size(); ++k) {
      int kind = pieces[k].first;
      bool want_name = k % 2 == 0;
      if (want_name && !(kind == 3 || (kind == 2 && IsIdText(pieces[k].second)))) {
        return Fail("invalid resolver name");
      }
      if (!want_name && kind != 0) return Fail("invalid resolver name");
    }
    if (pieces.empty() || pieces.size() % 2 == 0) return Fail("invalid resolver name");
    return absl::OkStatus();
  }

  // VALUE_MODE: sequence? then WS? `close`. Elements may be empty between commas; `elements`
  // (when given) gets each one's text, an empty view for a missing one.
  absl::Status Sequence(char close, std::vector<absl::string_view>* elements = nullptr) {
    bool after_comma = false, any = false;
    while (true) {
      if (WsThen(close)) {
        if (elements != nullptr && after_comma) elements->emplace_back();  // a trailing comma
        return absl::OkStatus();
      }
      if (AtEnd()) return Fail(absl::StrCat("missing '", std::string(1, close), "'"));
      if (WsThen(',')) {
        if (elements != nullptr && (after_comma || !any)) elements->emplace_back();
        after_comma = any = true;
        SkipWs();
        continue;
      }
      const size_t start = i_;
      if (auto st = Element(); !st.ok()) return st;
      if (elements != nullptr) elements->push_back(s_.substr(start, i_ - start));
      any = true;
      after_comma = false;
      if (WsThen(close)) return absl::OkStatus();
      if (!WsThen(',')) {
        return AtEnd() ? Fail(absl::StrCat("missing '", std::string(1, close), "'"))
                       : Fail(absl::StrCat("unexpected '", Current(), "'"));
      }
      after_comma = true;
      SkipWs();
    }
  }

  absl::Status Element() {
    char c = Peek();
    if (c == '[') {
      ++i_;
      SkipWs();
      return Sequence(']');
    }
    if (c == '{') {
      ++i_;
      SkipWs();
      return Dict();
    }
    if (c == '\'' || c == '"') return Quoted(c);
    return Primitive(/*dict_key=*/false);
  }

  absl::Status Dict() {
    if (WsThen('}')) return absl::OkStatus();
    while (true) {
      if (auto st = Primitive(/*dict_key=*/true); !st.ok()) return st;
      if (!WsThen(':')) return Fail("expected ':' after a dict key");
      SkipWs();
      if (auto st = Element(); !st.ok()) return st;
      if (WsThen('}')) return absl::OkStatus();
      if (!WsThen(','))
        return AtEnd() ? Fail("missing '}'") : Fail("expected ',' or '}' in a dict");
      SkipWs();
    }
  }

  // One or more of ID NULL INT FLOAT BOOL UNQUOTED_CHAR ESC WS (COLON and interpolations too,
  // except in dict keys), stopping before a separator.
  absl::Status Primitive(bool dict_key) {
    size_t start = i_;
    while (!AtEnd()) {
      char c = Peek();
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
          absl::string_view("/-+.%*@?|").find(c) != absl::string_view::npos) {
        ++i_;
      } else if (c == '\\') {
        i_ += (i_ + 1 < s_.size() &&
               absl::string_view("()[]{}:=, \t\\").find(s_[i_ + 1]) != absl::string_view::npos)
                  ? 2
                  : 1;
      } else if (At("${")) {
        if (dict_key) return Fail("an interpolation cannot be a dict key");
        if (auto st = Interpolation(); !st.ok()) return st;
      } else if (c == '$') {
        ++i_;
      } else if (IsWs(c)) {
        // Whitespace before a separator belongs to it.
        size_t j = i_;
        while (j < s_.size() && IsWs(s_[j])) ++j;
        if (j == s_.size() || absl::string_view(",]}:").find(s_[j]) != absl::string_view::npos)
          break;
        i_ = j;
      } else if (c == ':' && !dict_key) {
        ++i_;
      } else {
        break;
      }
    }
    if (i_ == start) {
      return AtEnd() ? Fail("unterminated interpolation")
                     : Fail(absl::StrCat("unexpected '", Current(), "'"));
    }
    return absl::OkStatus();
  }

  absl::Status Quoted(char quote) {
    ++i_;
    while (!AtEnd()) {
      if (At("\\${")) {
        i_ += 3;
      } else if (Peek() == '\\' && i_ + 1 < s_.size() &&
                 (s_[i_ + 1] == quote || s_[i_ + 1] == '\\')) {
        i_ += 2;
      } else if (At("${")) {
        if (auto st = Interpolation(); !st.ok()) return st;
      } else if (Peek() == quote) {
        ++i_;
        return absl::OkStatus();
      } else {
        ++i_;
      }
    }
    return Fail("unterminated quoted string");
  }

  // The character at the cursor, whole when it is UTF-8 (for messages).
  std::string Current() const {
    if (AtEnd()) return "";
    unsigned char c = static_cast<unsigned char>(s_[i_]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : 4;
    return std::string(s_.substr(i_, n));
  }

  absl::string_view s_;
  size_t i_ = 0;
  int depth_ = 0;
  InterpolationScan* record_ = nullptr;  // where Interpolation records the next `${...}`
};

// The interpolation starting at `dollar` ("${") in `text`, read by the grammar; its error names
// the column in `text`.
absl::StatusOr<InterpolationScan> ScanInterpolation(absl::string_view text, size_t dollar) {
  InterpolationScan scan;
  if (absl::Status st = GrammarCheck(text).Scan(dollar, &scan); !st.ok()) return st;
  return scan;
}

// Whether `text` is one interpolation and nothing else ("${a.b}", not "${a}x"); `scan` gets it.
bool IsWholeInterpolation(absl::string_view text, InterpolationScan* scan) {
  if (text.rfind("${", 0) != 0) return false;
  auto read = ScanInterpolation(text, 0);
  if (!read.ok() || read->close != text.size() - 1) return false;
  *scan = *std::move(read);
  return true;
}

}  // namespace

absl::Status CheckElementSyntax(absl::string_view text) {
  return GrammarCheck(text).SingleElement();
}

absl::Status CheckInterpolationSyntax(absl::string_view text) {
  if (text.find("${") == absl::string_view::npos) return absl::OkStatus();
  return GrammarCheck(text).Text();
}

absl::Status CheckInterpolationSyntaxIn(const Node& node, const std::string& key) {
  if (node.is_map()) {
    for (const auto& [k, v] : node.entries()) {
      if (auto st =
              CheckInterpolationSyntaxIn(*v, key.empty() ? KeyText(k) : key + "." + KeyText(k));
          !st.ok())
        return st;
    }
  } else if (node.is_list()) {
    for (size_t i = 0; i < node.items().size(); ++i) {
      auto st = CheckInterpolationSyntaxIn(*node.items()[i], absl::StrCat(key, "[", i, "]"));
      if (!st.ok()) return st;
    }
  } else if (node.kind() == NodeKind::kString) {
    absl::Status st = CheckInterpolationSyntax(node.as_string());
    if (!st.ok()) {
      std::string where = node.source().Describe();
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid interpolation ", key.empty() ? "" : "in '" + key + "' ", "'", node.as_string(),
          "': ", st.message(), where.empty() ? "" : " (set at " + where + ")"));
    }
  }
  return absl::OkStatus();
}

ResolverRegistry& ResolverRegistry::Default() {
  static ResolverRegistry* registry = [] {
    auto* r = new ResolverRegistry();
    RegisterBuiltins(r);
    return r;
  }();
  return *registry;
}

absl::Status ResolverRegistry::Add(const std::string& name, ResolverFn fn,
                                   const std::string& origin) {
  auto [it, added] = resolvers_.emplace(name, Entry{std::move(fn), origin});
  if (!added) {
    return absl::AlreadyExistsError(
        absl::StrCat("config resolver '", name, "' is already registered by ", it->second.origin,
                     "; ", origin, " cannot register it again: give it another name"));
  }
  return absl::OkStatus();
}

const std::string& ResolverRegistry::OriginOf(const std::string& name) const {
  static const std::string* none = new std::string();
  auto it = resolvers_.find(name);
  return it == resolvers_.end() ? *none : it->second.origin;
}

const ResolverFn* ResolverRegistry::Find(const std::string& name) const {
  auto it = resolvers_.find(name);
  if (it == resolvers_.end() && load_more_) {
    auto load = std::move(load_more_);
    load_more_ = nullptr;
    load_more_status_ = load();
    if (load_more_status_.ok()) it = resolvers_.find(name);
  }
  return it == resolvers_.end() ? nullptr : &it->second.fn;
}

std::vector<std::string> ResolverRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [k, v] : resolvers_) names.push_back(k);
  return names;
}

std::string JoinPath(const std::vector<std::string>& path) {
  return absl::StrJoin(path, ".",
                       [](std::string* out, const std::string& key) { out->append(KeyText(key)); });
}

std::vector<std::string> SplitKey(absl::string_view key) {
  std::vector<std::string> out;
  std::string current;
  for (size_t i = 0; i < key.size(); ++i) {
    char c = key[i];
    if (c == '.') {
      if (!current.empty()) out.push_back(current);
      current.clear();
    } else if (c == '[') {
      if (!current.empty()) out.push_back(current);
      current.clear();
      size_t close = key.find(']', i);
      if (close == absl::string_view::npos) close = key.size();
      std::string inner(key.substr(i + 1, close - i - 1));
      if (inner.size() >= 2 && (inner.front() == '\'' || inner.front() == '"')) {
        inner = inner.substr(1, inner.size() - 2);
      }
      out.push_back(inner);
      i = close;
    } else {
      current += c;
    }
  }
  if (!current.empty()) out.push_back(current);
  return out;
}

absl::StatusOr<NodePtr> Interpolator::Resolve(const NodePtr& node,
                                              const std::vector<std::string>& path) {
  if (node->is_map()) {
    NodePtr out = Node::Map();
    out->set_source(node->source());
    std::vector<std::string> child_path = path;
    for (const auto& [k, v] : node->entries()) {
      child_path.push_back(k);
      auto r = Resolve(v, child_path);
      if (!r.ok()) return r.status();
      out->Set(k, *r);
      child_path.pop_back();
    }
    return out;
  }
  if (node->is_list()) {
    NodePtr out = Node::List();
    out->set_source(node->source());
    std::vector<std::string> child_path = path;
    for (size_t i = 0; i < node->items().size(); ++i) {
      child_path.push_back(std::to_string(i));
      auto r = Resolve(node->items()[i], child_path);
      if (!r.ok()) return r.status();
      out->Append(*r);
      child_path.pop_back();
    }
    return out;
  }
  if (node->kind() == NodeKind::kString && node->as_string().find("${") != std::string::npos) {
    return ResolveString(*node, path);
  }
  return node->Clone();
}

absl::StatusOr<NodePtr> Interpolator::ResolveString(const Node& node,
                                                    const std::vector<std::string>& path) {
  if (auto it = resolved_.find(&node); it != resolved_.end()) return it->second->Clone();
  if (std::find(stack_.begin(), stack_.end(), &node) != stack_.end()) {
    std::vector<std::string> chain(stack_keys_.begin(), stack_keys_.end());
    chain.push_back(JoinPath(path));
    return absl::InvalidArgumentError(
        absl::StrCat("interpolation cycle: ", absl::StrJoin(chain, " -> ")));
  }
  if (stack_.size() >= 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("interpolations nested deeper than 256 levels at '", JoinPath(path), "'"));
  }
  stack_.push_back(&node);
  stack_keys_.push_back(JoinPath(path));
  const std::string& s = node.as_string();
  absl::StatusOr<NodePtr> result;
  InterpolationScan whole;
  if (IsWholeInterpolation(s, &whole)) {
    result = Evaluate(whole, path);
  } else {
    auto text = Interpolate(s, path);
    result = text.ok() ? absl::StatusOr<NodePtr>(Node::String(*text))
                       : absl::StatusOr<NodePtr>(text.status());
  }
  stack_.pop_back();
  stack_keys_.pop_back();
  if (!result.ok()) {
    // Name the value being resolved and where it was written, once (innermost wins).
    std::string message(result.status().message());
    if (message.find(" (while resolving ") == std::string::npos) {
      std::string where = node.source().Describe();
      message = absl::StrCat(message, " (while resolving '", JoinPath(path), "'",
                             where.empty() ? "" : ", set at " + where, ")");
    }
    return absl::Status(result.status().code(), message);
  }
  NodePtr out = *result;
  if (out.use_count() > 1) out = out->Clone();
  out->set_source(node.source());
  resolved_[&node] = out->Clone();
  return out;
}

absl::StatusOr<std::string> Interpolator::Interpolate(absl::string_view text,
                                                      const std::vector<std::string>& path) {
  const bool keys_must_be_strings = keys_must_be_strings_;
  keys_must_be_strings_ = false;
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\\') {
      size_t run = 0;
      while (i + run < text.size() && text[i + run] == '\\') ++run;
      if (i + run + 1 < text.size() && text[i + run] == '$' && text[i + run + 1] == '{') {
        out.append(run / 2, '\\');
        i += run;
        if (run % 2 == 1) {  // escaped: a literal "${"
          out += "${";
          ++i;
          continue;
        }
        --i;  // let the loop see the '$'
        continue;
      }
      out.append(run, '\\');
      i += run - 1;
      continue;
    }
    if (c == '$' && i + 1 < text.size() && text[i + 1] == '{') {
      auto scan = ScanInterpolation(text, i);
      if (!scan.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid interpolation in '", text, "': ", scan.status().message()));
      }
      const size_t close = scan->close;
      auto value = Evaluate(*scan, path);
      if (!value.ok()) return value.status();
      if ((*value)->is_missing()) {
        return absl::InvalidArgumentError(absl::StrCat("interpolation '",
                                                       text.substr(i, close - i + 1),
                                                       "' points to a missing value (\?\?\?)"));
      }
      if (keys_must_be_strings && (*value)->kind() != NodeKind::kString) {
        return absl::InvalidArgumentError(
            absl::StrCat("interpolation '", text.substr(i, close - i + 1),
                         "' names a key, so it must give a string, not ",
                         KindName((*value)->kind()), " ", PythonStr(**value)));
      }
      out += PythonStr(**value);
      if (out.size() > kMaxInterpolatedLength) {
        return absl::InvalidArgumentError(absl::StrCat("interpolation result longer than ",
                                                       kMaxInterpolatedLength, " characters in '",
                                                       text.substr(0, 60), "...'"));
      }
      i = close;
      continue;
    }
    out += c;
  }
  return out;
}

absl::StatusOr<NodePtr> Interpolator::Evaluate(const InterpolationScan& scan,
                                               const std::vector<std::string>& path) {
  const absl::string_view body = scan.body;
  if (scan.resolver) {
    std::string name(scan.name);
    if (name.find("${") != std::string::npos) {  // resolverName: (interpolation | ID) (DOT ...)*
      keys_must_be_strings_ = true;
      auto expanded = Interpolate(name, path);
      if (!expanded.ok()) return expanded.status();
      name = *std::move(expanded);
    }
    const ResolverFn* fn = resolvers_.Find(name);
    if (fn == nullptr) {
      const absl::Status& loading = resolvers_.load_more_status();
      return absl::NotFoundError(
          absl::StrCat("unknown resolver '", name, "' in '${", body,
                       "}' (known: ", absl::StrJoin(resolvers_.Names(), ", "), ")",
                       loading.ok() ? "" : "; the plugins that may provide it did not load: ",
                       loading.message()));
    }
    ResolverCall call{name, {}, this, &path};
    for (absl::string_view arg : scan.args) {
      auto value = EvaluateArgument(arg, path);
      if (!value.ok()) return value.status();
      call.args.push_back(*value);
    }
    return (*fn)(call);
  }
  // A key; parts of it may themselves be interpolations.
  std::string key(Trim(body));
  if (key.find("${") != std::string::npos) {
    keys_must_be_strings_ = true;  // OmegaConf: an interpolation that names a key gives a string
    auto expanded = Interpolate(key, path);
    if (!expanded.ok()) return expanded.status();
    key = *expanded;
  }
  std::vector<std::string> target_path;
  auto target = Lookup(key, path, &target_path);
  if (!target.ok()) return target.status();
  if (*target == nullptr) {
    return absl::NotFoundError(absl::StrCat("interpolation key '", key, "' not found"));
  }
  if ((*target)->is_missing()) {
    return absl::InvalidArgumentError(absl::StrCat("interpolation '${", key, "}' points to '",
                                                   JoinPath(target_path),
                                                   "', which is missing (\?\?\?)"));
  }
  return Resolve(*target, target_path);
}

absl::StatusOr<NodePtr> Interpolator::EvaluateArgument(absl::string_view text,
                                                       const std::vector<std::string>& path) {
  absl::string_view arg = Trim(text);
  if (arg.empty()) return Node::String("");
  if (arg.size() >= 2 && (arg.front() == '\'' || arg.front() == '"') && arg.back() == arg.front()) {
    std::string inner;
    for (size_t i = 1; i + 1 < arg.size(); ++i) {
      if (arg[i] == '\\' && i + 2 < arg.size() && arg[i + 1] == arg.front()) continue;
      inner += arg[i];
    }
    if (inner.find("${") == std::string::npos) return Node::String(inner);
    auto s = Interpolate(inner, path);
    if (!s.ok()) return s.status();
    return Node::String(*s);
  }
  if (InterpolationScan whole; IsWholeInterpolation(arg, &whole)) return Evaluate(whole, path);
  if (arg.find("${") != absl::string_view::npos) {
    auto s = Interpolate(arg, path);
    if (!s.ok()) return s.status();
    return Node::String(*s);
  }
  auto parsed = ParseOverrideValue(arg);
  if (parsed.ok()) return parsed->node;
  return Node::String(std::string(arg));
}

absl::StatusOr<NodePtr> Interpolator::Lookup(absl::string_view key,
                                             const std::vector<std::string>& path,
                                             std::vector<std::string>* target_path) {
  std::vector<std::string> base;
  size_t dots = 0;
  while (dots < key.size() && key[dots] == '.') ++dots;
  if (dots > 0) {
    // ${.x} is relative to the node's container; each further dot goes one level up.
    base = path;
    if (!base.empty()) base.pop_back();
    for (size_t i = 1; i < dots; ++i) {
      if (base.empty()) {
        return absl::NotFoundError(
            absl::StrCat("interpolation key '", key, "' goes above the root"));
      }
      base.pop_back();
    }
  }
  std::vector<std::string> full = base;
  for (auto& seg : SplitKey(key.substr(dots))) full.push_back(seg);
  NodePtr current = root_;
  for (const auto& seg : full) {
    if (current->is_map()) {
      current = current->Find(seg);
    } else if (current->is_list()) {
      char* end = nullptr;
      long index = std::strtol(seg.c_str(), &end, 10);
      if (seg.empty() || *end != '\0' || index < 0 ||
          static_cast<size_t>(index) >= current->items().size()) {
        return NodePtr();
      }
      current = current->items()[index];
    } else if (current->kind() == NodeKind::kString &&
               current->as_string().find("${") != std::string::npos) {
      // Walking through an interpolated container: resolve it first.
      auto resolved = Resolve(current, *target_path);
      if (!resolved.ok()) return resolved.status();
      current = *resolved;
      temporaries_.push_back(current);
      if (current->is_map()) {
        current = current->Find(seg);
      } else {
        return NodePtr();
      }
    } else {
      return NodePtr();
    }
    if (current == nullptr) return NodePtr();
    target_path->push_back(seg);
  }
  return current;
}

absl::StatusOr<NodePtr> Interpolator::Select(const std::string& key,
                                             const std::vector<std::string>& path, bool resolve) {
  std::vector<std::string> target_path;
  auto found = Lookup(key, path, &target_path);
  if (!found.ok() || *found == nullptr || !resolve) return found;
  return Resolve(*found, target_path);
}

}  // namespace kiln::config
