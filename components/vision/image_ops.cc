#include "components/vision/image_ops.h"

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

}  // namespace kiln::data
