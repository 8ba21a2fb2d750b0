#include "components/vision/image_ops.h"

#include <png.h>

#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "components/vision/jpeg_crop.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"

namespace kiln::data {

torch::Tensor ResizeBilinear(const torch::Tensor& image, int64_t height, int64_t width) {
  auto dtype = image.scalar_type();
  auto resized = torch::nn::functional::interpolate(image.to(torch::kFloat32).unsqueeze(0),
                                                    torch::nn::functional::InterpolateFuncOptions()
                                                        .size(std::vector<int64_t>{height, width})
                                                        .mode(torch::kBilinear)
                                                        .align_corners(false))
                     .squeeze(0);
  return dtype == torch::kUInt8 ? resized.round().clamp(0, 255).to(torch::kUInt8) : resized;
}

namespace {

uint32_t BigEndian32(std::string_view b, size_t at) {
  return static_cast<uint32_t>(static_cast<uint8_t>(b[at])) << 24 |
         static_cast<uint32_t>(static_cast<uint8_t>(b[at + 1])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(b[at + 2])) << 8 |
         static_cast<uint8_t>(b[at + 3]);
}
uint32_t LittleEndian(std::string_view b, size_t at, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = v << 8 | static_cast<uint8_t>(b[at + static_cast<size_t>(i)]);
  return v;
}

// What a decoder says about a bad image goes to kiln's log, one line per 10 s at most: a flood of
// bad uploads to `kiln serve` is one line now and then, not one per request.
RateLimitedLog& DecoderLog() {
  static auto* log = new RateLimitedLog(LogLevel::kWarning, 10.0);
  return *log;
}

// libpng reads from memory and reports to this, never to stderr (its default handlers print
// "libpng error: ..." there, which is what OpenCV's PNG decoder leaves them doing).
struct PngInput {
  std::string_view bytes;
  size_t pos = 0;
  std::string error;
  std::vector<std::string> warnings;
};

void ReadPngBytes(png_structp png, png_bytep out, size_t size) {
  auto* in = static_cast<PngInput*>(png_get_io_ptr(png));
  if (size > in->bytes.size() - in->pos)
    png_error(png, "the file ends before the image does (truncated)");
  std::memcpy(out, in->bytes.data() + in->pos, size);
  in->pos += size;
}

void OnPngError(png_structp png, png_const_charp message) {
  static_cast<PngInput*>(png_get_error_ptr(png))->error = message;
  png_longjmp(png, 1);
}

void OnPngWarning(png_structp png, png_const_charp message) {
  auto* in = static_cast<PngInput*>(png_get_error_ptr(png));
  if (in->warnings.size() < 3) in->warnings.push_back(message);
}

// A PNG decoded by libpng with the transformations OpenCV 4.6's PNG decoder asks for (imgcodecs'
// PngDecoder::readData for an 8-bit, 3- or 1-channel result: 16 bits cut to 8, alpha dropped,
// palettes and low-bit grays expanded, gray to RGB or RGB to gray with 0.299/0.587), so the pixels
// are those cv::imdecode gives, bit for bit, but in RGB order and with libpng's messages here.
absl::StatusOr<cv::Mat> DecodePng(std::string_view bytes, bool grayscale, const std::string& what) {
  PngInput in{bytes};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &in, OnPngError, OnPngWarning);
  if (png == nullptr)
    return absl::ResourceExhaustedError(absl::StrCat(what, ": cannot start libpng"));
  png_infop info = png_create_info_struct(png);
  png_infop end_info = png_create_info_struct(png);
  cv::Mat image;  // declared before setjmp: a longjmp back here leaves them intact
  std::vector<png_bytep> rows;
  bool decoded = false;
  if (info != nullptr && end_info != nullptr && setjmp(png_jmpbuf(png)) == 0) {
    png_set_read_fn(png, &in, ReadPngBytes);
    png_read_info(png, info);
    png_uint_32 width = 0, height = 0;
    int bit_depth = 0, color_type = 0;
    png_get_IHDR(png, info, &width, &height, &bit_depth, &color_type, nullptr, nullptr, nullptr);
    if (bit_depth == 16) png_set_strip_16(png);
    png_set_strip_alpha(png);
    if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if ((color_type & PNG_COLOR_MASK_COLOR) == 0 && bit_depth < 8)
      png_set_expand_gray_1_2_4_to_8(png);
    if (!grayscale && (color_type & PNG_COLOR_MASK_COLOR) == 0) {
      png_set_gray_to_rgb(png);
    } else if (grayscale) {
      png_set_rgb_to_gray(png, 1, 0.299, 0.587);
    }
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const int channels = grayscale ? 1 : 3;
    if (png_get_channels(png, info) != channels ||
        png_get_rowbytes(png, info) != static_cast<size_t>(width) * channels) {
      png_error(png, "unexpected layout after conversion");
    }
    image.create(static_cast<int>(height), static_cast<int>(width), grayscale ? CV_8UC1 : CV_8UC3);
    rows.resize(height);
    for (png_uint_32 y = 0; y < height; ++y) rows[y] = image.ptr<uint8_t>(static_cast<int>(y));
    png_read_image(png, rows.data());
    png_read_end(png, end_info);
    decoded = true;
  }
  png_destroy_read_struct(&png, info != nullptr ? &info : nullptr,
                          end_info != nullptr ? &end_info : nullptr);
  if (!in.warnings.empty())
    DecoderLog().Log(absl::StrCat(what, ": PNG: ", absl::StrJoin(in.warnings, "; ")));
  if (!decoded) {
    std::string message =
        absl::StrCat(what, ": cannot decode PNG: ", in.error.empty() ? "out of memory" : in.error);
    DecoderLog().Log(message);
    return absl::InvalidArgumentError(message);
  }
  return image;
}

}  // namespace

bool IsDecodableImage(std::string_view b) {
  return (b.size() >= 8 && b.substr(0, 8) == "\x89PNG\r\n\x1a\n") || LooksLikeJpeg(b) ||
         (b.size() >= 2 && b.substr(0, 2) == "BM") ||
         (b.size() >= 12 && b.substr(0, 4) == "RIFF" && b.substr(8, 4) == "WEBP");
}

std::optional<std::pair<int64_t, int64_t>> ClaimedImageSize(std::string_view b) {
  if (b.size() >= 24 && b.substr(0, 8) == "\x89PNG\r\n\x1a\n" && b.substr(12, 4) == "IHDR")
    return std::make_pair<int64_t, int64_t>(BigEndian32(b, 16), BigEndian32(b, 20));
  if (LooksLikeJpeg(b)) {
    auto size = JpegSize(b);  // (height, width)
    if (size.ok()) return std::make_pair(size->second, size->first);
    return std::nullopt;
  }
  if (b.size() >= 26 && b.substr(0, 2) == "BM") {
    // BITMAPINFOHEADER: signed 32-bit width and height (negative height: top-down rows).
    int64_t width = static_cast<int32_t>(LittleEndian(b, 18, 4)),
            height = static_cast<int32_t>(LittleEndian(b, 22, 4));
    return std::make_pair(std::abs(width), std::abs(height));
  }
  if (b.size() >= 30 && b.substr(0, 4) == "RIFF" && b.substr(8, 4) == "WEBP") {
    std::string_view chunk = b.substr(12, 4);
    if (chunk == "VP8X")
      return std::make_pair<int64_t, int64_t>(LittleEndian(b, 24, 3) + 1,
                                              LittleEndian(b, 27, 3) + 1);
    if (chunk == "VP8 ")
      return std::make_pair<int64_t, int64_t>(LittleEndian(b, 26, 2) & 0x3fff,
                                              LittleEndian(b, 28, 2) & 0x3fff);
    if (chunk == "VP8L") {
      uint32_t bits = LittleEndian(b, 21, 4);
      return std::make_pair<int64_t, int64_t>((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1);
    }
    return std::nullopt;
  }
  return std::nullopt;
}

absl::StatusOr<torch::Tensor> DecodeImageBytes(std::string_view bytes,
                                               const ImageDecodeOptions& options,
                                               const std::string& what) {
  if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty, not an image"));
  // OpenCV would also try its other decoders (JPEG 2000, TIFF, OpenEXR, PNM, and DICOM and GDAL's
  // formats through GDCM and GDAL); kiln reads the four formats above, and one of those others
  // aborts the process on a 133-byte input (GDCM's assert; fuzz/regressions/image_decode/).
  if (!IsDecodableImage(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": cannot decode image (corrupt, truncated, or not PNG, JPEG, BMP or WebP)"));
  }
  // width * height > limit, without the product (a PNM header's numbers may be 12 digits long).
  if (auto claimed = ClaimedImageSize(bytes);
      claimed && claimed->second > 0 && claimed->first > kMaxImagePixels / claimed->second) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": an image of ", claimed->first, " x ", claimed->second,
                     " pixels, more than kiln decodes (", kMaxImagePixels, ")"));
  }
  cv::Mat image;
  if (bytes.substr(0, 8) == "\x89PNG\r\n\x1a\n") {
    KILN_ASSIGN_OR_RETURN(image, DecodePng(bytes, options.grayscale, what));
  } else {
    try {
      cv::Mat buffer(1, static_cast<int>(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
      image = cv::imdecode(buffer, options.grayscale ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
    } catch (const cv::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": cannot decode image: ", e.msg));
    }
    if (image.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": cannot decode image (corrupt, truncated, or not PNG, JPEG, BMP or WebP)"));
    }
    if (!options.grayscale) cv::cvtColor(image, image, cv::COLOR_BGR2RGB);
  }
  if (options.height > 0 && (image.rows != options.height || image.cols != options.width)) {
    // Area averaging when shrinking avoids aliasing; bilinear when enlarging.
    bool shrink = options.height * options.width < static_cast<int64_t>(image.rows) * image.cols;
    cv::Mat resized;
    cv::resize(image, resized,
               cv::Size(static_cast<int>(options.width), static_cast<int>(options.height)), 0, 0,
               shrink ? cv::INTER_AREA : cv::INTER_LINEAR);
    image = resized;
  }
  if (!image.isContinuous()) image = image.clone();
  return torch::from_blob(image.data, {image.rows, image.cols, image.channels()}, torch::kUInt8)
      .permute({2, 0, 1})
      .contiguous();
}

absl::StatusOr<std::string> EncodePng(const torch::Tensor& image) {
  if (image.dim() != 3 || image.scalar_type() != torch::kUInt8 ||
      (image.size(0) != 1 && image.size(0) != 3)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write as PNG: an image must be uint8 [1 or 3, H, W], not ",
                     c10::str(image.sizes()), " ", c10::toString(image.scalar_type())));
  }
  torch::Tensor hwc = image.permute({1, 2, 0}).contiguous();
  cv::Mat mat(static_cast<int>(hwc.size(0)), static_cast<int>(hwc.size(1)),
              hwc.size(2) == 1 ? CV_8UC1 : CV_8UC3, hwc.data_ptr<uint8_t>());
  cv::Mat bgr;
  if (hwc.size(2) == 3) cv::cvtColor(mat, bgr, cv::COLOR_RGB2BGR);
  std::vector<uint8_t> out;
  if (!cv::imencode(".png", hwc.size(2) == 3 ? bgr : mat, out))
    return absl::InternalError("cannot encode PNG");
  return std::string(out.begin(), out.end());
}

torch::Tensor MapPixels(const torch::Tensor& hwc, const Transform::PixelMap& map) {
  const int64_t height = hwc.size(0), width = hwc.size(1), channels = hwc.size(2);
  const uint8_t* in = hwc.data_ptr<uint8_t>();
  torch::Tensor out =
      torch::empty({channels, height, width}, map.to_float ? torch::kFloat32 : torch::kUInt8);
  float* out_float = map.to_float ? out.data_ptr<float>() : nullptr;
  uint8_t* out_byte = map.to_float ? nullptr : out.data_ptr<uint8_t>();
  for (int64_t c = 0; c < channels; ++c) {
    const float scale = map.scale.empty() ? 1.0f : map.scale[static_cast<size_t>(c)];
    const float shift = map.shift.empty() ? 0.0f : map.shift[static_cast<size_t>(c)];
    for (int64_t y = 0; y < height; ++y) {
      const uint8_t* row = in + (y * width) * channels + c;
      if (map.to_float) {
        float* dst = out_float + (c * height + y) * width;
        for (int64_t x = 0; x < width; ++x) {
          int64_t sx = map.flip ? width - 1 - x : x;
          dst[x] = static_cast<float>(row[sx * channels]) * scale + shift;
        }
      } else {
        uint8_t* dst = out_byte + (c * height + y) * width;
        for (int64_t x = 0; x < width; ++x) dst[x] = row[(map.flip ? width - 1 - x : x) * channels];
      }
    }
  }
  return out;
}

absl::StatusOr<torch::Tensor> DecodeAndTransform(std::string_view bytes,
                                                 const ImageDecodeOptions& options,
                                                 const TransformPipeline& transforms,
                                                 SampleRng& rng, const std::string& what) {
  if (transforms.empty()) {
    KILN_ASSIGN_OR_RETURN(torch::Tensor image, DecodeImageBytes(bytes, options, what));
    return image.to(torch::kFloat32).div_(255.0);
  }
  const Transform* first = transforms.front();
  bool fused = options.height == 0 && options.width == 0;
  if (fused && LooksLikeJpeg(bytes)) {
    auto size = JpegSize(bytes);
    if (!size.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": cannot decode image (", size.status().message(), ")"));
    // The rng is drawn from only when the first step is a crop-and-resize, exactly as its Apply.
    SampleRng probe = rng;
    std::optional<Transform::CropResize> plan =
        first->PlanCropResize(size->first, size->second, probe);
    if (plan) {
      auto hwc = DecodeJpegCrop(bytes, *plan, options.grayscale, what);
      // A JPEG libjpeg's crop path refuses (CMYK, say) goes the whole-image way below with the
      // untouched rng, which draws the same crop.
      if (hwc.ok()) {
        rng = probe;
        // The per-pixel steps that follow (flip, to_tensor, normalize) in one pass to CHW.
        Transform::PixelMap map;
        size_t next = transforms.FoldFrom(1, map, hwc->size(2), rng);
        return transforms.ApplyFrom(next, MapPixels(*hwc, map), rng);
      }
    }
  }
  KILN_ASSIGN_OR_RETURN(torch::Tensor image, DecodeImageBytes(bytes, options, what));
  return transforms.Apply(std::move(image), rng);
}

}  // namespace kiln::data
