// The `kiln` command line: a command, Hydra's flags, and overrides.
//   kiln COMMAND [--config-path DIR] [--config-name NAME] [--config-dir DIR] [--cfg job|hydra|all]
//        [--resolve] [--package PKG] [--info [defaults|defaults-tree|config|searchpath|provenance]]
//        [-m|--multirun] [--dry-run] [--plugin PATH]... [--help] [overrides...]
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::app {

struct CommandLine {
  std::string command;
  std::string subcommand;  // `kiln tune lr_find`: lr_find (see KnownSubcommands)
  std::optional<std::string> config_path;
  std::optional<std::string> config_name;
  std::vector<std::string> config_dirs;
  std::optional<std::string> cfg;  // job | hydra | all
  bool resolve = false;
  std::optional<std::string> package;
  std::optional<std::string> info;  // "" means every section
  bool multirun = false;
  bool dry_run = false;
  bool help = false;
  std::vector<std::string> plugins;  // --plugin PATH, in order
  bool markdown = false;             // `kiln list --markdown`: docs/components.md
  bool fail_fast = false;            // -m: stop launching after the first failed job
  // Internal: run job N of the sweep in SWEEP_DIR in this process (the `local` launcher's
  // children).
  std::optional<int> multirun_job;
  std::optional<std::string> sweep_dir;
  // Internal: a data-parallel worker started by `trainer.devices=N`; runs the job whose resolved
  // config the parent wrote into run directory DIR.
  std::optional<std::string> worker_of;
  std::vector<std::string> overrides;
};

// Parses argv[1..]. Errors say which argument was wrong.
absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args);

// The commands kiln knows, with a line each, for usage messages.
const std::vector<std::pair<std::string, std::string>>& KnownCommands();
// The subcommands a command takes (`tune`: lr_find); empty for a command that takes none.
std::vector<std::string> KnownSubcommands(const std::string& command);
std::string Usage();
// The primary config a command composes without --config-name: `average`, `serve` and `tune`
// have their own (configs/NAME.yaml), every other command `train`.
std::string DefaultConfigName(const std::string& command);

}  // namespace kiln::app
