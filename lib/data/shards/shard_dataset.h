// A dataset read as a stream of shards, WebDataset's way, with epochs that are exact and
// resumable (docs/data.md):
//  - the epoch's shard order is a shuffle drawn from (seed, epoch) (storage order unshuffled);
//  - the shards laid end to end make the epoch's stream; rank r of W reads positions
//    [r*q, (r+1)*q) of it, q = ceil(N/W) (the last rank wraps around to the start, as PyTorch's
//    DistributedSampler pads), so ranks read disjoint parts whose union is the epoch;
//  - each rank streams its part sequentially on one reader thread and passes it through a shuffle
//    buffer of `buffer` samples (the order is computed ahead from the index's sample counts, so it
//    is a pure function of (seed, epoch, rank) and a resume at batch k skips exactly k batches);
//  - the loader's threads decode the samples in parallel.
// Memory holds at most buffer + the loader's look-ahead samples' bytes, whatever the shards' size.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lib/data/dataset.h"
#include "lib/data/sampler.h"
#include "lib/data/shards/shard_set.h"
#include "lib/data/shards/tar_shard.h"

namespace kiln::data::shards {

// The order of one rank's epochs over shards with `counts` samples each.
class ShardOrder : public Sampler {
 public:
  ShardOrder(std::vector<int64_t> counts, bool shuffle, uint64_t seed, int64_t rank,
             int64_t world_size, int64_t buffer);
  // Sample ids (shard by shard, in index order, from 0) in the order the loader delivers them.
  std::vector<int64_t> EpochOrder(int64_t epoch) const override;
  // The ids in the order this rank reads them from its shards.
  std::vector<int64_t> ReadOrder(int64_t epoch) const;
  // The shard holding sample `id`, and its position there.
  std::pair<size_t, int64_t> Locate(int64_t id) const;
  int64_t buffer() const { return shuffle_ ? buffer_ : 0; }

 private:
  std::vector<int64_t> counts_, starts_;
  int64_t total_ = 0;
  bool shuffle_;
  uint64_t seed_;
  int64_t rank_, world_, buffer_;
};

// Turns one sample's files into an example; `url` names its shard in errors. Runs on the loader's
// threads, several at once.
using ShardSampleDecoder =
    std::function<absl::StatusOr<Example>(const ShardSample&, const std::string& url, SampleRng&)>;

class ShardDataset : public Dataset {
 public:
  ShardDataset(ShardSet set, ShardSampleDecoder decode, int64_t shuffle_buffer);
  int64_t size() const override { return set_.samples(); }
  // Shards are read in order: random access is refused with a line saying so.
  absl::StatusOr<Example> Get(int64_t index, SampleRng& rng) const override;
  std::shared_ptr<Sampler> StreamSampler(bool shuffle, uint64_t seed, int64_t rank,
                                         int64_t world_size) const override;
  absl::StatusOr<std::unique_ptr<EpochSource>> OpenEpoch(const Sampler& sampler, int64_t epoch,
                                                         const std::vector<int64_t>& order,
                                                         size_t first, size_t ahead) const override;
  const ShardSet& shard_set() const { return set_; }

 private:
  ShardSet set_;
  std::vector<int64_t> counts_;
  ShardSampleDecoder decode_;
  int64_t shuffle_buffer_;
};

}  // namespace kiln::data::shards
