// Image transforms on [C, H, W] tensors: to_tensor, normalize, random_crop, center_crop,
// horizontal_flip, resize. Random ones draw only from the sample's SampleRng.
#include "absl/strings/str_cat.h"
#include "components/data/image_ops.h"
#include "lib/data/transform.h"
#include "lib/registry/registry.h"

namespace kiln::data {
namespace {

using TransformOr = absl::StatusOr<std::shared_ptr<Transform>>;

class ToTensor : public Transform {
 public:
  torch::Tensor Apply(torch::Tensor image, SampleRng&) const override {
    image = AsChw(std::move(image));
    if (image.scalar_type() == torch::kUInt8) return image.to(torch::kFloat32).div_(255.0);
    return image.to(torch::kFloat32);
  }
};

class Normalize : public Transform {
 public:
  Normalize(std::vector<double> mean, std::vector<double> std)
      : mean_(torch::tensor(mean, torch::kFloat32).view({-1, 1, 1})),
        inv_std_(1.0 / torch::tensor(std, torch::kFloat32).view({-1, 1, 1})) {}
  torch::Tensor Apply(torch::Tensor image, SampleRng&) const override {
    return (AsChw(std::move(image)).to(torch::kFloat32) - mean_) * inv_std_;
  }

 private:
  torch::Tensor mean_, inv_std_;
};

class RandomCrop : public Transform {
 public:
  RandomCrop(int64_t size, int64_t padding) : size_(size), padding_(padding) {}
  torch::Tensor Apply(torch::Tensor image, SampleRng& rng) const override {
    image = AsChw(std::move(image));
    if (padding_ > 0) image = torch::constant_pad_nd(image, {padding_, padding_, padding_, padding_}, 0);
    int64_t top = rng.UniformInt(0, std::max<int64_t>(0, image.size(1) - size_));
    int64_t left = rng.UniformInt(0, std::max<int64_t>(0, image.size(2) - size_));
    return image.slice(1, top, top + size_).slice(2, left, left + size_).contiguous();
  }

 private:
  int64_t size_, padding_;
};

class CenterCrop : public Transform {
 public:
  explicit CenterCrop(int64_t size) : size_(size) {}
  torch::Tensor Apply(torch::Tensor image, SampleRng&) const override {
    image = AsChw(std::move(image));
    int64_t top = std::max<int64_t>(0, (image.size(1) - size_) / 2);
    int64_t left = std::max<int64_t>(0, (image.size(2) - size_) / 2);
    return image.slice(1, top, top + size_).slice(2, left, left + size_).contiguous();
  }

 private:
  int64_t size_;
};

class HorizontalFlip : public Transform {
 public:
  explicit HorizontalFlip(double p) : p_(p) {}
  torch::Tensor Apply(torch::Tensor image, SampleRng& rng) const override {
    image = AsChw(std::move(image));
    return rng.Bernoulli(p_) ? image.flip({2}) : image;
  }

 private:
  double p_;
};

class Resize : public Transform {
 public:
  Resize(int64_t height, int64_t width) : height_(height), width_(width) {}
  torch::Tensor Apply(torch::Tensor image, SampleRng&) const override {
    return ResizeBilinear(AsChw(std::move(image)), height_, width_);
  }

 private:
  int64_t height_, width_;
};

absl::Status Positive(const config::Config& cfg, const char* key, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey(key), "' must be positive, got ", value,
                                                 " (set at ", cfg.WhereSet(key), ")"));
}

KILN_REGISTER(Transform, "to_tensor", "uint8 image -> float [C, H, W] in [0, 1]", OptionSchema(),
              [](const config::Config&) -> TransformOr { return std::make_shared<ToTensor>(); });

KILN_REGISTER(Transform, "normalize", "(x - mean) / std per channel",
              OptionSchema()
                  .Required("mean", OptionType::kList, "per-channel mean")
                  .Required("std", OptionType::kList, "per-channel standard deviation"),
              [](const config::Config& cfg) -> TransformOr {
                KILN_ASSIGN_OR_RETURN(auto mean, cfg.Get<std::vector<double>>("mean"));
                KILN_ASSIGN_OR_RETURN(auto std, cfg.Get<std::vector<double>>("std"));
                if (mean.size() != std.size() || mean.empty()) {
                  return absl::InvalidArgumentError(absl::StrCat("'", cfg.FullKey("mean"), "' and '",
                                                                 cfg.FullKey("std"),
                                                                 "' need the same, non-zero number of channels"));
                }
                for (double s : std) {
                  if (s <= 0) return absl::InvalidArgumentError(absl::StrCat("'", cfg.FullKey("std"), "' must be positive"));
                }
                return std::make_shared<Normalize>(mean, std);
              });

KILN_REGISTER(Transform, "random_crop", "Random size x size crop after zero padding",
              OptionSchema()
                  .Required("size", OptionType::kInt, "output height and width")
                  .Int("padding", 0, "zeros added on each side first"),
              [](const config::Config& cfg) -> TransformOr {
                KILN_ASSIGN_OR_RETURN(int64_t size, cfg.Get<int64_t>("size"));
                KILN_ASSIGN_OR_RETURN(int64_t padding, cfg.Get<int64_t>("padding"));
                KILN_RETURN_IF_ERROR(Positive(cfg, "size", size));
                return std::make_shared<RandomCrop>(size, padding);
              });

KILN_REGISTER(Transform, "center_crop", "Central size x size crop",
              OptionSchema().Required("size", OptionType::kInt, "output height and width"),
              [](const config::Config& cfg) -> TransformOr {
                KILN_ASSIGN_OR_RETURN(int64_t size, cfg.Get<int64_t>("size"));
                KILN_RETURN_IF_ERROR(Positive(cfg, "size", size));
                return std::make_shared<CenterCrop>(size);
              });

KILN_REGISTER(Transform, "horizontal_flip", "Mirror left-right with probability p",
              OptionSchema().Float("p", 0.5, "probability of flipping"),
              [](const config::Config& cfg) -> TransformOr {
                KILN_ASSIGN_OR_RETURN(double p, cfg.Get<double>("p"));
                return std::make_shared<HorizontalFlip>(p);
              });

KILN_REGISTER(Transform, "resize", "Bilinear resize to height x width",
              OptionSchema()
                  .Required("height", OptionType::kInt, "output height")
                  .Required("width", OptionType::kInt, "output width"),
              [](const config::Config& cfg) -> TransformOr {
                KILN_ASSIGN_OR_RETURN(int64_t h, cfg.Get<int64_t>("height"));
                KILN_ASSIGN_OR_RETURN(int64_t w, cfg.Get<int64_t>("width"));
                KILN_RETURN_IF_ERROR(Positive(cfg, "height", h));
                KILN_RETURN_IF_ERROR(Positive(cfg, "width", w));
                return std::make_shared<Resize>(h, w);
              });

}  // namespace
}  // namespace kiln::data
