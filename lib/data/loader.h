// Turns a dataset into batches: a oneTBB pipeline loads and collates batches in parallel ahead of
// the consumer (bounded prefetch) and hands them over in order. Each sample's randomness comes
// from (seed, epoch, dataset index), so batches do not depend on thread count or timing.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <mutex>

#include "absl/status/statusor.h"
#include "lib/data/dataset.h"
#include "lib/data/sampler.h"

namespace kiln::data {

struct Batch {
  torch::Tensor input;    // stacked inputs [B, ...]
  torch::Tensor target;   // stacked targets [B, ...]
  torch::Tensor lengths;  // padded sequences (PadCollate): int64 [B] real lengths; else undefined
  torch::Tensor mask;     // padded sequences: bool [B, T], true at real positions; else undefined
  // packed sequences: int64 [B, T], the sequence of its row each position belongs to (padding -1);
  // else undefined
  torch::Tensor segments;
  int64_t epoch = 0;
  int64_t index = 0;  // batch number within the epoch
  int64_t skipped =
      0;  // samples of the batch left out as corrupt (a data module's on_corrupt=skip)
  int64_t size() const { return input.defined() ? input.size(0) : 0; }
};

// Turns a batch's examples into a Batch (default: Collate).
using CollateFn = std::function<absl::StatusOr<Batch>(std::vector<Example>&)>;
// Rearranges an epoch's sample order before it is cut into batches (length bucketing); must be a
// pure function of (order, epoch, dataset) so resume and thread count do not change the batches.
using BatchOrderFn = std::function<std::vector<int64_t>(std::vector<int64_t> order, int64_t epoch,
                                                        const Dataset& dataset)>;

struct LoaderOptions {
  int64_t batch_size = 32;
  bool drop_last = false;
  int num_workers = 2;       // threads loading batches; 0 loads on the caller's thread
  int prefetch = 4;          // batches loaded ahead at most
  uint64_t seed = 0;         // per-sample randomness
  CollateFn collate;         // null: Collate (stack equal shapes)
  BatchOrderFn batch_order;  // null: the sampler's order as it is
};

// Stacks examples into a batch (all inputs must have the same shape). `input_buffer`, when given,
// says where the stacked inputs go (a tensor of their shape and type, reused between batches).
using BufferFn = std::function<torch::Tensor(c10::IntArrayRef sizes, c10::ScalarType type)>;
absl::StatusOr<Batch> Collate(std::vector<Example>& examples,
                              const BufferFn& input_buffer = nullptr);

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
             LoaderOptions options);

  int64_t num_batches() const;
  const LoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  // Delivers batches [first, last) of `epoch` to `consume`, in order; stops early when consume
  // returns false. Returns the first loading or consuming error.
  using Consumer = std::function<absl::StatusOr<bool>(Batch&)>;
  absl::Status Run(int64_t epoch, int64_t first, int64_t last, const Consumer& consume) const;

 private:
  absl::StatusOr<Batch> LoadBatch(const std::vector<int64_t>& order, int64_t epoch, int64_t index,
                                  EpochSource* source) const;

  // A batch-input tensor of this shape and type that nothing but this loader references any more
  // (the batch it carried has been consumed), or a new one: a large batch's pages are not
  // allocated, faulted in and unmapped again for every batch.
  torch::Tensor InputBuffer(c10::IntArrayRef sizes, c10::ScalarType type) const;

  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<Sampler> sampler_;
  LoaderOptions options_;
  mutable std::mutex buffers_mu_;
  mutable std::vector<torch::Tensor> buffers_;
};

}  // namespace kiln::data
