// One step of per-sample preprocessing or augmentation on an image tensor ([C, H, W], uint8 or
// float). Random transforms draw only from the sample's own SampleRng. Built by name from config
// lists like `- {_target_: random_crop, size: 28, padding: 2}` through Registry<Transform>.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/data/sample_rng.h"

namespace kiln::data {

class Transform {
 public:
  static constexpr const char* kKind = "transform";
  virtual ~Transform() = default;
  virtual torch::Tensor Apply(torch::Tensor image, SampleRng& rng) const = 0;
  // True when Apply draws nothing from `rng` (the same image always gives the same result), so
  // a data module may apply it once to a whole split at setup.
  virtual bool deterministic() const { return false; }
};

// Transforms applied in order.
class TransformPipeline {
 public:
  TransformPipeline() = default;
  explicit TransformPipeline(std::vector<std::shared_ptr<Transform>> steps) : steps_(std::move(steps)) {}
  // Builds the pipeline from a config list of `_target_` nodes (null or absent: no steps).
  static absl::StatusOr<TransformPipeline> FromConfig(const config::Config& parent, const std::string& key);
  // The same from the list itself (null: no steps).
  static absl::StatusOr<TransformPipeline> FromList(const config::Config& list);
  torch::Tensor Apply(torch::Tensor image, SampleRng& rng) const;
  bool empty() const { return steps_.empty(); }
  // True when every step is deterministic (and when there are none).
  bool deterministic() const;

 private:
  std::vector<std::shared_ptr<Transform>> steps_;
};

}  // namespace kiln::data
