// The command seam: a command (`train`, `serve`, ...) is a function of the job's resolved config
// and run folder, registered by the layer that implements it; the `kiln` program (lib/app) finds it
// by name. Also what every layer needs from the program around it: exit codes for a status, the
// one-line error report, kiln's version and its config folder.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "lib/base/exit_code.h"
#include "lib/config/compose.h"
#include "lib/config/config.h"

namespace kiln::run {

// What a command's job gets: the resolved config and where to write.
struct JobContext {
  std::string command;
  std::string subcommand;  // `kiln tune lr_find`: lr_find
  config::Config cfg;      // the job config, interpolations resolved
  const config::ComposeResult* composed = nullptr;
  std::string output_dir;
};
using CommandFn = std::function<absl::Status(JobContext&)>;

// Commands are provided by the layers that implement them (lib/commands registers `train`).
void RegisterCommand(const std::string& name, CommandFn fn);
bool HasCommand(const std::string& name);
// The command registered as `name`, or null.
const CommandFn* FindCommand(const std::string& name);

// The exit code for a failed status: 2 for user mistakes, 1 otherwise.
int ExitCodeFor(const absl::Status& status);
// Prints "kiln: error: MESSAGE" on one line to stderr.
void ReportError(const absl::Status& status);

// kiln's configs: `share/kiln/configs` beside the installed `kiln` (or beside this library, for a
// program that links kiln), else the source tree's `configs/`.
std::string DefaultConfigPath();
std::string Version();
// The running program (/proc/self/exe) and its folder.
std::string ExecutablePath();
std::string ExecutableDir();

}  // namespace kiln::run

// The names these had in kiln::app until 0.1.0, for plugins built against them; removed in the next
// version (docs/plugins.md).
namespace kiln::app {
using run::CommandFn;
using run::ExitCodeFor;
using run::JobContext;
using run::RegisterCommand;
using run::ReportError;
}  // namespace kiln::app
