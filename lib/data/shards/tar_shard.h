// WebDataset-layout tar shards, read and written with libarchive: a shard is a tar of KEY.EXT
// members, consecutive members with the same KEY making one sample (KEY.jpg, KEY.cls, ...).
// A shard is a local path or `pipe:CMD`, a shell command whose standard output is the tar
// (`pipe:curl -s URL`, an object store's CLI).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/data/encoded_sample.h"

struct archive;  // libarchive's handle

namespace kiln::data::shards {

// WebDataset's split of a member name: the key is everything before the first dot of the last
// path component ("a/b.seg.jpg" -> {"a/b", "seg.jpg"}); the extension is lowercased.
std::pair<std::string, std::string> SplitKeyExt(std::string_view name);

struct ShardSample {
  std::string key;
  EncodedSample files;  // extension -> bytes, in the shard's order
  // The bytes of extension `ext`, or null.
  const std::string* Find(std::string_view ext) const;
  std::string* Find(std::string_view ext) {
    return const_cast<std::string*>(static_cast<const ShardSample*>(this)->Find(ext));
  }
};

class ShardReader {
 public:
  // Opens a local shard or starts `pipe:CMD`.
  static absl::StatusOr<std::unique_ptr<ShardReader>> Open(const std::string& url);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  // The next sample, nullopt at the end of the shard. With keep=false the members' bytes are
  // skipped, not read into memory (counting, skipping to a resume point).
  absl::StatusOr<std::optional<ShardSample>> Next(bool keep = true);
  const std::string& url() const { return url_; }

 private:
  explicit ShardReader(std::string url) : url_(std::move(url)) {}
  // An error naming the shard; for a pipe, the command's exit status when it failed.
  absl::Status Fail(const std::string& what);
  absl::Status FinishPipe();

  std::string url_;
  struct archive* archive_ = nullptr;
  int fd_ = -1;
  int child_ = -1;  // pid of a pipe's shell
  // The current member's data, read (keep) or skipped.
  absl::StatusOr<std::string> MemberData(bool keep, const std::string& name);

  // A member whose header has been read but not its data: the first of the next sample, whose
  // own Next call decides whether its bytes are kept.
  std::string pending_name_, pending_key_, pending_ext_;
  bool pending_ = false, done_ = false;
  int64_t entry_size_ = 0;  // the current member's size
};

// Counts the samples of a shard (reading headers; data is skipped).
absl::StatusOr<int64_t> CountSamples(const std::string& url);

// Writes one shard: members with fixed metadata (mtime 0, mode 0644, owner 0), so the same samples
// always give the same bytes. The shard is written under a temporary name and renamed by Close.
class ShardWriter {
 public:
  static absl::StatusOr<std::unique_ptr<ShardWriter>> Create(const std::string& path);
  ~ShardWriter();
  absl::Status Add(const std::string& key, const EncodedSample& files);
  // Bytes the shard takes so far, as tar lays it out (headers, padding).
  int64_t bytes() const { return bytes_; }
  int64_t samples() const { return samples_; }
  // Finishes the tar, fsyncs and renames it into place; returns its SHA-256 (hex).
  absl::StatusOr<std::string> Close();

 private:
  ShardWriter() = default;
  std::string path_, temp_;
  struct archive* archive_ = nullptr;
  int64_t bytes_ = 0, samples_ = 0;
  bool closed_ = false;
};

// The SHA-256 (hex) of a file's bytes.
absl::StatusOr<std::string> FileSha256(const std::string& path);

}  // namespace kiln::data::shards
