// random_resized_crop and color_jitter: torchvision's semantics checked on values (crop windows,
// the centre-crop fallback, exact brightness/contrast/saturation/hue arithmetic on uint8), and
// determinism from (seed, epoch, index) alone.
#include <gtest/gtest.h>
#include <png.h>
#include <torch/torch.h>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <random>
#include <set>

#include "components/vision/image_ops.h"
#include "lib/data/transform.h"
#include "tests/components/instantiate.h"

namespace kiln::data {
namespace transforms_test {

absl::StatusOr<std::shared_ptr<Transform>> Build(const std::string& yaml) {
  return testing::Instantiate<Transform>(yaml, "t");
}

std::shared_ptr<Transform> BuildOk(const std::string& yaml) {
  return testing::InstantiateOk<Transform>(yaml, "t");
}

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
  return torch::tensor(std::vector<int64_t>(values.begin(), values.end()), torch::kInt64)
      .to(torch::kUInt8)
      .view({3, h, w});
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
  EXPECT_TRUE(torch::equal(ApplyTo(*third, Rgb({255, 0, 0}, 1, 1)), Rgb({0, 255, 0}, 1, 1)))
      << ApplyTo(*third, Rgb({255, 0, 0}, 1, 1));
  // Grayscale images have no saturation or hue to change.
  torch::Tensor one_channel = torch::full({1, 2, 2}, 77, torch::kUInt8);
  EXPECT_TRUE(torch::equal(ApplyTo(*gray, one_channel), one_channel));
  EXPECT_TRUE(torch::equal(ApplyTo(*hue, one_channel), one_channel));
}

TEST(ColorJitter, FactorsStayInRangeAndDependOnlyOnTheSample) {
  auto t = BuildOk(
      "_target_: color_jitter\nbrightness: 0.4\ncontrast: 0.4\nsaturation: 0.4\nhue: 0.1\n");
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

}  // namespace transforms_test
}  // namespace kiln::data

namespace kiln::data {
namespace transforms_test {

// Only PNG, JPEG, BMP and WebP reach OpenCV (the fuzzer's findings: a 40-byte PBM made it allocate
// 2.4 GB, a 133-byte DICOM-looking input aborted the process in GDCM), and headers that claim more
// than kMaxImagePixels are refused before a decoder allocates anything; small images still decode,
// and each format's header gives its size.
TEST(DecodeImageBytes, RefusesOtherFormatsAndHeadersClaimingMoreThanTheLimit) {
  // fuzz/regressions/image_decode/opencv_pbm_2gb: "P4", width 15555, height 52255.
  const std::string pbm(
      "P4\n15555\xd3"
      "52255\xd3"
      "522\nP4\xba\n2\n\nP4\n2\n7\xfd"
      "0\n\xff\xff\xff\xff/",
      40);
  auto refused = DecodeImageBytes(pbm, {}, "tiny.pbm");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "tiny.pbm: cannot decode image (corrupt, truncated, or not PNG, JPEG, BMP or WebP)");
  // fuzz/regressions/image_decode/gdcm_assert_abort: zeros with "DICM" where DICOM puts it.
  std::string dicom(133, '\0');
  dicom.replace(128, 4, "DICM");
  EXPECT_FALSE(DecodeImageBytes(dicom, {}, "scan.dcm").ok());
  // A PNG whose IHDR claims 20000 x 20000.
  std::string png = "\x89PNG\r\n\x1a\n" + std::string("\0\0\0\rIHDR", 8) +
                    std::string("\0\0N\x20\0\0N\x20", 8) + std::string(9, '\0');
  EXPECT_EQ(ClaimedImageSize(png), std::make_pair(int64_t{20000}, int64_t{20000}));
  EXPECT_FALSE(DecodeImageBytes(png, {}, "big.png").ok());
  // 0xffffffff x 0xffffffff: the comparison must not overflow (UBSan found the product did;
  // fuzz/regressions/image_decode/png_size_product_overflow).
  std::string huge = "\x89PNG\r\n\x1a\n" + std::string("\0\0\0\rIHDR", 8) + std::string(40, '\xff');
  auto huge_refused = DecodeImageBytes(huge, {}, "huge.png");
  ASSERT_FALSE(huge_refused.ok());
  EXPECT_NE(huge_refused.status().message().find(
                "4294967295 x 4294967295 pixels, more than kiln decodes"),
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

// A PNG of any layout, written by libpng into memory: pixels random (seeded), each row `width *
// samples` values of `bit_depth` bits packed as PNG packs them.
struct PngSpec {
  const char* name;
  int color_type;
  int bit_depth;
  bool interlaced = false;
  bool transparency = false;  // a tRNS chunk (palette alpha, or a transparent gray/RGB value)
};

std::string WritePng(const PngSpec& spec, int width, int height, unsigned seed) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, size_t n) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<char*>(data), n);
      },
      [](png_structp) {});
  png_set_IHDR(png, info, width, height, spec.bit_depth, spec.color_type,
               spec.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  std::mt19937 rng(seed);
  const size_t entries =
      spec.bit_depth < 4 ? size_t{1} << spec.bit_depth : 16;  // what the indices reach
  std::vector<png_color> palette(entries);
  std::vector<png_byte> alpha(entries);
  for (size_t i = 0; i < palette.size(); ++i) {
    palette[i] = {static_cast<png_byte>(rng()), static_cast<png_byte>(rng()),
                  static_cast<png_byte>(rng())};
    alpha[i] = static_cast<png_byte>(rng());
  }
  png_color_16 transparent{};
  transparent.gray = 1;
  transparent.red = 3;
  if (spec.color_type == PNG_COLOR_TYPE_PALETTE)
    png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  if (spec.transparency) {
    png_set_tRNS(png, info, alpha.data(),
                 spec.color_type == PNG_COLOR_TYPE_PALETTE ? static_cast<int>(entries) : 0,
                 &transparent);
  }
  png_write_info(png, info);
  png_set_interlace_handling(png);
  const int samples = spec.color_type == PNG_COLOR_TYPE_RGB_ALPHA    ? 4
                      : spec.color_type == PNG_COLOR_TYPE_RGB        ? 3
                      : spec.color_type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                                                                     : 1;
  const size_t row_bytes = (static_cast<size_t>(width) * samples * spec.bit_depth + 7) / 8;
  std::vector<std::vector<png_byte>> rows(height, std::vector<png_byte>(row_bytes));
  for (auto& row : rows) {
    for (auto& b : row) b = static_cast<png_byte>(rng());
    if (spec.color_type == PNG_COLOR_TYPE_PALETTE && spec.bit_depth == 8) {
      for (auto& b : row) b %= 16;  // indices within the palette
    }
  }
  std::vector<png_bytep> pointers;
  for (auto& row : rows) pointers.push_back(row.data());
  png_write_image(png, pointers.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// kiln decodes PNGs with libpng itself (so libpng's messages reach kiln's log, not stderr) and
// must give exactly what OpenCV's decoder gave before: every layout PNG has, in color and gray.
TEST(DecodeImageBytes, PngPixelsAreOpenCvsBitForBit) {
  const std::vector<PngSpec> specs = {
      {"gray1", PNG_COLOR_TYPE_GRAY, 1},
      {"gray2", PNG_COLOR_TYPE_GRAY, 2},
      {"gray4_trns", PNG_COLOR_TYPE_GRAY, 4, false, true},
      {"gray8", PNG_COLOR_TYPE_GRAY, 8},
      {"gray16", PNG_COLOR_TYPE_GRAY, 16},
      {"gray_alpha8", PNG_COLOR_TYPE_GRAY_ALPHA, 8},
      {"gray_alpha16", PNG_COLOR_TYPE_GRAY_ALPHA, 16},
      {"rgb8", PNG_COLOR_TYPE_RGB, 8},
      {"rgb8_interlaced", PNG_COLOR_TYPE_RGB, 8, true},
      {"rgb8_trns", PNG_COLOR_TYPE_RGB, 8, false, true},
      {"rgb16", PNG_COLOR_TYPE_RGB, 16},
      {"rgba8", PNG_COLOR_TYPE_RGB_ALPHA, 8},
      {"rgba16_interlaced", PNG_COLOR_TYPE_RGB_ALPHA, 16, true},
      {"palette2", PNG_COLOR_TYPE_PALETTE, 2},
      {"palette4_trns", PNG_COLOR_TYPE_PALETTE, 4, false, true},
      {"palette8_trns_interlaced", PNG_COLOR_TYPE_PALETTE, 8, true, true},
  };
  unsigned seed = 1;
  for (const PngSpec& spec : specs) {
    std::string bytes = WritePng(spec, 13, 9, seed++);
    cv::Mat buffer(1, static_cast<int>(bytes.size()), CV_8UC1, bytes.data());
    for (bool grayscale : {false, true}) {
      SCOPED_TRACE(std::string(spec.name) + (grayscale ? " as gray" : " as color"));
      cv::Mat expected = cv::imdecode(buffer, grayscale ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
      ASSERT_FALSE(expected.empty());
      if (!grayscale) cv::cvtColor(expected, expected, cv::COLOR_BGR2RGB);
      ImageDecodeOptions options;
      options.grayscale = grayscale;
      auto decoded = DecodeImageBytes(bytes, options, spec.name);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      torch::Tensor want =
          torch::from_blob(expected.data, {expected.rows, expected.cols, expected.channels()},
                           torch::kUInt8)
              .permute({2, 0, 1});
      EXPECT_TRUE(torch::equal(*decoded, want));
    }
  }
}

// A truncated or corrupt PNG is one status naming the input, and libpng's complaint reaches
// stderr only as kiln's log line (Hydra's format), once per 10 s however many arrive.
TEST(DecodeImageBytes, BadPngsAreAStatusAndOneRateLimitedLogLine) {
  std::string good = WritePng({"rgb8", PNG_COLOR_TYPE_RGB, 8}, 32, 32, 7);
  std::string truncated = good.substr(0, good.size() / 2);
  std::string corrupt = good;
  corrupt[good.size() / 2] ^= 0x55;  // inside IDAT: its CRC no longer matches
  ::testing::internal::CaptureStderr();
  auto first = DecodeImageBytes(truncated, {}, "upload.png");
  std::vector<absl::Status> more;
  for (int i = 0; i < 5; ++i)
    more.push_back(DecodeImageBytes(i % 2 ? corrupt : truncated, {}, "upload.png").status());
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().message(),
            "upload.png: cannot decode PNG: the file ends before the image does (truncated)");
  for (const auto& st : more) EXPECT_FALSE(st.ok());
  EXPECT_NE(more[0].message().find("upload.png: cannot decode PNG: "), std::string::npos)
      << more[0];
  EXPECT_EQ(err.find("libpng"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(
      err.find(
          "][kiln][WARNING] - upload.png: cannot decode PNG: the file ends before the image does"),
      std::string::npos)
      << err;
}

}  // namespace transforms_test
}  // namespace kiln::data
