#include "lib/config/merge.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/config/interpolation.h"
#include "lib/config/suggest.h"

namespace kiln::config {
namespace {

std::string Join(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? KeyText(key) : prefix + "." + KeyText(key);
}

bool ParseIndex(const std::string& seg, size_t size, size_t* index) {
  if (seg.empty()) return false;
  char* end = nullptr;
  long v = std::strtol(seg.c_str(), &end, 10);
  if (*end != '\0' || v < 0 || static_cast<size_t>(v) >= size) return false;
  *index = static_cast<size_t>(v);
  return true;
}

std::vector<std::string> KeysOf(const Node& map) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : map.entries()) keys.push_back(KeyText(k));
  return keys;
}

bool IsNumber(const Node& n) {
  return n.kind() == NodeKind::kBool || n.kind() == NodeKind::kInt || n.kind() == NodeKind::kFloat;
}

}  // namespace

absl::Status MergeInto(Node& dest, const Node& src, bool struct_mode, const std::string& path) {
  for (const auto& [key, src_value] : src.entries()) {
    NodePtr dest_value = dest.Find(key);
    if (dest_value == nullptr) {
      if (struct_mode) {
        return absl::InvalidArgumentError(absl::StrCat("key '", Join(path, key),
                                                       "' is not in the config",
                                                       DidYouMean(KeyText(key), KeysOf(dest))));
      }
      dest.Set(key, src_value->Clone());
      continue;
    }
    if (dest_value->is_map() && src_value->is_map()) {
      auto st = MergeInto(*dest_value, *src_value, struct_mode, Join(path, key));
      if (!st.ok()) return st;
      continue;
    }
    // A mandatory placeholder never replaces a value that is already there.
    if (src_value->is_missing()) continue;
    // OmegaConf merges a container into a container: a list and a mapping do not merge.
    if (dest_value->is_container() && src_value->is_container()) {
      if (dest_value->is_list() != src_value->is_list()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cannot merge a ", KindName(src_value->kind()), " into the ",
            KindName(dest_value->kind()), " at '", Join(path, key), "'",
            src_value->source().known() ? " (from " + src_value->source().Describe() + ")" : ""));
      }
    }
    dest.Set(key, src_value->Clone());
  }
  return absl::OkStatus();
}

NodePtr WrapInPackage(const NodePtr& content, const std::string& package) {
  NodePtr result = content->Clone();
  if (package.empty()) return result;
  std::vector<std::string> parts = absl::StrSplit(package, '.');
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    NodePtr wrapper = Node::Map();
    wrapper->Set(*it, result);
    result = wrapper;
  }
  return result;
}

NodePtr SelectPath(const NodePtr& root, const std::vector<std::string>& path) {
  NodePtr current = root;
  for (const auto& seg : path) {
    if (current->is_map()) {
      current = current->Find(seg);
    } else if (current->is_list()) {
      size_t index = 0;
      if (!ParseIndex(seg, current->items().size(), &index)) return nullptr;
      current = current->items()[index];
    } else {
      return nullptr;
    }
    if (current == nullptr) return nullptr;
  }
  return current;
}

bool PythonEqual(const Node& a, const Node& b) {
  if (IsNumber(a) && IsNumber(b)) return NumberValue(a) == NumberValue(b);
  if (a.kind() != b.kind()) return false;
  if (a.is_list()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!PythonEqual(*a.items()[i], *b.items()[i])) return false;
    }
    return true;
  }
  if (a.is_map()) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a.entries()) {
      NodePtr other = b.Find(k);
      if (other == nullptr || !PythonEqual(*v, *other)) return false;
    }
    return true;
  }
  return DeepEqual(a, b);
}

namespace {

absl::Status MissingKey(const Override& o, const Node& container,
                        const std::vector<std::string>& path, size_t depth) {
  std::string hint;
  if (container.is_map()) {
    std::string prefix;
    for (size_t i = 0; i < depth; ++i) prefix += path[i] + ".";
    std::vector<std::string> full;
    for (const auto& k : KeysOf(container)) full.push_back(prefix + k);
    hint = DidYouMean(prefix + path[depth], full);
  }
  std::string value = o.input_line.substr(
      o.input_line.find('=') == std::string::npos ? o.input_line.size() : o.input_line.find('='));
  return absl::InvalidArgumentError(
      absl::StrCat("Could not override '", o.key_or_group, "': no such key in the config", hint,
                   ". To append to your config use +", o.key_or_group, value));
}

// OmegaConf.update(cfg, key, value, merge=True, force_add=...).
// Hydra merges an override's dict or list into the node (OmegaConf.update with merge=True):
// a dict cannot merge into a list, nor a list into a dict. Scalars and null replace anything.
absl::Status CheckContainerKinds(const Node& existing, const Node& value, const Override& o) {
  if ((existing.is_list() && value.is_map()) || (existing.is_map() && value.is_list())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Error merging override ", o.input_line, ": cannot merge a ",
                     value.is_map() ? "dict" : "list", " into the ",
                     existing.is_map() ? "dict" : "list", " at '", o.key_or_group, "'"));
  }
  return absl::OkStatus();
}

absl::Status Update(Node& cfg, const Override& o, bool force_add) {
  std::vector<std::string> path = SplitKey(o.key_or_group);
  NodePtr value = o.value.node->Clone();
  value->SetSourceRecursive(Source::Override(o.input_line));
  Node* current = &cfg;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    const std::string& seg = path[i];
    NodePtr next;
    size_t index = 0;
    if (current->is_map()) {
      next = current->Find(seg);
      if (next == nullptr && !force_add) return MissingKey(o, *current, path, i);
      if (next == nullptr || !next->is_container()) {
        next = Node::Map();
        current->Set(seg, next);
      }
    } else if (current->is_list()) {
      if (!ParseIndex(seg, current->items().size(), &index)) {
        return absl::InvalidArgumentError(
            absl::StrCat("Could not override '", o.key_or_group, "': '", seg,
                         "' is not an index of the list (size ", current->items().size(), ")"));
      }
      next = current->items()[index];
      if (!next->is_container()) {
        next = Node::Map();
        current->mutable_items()[index] = next;
      }
    }
    current = next.get();
  }
  const std::string& last = path.back();
  if (current->is_list()) {
    size_t index = 0;
    if (!ParseIndex(last, current->items().size(), &index)) {
      return absl::InvalidArgumentError(absl::StrCat("Could not override '", o.key_or_group, "': '",
                                                     last, "' is not an index of the list (size ",
                                                     current->items().size(), ")"));
    }
    NodePtr& slot = current->mutable_items()[index];
    if (auto st = CheckContainerKinds(*slot, *value, o); !st.ok()) return st;
    if (slot->is_map() && value->is_map())
      return MergeInto(*slot, *value, !force_add, o.key_or_group);
    slot = value;
    return absl::OkStatus();
  }
  NodePtr existing = current->Find(last);
  if (existing == nullptr && !force_add) return MissingKey(o, *current, path, path.size() - 1);
  if (existing != nullptr) {
    if (auto st = CheckContainerKinds(*existing, *value, o); !st.ok()) return st;
  }
  if (existing != nullptr && existing->is_map() && value->is_map()) {
    auto st = MergeInto(*existing, *value, !force_add, o.key_or_group);
    if (!st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Could not override '", o.key_or_group, "' with '", o.input_line, "': ", st.message()));
    }
    return absl::OkStatus();
  }
  current->Set(last, value);
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyConfigOverride(Node& cfg, const Override& o) {
  if (o.has_value && o.value.node != nullptr) {
    if (auto st = CheckInterpolationSyntaxIn(*o.value.node, o.key_or_group); !st.ok()) return st;
  }
  if (o.is_sweep()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Ambiguous value for argument '", o.input_line,
        "': to use it as a list use key=[value1,value2], to use it as a string quote it "
        "(key='value1,value2'), to sweep over it add --multirun"));
  }
  if (o.package.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Override '", o.input_line, "' looks like a config group override, but config group '",
        o.key_or_group, "' does not exist"));
  }
  std::vector<std::string> path = SplitKey(o.key_or_group);
  NodePtr root(&cfg, [](Node*) {});
  if (o.is_delete()) {
    NodePtr existing = SelectPath(root, path);
    if (existing == nullptr || existing->is_null()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Could not delete from config. '", o.key_or_group, "' does not exist."));
    }
    if (o.has_value && !PythonEqual(*o.value.node, *existing)) {
      return absl::InvalidArgumentError(absl::StrCat("Could not delete from config. The value of '",
                                                     o.key_or_group, "' is ", PythonStr(*existing),
                                                     " and not ", PythonStr(*o.value.node), "."));
    }
    std::vector<std::string> parent_path(path.begin(), path.end() - 1);
    NodePtr parent = SelectPath(root, parent_path);
    if (parent->is_map()) {
      parent->Erase(path.back());
    } else {
      size_t index = 0;
      ParseIndex(path.back(), parent->items().size(), &index);
      parent->mutable_items().erase(parent->mutable_items().begin() + index);
    }
    return absl::OkStatus();
  }
  if (o.is_add()) {
    NodePtr existing = SelectPath(root, path);
    if (existing == nullptr || existing->is_null() || o.value.node->is_container()) {
      return Update(cfg, o, /*force_add=*/true);
    }
    std::string rest = o.input_line.substr(1);
    return absl::InvalidArgumentError(absl::StrCat(
        "Could not append to config. An item is already at '", o.key_or_group,
        "'. Either remove + prefix: '", rest, "' Or add a second + to add or override '",
        o.key_or_group, "': '+", o.input_line, "'"));
  }
  return Update(cfg, o, /*force_add=*/o.is_force_add());
}

}  // namespace kiln::config
