// One entry of a defaults list (`- model: cnn`, `- base`, `- override /optimizer: adamw`,
// `- optional db_schema: ${db}`, `- server/db@server.primary: mysql`, `- _self_`), with Hydra
// 1.3's rules for its group path, config path, package and override key.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lib/config/node.h"

namespace kiln::config {

struct DefaultElement {
  bool is_group = false;  // GroupDefault (`group: option`) vs ConfigDefault (`- path`)
  std::string path;       // ConfigDefault: "base", "/abs/path", "_self_"
  std::string group;      // GroupDefault: "model", "/optimizer", "server/db"
  std::optional<std::string> package;

  // GroupDefault's option: a name, a list of names (multi-select), or null.
  bool value_is_null = false;
  bool value_is_list = false;
  std::string value;
  std::vector<std::string> options;

  bool optional = false;
  bool override_ = false;
  bool external_append = false;  // added by `+group=option` on the command line
  bool primary = false;
  bool deleted = false;
  bool config_name_overridden = false;

  std::optional<std::string> package_header;  // absolute, "_global_..." form
  std::optional<std::string> parent_base_dir;
  std::optional<std::string> parent_package;

  Source source;  // where the entry was written

  bool is_self() const;
  bool is_options() const { return is_group && value_is_list; }
  bool is_missing() const;
  bool is_interpolation() const;

  void UpdateParent(const std::string& base_dir, const std::string& package);
  void SetPackageHeader(const std::optional<std::string>& header);

  std::string GroupPath() const;
  std::string ConfigPath() const;
  std::optional<std::string> Name() const;
  std::string DefaultPackage() const;
  std::optional<std::string> Package(bool default_to_package_header = true) const;
  std::string FinalPackage(bool default_to_package_header = true) const;
  std::string OverrideKey() const;

  // Replaces `${key}` in the option (or path) with known choices; false if one is unknown.
  bool ResolveInterpolation(
      const std::vector<std::pair<std::string, std::optional<std::string>>>& known,
      std::string* unresolved);

  // How the entry reads in a defaults list: "model: cnn", "override /optimizer: adamw".
  std::string Describe() const;

 private:
  std::string RelativeGroupPath() const;
};

}  // namespace kiln::config
