#include "lib/run/internal/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace kiln::run {

namespace {
// Set in a child's environment by SpawnProcess(stop_with_parent): the parent's pid.
constexpr char kParentPidVariable[] = "KILN_STOP_WITH_PARENT";
}  // namespace

bool StopWithParent() {
  const char* value = std::getenv(kParentPidVariable);
  if (value == nullptr) return true;
  pid_t parent = static_cast<pid_t>(std::atoll(value));
  ::unsetenv(kParentPidVariable);  // this process's own children are told their own parent
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  return ::getppid() == parent;  // the parent may have died before prctl
}

absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   const SpawnOptions& options) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::map<std::string, std::string> added = options.env;
  if (options.stop_with_parent) added[kParentPidVariable] = std::to_string(::getpid());
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    std::string name = entry.substr(0, entry.find('='));
    if (added.count(name) == 0) env_storage.push_back(entry);
  }
  for (const auto& [name, value] : added) env_storage.push_back(name + "=" + value);
  std::vector<char*> env;
  for (auto& e : env_storage) env.push_back(e.data());
  env.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (!options.output_file.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, options.output_file.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  }
  pid_t pid = 0;
  int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
  return pid;
}

std::string DescribeExit(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with code ", WEXITSTATUS(wait_status));
  int signal = WTERMSIG(wait_status);
  const char* name = sigabbrev_np(signal);
  return absl::StrCat("was killed by signal ", signal,
                      name != nullptr ? absl::StrCat(" (SIG", name, ")") : "");
}

int ExitCodeOf(int wait_status) {
  return WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
}

std::string LastLineOf(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!absl::StripAsciiWhitespace(line).empty()) last = line;
  }
  return last;
}

}  // namespace kiln::run
