// A dataset is a size and a random-access, thread-safe Get(i). Loaders, samplers and the
// trainer only see this interface (flashlight's Dataset: size() + get(i)).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "lib/data/sample_rng.h"

namespace kiln::data {

struct Example {
  torch::Tensor input;   // e.g. a float image [C, H, W]
  torch::Tensor target;  // e.g. an int64 class index (0-d)
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Must be safe to call from several threads at once. `rng` is this sample's own randomness.
  virtual absl::StatusOr<Example> Get(int64_t index, SampleRng& rng) const = 0;
};

// The examples of `base` at `indices` (a split, a subset).
std::shared_ptr<Dataset> Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);

}  // namespace kiln::data
