// Starting child `kiln` processes (sweep jobs, data-parallel workers) and describing how they
// ended.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::run {

struct SpawnOptions {
  std::map<std::string, std::string> env;  // added to (or replacing in) this process's environment
  std::string output_file;                 // stdout and stderr go here (appending) when set
  // The child gets SIGTERM when this process dies, however it dies (SIGKILL too): a kiln child
  // then checkpoints and stops as on any SIGTERM. Call SpawnProcess from the main thread: Linux
  // sends the signal when the spawning thread ends.
  bool stop_with_parent = false;
};

// Starts argv[0] with stdin from /dev/null.
absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const SpawnOptions& options = {});

// In a child started with stop_with_parent: asks Linux for SIGTERM when the parent dies, and
// returns false when the parent is already gone (the child should not start its work). Else true.
bool StopWithParent();

// "exited with code 3" or "killed by signal 9 (SIGKILL)", from waitpid's status.
std::string DescribeExit(int wait_status);
// The shell's exit code for a waitpid status: the code, or 128 + the signal.
int ExitCodeOf(int wait_status);
// The last line of a child's log file that is not blank (what it said when it failed), or "".
std::string LastLineOf(const std::string& path);

}  // namespace kiln::run
