// Runs a program and captures its exit code, stdout and stderr (for CLI tests).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace kiln::testing {

struct ProcessResult {
  int exit_code = -1;  // 128+N when killed by signal N
  std::string out;
  std::string err;
};

// `env` entries are added to (or replace in) the current environment; `cwd` empty = inherit.
ProcessResult RunProcess(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env = {},
                         const std::string& cwd = "");

// Starts `argv` in a process group of its own, its output discarded, and returns its pid (-1 when
// fork fails): a test kills it midway with kill(pid, ...) or, with everything it started,
// kill(-pid, ...), then reaps it with waitpid. It is killed when the thread that started it ends
// (the test process killed by ctest's timeout or Ctrl-C): start it from the test's own thread.
pid_t StartInOwnGroup(const std::vector<std::string>& argv, const std::string& cwd = "");
// The live processes of process group `group` (zombies left out), read from /proc.
std::vector<pid_t> ProcessesInGroup(pid_t group);
// Kills `pid` (the leader of its own group) with SIGKILL alone, reaps it, and waits up to
// `seconds` for the rest of its group to end; returns the processes still alive then.
std::vector<pid_t> KillLeaderAndWaitForGroup(pid_t pid, int seconds);

// A loopback TCP port nobody listens on now (the kernel's pick for port 0), for a server a test
// starts.
int FreeLoopbackPort();

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Writes `contents` to path()/relative, creating folders.
  void Write(const std::string& relative, const std::string& contents) const;

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path);
bool FileExists(const std::string& path);

}  // namespace kiln::testing
