// Composes a config the way Hydra 1.3 does: defaults list, merge, command-line overrides,
// and the `hydra` node (run dirs, choices, overrides) that the launcher and tools read.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/node.h"
#include "lib/config/override.h"
#include "lib/config/search_path.h"

namespace kiln::config {

// Hydra's internals, not part of the installed API (lib/config/defaults_list.h, repository.h).
struct DefaultsList;
class ConfigRepository;

struct ComposeOptions {
  // Folders searched for configs, in order (the primary config folder first).
  std::vector<SearchPathEntry> search_path;
  std::string config_name;  // primary config, e.g. "train"; empty for none
  std::vector<std::string> overrides;
  bool multirun = false;  // sweep overrides are allowed (and left out of composition)
  std::string job_name = "kiln";
  std::string version = "0.0.0";
  // A plain `key=value` override of a key the composition lacks is left out instead of refused
  // (it stays in ComposeResult::defaults.config_overrides): for a caller that applies the
  // overrides to another config afterwards, as kiln's commands that start from a run's stored
  // config do, where the key may be the run's own (`data.predict=` of a text dataset).
  bool defer_missing_keys = false;
};

struct ComposeResult {
  NodePtr root;   // everything, `hydra` included
  NodePtr job;    // the job's config: root without `hydra`
  NodePtr hydra;  // the `hydra` node
  // The resolved defaults list (choices, config overrides, the defaults tree): for kiln's own
  // commands, which include lib/config/defaults_list.h.
  std::shared_ptr<const DefaultsList> defaults;
  std::vector<Override> overrides;  // the parsed command-line overrides, in order
  // hydra.mode as the config set it ("RUN", "MULTIRUN", or "" when unset) before composition
  // wrote the mode it composed in; Hydra runs a config that sets MULTIRUN as a multirun.
  std::string configured_mode;
};

// Parses every override first, so a syntax error is reported before any file is read.
absl::StatusOr<std::vector<Override>> ParseOverrides(const std::vector<std::string>& overrides);

absl::StatusOr<ComposeResult> Compose(const ComposeOptions& options);
// Like Compose, reusing a repository (and its file cache) across jobs of a sweep.
absl::StatusOr<ComposeResult> Compose(const ComposeOptions& options, ConfigRepository& repo);

// The job config with every interpolation resolved (`???` left as is).
absl::StatusOr<NodePtr> ResolveJob(const ComposeResult& result);
// The hydra node, resolved (run dirs expanded).
absl::StatusOr<NodePtr> ResolveHydra(const ComposeResult& result);

// Sets `key` (dotted) in a config tree, creating maps on the way.
void SetPath(Node& root, const std::string& dotted_key, NodePtr value);

}  // namespace kiln::config
