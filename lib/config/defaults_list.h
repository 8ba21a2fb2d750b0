// Builds the defaults tree of a primary config with the command line's group overrides, then
// flattens it into the ordered list of configs to merge (Hydra 1.3's algorithm).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/default_element.h"
#include "lib/config/override.h"
#include "lib/config/repository.h"

namespace kiln::config {

struct DefaultsTreeNode {
  DefaultElement node;
  DefaultsTreeNode* parent = nullptr;
  bool virtual_root = false;
  bool expanded = false;  // has children (even if all were deleted)
  std::vector<std::unique_ptr<DefaultsTreeNode>> children;
};

// One config to merge, in order.
struct ResultDefault {
  std::string config_path;
  std::optional<std::string> parent;
  std::string package;
  bool is_self = false;
  bool primary = false;
  std::optional<std::string> override_key;
};

struct DefaultsList {
  std::vector<ResultDefault> defaults;
  std::unique_ptr<DefaultsTreeNode> tree;
  std::vector<Override> config_overrides;  // key=value overrides, applied after merging
  // Final choice of every config group (override key -> option, nullopt for null).
  std::vector<std::pair<std::string, std::optional<std::string>>> choices;
};

// `config_name` empty means no primary config. `with_hydra` puts hydra/config first.
absl::StatusOr<DefaultsList> CreateDefaultsList(ConfigRepository& repo,
                                                const std::string& config_name,
                                                const std::vector<Override>& overrides,
                                                bool with_hydra, bool skip_missing);

// The tree as `--info defaults-tree` prints it.
std::string FormatDefaultsTree(const DefaultsTreeNode& tree);

}  // namespace kiln::config
