// Criteo-format files read as a stream each epoch (data=criteo with `stream: true`), so that
// memory holds the shuffle buffer and the loader's look-ahead, not the data: TorchRec's and the
// DLRM reference's way of reading Criteo's terabyte of days, with epochs as exact and resumable as
// kiln's shards (docs/data.md):
//  - the files are counted once (their rows) when the run starts, so an epoch's length is exact;
//  - an epoch's file order is a shuffle drawn from (seed, epoch) (storage order unshuffled);
//  - the files laid end to end make the epoch's stream of N rows; rank r of W reads positions
//    [r*q, (r+1)*q) of it, q = ceil(N/W), wrapping round to the start past N (as PyTorch's
//    DistributedSampler pads), so ranks read disjoint parts whose union is the epoch;
//  - each rank's rows pass through a shuffle buffer of `shuffle_buffer` rows drawn from
//    (seed, epoch, rank), and position p of its epoch is the p-th row out of the buffer: a resume
//    at batch k reads the stream up to there again (without training on it) and goes on with
//    bitwise the same batches.
// A batch is gathered in one go (EpochSource::GetStacked): int64 [B, 39] and float [B], as the
// in-memory rows give it. A bad line under bad_lines=skip leaves its batch one row smaller.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "components/recsys/criteo_file.h"
#include "lib/data/dataset.h"

namespace kiln::recsys {

class CriteoStream : public data::Dataset {
 public:
  // Counts the rows of `files` (at most read.max_rows of each); an error names the file. Files
  // without rows are kept (they add nothing); no rows at all is an error naming `option`.
  static absl::StatusOr<std::shared_ptr<CriteoStream>> Open(std::vector<std::string> files,
                                                            CriteoReadOptions read,
                                                            int64_t shuffle_buffer,
                                                            const std::string& option);

  int64_t size() const override { return total_; }
  // Rows are read in order: random access is refused with a line saying so.
  absl::StatusOr<data::Example> Get(int64_t index, data::SampleRng& rng) const override;
  std::shared_ptr<data::Sampler> StreamSampler(bool shuffle, uint64_t seed, int64_t rank,
                                               int64_t world_size) const override;
  absl::StatusOr<std::unique_ptr<data::EpochSource>> OpenEpoch(const data::Sampler& sampler,
                                                               int64_t epoch,
                                                               const std::vector<int64_t>& order,
                                                               size_t first,
                                                               size_t ahead) const override;

  const std::vector<std::string>& files() const { return files_; }
  const std::vector<int64_t>& rows() const { return rows_; }

 private:
  CriteoStream() = default;
  std::vector<std::string> files_;
  std::vector<int64_t> rows_;
  int64_t total_ = 0;
  CriteoReadOptions read_;
  int64_t shuffle_buffer_ = 1;
};

}  // namespace kiln::recsys
