#include "lib/config/config.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/config/interpolation.h"
#include "lib/config/merge.h"
#include "lib/config/suggest.h"
#include "lib/config/yaml_io.h"

namespace kiln::config {

std::string Config::FullKey(absl::string_view key) const {
  if (prefix_.empty()) return std::string(key);
  if (key.empty()) return prefix_;
  return absl::StrCat(prefix_, ".", key);
}

absl::StatusOr<NodePtr> Config::Lookup(absl::string_view key) const {
  if (key.empty()) return root_;
  std::vector<std::string> path = SplitKey(key);
  NodePtr current = root_;
  std::string walked = prefix_;
  for (const auto& seg : path) {
    NodePtr next;
    if (current->is_map()) {
      next = current->Find(seg);
      if (next == nullptr) {
        std::vector<std::string> keys;
        for (const auto& [k, v] : current->entries()) keys.push_back(KeyText(k));
        return absl::NotFoundError(
            absl::StrCat("config key '", FullKey(key), "' not found",
                         DidYouMean(seg, keys).empty()
                             ? ""
                             : absl::StrCat(" (did you mean '", walked.empty() ? "" : walked + ".",
                                            ClosestNames(seg, keys, 1)[0], "'?)")));
      }
    } else {
      next = SelectPath(current, {seg});
      if (next == nullptr) {
        return absl::NotFoundError(absl::StrCat("config key '", FullKey(key), "' not found"));
      }
    }
    walked = walked.empty() ? seg : walked + "." + seg;
    current = next;
  }
  if (current->is_missing()) {
    std::string where = current->source().Describe();
    return absl::FailedPreconditionError(absl::StrCat(
        "missing mandatory value '", FullKey(key), "'",
        where.empty() ? "" : " (??? at " + where + ")", "; set it, e.g. ", FullKey(key), "=VALUE"));
  }
  return current;
}

bool Config::Has(absl::string_view key) const {
  return SelectPath(root_, SplitKey(key)) != nullptr;
}

bool Config::HasValue(absl::string_view key) const {
  NodePtr n = SelectPath(root_, SplitKey(key));
  return n != nullptr && !n->is_null();
}

std::vector<std::string> Config::Keys() const {
  std::vector<std::string> keys;
  for (const auto& [k, v] : root_->entries()) keys.push_back(k);
  return keys;
}

std::string Config::WhereSet(absl::string_view key) const {
  NodePtr n = SelectPath(root_, SplitKey(key));
  return n == nullptr ? "" : n->source().Describe();
}

absl::StatusOr<Config> Config::Sub(absl::string_view key) const {
  auto node = Lookup(key);
  if (!node.ok()) return node.status();
  if (!(*node)->is_container()) return TypeError(key, **node, "a mapping");
  return Config(*node, FullKey(key));
}

absl::Status Config::TypeError(absl::string_view key, const Node& node,
                               const char* expected) const {
  std::string where = node.source().Describe();
  return absl::InvalidArgumentError(absl::StrCat(
      "config key '", FullKey(key), "' must be ", expected, ", got ", KindName(node.kind()), " ",
      ScalarToYaml(node), where.empty() ? "" : " (set at " + where + ")"));
}

template <>
absl::StatusOr<NodePtr> Config::Get<NodePtr>(absl::string_view key) const {
  return Lookup(key);
}

template <>
absl::StatusOr<bool> Config::Get<bool>(absl::string_view key) const {
  auto n = Lookup(key);
  if (!n.ok()) return n.status();
  if ((*n)->kind() != NodeKind::kBool) return TypeError(key, **n, "true or false");
  return (*n)->as_bool();
}

template <>
absl::StatusOr<int64_t> Config::Get<int64_t>(absl::string_view key) const {
  auto n = Lookup(key);
  if (!n.ok()) return n.status();
  if ((*n)->kind() != NodeKind::kInt) return TypeError(key, **n, "an integer");
  if ((*n)->is_big_int()) return TypeError(key, **n, "an integer that fits in 64 bits");
  return (*n)->as_int();
}

template <>
absl::StatusOr<int> Config::Get<int>(absl::string_view key) const {
  auto v = Get<int64_t>(key);
  if (!v.ok()) return v.status();
  if (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max()) {
    return TypeError(key, *Lookup(key).value(), "an integer that fits in 32 bits");
  }
  return static_cast<int>(*v);
}

template <>
absl::StatusOr<double> Config::Get<double>(absl::string_view key) const {
  auto n = Lookup(key);
  if (!n.ok()) return n.status();
  if ((*n)->kind() == NodeKind::kInt) return NumberValue(**n);
  if ((*n)->kind() != NodeKind::kFloat) return TypeError(key, **n, "a number");
  return (*n)->as_float();
}

template <>
absl::StatusOr<float> Config::Get<float>(absl::string_view key) const {
  auto v = Get<double>(key);
  if (!v.ok()) return v.status();
  return static_cast<float>(*v);
}

template <>
absl::StatusOr<std::string> Config::Get<std::string>(absl::string_view key) const {
  auto n = Lookup(key);
  if (!n.ok()) return n.status();
  if ((*n)->kind() != NodeKind::kString) return TypeError(key, **n, "a string");
  return (*n)->as_string();
}

namespace {

template <typename T>
absl::StatusOr<std::vector<T>> GetList(const Config& cfg, absl::string_view key) {
  auto sub = cfg.Get<NodePtr>(key);
  if (!sub.ok()) return sub.status();
  if (!(*sub)->is_list()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config key '", cfg.FullKey(key), "' must be a list, got ",
                     KindName((*sub)->kind()), " ", ScalarToYaml(**sub)));
  }
  std::vector<T> out;
  Config list(*sub, cfg.FullKey(key));
  for (size_t i = 0; i < (*sub)->items().size(); ++i) {
    auto v = list.Get<T>(std::to_string(i));
    if (!v.ok()) return v.status();
    out.push_back(*v);
  }
  return out;
}

}  // namespace

template <>
absl::StatusOr<std::vector<int64_t>> Config::Get<std::vector<int64_t>>(
    absl::string_view key) const {
  return GetList<int64_t>(*this, key);
}
template <>
absl::StatusOr<std::vector<int>> Config::Get<std::vector<int>>(absl::string_view key) const {
  return GetList<int>(*this, key);
}
template <>
absl::StatusOr<std::vector<double>> Config::Get<std::vector<double>>(absl::string_view key) const {
  return GetList<double>(*this, key);
}
template <>
absl::StatusOr<std::vector<std::string>> Config::Get<std::vector<std::string>>(
    absl::string_view key) const {
  return GetList<std::string>(*this, key);
}

}  // namespace kiln::config
