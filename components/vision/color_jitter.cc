// color_jitter (torchvision's ColorJitter): brightness, contrast, saturation and hue changed by
// random factors, applied in a random order. The arithmetic follows torchvision's tensor
// functional ops, truncation of uint8 results included, so the same factors give the same pixels.
#include <array>
#include <cmath>

#include "components/common/option_values.h"
#include "components/vision/image_ops.h"
#include "lib/data/transform.h"
#include "lib/registry/registry.h"

namespace kiln::data {
namespace {

bool IsUint8(const torch::Tensor& image) { return image.scalar_type() == torch::kUInt8; }

// ratio * a + (1 - ratio) * b, clamped to the image's range, in a's dtype.
torch::Tensor Blend(const torch::Tensor& a, const torch::Tensor& b, double ratio) {
  double bound = IsUint8(a) ? 255.0 : 1.0;
  torch::Tensor mixed = a.to(torch::kFloat32) * ratio + b.to(torch::kFloat32) * (1.0 - ratio);
  return mixed.clamp(0, bound).to(a.scalar_type());
}

// ITU-R 601-2 luma, as [1, H, W] in the image's dtype (truncated for uint8, as torchvision does).
torch::Tensor Grayscale(const torch::Tensor& image) {
  torch::Tensor f = image.to(torch::kFloat32);
  return (f[0] * 0.2989 + f[1] * 0.587 + f[2] * 0.114).unsqueeze(0).to(image.scalar_type());
}

torch::Tensor AdjustBrightness(const torch::Tensor& image, double factor) {
  return Blend(image, torch::zeros_like(image), factor);
}

torch::Tensor AdjustContrast(const torch::Tensor& image, double factor) {
  torch::Tensor gray = image.size(0) == 3 ? Grayscale(image) : image;
  return Blend(image, gray.to(torch::kFloat32).mean(), factor);
}

torch::Tensor AdjustSaturation(const torch::Tensor& image, double factor) {
  if (image.size(0) != 3) return image;
  return Blend(image, Grayscale(image), factor);
}

torch::Tensor RgbToHsv(const torch::Tensor& rgb) {
  torch::Tensor r = rgb[0], g = rgb[1], b = rgb[2];
  torch::Tensor maxc = std::get<0>(rgb.max(0)), minc = std::get<0>(rgb.min(0));
  torch::Tensor equal = maxc == minc;
  torch::Tensor range = maxc - minc;
  torch::Tensor ones = torch::ones_like(maxc);
  torch::Tensor s = range / torch::where(equal, ones, maxc);
  torch::Tensor divisor = torch::where(equal, ones, range);
  torch::Tensor rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
  torch::Tensor hr = (maxc == r).to(torch::kFloat32) * (bc - gc);
  torch::Tensor hg = ((maxc == g) & (maxc != r)).to(torch::kFloat32) * (2.0 + rc - bc);
  torch::Tensor hb = ((maxc != g) & (maxc != r)).to(torch::kFloat32) * (4.0 + gc - rc);
  torch::Tensor h = torch::fmod((hr + hg + hb) / 6.0 + 1.0, 1.0);
  return torch::stack({h, s, maxc});
}

torch::Tensor HsvToRgb(const torch::Tensor& hsv) {
  torch::Tensor h = hsv[0], s = hsv[1], v = hsv[2];
  torch::Tensor i = torch::floor(h * 6.0);
  torch::Tensor f = h * 6.0 - i;
  torch::Tensor sector = torch::remainder(i.to(torch::kInt64), 6).unsqueeze(0);
  torch::Tensor p = (v * (1.0 - s)).clamp(0.0, 1.0);
  torch::Tensor q = (v * (1.0 - s * f)).clamp(0.0, 1.0);
  torch::Tensor t = (v * (1.0 - s * (1.0 - f))).clamp(0.0, 1.0);
  auto pick = [&](std::initializer_list<torch::Tensor> by_sector) {
    return torch::stack(by_sector).gather(0, sector).squeeze(0);
  };
  return torch::stack(
      {pick({v, q, p, p, t, v}), pick({t, v, v, q, p, p}), pick({p, p, t, v, v, q})});
}

torch::Tensor AdjustHue(const torch::Tensor& image, double factor) {
  if (image.size(0) != 3) return image;
  torch::Tensor rgb =
      IsUint8(image) ? image.to(torch::kFloat32) / 255.0 : image.to(torch::kFloat32);
  torch::Tensor hsv = RgbToHsv(rgb);
  hsv[0] = torch::remainder(hsv[0] + factor, 1.0);
  torch::Tensor out = HsvToRgb(hsv);
  // torchvision's convert_image_dtype from float to uint8.
  return IsUint8(image) ? (out * (255.0 + 1.0 - 1e-3)).to(torch::kUInt8)
                        : out.to(image.scalar_type());
}

struct JitterRanges {
  // Empty (low == high == neutral) ranges are skipped without drawing a factor.
  std::pair<double, double> brightness{1, 1}, contrast{1, 1}, saturation{1, 1}, hue{0, 0};
};

class ColorJitter : public Transform {
 public:
  explicit ColorJitter(JitterRanges ranges) : ranges_(ranges) {}

  torch::Tensor Apply(torch::Tensor image, SampleRng& rng) const override {
    image = AsChw(std::move(image));
    // As torchvision: first the order, then the factors of the enabled adjustments.
    std::array<int, 4> order = {0, 1, 2, 3};
    for (int i = 3; i > 0; --i)
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng.UniformInt(0, i))]);
    const std::array<std::pair<double, double>, 4> ranges = {ranges_.brightness, ranges_.contrast,
                                                             ranges_.saturation, ranges_.hue};
    const std::array<double, 4> neutral = {1, 1, 1, 0};
    std::array<double, 4> factor = neutral;
    std::array<bool, 4> enabled{};
    for (size_t k = 0; k < 4; ++k) {
      enabled[k] = !(ranges[k].first == neutral[k] && ranges[k].second == neutral[k]);
      if (enabled[k])
        factor[k] = ranges[k].first + (ranges[k].second - ranges[k].first) * rng.Uniform();
    }
    for (int k : order) {
      if (!enabled[static_cast<size_t>(k)]) continue;
      double f = factor[static_cast<size_t>(k)];
      switch (k) {
        case 0: image = AdjustBrightness(image, f); break;
        case 1: image = AdjustContrast(image, f); break;
        case 2: image = AdjustSaturation(image, f); break;
        default: image = AdjustHue(image, f); break;
      }
    }
    return image;
  }

 private:
  JitterRanges ranges_;
};

struct ColorJitterOptions {
  config::NodePtr brightness = config::Node::Int(0);
  config::NodePtr contrast = config::Node::Int(0);
  config::NodePtr saturation = config::Node::Int(0);
  config::NodePtr hue = config::Node::Int(0);
};

// Factors around 1 (brightness, contrast, saturation) and hue shifts around 0, by half a turn at
// most.
const RangeOption kFactor(1, 0, HUGE_VAL);
const RangeOption kHueShift(0, -0.5, 0.5);

KILN_REGISTER_BOUND(Transform, "color_jitter",
                    "Random brightness, contrast, saturation and hue in random order (torchvision "
                    "ColorJitter); use before normalize",
                    OptionBinding<ColorJitterOptions>()
                        .Node("brightness", &ColorJitterOptions::brightness, OptionType::kAny,
                              "v: factor in [max(0, 1-v), 1+v], or [low, high]", kFactor.check())
                        .Node("contrast", &ColorJitterOptions::contrast, OptionType::kAny,
                              "v: factor in [max(0, 1-v), 1+v], or [low, high]", kFactor.check())
                        .Node("saturation", &ColorJitterOptions::saturation, OptionType::kAny,
                              "v: factor in [max(0, 1-v), 1+v], or [low, high]", kFactor.check())
                        .Node("hue", &ColorJitterOptions::hue, OptionType::kAny,
                              "v in [0, 0.5]: hue shift in [-v, v], or [low, high]",
                              kHueShift.check()),
                    [](const ColorJitterOptions& o) -> absl::StatusOr<std::shared_ptr<Transform>> {
                      JitterRanges r;
                      r.brightness = kFactor.Of(*o.brightness);
                      r.contrast = kFactor.Of(*o.contrast);
                      r.saturation = kFactor.Of(*o.saturation);
                      r.hue = kHueShift.Of(*o.hue);
                      return std::make_shared<ColorJitter>(r);
                    });

}  // namespace
}  // namespace kiln::data
