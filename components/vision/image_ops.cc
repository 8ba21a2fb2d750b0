#include "components/vision/image_ops.h"

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <vector>

#include "absl/strings/str_cat.h"

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

absl::StatusOr<torch::Tensor> DecodeImageBytes(std::string_view bytes, const ImageDecodeOptions& options,
                                               const std::string& what) {
  if (bytes.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty, not an image"));
  cv::Mat image;
  try {
    cv::Mat buffer(1, static_cast<int>(bytes.size()), CV_8UC1, const_cast<char*>(bytes.data()));
    image = cv::imdecode(buffer, options.grayscale ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
  } catch (const cv::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": cannot decode image: ", e.msg));
  }
  if (image.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": cannot decode image (corrupt, truncated or not an image)"));
  }
  if (!options.grayscale) cv::cvtColor(image, image, cv::COLOR_BGR2RGB);
  if (options.height > 0 && (image.rows != options.height || image.cols != options.width)) {
    // Area averaging when shrinking avoids aliasing; bilinear when enlarging.
    bool shrink = options.height * options.width < static_cast<int64_t>(image.rows) * image.cols;
    cv::Mat resized;
    cv::resize(image, resized, cv::Size(static_cast<int>(options.width), static_cast<int>(options.height)), 0, 0,
               shrink ? cv::INTER_AREA : cv::INTER_LINEAR);
    image = resized;
  }
  if (!image.isContinuous()) image = image.clone();
  return torch::from_blob(image.data, {image.rows, image.cols, image.channels()}, torch::kUInt8)
      .permute({2, 0, 1})
      .contiguous();
}

}  // namespace kiln::data
