// The config search path: folders of YAML files (groups are sub-folders, options are files),
// preceded by kiln's built-in `hydra/` configs. Loads each config once and parses its
// `# @package` header and defaults list.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/config/default_element.h"
#include "lib/config/node.h"
#include "lib/config/search_path.h"

namespace kiln::config {

struct LoadedConfig {
  std::string config_path;  // "model/cnn"
  std::string file;         // where it was read from, for messages
  NodePtr content;          // the config without its `defaults` key
  bool has_defaults_list = false;
  std::vector<DefaultElement> defaults;
  std::optional<std::string> package_header;
};

class ConfigRepository {
 public:
  explicit ConfigRepository(std::vector<SearchPathEntry> search_path);

  // nullptr (not an error) when no such config exists; an error when it exists but is broken.
  absl::StatusOr<const LoadedConfig*> Load(const std::string& config_path);
  bool ConfigExists(const std::string& config_path) const;
  bool GroupExists(const std::string& group) const;
  // Option names of a group, sorted, from every folder on the search path.
  std::vector<std::string> GroupOptions(const std::string& group) const;
  // Sub-groups directly below `parent` ("" for top-level groups), sorted.
  std::vector<std::string> Groups(const std::string& parent) const;

  const std::vector<SearchPathEntry>& search_path() const { return search_path_; }
  std::string DescribeSearchPath() const;

 private:
  std::optional<std::string> FindFile(const std::string& config_path) const;
  bool IsDir(const std::string& path) const;
  bool IsFile(const std::string& path) const;

  std::vector<SearchPathEntry> search_path_;
  std::unordered_map<std::string, std::unique_ptr<LoadedConfig>> cache_;
  mutable std::unordered_map<std::string, bool> stat_cache_;
};

// Parses a loaded YAML file into a LoadedConfig (header, defaults list, content).
absl::StatusOr<std::unique_ptr<LoadedConfig>> ParseConfigFile(const std::string& config_path,
                                                              const std::string& file,
                                                              absl::string_view text);

// kiln's built-in `hydra/...` configs (output dirs, launcher, sweeper, help, logging).
const std::map<std::string, std::string>& BuiltinHydraConfigs();

}  // namespace kiln::config
