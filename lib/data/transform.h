// One step of per-sample preprocessing or augmentation on an image tensor ([C, H, W], uint8 or
// float). Random transforms draw only from the sample's own SampleRng. Built by name from config
// lists like `- {_target_: random_crop, size: 28, padding: 2}` through Registry<Transform>.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
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

  // A crop of an image, resized to out_height x out_width.
  struct CropResize {
    int64_t top, left, height, width, out_height, out_width;
  };
  // When this transform is a crop then a resize (random_resized_crop), the crop it takes of an
  // image of `height` x `width`, drawing from `rng` exactly as Apply does, so that an image
  // decoder can do the work (decode only the crop, scaled down while decoding); nullopt: it is not.
  virtual std::optional<CropResize> PlanCropResize(int64_t /*height*/, int64_t /*width*/,
                                                   SampleRng& /*rng*/) const {
    return std::nullopt;
  }

  // Per-pixel work a decoder can do while it writes the image out: a mirror, then per channel
  // x * scale + shift into float (no scale: uint8 stays).
  struct PixelMap {
    bool flip = false;
    bool to_float = false;
    std::vector<float> scale, shift;  // per channel; empty: 1 and 0
  };
  // When this transform is such per-pixel work on a `channels`-channel image, adds it to `map`
  // (drawing from `rng` exactly as Apply does) and returns true; false: it is not, nothing drawn.
  virtual bool FoldInto(PixelMap& /*map*/, int64_t /*channels*/, SampleRng& /*rng*/) const {
    return false;
  }
};

// Transforms applied in order.
class TransformPipeline {
 public:
  TransformPipeline() = default;
  explicit TransformPipeline(std::vector<std::shared_ptr<Transform>> steps)
      : steps_(std::move(steps)) {}
  // Builds the pipeline from a config list of `_target_` nodes (null or absent: no steps).
  static absl::StatusOr<TransformPipeline> FromConfig(const config::Config& parent,
                                                      const std::string& key);
  // The same from the list itself (null: no steps).
  static absl::StatusOr<TransformPipeline> FromList(const config::Config& list);
  torch::Tensor Apply(torch::Tensor image, SampleRng& rng) const;
  // Steps `first`.. only (the first having been done by the decoder).
  torch::Tensor ApplyFrom(size_t first, torch::Tensor image, SampleRng& rng) const;
  // Folds steps `first`.. into `map` while they are per-pixel work (Transform::FoldInto); returns
  // the index of the first step not folded.
  size_t FoldFrom(size_t first, Transform::PixelMap& map, int64_t channels, SampleRng& rng) const;
  // The first step, or null.
  const Transform* front() const { return steps_.empty() ? nullptr : steps_.front().get(); }
  bool empty() const { return steps_.empty(); }
  // True when every step is deterministic (and when there are none).
  bool deterministic() const;

 private:
  std::vector<std::shared_ptr<Transform>> steps_;
};

}  // namespace kiln::data
