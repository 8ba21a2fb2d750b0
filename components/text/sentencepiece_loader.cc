// Finds and loads libkiln_sentencepiece.so next to this library (see sentencepiece_backend.h).
#include <dlfcn.h>

#include <mutex>

#include "components/text/sentencepiece_backend.h"

namespace kiln::text::spm {

const Backend* LoadBackend(std::string* error) {
  static std::once_flag once;
  static const Backend* backend = nullptr;
  static std::string load_error;
  std::call_once(once, [] {
    Dl_info info;
    std::string dir = ".";
    if (::dladdr(reinterpret_cast<void*>(&LoadBackend), &info) != 0 && info.dli_fname != nullptr) {
      std::string self = info.dli_fname;
      size_t slash = self.rfind('/');
      if (slash != std::string::npos) dir = self.substr(0, slash);
    }
    std::string path = dir + "/libkiln_sentencepiece.so";
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      load_error = "cannot load " + path + ": " + (why ? why : "unknown error");
      return;
    }
    using Entry = const Backend* (*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(handle, "kiln_sentencepiece_backend"));
    if (entry == nullptr) {
      load_error = path + " has no kiln_sentencepiece_backend()";
      return;
    }
    backend = entry();  // never unloaded, as plugins
  });
  if (backend == nullptr && error != nullptr) *error = load_error;
  return backend;
}

}  // namespace kiln::text::spm
