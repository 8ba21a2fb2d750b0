// A checkpoint file (LibTorch's zip archive, as torch::serialize::OutputArchive writes it) opened
// without reading its tensors: the archive's layout (its data.pkl) is unpickled with every
// tensor's storage left unread, and a tensor's bytes come from the file when asked for, whole or
// a range of its rows. A worker resuming from a sharded checkpoint reads only the rows it keeps of
// each rank's pieces this way, never a rank's whole file (sharded_checkpoint.cc).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

// Whether what LibTorch's loader would allocate for the archive at `path` fits in the file: no
// record larger than it, and no pickle claiming more bytes than its record holds (LibTorch's
// unpickler allocates a claimed length before reading it). Throws c10::Error for an archive the
// zip reader cannot open.
bool ArchiveClaimsFit(const std::string& path, uint64_t file_size);

class LazyArchive {
 public:
  // A missing file is NotFound; one that is not a readable archive (corrupt, truncated) is a
  // one-line error naming it.
  static absl::StatusOr<std::unique_ptr<LazyArchive>> Open(const std::string& path);
  ~LazyArchive();
  LazyArchive(const LazyArchive&) = delete;
  LazyArchive& operator=(const LazyArchive&) = delete;

  const std::string& path() const { return path_; }
  // The value at `keys`: an entry of the archive, then of the archive it holds, and so on (what
  // torch::serialize::InputArchive's read of each key, one inside the other, gives); nullopt when
  // there is none. A nested archive is an Object; a tensor comes unread (sizes, strides and dtype,
  // no bytes: Read it).
  std::optional<c10::IValue> Find(const std::vector<std::string>& keys) const;

  // Rows [first, first + count) of dimension 0 of `t`, an unread tensor of this archive, read
  // from the file into a contiguous tensor; a tensor of no dimension is read whole. Throws
  // std::runtime_error naming the file when its bytes are not there.
  torch::Tensor ReadRows(const torch::Tensor& t, int64_t first, int64_t count) const;
  torch::Tensor Read(const torch::Tensor& t) const;
  // ReadRows into `into` (of those rows' shape): straight from the file into its memory when it
  // is a contiguous CPU tensor of `t`'s dtype, with no buffer between.
  void ReadRowsInto(const torch::Tensor& t, int64_t first, int64_t count,
                    const torch::Tensor& into) const;

  // The whole archive into `out`, every tensor read, except those `replace` gives a value for by
  // their path (the keys from the root joined with '/', as "optimizer/state/3/exp_avg").
  void CopyTo(
      torch::serialize::OutputArchive& out,
      const std::function<std::optional<torch::Tensor>(const std::string& path)>& replace) const;

 private:
  LazyArchive() = default;
  struct Record {
    uint64_t offset = 0;  // of the record's bytes in the file
    uint64_t size = 0;
  };
  const Record* RecordOf(const torch::Tensor& t) const;
  // ReadRows into `out`, which is allocated unless given (contiguous, of the rows' shape and
  // `t`'s dtype: ReadRowsInto checks).
  void Rows(const torch::Tensor& t, int64_t first, int64_t count, torch::Tensor& out) const;
  void ReadBytes(const Record& record, uint64_t begin, uint64_t bytes, void* into) const;
  // `v` with every tensor it holds (in lists, tuples, dicts) read.
  c10::IValue Materialize(const c10::IValue& v) const;
  void CopyObject(
      const c10::ivalue::Object& object, torch::serialize::OutputArchive& out,
      const std::string& prefix,
      const std::function<std::optional<torch::Tensor>(const std::string& path)>& replace) const;

  std::string path_;
  int fd_ = -1;
  c10::IValue root_;
  std::unordered_map<const c10::StorageImpl*, Record> records_;
};

}  // namespace kiln
