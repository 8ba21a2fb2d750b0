// The order in which an epoch visits a dataset. Orders are pure functions of (seed, epoch), so a
// checkpoint only needs the epoch and how many batches were consumed to resume mid-epoch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace kiln::data {

class Dataset;

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> EpochOrder(int64_t epoch) const = 0;
};

// 0, 1, 2, ... every epoch.
std::shared_ptr<Sampler> SequentialSampler(int64_t size);
// A permutation drawn from (seed, epoch).
std::shared_ptr<Sampler> RandomSampler(int64_t size, uint64_t seed);
// Rank `rank` of `world_size` takes every world_size-th index of `base`'s order, padded by
// wrapping around so every rank gets the same count (as PyTorch's DistributedSampler).
std::shared_ptr<Sampler> DistributedSampler(std::shared_ptr<Sampler> base, int64_t rank,
                                            int64_t world_size);

// The order a loader reads `dataset` in: its own (a stream's, Dataset::StreamSampler) or a
// random/sequential one, split across ranks when world_size > 1.
std::shared_ptr<Sampler> SamplerFor(const Dataset& dataset, bool shuffle, uint64_t seed,
                                    int64_t rank = 0, int64_t world_size = 1);

}  // namespace kiln::data
