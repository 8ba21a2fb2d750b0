// Image transforms on [C, H, W] tensors: to_tensor, normalize, random_crop, center_crop,
// horizontal_flip, resize. Random ones draw only from the sample's SampleRng.
#include "absl/strings/str_cat.h"
#include "components/vision/image_ops.h"
#include "lib/data/transform.h"
#include "lib/registry/registry.h"

namespace kiln::data {
namespace {

using TransformOr = absl::StatusOr<std::shared_ptr<Transform>>;

class ToTensor : public Transform {
 public:
  bool deterministic() const override { return true; }
  torch::Tensor Apply(torch::Tensor image, SampleRng&) const override {
    image = AsChw(std::move(image));
    if (image.scalar_type() == torch::kUInt8) return image.to(torch::kFloat32).div_(255.0);
    return image.to(torch::kFloat32);
  }
  bool FoldInto(PixelMap& map, int64_t channels, SampleRng&) const override {
    if (map.to_float) return false;  // already float: to_tensor only converts
    map.to_float = true;
    map.scale.assign(static_cast<size_t>(channels), 1.0f / 255.0f);
    map.shift.assign(static_cast<size_t>(channels), 0.0f);
    return true;
  }
};

class Normalize : public Transform {
 public:
  bool deterministic() const override { return true; }
  Normalize(std::vector<double> mean, std::vector<double> std)
      : mean_(torch::tensor(mean, torch::kFloat32).view({-1, 1, 1})),
        inv_std_(1.0 / torch::tensor(std, torch::kFloat32).view({-1, 1, 1})) {}
  torch::Tensor Apply(torch::Tensor image, SampleRng&) const override {
    return (AsChw(std::move(image)).to(torch::kFloat32) - mean_) * inv_std_;
  }
  // Only after to_tensor has been folded (on uint8 Apply would normalize 0..255 values, the same
  // map without its 1/255).
  bool FoldInto(PixelMap& map, int64_t channels, SampleRng&) const override {
    auto fits = [&](const torch::Tensor& t) { return t.numel() == channels || t.numel() == 1; };
    if (!map.to_float || !fits(mean_) || !fits(inv_std_)) return false;
    torch::Tensor mean_all = mean_.flatten(), inv_std_all = inv_std_.flatten();
    for (int64_t c = 0; c < channels; ++c) {
      float mean = mean_all[mean_all.numel() == 1 ? 0 : c].item<float>();
      float inv_std = inv_std_all[inv_std_all.numel() == 1 ? 0 : c].item<float>();
      auto i = static_cast<size_t>(c);
      map.scale[i] *= inv_std;
      map.shift[i] = (map.shift[i] - mean) * inv_std;
    }
    return true;
  }

 private:
  torch::Tensor mean_, inv_std_;
};

class RandomCrop : public Transform {
 public:
  RandomCrop(int64_t size, int64_t padding) : size_(size), padding_(padding) {}
  torch::Tensor Apply(torch::Tensor image, SampleRng& rng) const override {
    image = AsChw(std::move(image));
    if (padding_ > 0)
      image = torch::constant_pad_nd(image, {padding_, padding_, padding_, padding_}, 0);
    int64_t top = rng.UniformInt(0, std::max<int64_t>(0, image.size(1) - size_));
    int64_t left = rng.UniformInt(0, std::max<int64_t>(0, image.size(2) - size_));
    return image.slice(1, top, top + size_).slice(2, left, left + size_).contiguous();
  }

 private:
  int64_t size_, padding_;
};

class CenterCrop : public Transform {
 public:
  bool deterministic() const override { return true; }
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
  bool FoldInto(PixelMap& map, int64_t, SampleRng& rng) const override {
    if (rng.Bernoulli(p_)) map.flip = !map.flip;
    return true;
  }

 private:
  double p_;
};

class Resize : public Transform {
 public:
  bool deterministic() const override { return true; }
  Resize(int64_t height, int64_t width) : height_(height), width_(width) {}
  torch::Tensor Apply(torch::Tensor image, SampleRng&) const override {
    return ResizeBilinear(AsChw(std::move(image)), height_, width_);
  }

 private:
  int64_t height_, width_;
};

KILN_REGISTER_BOUND(Transform, "to_tensor", "uint8 image -> float [C, H, W] in [0, 1]",
                    OptionBinding<NoOptions>(),
                    [](const NoOptions&) -> TransformOr { return std::make_shared<ToTensor>(); });

struct NormalizeOptions {
  std::vector<double> mean, std;
};

KILN_REGISTER_BOUND(Transform, "normalize", "(x - mean) / std per channel",
                    OptionBinding<NormalizeOptions>()
                        .Required("mean", &NormalizeOptions::mean, "per-channel mean", NonEmpty())
                        .Required("std", &NormalizeOptions::std, "per-channel standard deviation",
                                  Each(GreaterThan(0))),
                    [](const NormalizeOptions& o, const OptionContext& context) -> TransformOr {
                      if (o.std.size() != o.mean.size()) {
                        return context.Refuse(
                            "std", absl::StrCat("as many numbers as mean (", o.mean.size(), ")"));
                      }
                      return std::make_shared<Normalize>(o.mean, o.std);
                    });

struct RandomCropOptions {
  int64_t size = 0;
  int64_t padding = 0;
};

KILN_REGISTER_BOUND(Transform, "random_crop", "Random size x size crop after zero padding",
                    OptionBinding<RandomCropOptions>()
                        .Required("size", &RandomCropOptions::size, "output height and width",
                                  AtLeast(1))
                        .Field("padding", &RandomCropOptions::padding,
                               "zeros added on each side first"),
                    [](const RandomCropOptions& o) -> TransformOr {
                      return std::make_shared<RandomCrop>(o.size, o.padding);
                    });

struct CenterCropOptions {
  int64_t size = 0;
};

KILN_REGISTER_BOUND(Transform, "center_crop", "Central size x size crop",
                    OptionBinding<CenterCropOptions>().Required("size", &CenterCropOptions::size,
                                                                "output height and width",
                                                                AtLeast(1)),
                    [](const CenterCropOptions& o) -> TransformOr {
                      return std::make_shared<CenterCrop>(o.size);
                    });

struct HorizontalFlipOptions {
  double p = 0.5;
};

KILN_REGISTER_BOUND(Transform, "horizontal_flip", "Mirror left-right with probability p",
                    OptionBinding<HorizontalFlipOptions>().Field("p", &HorizontalFlipOptions::p,
                                                                 "probability of flipping"),
                    [](const HorizontalFlipOptions& o) -> TransformOr {
                      return std::make_shared<HorizontalFlip>(o.p);
                    });

struct ResizeOptions {
  int64_t height = 0, width = 0;
};

KILN_REGISTER_BOUND(Transform, "resize", "Bilinear resize to height x width",
                    OptionBinding<ResizeOptions>()
                        .Required("height", &ResizeOptions::height, "output height", AtLeast(1))
                        .Required("width", &ResizeOptions::width, "output width", AtLeast(1)),
                    [](const ResizeOptions& o) -> TransformOr {
                      return std::make_shared<Resize>(o.height, o.width);
                    });

}  // namespace
}  // namespace kiln::data
