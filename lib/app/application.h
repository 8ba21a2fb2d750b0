// The `kiln` program as a library function, so tests and other front-ends can run it:
// compose the config, answer --cfg/--info/--help, plan sweeps, create run directories and
// run the command's job through a launcher. User mistakes end in one line and exit code 2.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lib/config/compose.h"
#include "lib/config/config.h"
#include "lib/core/exit_code.h"

namespace kiln::app {


// What a command's job gets: the resolved config and where to write.
struct JobContext {
  std::string command;
  std::string subcommand;             // `kiln tune lr_find`: lr_find
  config::Config cfg;                 // the job config, interpolations resolved
  const config::ComposeResult* composed = nullptr;
  std::string output_dir;
};
using CommandFn = std::function<absl::Status(JobContext&)>;

// Commands are provided by the layers that implement them (the trainer registers `train`).
void RegisterCommand(const std::string& name, CommandFn fn);
bool HasCommand(const std::string& name);

// Runs kiln with argv[1..]; returns the process exit code.
int RunApplication(const std::vector<std::string>& args);

// The exit code for a failed status: 2 for user mistakes, 1 otherwise.
int ExitCodeFor(const absl::Status& status);
// Prints "kiln: error: MESSAGE" on one line to stderr.
void ReportError(const absl::Status& status);

// The folder `configs/` of the source tree, or `share/kiln/configs` next to the installed binary.
std::string DefaultConfigPath();
std::string Version();

}  // namespace kiln::app
