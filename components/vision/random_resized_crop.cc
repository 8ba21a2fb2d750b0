// random_resized_crop (torchvision's RandomResizedCrop): a crop of random area (a share `scale`
// of the image) and aspect ratio (log-uniform in `ratio`), resized to `size`. After 10 draws
// that do not fit, a central crop clamped to `ratio` is taken instead.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "components/common/option_values.h"
#include "components/vision/image_ops.h"
#include "lib/data/transform.h"
#include "lib/registry/registry.h"

namespace kiln::data {
namespace {

class RandomResizedCrop : public Transform {
 public:
  RandomResizedCrop(std::pair<int64_t, int64_t> size, std::pair<double, double> scale,
                    std::pair<double, double> ratio)
      : size_(size), scale_(scale), ratio_(ratio) {}

  torch::Tensor Apply(torch::Tensor image, SampleRng& rng) const override {
    image = AsChw(std::move(image));
    int64_t height = image.size(1), width = image.size(2);
    auto [top, left, h, w] = CropBox(height, width, rng);
    torch::Tensor crop = image.slice(1, top, top + h).slice(2, left, left + w);
    if (h == size_.first && w == size_.second) return crop.contiguous();
    return ResizeBilinear(crop, size_.first, size_.second);
  }

  std::optional<CropResize> PlanCropResize(int64_t height, int64_t width,
                                           SampleRng& rng) const override {
    auto [top, left, h, w] = CropBox(height, width, rng);
    return CropResize{top, left, h, w, size_.first, size_.second};
  }

 private:
  struct Box {
    int64_t top, left, height, width;
  };

  Box CropBox(int64_t height, int64_t width, SampleRng& rng) const {
    double area = static_cast<double>(height * width);
    double log_low = std::log(ratio_.first), log_high = std::log(ratio_.second);
    for (int attempt = 0; attempt < 10; ++attempt) {
      double target_area = area * (scale_.first + (scale_.second - scale_.first) * rng.Uniform());
      double aspect = std::exp(log_low + (log_high - log_low) * rng.Uniform());
      auto w = static_cast<int64_t>(std::lround(std::sqrt(target_area * aspect)));
      auto h = static_cast<int64_t>(std::lround(std::sqrt(target_area / aspect)));
      if (0 < w && w <= width && 0 < h && h <= height) {
        int64_t top = rng.UniformInt(0, height - h);
        int64_t left = rng.UniformInt(0, width - w);
        return {top, left, h, w};
      }
    }
    double in_ratio = static_cast<double>(width) / static_cast<double>(height);
    int64_t w = width, h = height;
    if (in_ratio < ratio_.first) {
      h = std::lround(static_cast<double>(w) / ratio_.first);
    } else if (in_ratio > ratio_.second) {
      w = std::lround(static_cast<double>(h) * ratio_.second);
    }
    return {(height - h) / 2, (width - w) / 2, h, w};
  }

  std::pair<int64_t, int64_t> size_;
  std::pair<double, double> scale_, ratio_;
};

struct RandomResizedCropOptions {
  ImageSize size;
  std::pair<double, double> scale = {0.08, 1.0};
  std::pair<double, double> ratio = {0.75, 1.3333333333333333};
};

KILN_REGISTER_BOUND(
    Transform, "random_resized_crop",
    "Crop of random area and aspect ratio, resized to size (torchvision RandomResizedCrop)",
    OptionBinding<RandomResizedCropOptions>()
        .Required("size", &RandomResizedCropOptions::size,
                  "output [height, width], or one side for a square")
        .Field("scale", &RandomResizedCropOptions::scale,
               "[low, high] share of the image area to crop",
               PairCheck("[low, high] within [0, 1] with low <= high and high > 0",
                         [](double low, double high) {
                           return 0 <= low && low <= high && high <= 1 && high > 0;
                         }))
        .Field("ratio", &RandomResizedCropOptions::ratio,
               "[low, high] aspect ratio (width / height) of the crop, drawn log-uniformly",
               PairCheck("[low, high] with 0 < low <= high",
                         [](double low, double high) { return 0 < low && low <= high; })),
    [](const RandomResizedCropOptions& o) -> absl::StatusOr<std::shared_ptr<Transform>> {
      return std::make_shared<RandomResizedCrop>(std::make_pair(o.size.height, o.size.width),
                                                 o.scale, o.ratio);
    });

}  // namespace
}  // namespace kiln::data
