// Loads shared libraries that register components: kiln's own LibTorch layers (loaded only by
// the commands that need them, so composing a config never pays LibTorch's start-up) and,
// later, plugins. RTLD_NOW so missing symbols fail here, never unloaded.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace kiln {

// Loads `path` once; components it registers are recorded with `origin` ("built-in", "plugin x").
absl::Status LoadComponentLibrary(const std::string& path, const std::string& origin);

}  // namespace kiln
