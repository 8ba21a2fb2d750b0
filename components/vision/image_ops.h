// Small operations on image tensors that several transforms share.
#pragma once

#include <torch/torch.h>

namespace kiln::data {

// [H, W] becomes [1, H, W]; [C, H, W] is returned as is.
inline torch::Tensor AsChw(torch::Tensor image) { return image.dim() == 2 ? image.unsqueeze(0) : image; }

// Bilinear resize of [C, H, W] (uint8 results are rounded back to uint8).
torch::Tensor ResizeBilinear(const torch::Tensor& image, int64_t height, int64_t width);

}  // namespace kiln::data
