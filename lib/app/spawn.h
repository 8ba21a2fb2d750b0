// Starting child `kiln` processes (sweep jobs, data-parallel workers) and describing how they ended.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::app {

struct SpawnOptions {
  std::map<std::string, std::string> env;  // added to (or replacing in) this process's environment
  std::string output_file;                 // stdout and stderr go here (appending) when set
};

// Starts argv[0] with stdin from /dev/null.
absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv, const SpawnOptions& options = {});

// "exited with code 3" or "killed by signal 9 (SIGKILL)", from waitpid's status.
std::string DescribeExit(int wait_status);
// The shell's exit code for a waitpid status: the code, or 128 + the signal.
int ExitCodeOf(int wait_status);

}  // namespace kiln::app
