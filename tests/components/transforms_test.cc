// random_resized_crop and color_jitter: torchvision's semantics checked on values (crop windows,
// the centre-crop fallback, exact brightness/contrast/saturation/hue arithmetic on uint8), and
// determinism from (seed, epoch, index) alone.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "tests/components/instantiate.h"
#include "components/vision/image_ops.h"
#include "lib/data/transform.h"

namespace kiln::data {
namespace {

absl::StatusOr<std::shared_ptr<Transform>> Build(const std::string& yaml) {
  return testing::Instantiate<Transform>(yaml, "t");
}

std::shared_ptr<Transform> BuildOk(const std::string& yaml) { return testing::InstantiateOk<Transform>(yaml, "t"); }

torch::Tensor ApplyTo(const Transform& t, const torch::Tensor& image, int64_t index = 0) {
  SampleRng rng(42, 1, index);
  return t.Apply(image, rng);
}

// An 8x8 single-channel image whose pixel (y, x) is 8 * y + x.
torch::Tensor Ramp() { return torch::arange(64, torch::kFloat32).view({1, 8, 8}); }

TEST(RandomResizedCrop, CropsAreWindowsOfTheImageAtTheAskedScale) {
  // scale 0.25 and ratio 1 on 8x8: always a 4x4 window, which size 4 keeps unresized.
  auto t = BuildOk("_target_: random_resized_crop\nsize: 4\nscale: [0.25, 0.25]\nratio: [1, 1]\n");
  std::set<std::pair<int64_t, int64_t>> corners;
  for (int64_t i = 0; i < 40; ++i) {
    torch::Tensor out = ApplyTo(*t, Ramp(), i);
    ASSERT_EQ(out.sizes(), (std::vector<int64_t>{1, 4, 4}));
    auto top_left = static_cast<int64_t>(out[0][0][0].item<float>());
    int64_t top = top_left / 8, left = top_left % 8;
    EXPECT_TRUE(torch::equal(out, Ramp().slice(1, top, top + 4).slice(2, left, left + 4)));
    corners.insert({top, left});
  }
  EXPECT_GT(corners.size(), 5u);  // the window moves
  EXPECT_LE(std::max_element(corners.begin(), corners.end())->first, 4);
}

TEST(RandomResizedCrop, FallsBackToACentreCropClampedToTheRatio) {
  // A 4:1 crop of the whole area never fits an 8x8 image: after 10 draws torchvision takes the
  // centre crop of width 8 and height round(8 / 4) = 2, rows 3 and 4.
  auto t = BuildOk("_target_: random_resized_crop\nsize: [2, 8]\nscale: [1, 1]\nratio: [4, 4]\n");
  EXPECT_TRUE(torch::equal(ApplyTo(*t, Ramp()), Ramp().slice(1, 3, 5)));
}

TEST(RandomResizedCrop, ResizesToSizeAndIsDeterministicPerSample) {
  auto t = BuildOk("_target_: random_resized_crop\nsize: [5, 7]\n");
  torch::Tensor image = torch::randint(0, 256, {3, 20, 30}, torch::kUInt8);
  torch::Tensor a = ApplyTo(*t, image, 3);
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{3, 5, 7}));
  EXPECT_EQ(a.scalar_type(), torch::kUInt8);
  EXPECT_TRUE(torch::equal(a, ApplyTo(*t, image, 3)));
  bool differs = false;
  for (int64_t i = 4; i < 10 && !differs; ++i) differs = !torch::equal(a, ApplyTo(*t, image, i));
  EXPECT_TRUE(differs);
}

TEST(RandomResizedCrop, BadOptionsAreNamed) {
  auto bad = Build("_target_: random_resized_crop\nsize: 4\nscale: [0.9, 0.1]\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message())
                .find("option 't.scale' of transform 'random_resized_crop' must be a list of two "
                      "numbers ([low, high] within [0, 1] with low <= high"),
            std::string::npos)
      << bad.status();
}

torch::Tensor Rgb(std::vector<uint8_t> values, int64_t h, int64_t w) {
  return torch::tensor(std::vector<int64_t>(values.begin(), values.end()), torch::kInt64).to(torch::kUInt8).view({3, h, w});
}

TEST(ColorJitter, BrightnessFactorIsAppliedExactly) {
  auto t = BuildOk("_target_: color_jitter\nbrightness: [1.25, 1.25]\n");
  torch::Tensor image = Rgb({0, 100, 220, 10, 11, 12, 50, 60, 70}, 1, 3);
  // 1.25 * v, clamped at 255, truncated to uint8 as torchvision does.
  torch::Tensor expected = Rgb({0, 125, 255, 12, 13, 15, 62, 75, 87}, 1, 3);
  EXPECT_TRUE(torch::equal(ApplyTo(*t, image), expected)) << ApplyTo(*t, image);
  // On float images the factor multiplies exactly.
  torch::Tensor f = torch::full({3, 2, 2}, 0.5f);
  EXPECT_TRUE(torch::equal(ApplyTo(*t, f), torch::full({3, 2, 2}, 0.625f)));
}

TEST(ColorJitter, ContrastBlendsWithTheMeanLuma) {
  auto t = BuildOk("_target_: color_jitter\ncontrast: [0.5, 0.5]\n");
  // Pixels (r, g, b) = (100, 0, 200) and (200, 100, 0).
  torch::Tensor image = Rgb({100, 200, 0, 100, 200, 0}, 1, 2);
  // Luma, truncated: 0.2989*100 + 0.114*200 = 52 and 0.2989*200 + 0.587*100 = 118; mean 85.
  // Each value becomes 0.5 * v + 0.5 * 85, truncated.
  torch::Tensor expected = Rgb({92, 142, 42, 92, 142, 42}, 1, 2);
  EXPECT_TRUE(torch::equal(ApplyTo(*t, image), expected)) << ApplyTo(*t, image);
}

TEST(ColorJitter, SaturationZeroGivesGrayAndHueHalfTurnsRedToCyan) {
  auto gray = BuildOk("_target_: color_jitter\nsaturation: [0, 0]\n");
  torch::Tensor image = Rgb({200, 10, 30}, 1, 1);
  torch::Tensor out = ApplyTo(*gray, image);
  // 0.2989*200 + 0.587*10 + 0.114*30 = 69.07 -> 69 in every channel.
  EXPECT_TRUE(torch::equal(out, Rgb({69, 69, 69}, 1, 1))) << out;
  auto hue = BuildOk("_target_: color_jitter\nhue: [0.5, 0.5]\n");
  EXPECT_TRUE(torch::equal(ApplyTo(*hue, Rgb({255, 0, 0}, 1, 1)), Rgb({0, 255, 255}, 1, 1)));
  // A third of a turn: red -> green -> blue.
  auto third = BuildOk("_target_: color_jitter\nhue: [0.33333334, 0.33333334]\n");
  EXPECT_TRUE(torch::equal(ApplyTo(*third, Rgb({255, 0, 0}, 1, 1)), Rgb({0, 255, 0}, 1, 1))) << ApplyTo(*third, Rgb({255, 0, 0}, 1, 1));
  // Grayscale images have no saturation or hue to change.
  torch::Tensor one_channel = torch::full({1, 2, 2}, 77, torch::kUInt8);
  EXPECT_TRUE(torch::equal(ApplyTo(*gray, one_channel), one_channel));
  EXPECT_TRUE(torch::equal(ApplyTo(*hue, one_channel), one_channel));
}

TEST(ColorJitter, FactorsStayInRangeAndDependOnlyOnTheSample) {
  auto t = BuildOk("_target_: color_jitter\nbrightness: 0.4\ncontrast: 0.4\nsaturation: 0.4\nhue: 0.1\n");
  torch::manual_seed(1);
  torch::Tensor image = torch::randint(0, 256, {3, 6, 6}, torch::kUInt8);
  torch::Tensor a = ApplyTo(*t, image, 5);
  EXPECT_TRUE(torch::equal(a, ApplyTo(*t, image, 5)));
  EXPECT_FALSE(torch::equal(a, ApplyTo(*t, image, 6)));
  EXPECT_FALSE(torch::equal(a, image));
  // Brightness alone: every pixel scaled by one factor in [0.6, 1.4].
  auto b = BuildOk("_target_: color_jitter\nbrightness: 0.4\n");
  torch::Tensor f = torch::full({3, 2, 2}, 0.5f);
  for (int64_t i = 0; i < 20; ++i) {
    torch::Tensor out = ApplyTo(*b, f, i);
    double factor = out[0][0][0].item<double>() / 0.5;
    EXPECT_GE(factor, 0.6);
    EXPECT_LE(factor, 1.4);
    EXPECT_TRUE(torch::allclose(out, torch::full({3, 2, 2}, static_cast<float>(0.5 * factor))));
  }
}

TEST(ColorJitter, HueBeyondHalfATurnIsRefused) {
  auto bad = Build("_target_: color_jitter\nhue: 0.7\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message())
                .find("option 't.hue' of transform 'color_jitter' must be v >= 0 or [low, high] "
                      "with low <= high, the range lying within [-0.5, 0.5]"),
            std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace kiln::data

namespace kiln::data {
namespace {

// Only PNG, JPEG, BMP and WebP reach OpenCV (the fuzzer's findings: a 40-byte PBM made it allocate
// 2.4 GB, a 133-byte DICOM-looking input aborted the process in GDCM), and headers that claim more
// than kMaxImagePixels are refused before a decoder allocates anything; small images still decode,
// and each format's header gives its size.
TEST(DecodeImageBytes, RefusesOtherFormatsAndHeadersClaimingMoreThanTheLimit) {
  // fuzz/regressions/image_decode/opencv_pbm_2gb: "P4", width 15555, height 52255.
  const std::string pbm(
      "P4\n15555\xd3" "52255\xd3" "522\nP4\xba\n2\n\nP4\n2\n7\xfd" "0\n\xff\xff\xff\xff/", 40);
  auto refused = DecodeImageBytes(pbm, {}, "tiny.pbm");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "tiny.pbm: cannot decode image (corrupt, truncated, or not PNG, JPEG, BMP or WebP)");
  // fuzz/regressions/image_decode/gdcm_assert_abort: zeros with "DICM" where DICOM puts it.
  std::string dicom(133, '\0');
  dicom.replace(128, 4, "DICM");
  EXPECT_FALSE(DecodeImageBytes(dicom, {}, "scan.dcm").ok());
  // A PNG whose IHDR claims 20000 x 20000.
  std::string png = "\x89PNG\r\n\x1a\n" + std::string("\0\0\0\rIHDR", 8) + std::string("\0\0N\x20\0\0N\x20", 8) + std::string(9, '\0');
  EXPECT_EQ(ClaimedImageSize(png), std::make_pair(int64_t{20000}, int64_t{20000}));
  EXPECT_FALSE(DecodeImageBytes(png, {}, "big.png").ok());
  // 0xffffffff x 0xffffffff: the comparison must not overflow (UBSan found the product did;
  // fuzz/regressions/image_decode/png_size_product_overflow).
  std::string huge = "\x89PNG\r\n\x1a\n" + std::string("\0\0\0\rIHDR", 8) + std::string(40, '\xff');
  auto huge_refused = DecodeImageBytes(huge, {}, "huge.png");
  ASSERT_FALSE(huge_refused.ok());
  EXPECT_NE(huge_refused.status().message().find("4294967295 x 4294967295 pixels, more than kiln decodes"),
            std::string::npos)
      << huge_refused.status();
  // A real image of each kind still decodes, and its header says its size.
  torch::Tensor image = torch::randint(0, 255, {3, 5, 7}, torch::kUInt8);
  auto encoded = EncodePng(image);
  ASSERT_TRUE(encoded.ok());
  EXPECT_EQ(ClaimedImageSize(*encoded), std::make_pair(int64_t{7}, int64_t{5}));
  auto decoded = DecodeImageBytes(*encoded, {}, "small.png");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(torch::equal(*decoded, image));
  EXPECT_EQ(ClaimedImageSize("not an image"), std::nullopt);
  EXPECT_FALSE(IsDecodableImage("P5 12 34 255"));
}

}  // namespace
}  // namespace kiln::data
