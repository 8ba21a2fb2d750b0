#include "lib/run/command.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "absl/strings/str_replace.h"
#include "lib/base/files.h"

namespace kiln::run {
namespace {

std::map<std::string, CommandFn>& Commands() {
  static auto* commands = new std::map<std::string, CommandFn>();
  return *commands;
}

}  // namespace

void RegisterCommand(const std::string& name, CommandFn fn) { Commands()[name] = std::move(fn); }
bool HasCommand(const std::string& name) { return Commands().count(name) > 0; }
const CommandFn* FindCommand(const std::string& name) {
  auto it = Commands().find(name);
  return it == Commands().end() ? nullptr : &it->second;
}

std::string ExecutablePath() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "kiln";
}

std::string ExecutableDir() {
  std::string path = ExecutablePath();
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string Version() { return KILN_VERSION; }

std::string DefaultConfigPath() {
  std::string installed = ExecutableDir() + "/../share/kiln/configs";
  char canonical[4096];
  if (::realpath(installed.c_str(), canonical) != nullptr) return canonical;
  Dl_info info;
  if (::dladdr(reinterpret_cast<void*>(&DefaultConfigPath), &info) != 0 &&
      info.dli_fname != nullptr) {
    std::string library = info.dli_fname;
    std::string beside = library.substr(0, library.rfind('/') + 1) + "../share/kiln/configs";
    if (::realpath(beside.c_str(), canonical) != nullptr) return canonical;
  }
  if (!IsDirectory(KILN_SOURCE_CONFIG_DIR)) return installed;
  return KILN_SOURCE_CONFIG_DIR;
}

int ExitCodeFor(const absl::Status& status) {
  if (int requested = RequestedExitCode(status); requested >= 0) return requested;
  switch (status.code()) {
    case absl::StatusCode::kOk: return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kOutOfRange: return kExitUsage;
    default: return kExitFailure;
  }
}

void ReportError(const absl::Status& status) {
  if (IsReported(status)) return;
  std::string message = absl::StrReplaceAll(status.message(), {{"\n", " "}});
  std::fprintf(stderr, "kiln: error: %s\n", message.c_str());
}

}  // namespace kiln::run
