// A crop of a JPEG, decoded with libjpeg-turbo doing the work a crop-and-resize would otherwise
// do on the whole decoded image (what PIL's draft() and DALI's ROI decoding do): rows above and
// below the crop are skipped, columns outside it are not converted, and when the crop is at least
// twice the output size it is scaled down in the DCT domain (by k/8) while decoding.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "lib/data/transform.h"

namespace kiln::data {

// True when `bytes` starts like a JPEG (FF D8 FF).
bool LooksLikeJpeg(std::string_view bytes);

// The JPEG's height and width from its header; InvalidArgument when it has none.
absl::StatusOr<std::pair<int64_t, int64_t>> JpegSize(std::string_view bytes);

// The crop `plan` of a JPEG as uint8 [out_height, out_width, C] (HWC; C = 1 grayscale, 3 RGB):
// scaled by 1/2, 1/4 or 1/8 in the DCT domain (libjpeg-turbo's SIMD scales) while the crop still
// covers the output, then resized bilinearly. A JPEG libjpeg cannot decode (corrupt, truncated,
// CMYK) is an InvalidArgument status naming `what`.
absl::StatusOr<torch::Tensor> DecodeJpegCrop(std::string_view bytes,
                                             const Transform::CropResize& plan, bool grayscale,
                                             const std::string& what);

}  // namespace kiln::data
