// Where configs are searched for, Hydra's config search path: the folders (or kiln's built-in
// `pkg://` configs) in order, each named by what added it.
#pragma once

#include <string>

namespace kiln::config {

struct SearchPathEntry {
  std::string provider;  // "kiln" (built-in hydra configs), "main", "command-line", "plugin:NAME"
  std::string path;      // a folder, or "pkg://kiln.hydra" for the built-ins
};

}  // namespace kiln::config
