#include "lib/trainer/internal/cuda_module.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

const CudaModuleHooks* cuda_module_hooks = nullptr;  // constant-initialized: set by the module

// Why the module is not loaded ("" when it is): whether it is, is whether it registered its hooks.
std::string& CudaModuleAbsence() {
  static std::string* note = new std::string();
  return *note;
}

// The folder kiln_engine was loaded from; the module is beside it (a build's lib/, an installed
// prefix's lib/, the Python package's lib/).
std::string EngineLibraryDir() {
  Dl_info info;
  if (::dladdr(reinterpret_cast<void*>(&CudaModuleLoaded), &info) == 0 ||
      info.dli_fname == nullptr) {
    return ".";
  }
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string LoadCudaModule() {
  const char* setting = std::getenv("KILN_LOAD_CUDA");
  std::string mode = setting != nullptr ? setting : "";
  if (mode != "" && mode != "0" && mode != "1" && mode != "auto") {
    std::fprintf(stderr, "kiln: warning: KILN_LOAD_CUDA=%s is not 0, 1 or auto; taking auto\n",
                 mode.c_str());
    mode = "auto";
  }
  if (mode == "0") return "KILN_LOAD_CUDA=0";
#if !KILN_WITH_CUDA
  const std::string note = "this kiln was built without CUDA";
  if (mode == "1") std::fprintf(stderr, "kiln: warning: KILN_LOAD_CUDA=1, but %s\n", note.c_str());
  return note;
#else
  // CUDA's driver: what LibTorch's CUDA needs to see a GPU. Kept loaded (LibTorch uses it).
  if (mode != "1" && ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) {
    return "no CUDA driver (libcuda.so.1) on this machine";
  }
  std::string path = EngineLibraryDir() + "/libkiln_cuda.so";
  if (::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* error = ::dlerror();
    std::string note =
        absl::StrCat("kiln's CUDA module could not be loaded: ", error != nullptr ? error : path);
    std::fprintf(stderr, "kiln: warning: %s; kiln runs on the CPU\n", note.c_str());
    return note;
  }
  return cuda_module_hooks != nullptr ? "" : absl::StrCat(path, " registered nothing");
#endif
}

// As kiln_engine loads (before main, or inside the dlopen that loads it): before anything asks
// LibTorch about CUDA.
[[maybe_unused]] const bool kCudaModuleLoadAttempted = [] {
  CudaModuleAbsence() = LoadCudaModule();
  return true;
}();

}  // namespace

bool CudaModuleLoaded() { return cuda_module_hooks != nullptr; }

std::string CudaModuleNote() { return CudaModuleAbsence(); }

std::string NoCudaDeviceAvailable() {
  std::string note = CudaModuleNote();
  return absl::StrCat("no CUDA device is available", note.empty() ? "" : ": ", note);
}

const CudaModuleHooks* GetCudaModuleHooks() { return cuda_module_hooks; }

void SetCudaModuleHooks(const CudaModuleHooks* hooks) { cuda_module_hooks = hooks; }

}  // namespace kiln
