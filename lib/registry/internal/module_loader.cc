#include "lib/registry/internal/module_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

// LibTorch and the CUDA libraries it links live in the virtual environment kiln was built with
// (scripts/setup_venv.sh): when one of them is what the loader could not find, say what to run.
std::string MissingTorchHint(const std::string& error) {
  if (error.find("cannot open shared object file") == std::string::npos) return "";
  for (const char* prefix : {"libtorch", "libc10", "libcu", "libnv", "libnccl", "libgomp"}) {
    if (error.find(prefix) != std::string::npos) {
      return " (LibTorch comes from the project's virtual environment .venv, which is missing or "
             "incomplete: "
             "run scripts/setup.sh)";
    }
  }
  return "";
}

}  // namespace

absl::Status LoadComponentLibrary(const std::string& path, const std::string& origin) {
  static std::mutex mu;
  static std::set<std::string>* loaded = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  if (loaded->count(path)) return absl::OkStatus();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(path, ": no such library"));
  auto handle = OpenLibraryAs(path, origin, RTLD_GLOBAL);
  if (!handle.ok()) return handle.status();
  loaded->insert(path);  // never dlclose: registered factories point into it
  return absl::OkStatus();
}

absl::StatusOr<void*> OpenLibraryAs(const std::string& path, const std::string& origin, int flags) {
  RegistryHub& hub = RegistryHub::Instance();
  std::string previous = hub.current_origin();
  hub.set_current_origin(origin);
  // Registrations run as the library's static initializers, inside dlopen.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | flags);
  hub.set_current_origin(previous);
  if (handle == nullptr) {
    const char* error = ::dlerror();
    std::string message = error != nullptr ? error : "unknown error";
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load ", path, ": ", message, MissingTorchHint(message)));
  }
  return handle;
}

}  // namespace kiln
