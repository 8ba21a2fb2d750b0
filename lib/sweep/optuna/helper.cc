#include "lib/sweep/optuna/helper.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/base/status_macros.h"
#include "lib/config/json.h"
#include "lib/config/yaml_io.h"
#include "lib/run/internal/spawn.h"

extern char** environ;

namespace kiln::sweep {

using config::JsonString;
using config::NodeToJson;
namespace {

const char kHelperScript[] =
#include "lib/sweep/optuna/helper_py.inc"
    ;

constexpr char kInstall[] = "pip install optuna (kiln's .venv: scripts/setup_venv.sh test)";

}  // namespace

double ReplyNumber(const config::Node& node) {
  switch (node.kind()) {
    case config::NodeKind::kInt: return config::NumberValue(node);
    case config::NodeKind::kFloat: return node.as_float();
    case config::NodeKind::kString: return std::strtod(node.as_string().c_str(), nullptr);
    default: return std::nan("");
  }
}

const config::Node& Field(const config::NodePtr& reply, const std::string& key) {
  static const config::NodePtr kNull = config::Node::Null();
  config::NodePtr field = reply == nullptr ? nullptr : reply->Find(key);
  return field == nullptr ? *kNull : *field;
}

absl::StatusOr<std::unique_ptr<OptunaHelper>> OptunaHelper::Start(const std::string& python,
                                                                  const std::string& log_file) {
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<OptunaHelper> h(new OptunaHelper());
  h->python_ = python;
  h->log_file_ = log_file;
  int in_pipe[2], out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  // A helper that died must not kill kiln with SIGPIPE on the next request.
  ::signal(SIGPIPE, SIG_IGN);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  std::vector<std::string> argv = {python, "-u", "-c", kHelperScript};
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, python.c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  if (rc != 0) {
    ::close(in_pipe[1]);
    ::close(out_pipe[0]);
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot start Python for the optuna sweeper (", "hydra.sweeper.python=", python,
        "): ", std::strerror(rc), "; install Optuna with: ", kInstall));
  }
  h->pid_ = pid;
  h->to_ = in_pipe[1];
  h->from_ = out_pipe[0];
  // The helper's first line: ready, or Optuna missing.
  auto hello = h->Call("");
  if (!hello.ok()) {
    if (absl::StrContains(hello.status().message(), "optuna-missing")) {
      return absl::FailedPreconditionError(
          absl::StrCat("Optuna is not installed for ", python,
                       " (hydra.sweeper.python); install it with: ", kInstall));
    }
    return hello.status();
  }
  if (auto v = (*hello)->Find("optuna")) h->version_ = v->as_string();
  h->start_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return h;
}

OptunaHelper::~OptunaHelper() {
  if (to_ >= 0) ::close(to_);  // end of input: the helper exits
  if (from_ >= 0) ::close(from_);
  if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
}

absl::Status OptunaHelper::Died(const std::string& doing) {
  dead_ = true;
  std::string last = run::LastLineOf(log_file_);
  return absl::UnavailableError(
      absl::StrCat("the Optuna helper (", python_, ", pid ", pid_, ") ended while ", doing,
                   last.empty() ? "" : absl::StrCat(" (", last, ")"),
                   "; the study keeps every trial told so far: run the same command "
                   "again to resume it"));
}

absl::StatusOr<config::NodePtr> OptunaHelper::Call(const std::string& request) {
  std::string op = request.empty() ? "starting" : request.substr(0, request.find(','));
  if (dead_) return Died(op);
  if (!request.empty()) {
    std::string line = request + "\n";
    size_t off = 0;
    while (off < line.size()) {
      ssize_t n = ::write(to_, line.data() + off, line.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Died(absl::StrCat("kiln sent ", op));
      off += static_cast<size_t>(n);
    }
  }
  size_t newline;
  while ((newline = buffer_.find('\n')) == std::string::npos) {
    char buf[4096];
    ssize_t n = ::read(from_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Died(request.empty() ? "starting" : absl::StrCat("answering ", op));
    buffer_.append(buf, static_cast<size_t>(n));
  }
  std::string reply = buffer_.substr(0, newline);
  buffer_.erase(0, newline + 1);
  KILN_ASSIGN_OR_RETURN(config::NodePtr node,
                        config::ParseYaml(reply, "the Optuna helper's reply"));
  if (auto error = node->Find("error")) {
    std::string message = node->Find("message") ? node->Find("message")->as_string() : "";
    if (error->as_string() == "bad-input") return absl::InvalidArgumentError(message);
    return absl::InternalError(absl::StrCat(error->as_string(), ": ", message));
  }
  return node;
}

}  // namespace kiln::sweep
