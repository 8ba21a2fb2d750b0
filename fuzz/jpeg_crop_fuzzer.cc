// libFuzzer target: the libjpeg-turbo crop decode (components/vision/jpeg_crop.cc): the JPEG's size
// from its header, then a crop of it decoded with DCT-domain scaling and resized, as
// random_resized_crop plans one. The first 6 bytes choose the crop and output; the rest is the
// JPEG.
#include <algorithm>
#include <cstdlib>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string_view>
#include <vector>

#include "components/vision/jpeg_crop.h"
#include "fuzz/fuzz_input.h"

// Seeds: 6 choice bytes then a small JPEG (colour, gray, progressive, restart
// markers, Huffman-optimized), sized so that crops scale by 1/2..1/8 in the DCT domain.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = kiln::fuzz::SeedDir();
  if (dir == nullptr) return 0;
  cv::Mat colour(48, 64, CV_8UC3), gray(40, 24, CV_8UC1);
  cv::randu(colour, 0, 255);
  cv::randu(gray, 0, 255);
  const std::string choices[] = {std::string("\x7f\xff\x00\x00\x03\x03", 6),
                                 std::string("\x20\x40\x80\x80\x00\x41", 6)};
  auto write = [&](const std::string& name, const cv::Mat& image, const std::vector<int>& params) {
    std::vector<uchar> bytes;
    if (!cv::imencode(".jpg", image, bytes, params)) return;
    for (size_t i = 0; i < 2; ++i)
      kiln::fuzz::WriteSeed(name + std::to_string(i),
                            choices[i] + std::string(bytes.begin(), bytes.end()));
  };
  write("colour420_", colour, {cv::IMWRITE_JPEG_QUALITY, 40});
  write("optimized_", colour, {cv::IMWRITE_JPEG_OPTIMIZE, 1, cv::IMWRITE_JPEG_QUALITY, 95});
  write("progressive_", colour, {cv::IMWRITE_JPEG_PROGRESSIVE, 1});
  write("restart_", gray, {cv::IMWRITE_JPEG_RST_INTERVAL, 1});
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 6) return 0;
  const uint8_t* choice = data;
  std::string_view bytes(reinterpret_cast<const char*>(data + 6), size - 6);
  if (!kiln::data::LooksLikeJpeg(bytes)) return 0;
  auto full = kiln::data::JpegSize(bytes);
  if (!full.ok()) return 0;
  auto [height, width] = *full;
  kiln::data::Transform::CropResize plan;
  // A crop of 1/256..256/256 of each side at an offset that keeps it inside (or, with the top bit
  // of the first choice byte, a box that may leave the image: the decoder must refuse it).
  plan.height = std::max<int64_t>(1, height * (choice[0] % 128 + 1) / 128);
  plan.width = std::max<int64_t>(1, width * (choice[1] + 1) / 256);
  plan.top = (height - plan.height) * choice[2] / 255;
  plan.left = (width - plan.width) * choice[3] / 255;
  if (choice[0] & 128) plan.top += choice[2];
  plan.out_height = 1 + choice[4] % 64;
  plan.out_width = 1 + choice[5] % 64;
  bool grayscale = (choice[5] & 64) != 0;
  auto image = kiln::data::DecodeJpegCrop(bytes, plan, grayscale, "fuzz input");
  if (image.ok() && (image->size(0) != plan.out_height || image->size(1) != plan.out_width))
    __builtin_trap();
  return 0;
}
