// Typed, read-only access to a resolved config for components:
//   KILN_ASSIGN_OR_RETURN(int epochs, cfg.Get<int>("trainer.max_epochs"));
// Errors name the full key and where its value was set (file:line or command-line override).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/base/status_macros.h"
#include "lib/config/node.h"

namespace kiln::config {

class Config {
 public:
  Config() : root_(Node::Map()) {}
  // `prefix` is the key of `root` inside a larger config, used in messages.
  explicit Config(NodePtr root, std::string prefix = "")
      : root_(std::move(root)), prefix_(std::move(prefix)) {}

  const NodePtr& node() const { return root_; }
  const std::string& prefix() const { return prefix_; }
  bool Has(absl::string_view key) const;
  // The sub-tree at `key` (a mapping or list).
  absl::StatusOr<Config> Sub(absl::string_view key) const;
  // Keys of this mapping, in order.
  std::vector<std::string> Keys() const;

  template <typename T>
  absl::StatusOr<T> Get(absl::string_view key) const;
  // Like Get, but an absent or null key gives `fallback`; a wrong type is still an error.
  template <typename T>
  absl::StatusOr<T> GetOr(absl::string_view key, T fallback) const {
    if (!HasValue(key)) return fallback;
    return Get<T>(key);
  }

  // "trainer.max_epochs" for `key` relative to this config.
  std::string FullKey(absl::string_view key) const;
  // Describes where `key` was set, or "" when unknown.
  std::string WhereSet(absl::string_view key) const;

 private:
  bool HasValue(absl::string_view key) const;
  absl::StatusOr<NodePtr> Lookup(absl::string_view key) const;
  absl::Status TypeError(absl::string_view key, const Node& node, const char* expected) const;

  NodePtr root_;
  std::string prefix_;
};

template <>
absl::StatusOr<bool> Config::Get<bool>(absl::string_view key) const;
template <>
absl::StatusOr<int64_t> Config::Get<int64_t>(absl::string_view key) const;
template <>
absl::StatusOr<int> Config::Get<int>(absl::string_view key) const;
template <>
absl::StatusOr<double> Config::Get<double>(absl::string_view key) const;
template <>
absl::StatusOr<float> Config::Get<float>(absl::string_view key) const;
template <>
absl::StatusOr<std::string> Config::Get<std::string>(absl::string_view key) const;
template <>
absl::StatusOr<std::vector<int64_t>> Config::Get<std::vector<int64_t>>(absl::string_view key) const;
template <>
absl::StatusOr<std::vector<int>> Config::Get<std::vector<int>>(absl::string_view key) const;
template <>
absl::StatusOr<std::vector<double>> Config::Get<std::vector<double>>(absl::string_view key) const;
template <>
absl::StatusOr<std::vector<std::string>> Config::Get<std::vector<std::string>>(
    absl::string_view key) const;
template <>
absl::StatusOr<NodePtr> Config::Get<NodePtr>(absl::string_view key) const;

}  // namespace kiln::config
