// File helpers every layer uses: what a path is, creating folders, and writing a file so that
// readers never see half of it (a crash mid-write leaves the previous file whole).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln {

// Whether `path` is a regular file / a directory (following symbolic links).
bool IsRegularFile(const std::string& path);
bool IsDirectory(const std::string& path);
// `path` made absolute against the working directory (as it is when already absolute, or when the
// working directory cannot be read).
std::string AbsolutePath(const std::string& path);
// The whole of a file's bytes. Fails with "PATH: no such file", "PATH: is a folder, not a file"
// or "PATH: cannot be read (REASON)".
absl::StatusOr<std::string> ReadFileToString(const std::string& path);
// Creates a directory and its parents.
absl::Status MakeDirs(const std::string& path);
// Writes a file through a temporary name, fsync, a rename and an fsync of its folder. A failure
// at any step (a full disk, an I/O error, a read-only folder) leaves `path` as it was and no
// temporary file behind.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

// Removes the temporary files (NAME.tmp.PID) that WriteFileAtomically left in `dir` when its
// process was killed mid-write, those of processes no longer alive on this machine; returns how
// many it removed (0 when `dir` does not exist).
int RemoveStaleTemporaryFiles(const std::string& dir);

// Takes the bytes of a file in order. It never fails: after a failed write it drops the rest,
// and WriteFileAtomically returns the error once `produce` is done (serializers such as
// LibTorch's cannot be stopped midway without throwing from a destructor).
using ByteSink = std::function<void(const void* data, size_t size)>;
// WriteFileAtomically with the bytes handed to `sink` piece by piece by `produce`, whose own
// failure (a status) also leaves `path` as it was.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::function<absl::Status(const ByteSink& sink)>& produce);

}  // namespace kiln
