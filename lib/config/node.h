// A config value tree (the OmegaConf data model): null, bool, int, float, string, map, list.
// Every node remembers where it was set (file:line or a command-line override) for provenance.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace kiln::config {

// Where a value came from: a file position, or a command-line override.
struct Source {
  std::shared_ptr<const std::string> file;  // null when not from a file
  int line = 0;                             // 1-based; 0 when unknown
  int column = 0;                           // 1-based; 0 when unknown
  std::string override_text;                // non-empty for command-line overrides

  static Source File(std::shared_ptr<const std::string> file, int line, int column);
  static Source Override(std::string text);
  bool known() const { return file != nullptr || !override_text.empty(); }
  // "configs/model/cnn.yaml:3" or "command line 'model.depth=50'" or "" when unknown.
  std::string Describe() const;
};

enum class NodeKind { kNull, kBool, kInt, kFloat, kString, kMap, kList };
const char* KindName(NodeKind kind);

class Node;
using NodePtr = std::shared_ptr<Node>;

class Node {
 public:
  using MapEntries = std::vector<std::pair<std::string, NodePtr>>;

  static NodePtr Null();
  static NodePtr Bool(bool value);
  static NodePtr Int(int64_t value);
  // An integer of any size, from its decimal text (an optional sign, then digits): OmegaConf keeps
  // 2**64 an int, as Python does. Int(value) where it fits in int64, else a big int.
  static NodePtr Integer(absl::string_view decimal);
  static NodePtr Float(double value);
  static NodePtr String(std::string value);
  static NodePtr Map();
  static NodePtr List();

  NodeKind kind() const { return kind_; }
  bool is_null() const { return kind_ == NodeKind::kNull; }
  bool is_map() const { return kind_ == NodeKind::kMap; }
  bool is_list() const { return kind_ == NodeKind::kList; }
  bool is_container() const { return is_map() || is_list(); }
  bool is_scalar() const { return !is_container(); }
  // "???": a mandatory value nobody has set yet.
  bool is_missing() const { return kind_ == NodeKind::kString && str_ == "???"; }
  // A string holding at least one unescaped "${".
  bool is_interpolation() const;

  // An int beyond int64 (from Integer()). Its as_int() is the nearest int64 (saturated), so code
  // that takes int64 options must refuse it; int_text() is its value.
  bool is_big_int() const { return kind_ == NodeKind::kInt && !str_.empty(); }
  // An int's value in decimal, of either size.
  std::string int_text() const;

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }
  double as_float() const { return float_; }
  const std::string& as_string() const { return str_; }

  // Maps keep insertion order, like Python dicts.
  const MapEntries& entries() const { return entries_; }
  NodePtr Find(absl::string_view key) const;
  bool Contains(absl::string_view key) const { return Find(key) != nullptr; }
  // Replaces the value of an existing key in place, or appends a new key.
  void Set(absl::string_view key, NodePtr value);
  bool Erase(absl::string_view key);

  const std::vector<NodePtr>& items() const { return items_; }
  std::vector<NodePtr>& mutable_items() { return items_; }
  void Append(NodePtr value) { items_.push_back(std::move(value)); }

  size_t size() const { return is_map() ? entries_.size() : items_.size(); }

  // Deep copy, sources included.
  NodePtr Clone() const;

  const Source& source() const { return source_; }
  void set_source(Source source) { source_ = std::move(source); }
  // Sets this source on this node and every node below it.
  void SetSourceRecursive(const Source& source);

 private:
  explicit Node(NodeKind kind) : kind_(kind) {}

  NodeKind kind_;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0.0;
  std::string str_;  // a string's text, or a big int's decimal digits (empty for other ints)
  MapEntries entries_;
  std::vector<NodePtr> items_;
  Source source_;
};

// Map keys are strings, but a YAML file (`1:`, `on:`, `0.5:`) or an override's dictionary
// (`{1:a}`) may also give a bool, int or float key, and OmegaConf keeps it typed: the int key 1
// is not the string key '1', so neither `${x.1}` nor the override `x.1=v` reaches it. Such a key
// is stored as TypedKey(value): a 0xFF byte (never part of UTF-8 text, so no string key starts
// with it), the kind and the value. Like Python dict keys, typed keys that are equal numbers
// (1, 1.0, true) are one key, and the first one written stays.
std::string TypedKey(const Node& scalar);  // `scalar` is a bool, int or float
bool IsTypedKey(absl::string_view key);
// The key as a value: the bool, int or float of a typed key, else the string.
NodePtr KeyValue(absl::string_view key);
// The key as text for paths and messages (Python's str(): "1", "True", "0.5").
std::string KeyText(absl::string_view key);
// Whether two keys name the same entry (what Find, Set and Erase compare).
bool KeysMatch(absl::string_view a, absl::string_view b);

// Structural equality: same kinds, same scalars (1, 1.0, '1' and true all differ), same map
// keys (typed keys too) regardless of order, same list items in order. NaN equals NaN.
bool DeepEqual(const Node& a, const Node& b);

// An int as a double (the nearest one, for big ints too), or a float's value.
double NumberValue(const Node& number);

// Python's str() of a scalar (used by string interpolation): 5 -> "5", 0.5 -> "0.5",
// true -> "True", null -> "None".
std::string PythonStr(const Node& node);
// Python's repr() of a float: the shortest text that reads back to the same double.
std::string PythonFloatRepr(double value);

}  // namespace kiln::config
