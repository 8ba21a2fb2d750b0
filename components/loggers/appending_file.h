// A logger's output file: created (emptied) by the first write of the run, appended to and
// flushed by every write after it, also after Close (a test after a fit goes on in the same file).
// A failed write leaves the file as it was before it (no half row).
#pragma once

#include <sys/types.h>

#include <cstdio>
#include <string>

#include "absl/status/status.h"

namespace kiln {

class AppendingFile {
 public:
  explicit AppendingFile(std::string path) : path_(std::move(path)) {}
  ~AppendingFile() { Close().IgnoreError(); }
  AppendingFile(const AppendingFile&) = delete;
  AppendingFile& operator=(const AppendingFile&) = delete;

  // Whether nothing was written yet in this run.
  bool fresh() const { return !started_; }
  absl::Status Append(const std::string& bytes);
  // Replaces the file by `contents` (atomically); later writes append to it. A resumed run starts
  // from the rows it keeps, a new column's header rewrites the file.
  absl::Status StartWith(const std::string& contents);
  absl::Status Close();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  bool started_ = false;
  off_t whole_size_ = 0;  // the file's size after the last write that succeeded
};

}  // namespace kiln
