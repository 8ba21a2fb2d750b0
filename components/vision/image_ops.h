// Small operations on image tensors that several transforms share.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "lib/data/sample_rng.h"
#include "lib/data/transform.h"

namespace kiln::data {

// [H, W] becomes [1, H, W]; [C, H, W] is returned as is.
inline torch::Tensor AsChw(torch::Tensor image) {
  return image.dim() == 2 ? image.unsqueeze(0) : image;
}

// Bilinear resize of [C, H, W] (uint8 results are rounded back to uint8).
torch::Tensor ResizeBilinear(const torch::Tensor& image, int64_t height, int64_t width);

// The most pixels kiln decodes an image to: 2^27, about 11585 x 11585 (PIL warns above 89 M and
// refuses above 179 M by default). A header claiming more is refused before the decoder allocates
// anything. The fuzzer found a 40-byte PBM claiming 15555 x 52255 pixels that made OpenCV allocate
// 2.4 GB, and a 218-byte JPEG claiming 65486 x 2499 (2^27.3) whose decode, RGB conversion and
// tensor took 1.5 GB (fuzz/regressions/image_decode/).
constexpr int64_t kMaxImagePixels = int64_t{1} << 27;

// Whether `bytes` start as a PNG, JPEG, BMP or WebP file: the formats kiln decodes.
bool IsDecodableImage(std::string_view bytes);
// The width and height a PNG, JPEG, BMP or WebP header claims; nullopt for another format or a
// header too short to say (the decoder then judges the bytes).
std::optional<std::pair<int64_t, int64_t>> ClaimedImageSize(std::string_view bytes);

// How an encoded image (PNG, JPEG, BMP, WebP) becomes a tensor.
struct ImageDecodeOptions {
  bool grayscale = false;
  int64_t height = 0, width = 0;  // 0: keep each image's size
};

// An encoded PNG, JPEG, BMP or WebP image as uint8 [C, H, W] (RGB or grayscale; OpenCV decodes
// it), resized when asked (area averaging when shrinking, bilinear when enlarging); another format,
// or more than kMaxImagePixels, is refused. `what` names the image in errors (a
// path, "the request's image"): bytes that are not an image are an InvalidArgument status.
absl::StatusOr<torch::Tensor> DecodeImageBytes(std::string_view bytes,
                                               const ImageDecodeOptions& options,
                                               const std::string& what);

// A uint8 [C, H, W] image (C = 1 or 3, RGB) as PNG bytes.
absl::StatusOr<std::string> EncodePng(const torch::Tensor& image);

// A uint8 [H, W, C] image as [C, H, W], mirrored and mapped per channel as `map` says.
torch::Tensor MapPixels(const torch::Tensor& hwc, const Transform::PixelMap& map);

// An encoded image through `transforms` (none: float in [0, 1]). When the first transform is a
// crop-and-resize (random_resized_crop) and no decode size is set, the decoder does it: a JPEG is
// decoded only where the crop is, scaled down while decoding (jpeg_crop.h), other formats are
// decoded whole and the crop resized with OpenCV. The crop box is the one the transform draws; the
// pixels are within rounding of decode-then-transform.
absl::StatusOr<torch::Tensor> DecodeAndTransform(std::string_view bytes,
                                                 const ImageDecodeOptions& options,
                                                 const TransformPipeline& transforms,
                                                 SampleRng& rng, const std::string& what);

}  // namespace kiln::data
