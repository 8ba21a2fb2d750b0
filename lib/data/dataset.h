// A dataset is a size and a random-access, thread-safe Get(i). Loaders, samplers and the
// trainer only see this interface (flashlight's Dataset: size() + get(i)).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/data/encoded_sample.h"
#include "lib/data/sample_rng.h"

namespace kiln::data {

struct Example {
  torch::Tensor input;   // e.g. a float image [C, H, W]; undefined: a sample skipped as corrupt
  torch::Tensor target;  // e.g. an int64 class index (0-d)
  // Several sequences packed one after another into one (data.packing): int64 [T], which of them
  // each position belongs to (0, 1, ...); undefined for an ordinary example.
  torch::Tensor segments;
};

class Sampler;

// One epoch of a dataset read as a stream (shards): Get hands out the examples the stream has read.
class EpochSource {
 public:
  virtual ~EpochSource() = default;
  // Blocks until sample `index` has been read; safe from several threads at once.
  virtual absl::StatusOr<Example> Get(int64_t index, SampleRng& rng) = 0;
  // The examples at `indices` stacked (input [B, ...], target [B, ...]) when the stream can hand
  // them out in one go, as Dataset::GetStacked; samples it left out (a bad record skipped) are
  // counted in `skipped`, and the batch is that much smaller. nullopt: Get serves, one by one.
  virtual absl::StatusOr<std::optional<Example>> GetStacked(const std::vector<int64_t>& /*indices*/,
                                                            int64_t* /*skipped*/) {
    return std::optional<Example>();
  }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Must be safe to call from several threads at once. `rng` is this sample's own randomness.
  virtual absl::StatusOr<Example> Get(int64_t index, SampleRng& rng) const = 0;
  // Where example `index` comes from (a file path), for predictions and error messages; "" if
  // the dataset has no such notion.
  virtual std::string Source(int64_t /*index*/) const { return ""; }
  // The length of example `index` (tokens of a text) for length bucketing, without loading it;
  // 0 when the dataset has no such notion.
  virtual int64_t Length(int64_t /*index*/) const { return 0; }
  // True when Get draws nothing from its `rng`: example `index` is always the same tensors.
  virtual bool deterministic() const { return false; }
  // The examples at `indices` already stacked (input [B, ...], target [B, ...]), exactly what
  // Get one by one then Collate would give, when the dataset can gather them in one go; nullopt:
  // it cannot (the loader then Gets and collates them).
  virtual std::optional<Example> GetStacked(const std::vector<int64_t>& /*indices*/) const {
    return std::nullopt;
  }
  // Example `index` as the files it came from (the image file's bytes, a PNG of an in-memory
  // image, the label as text), what `kiln shard` writes; Unimplemented when the dataset cannot.
  // `index` runs over [0, encoded_size()): the samples, or for a dataset whose examples are cut
  // from larger records (text_corpus' blocks of a token stream), those records (its documents).
  virtual absl::StatusOr<EncodedSample> Encoded(int64_t /*index*/) const {
    return absl::UnimplementedError("this data module's samples cannot be written as shards");
  }
  virtual int64_t encoded_size() const { return size(); }

  // A dataset read as a stream (shards) orders its own epochs: the order of `rank` of
  // `world_size` (every rank the same count), shuffled from (seed, epoch) or in storage order.
  // Null: the dataset is random-access (Get), ordered by the usual samplers.
  virtual std::shared_ptr<Sampler> StreamSampler(bool /*shuffle*/, uint64_t /*seed*/,
                                                 int64_t /*rank*/, int64_t /*world_size*/) const {
    return nullptr;
  }
  // Starts reading `epoch` as `sampler` (this dataset's StreamSampler) orders it, for the samples
  // at positions >= `first` of `order`, reading at most `ahead` samples beyond those asked for.
  // Null: Get serves.
  virtual absl::StatusOr<std::unique_ptr<EpochSource>> OpenEpoch(
      const Sampler& /*sampler*/, int64_t /*epoch*/, const std::vector<int64_t>& /*order*/,
      size_t /*first*/, size_t /*ahead*/) const {
    return std::unique_ptr<EpochSource>();
  }
};

// The examples of `base` at `indices` (a split, a subset).
std::shared_ptr<Dataset> Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);

// A deterministic dataset's examples, each loaded once with Get and stacked in memory, so that
// Get is a slice and GetStacked one index_select per tensor (the same values bitwise); `base`
// itself when it is not deterministic, is empty, or its stacked inputs and targets would take
// more than `max_bytes`. Source and Length still ask `base`. The stacked tensors live on `device`
// (data.on_device: a batch is then an index_select on the GPU).
absl::StatusOr<std::shared_ptr<const Dataset>> Precomputed(std::shared_ptr<const Dataset> base,
                                                           int64_t max_bytes,
                                                           torch::Device device = torch::kCPU);

// The GPU this process trains on: LOCAL_RANK's (modulo the GPUs there are), the first without
// LOCAL_RANK; the CPU where there is no CUDA device. The trainer's strategy asks this, and tells
// the data module what it chose (DataModule::device, for data.on_device).
torch::Device TrainingGpu();

// A seeded shuffle of 0..n-1 cut into {train, val}, val holding floor(n * val_fraction) indices;
// the same (n, val_fraction, seed) always gives the same split.
std::pair<std::vector<int64_t>, std::vector<int64_t>> RandomSplit(int64_t n, double val_fraction,
                                                                  int64_t seed);

}  // namespace kiln::data
