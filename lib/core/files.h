// File helpers every layer uses: what a path is, creating folders, and writing a file so that
// readers never see half of it (a crash mid-write leaves the previous file whole).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace kiln {

// Whether `path` is a regular file / a directory (following symbolic links).
bool IsRegularFile(const std::string& path);
bool IsDirectory(const std::string& path);
// `path` made absolute against the working directory (as it is when already absolute, or when the
// working directory cannot be read).
std::string AbsolutePath(const std::string& path);
// Creates a directory and its parents.
absl::Status MakeDirs(const std::string& path);
// Writes a file through a temporary name, fsync and a rename.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace kiln
