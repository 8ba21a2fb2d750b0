#include "lib/config/node.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::config {

Source Source::File(std::shared_ptr<const std::string> file, int line, int column) {
  Source s;
  s.file = std::move(file);
  s.line = line;
  s.column = column;
  return s;
}

Source Source::Override(std::string text) {
  Source s;
  s.override_text = std::move(text);
  return s;
}

std::string Source::Describe() const {
  if (!override_text.empty()) return absl::StrCat("command line '", override_text, "'");
  if (file == nullptr) return "";
  if (line <= 0) return *file;
  return absl::StrCat(*file, ":", line);
}

const char* KindName(NodeKind kind) {
  switch (kind) {
    case NodeKind::kNull: return "null";
    case NodeKind::kBool: return "bool";
    case NodeKind::kInt: return "int";
    case NodeKind::kFloat: return "float";
    case NodeKind::kString: return "string";
    case NodeKind::kMap: return "mapping";
    case NodeKind::kList: return "list";
  }
  return "?";
}

NodePtr Node::Null() { return NodePtr(new Node(NodeKind::kNull)); }
NodePtr Node::Bool(bool value) {
  NodePtr n(new Node(NodeKind::kBool));
  n->bool_ = value;
  return n;
}
NodePtr Node::Int(int64_t value) {
  NodePtr n(new Node(NodeKind::kInt));
  n->int_ = value;
  return n;
}
NodePtr Node::Integer(absl::string_view decimal) {
  bool negative = !decimal.empty() && decimal[0] == '-';
  if (!decimal.empty() && (decimal[0] == '-' || decimal[0] == '+')) decimal.remove_prefix(1);
  while (decimal.size() > 1 && decimal[0] == '0') decimal.remove_prefix(1);
  if (decimal.empty()) return Int(0);
  // Within int64 when shorter than 19 digits, or 19 digits up to 9223372036854775807 (...808 when
  // negative): equal-length digit strings compare as their numbers.
  static constexpr absl::string_view kMax = "9223372036854775807";
  static constexpr absl::string_view kMinMagnitude = "9223372036854775808";
  absl::string_view limit = negative ? kMinMagnitude : kMax;
  if (decimal.size() < limit.size() || (decimal.size() == limit.size() && decimal <= limit)) {
    uint64_t magnitude = 0;
    for (char c : decimal) magnitude = magnitude * 10 + static_cast<uint64_t>(c - '0');
    return Int(negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude));
  }
  NodePtr n(new Node(NodeKind::kInt));
  n->int_ = negative ? INT64_MIN : INT64_MAX;
  n->str_ = absl::StrCat(negative ? "-" : "", decimal);
  return n;
}

std::string Node::int_text() const { return is_big_int() ? str_ : std::to_string(int_); }

double NumberValue(const Node& number) {
  switch (number.kind()) {
    case NodeKind::kFloat: return number.as_float();
    case NodeKind::kBool: return number.as_bool() ? 1.0 : 0.0;
    case NodeKind::kInt:
      return number.is_big_int() ? std::strtod(number.int_text().c_str(), nullptr)
                                 : static_cast<double>(number.as_int());
    default: return 0.0;
  }
}

NodePtr Node::Float(double value) {
  NodePtr n(new Node(NodeKind::kFloat));
  n->float_ = value;
  return n;
}
NodePtr Node::String(std::string value) {
  NodePtr n(new Node(NodeKind::kString));
  n->str_ = std::move(value);
  return n;
}
NodePtr Node::Map() { return NodePtr(new Node(NodeKind::kMap)); }
NodePtr Node::List() { return NodePtr(new Node(NodeKind::kList)); }

bool Node::is_interpolation() const {
  if (kind_ != NodeKind::kString) return false;
  for (size_t i = 0; i + 1 < str_.size(); ++i) {
    if (str_[i] == '$' && str_[i + 1] == '{') {
      // "\${" is an escaped dollar, "\\${" an escaped backslash before a real interpolation.
      size_t backslashes = 0;
      for (size_t j = i; j > 0 && str_[j - 1] == '\\'; --j) ++backslashes;
      if (backslashes % 2 == 0) return true;
    }
  }
  return false;
}

namespace {

constexpr char kTypedKeyMarker = '\xff';

// Whether two bool, int or float keys are equal numbers, exactly as Python compares 1, 1.0 and
// True (and 2**64 and 2.0**64): a float equals an int only when it is integral, with the same
// digits (printf's %.0f writes a double's exact value).
bool SameNumber(const Node& x, const Node& y) {
  auto integer_text = [](const Node& n) -> std::string {
    return n.kind() == NodeKind::kBool ? (n.as_bool() ? "1" : "0") : n.int_text();
  };
  bool x_float = x.kind() == NodeKind::kFloat, y_float = y.kind() == NodeKind::kFloat;
  if (x_float && y_float) return x.as_float() == y.as_float();
  if (!x_float && !y_float) return integer_text(x) == integer_text(y);
  double f = x_float ? x.as_float() : y.as_float();
  if (!std::isfinite(f) || f != std::floor(f)) return false;
  char digits[400];
  std::snprintf(digits, sizeof(digits), "%.0f", f == 0 ? 0.0 : f);
  return digits == integer_text(x_float ? y : x);
}

}  // namespace

std::string TypedKey(const Node& scalar) {
  switch (scalar.kind()) {
    case NodeKind::kBool:
      return absl::StrCat(std::string(1, kTypedKeyMarker), "b", scalar.as_bool() ? 1 : 0);
    case NodeKind::kInt:
      return absl::StrCat(std::string(1, kTypedKeyMarker), "i", scalar.int_text());
    case NodeKind::kFloat: {
      // The bits in hex: exact, and free of the '.' that separates path segments.
      uint64_t bits = 0;
      double value = scalar.as_float();
      std::memcpy(&bits, &value, sizeof(bits));
      char hex[17];
      std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(bits));
      return absl::StrCat(std::string(1, kTypedKeyMarker), "f", hex);
    }
    default: return scalar.as_string();
  }
}

bool IsTypedKey(absl::string_view key) { return !key.empty() && key[0] == kTypedKeyMarker; }

NodePtr KeyValue(absl::string_view key) {
  if (!IsTypedKey(key) || key.size() < 3) return Node::String(std::string(key));
  std::string text(key.substr(2));
  switch (key[1]) {
    case 'b': return Node::Bool(text == "1");
    case 'i': return Node::Integer(text);
    default: {
      uint64_t bits = std::strtoull(text.c_str(), nullptr, 16);
      double value = 0;
      std::memcpy(&value, &bits, sizeof(value));
      return Node::Float(value);
    }
  }
}

std::string KeyText(absl::string_view key) {
  return IsTypedKey(key) ? PythonStr(*KeyValue(key)) : std::string(key);
}

bool KeysMatch(absl::string_view a, absl::string_view b) {
  if (a == b) return true;
  if (!IsTypedKey(a) || !IsTypedKey(b)) return false;
  return SameNumber(*KeyValue(a), *KeyValue(b));
}

NodePtr Node::Find(absl::string_view key) const {
  for (const auto& [k, v] : entries_) {
    if (KeysMatch(k, key)) return v;
  }
  return nullptr;
}

void Node::Set(absl::string_view key, NodePtr value) {
  for (auto& [k, v] : entries_) {
    if (KeysMatch(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::string(key), std::move(value));
}

bool Node::Erase(absl::string_view key) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (KeysMatch(it->first, key)) {
      entries_.erase(it);
      return true;
    }
  }
  return false;
}

NodePtr Node::Clone() const {
  NodePtr n(new Node(kind_));
  n->bool_ = bool_;
  n->int_ = int_;
  n->float_ = float_;
  n->str_ = str_;
  n->source_ = source_;
  n->entries_.reserve(entries_.size());
  for (const auto& [k, v] : entries_) n->entries_.emplace_back(k, v->Clone());
  n->items_.reserve(items_.size());
  for (const auto& v : items_) n->items_.push_back(v->Clone());
  return n;
}

void Node::SetSourceRecursive(const Source& source) {
  source_ = source;
  for (auto& [k, v] : entries_) v->SetSourceRecursive(source);
  for (auto& v : items_) v->SetSourceRecursive(source);
}

bool DeepEqual(const Node& a, const Node& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case NodeKind::kNull: return true;
    case NodeKind::kBool: return a.as_bool() == b.as_bool();
    case NodeKind::kInt:
      return a.is_big_int() || b.is_big_int() ? a.int_text() == b.int_text()
                                              : a.as_int() == b.as_int();
    case NodeKind::kFloat:
      return a.as_float() == b.as_float() || (std::isnan(a.as_float()) && std::isnan(b.as_float()));
    case NodeKind::kString: return a.as_string() == b.as_string();
    case NodeKind::kMap: {
      if (a.size() != b.size()) return false;
      for (const auto& [k, v] : a.entries()) {
        // The same key written the same way: `1:` and `true:` are one key, but print differently.
        auto other = std::find_if(b.entries().begin(), b.entries().end(),
                                  [&k = k](const auto& entry) { return entry.first == k; });
        if (other == b.entries().end() || !DeepEqual(*v, *other->second)) return false;
      }
      return true;
    }
    case NodeKind::kList: {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!DeepEqual(*a.items()[i], *b.items()[i])) return false;
      }
      return true;
    }
  }
  return false;
}

std::string PythonFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: positional for exponents in [-4, 16).
  char buf[40];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  std::string sci(buf);
  size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  int exponent = std::atoi(sci.c_str() + e_pos + 1);
  bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(-exponent - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out = digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[8];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    out += exp_buf;
  }
  return negative ? "-" + out : out;
}

namespace {

// Python's repr() of a str: single quotes unless the text has ' and no ".
std::string PythonStringRepr(const std::string& s) {
  char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c == static_cast<unsigned char>(quote)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + quote;
}

std::string PythonRepr(const Node& node) {
  return node.kind() == NodeKind::kString ? PythonStringRepr(node.as_string()) : PythonStr(node);
}

}  // namespace

std::string PythonStr(const Node& node) {
  switch (node.kind()) {
    case NodeKind::kNull: return "None";
    case NodeKind::kBool: return node.as_bool() ? "True" : "False";
    case NodeKind::kInt: return node.int_text();
    case NodeKind::kFloat: return PythonFloatRepr(node.as_float());
    case NodeKind::kString: return node.as_string();
    case NodeKind::kMap: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : node.entries()) {
        if (!first) out += ", ";
        first = false;
        out += PythonRepr(*KeyValue(k)) + ": " + PythonRepr(*v);
      }
      return out + "}";
    }
    case NodeKind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < node.items().size(); ++i) {
        if (i > 0) out += ", ";
        out += PythonRepr(*node.items()[i]);
      }
      return out + "]";
    }
  }
  return "";
}

}  // namespace kiln::config
