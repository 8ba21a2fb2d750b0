// libFuzzer target: image decoding through OpenCV (DecodeImageBytes in
// components/vision/image_ops.cc: PNG, JPEG, BMP, WebP, ... as image folders, shards and `kiln
// serve` uploads arrive), in colour and grayscale, kept at its size or resized as a data module's
// decode size asks.
#include <cstdlib>
#include <opencv2/imgcodecs.hpp>
#include <string_view>
#include <vector>

#include "components/vision/image_ops.h"
#include "fuzz/fuzz_input.h"

// Seeds: small images in the formats OpenCV reads (PNG colour and gray, JPEG baseline and
// progressive, BMP, WebP, TIFF, PPM).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = kiln::fuzz::SeedDir();
  if (dir == nullptr) return 0;
  cv::Mat colour(6, 8, CV_8UC3), gray(5, 3, CV_8UC1);
  cv::randu(colour, 0, 255);
  cv::randu(gray, 0, 255);
  auto write = [](const std::string& name, const cv::Mat& image,
                  const std::vector<int>& params = {}) {
    std::vector<uchar> bytes;
    if (cv::imencode(name.substr(name.rfind('.')), image, bytes, params))
      kiln::fuzz::WriteSeed(name, std::string(bytes.begin(), bytes.end()));
  };
  write("colour.png", colour);
  write("gray.png", gray);
  write("colour.jpg", colour, {cv::IMWRITE_JPEG_QUALITY, 50});
  write("progressive.jpg", gray, {cv::IMWRITE_JPEG_PROGRESSIVE, 1});
  write("colour.bmp", colour);
  write("colour.webp", colour);
  write("gray.tiff", gray);
  write("colour.ppm", colour);
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  kiln::data::ImageDecodeOptions options;
  options.grayscale = (size % 2) == 1;
  auto image = kiln::data::DecodeImageBytes(bytes, options, "fuzz input");
  if (image.ok()) {
    if (image->dim() != 3 || image->size(0) != (options.grayscale ? 1 : 3)) __builtin_trap();
    options.height = 7;
    options.width = 5;
    auto resized = kiln::data::DecodeImageBytes(bytes, options, "fuzz input");
    if (!resized.ok() || resized->size(1) != 7 || resized->size(2) != 5) __builtin_trap();
  }
  return 0;
}
