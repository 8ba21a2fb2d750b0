// Loads shared libraries that register components: kiln's own LibTorch layers (loaded only by
// the commands that need them, so composing a config never pays LibTorch's start-up) and,
// later, plugins. RTLD_NOW so missing symbols fail here, never unloaded.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln {

// Loads `path` once; components it registers are recorded with `origin` ("built-in", "plugin x").
absl::Status LoadComponentLibrary(const std::string& path, const std::string& origin);

// dlopen(path, RTLD_NOW | flags) with `origin` recorded for whatever the library registers from
// its static initializers; the handle is never closed. The error names the library.
absl::StatusOr<void*> OpenLibraryAs(const std::string& path, const std::string& origin, int flags);

}  // namespace kiln
