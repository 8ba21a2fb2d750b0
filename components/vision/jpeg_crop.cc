#include "components/vision/jpeg_crop.h"

#include <csetjmp>
#include <cstdio>
// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
// jerror.h after jpeglib.h: its message codes (JWRN_JPEG_EOF).
#include <jerror.h>

#include <algorithm>
#include <memory>
#include <opencv2/imgproc.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "components/vision/image_ops.h"

namespace kiln::data {
namespace {

// libjpeg reports fatal errors through error_exit, which must not return: it jumps back to the
// decode with the message kept.
struct ErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnError(j_common_ptr cinfo) {
  auto* manager = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, manager->message);
  std::longjmp(manager->jump, 1);
}

// Warnings (e.g. extraneous bytes) are not errors, but a file that ends before its image does is
// (libjpeg would make up the rest: a 500-byte file claiming 65000 x 50000 pixels takes minutes).
void OnMessage(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) OnError(cinfo);
}

// The most memory libjpeg may take for one image (its whole-image buffers: a progressive or
// multi-scan JPEG's coefficients, 128 bytes per 8x8 block, are ~30 MB for a 12-megapixel photo),
// and the most pixels an image may have (kMaxImagePixels, as for every decoder). A header claiming
// more is refused before anything that size is allocated.
constexpr long kMaxDecoderMemory = 512L << 20;
constexpr int64_t kMaxPixels = kMaxImagePixels;

// What the decode fills; allocated before setjmp so that a jump back leaves it intact.
struct DecodeState {
  DecodeState() {
    cinfo.err = jpeg_std_error(&error.base);
    error.base.error_exit = OnError;
    error.base.emit_message = OnMessage;
  }
  jpeg_decompress_struct cinfo;
  ErrorManager error;
  std::vector<uint8_t> rows;
  int64_t height = 0, width = 0, channels = 0, x_offset = 0;
};

}  // namespace

bool LooksLikeJpeg(std::string_view bytes) {
  return bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == 0xFF &&
         static_cast<uint8_t>(bytes[1]) == 0xD8 && static_cast<uint8_t>(bytes[2]) == 0xFF;
}

absl::StatusOr<std::pair<int64_t, int64_t>> JpegSize(std::string_view bytes) {
  auto state = std::make_unique<DecodeState>();
  jpeg_decompress_struct& cinfo = state->cinfo;
  if (setjmp(state->error.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(absl::StrCat("not a readable JPEG: ", state->error.message));
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  std::pair<int64_t, int64_t> size{cinfo.image_height, cinfo.image_width};
  jpeg_destroy_decompress(&cinfo);
  return size;
}

absl::StatusOr<torch::Tensor> DecodeJpegCrop(std::string_view bytes,
                                             const Transform::CropResize& plan, bool grayscale,
                                             const std::string& what) {
  auto state = std::make_unique<DecodeState>();
  jpeg_decompress_struct& cinfo = state->cinfo;
  if (setjmp(state->error.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": cannot decode JPEG (", state->error.message, ")"));
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  cinfo.mem->max_memory_to_use = kMaxDecoderMemory;
  jpeg_read_header(&cinfo, TRUE);
  const int64_t full_height = cinfo.image_height, full_width = cinfo.image_width;
  if (full_height * full_width > kMaxPixels) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(absl::StrCat(what, ": JPEG of ", full_width, " x ",
                                                   full_height, " pixels, more than kiln decodes (",
                                                   kMaxPixels, ")"));
  }
  if (plan.top < 0 || plan.left < 0 || plan.height < 1 || plan.width < 1 ||
      plan.top + plan.height > full_height || plan.left + plan.width > full_width) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(absl::StrCat(what, ": crop outside the image"));
  }
  cinfo.out_color_space = grayscale ? JCS_GRAYSCALE : JCS_RGB;
  // The smallest of 1/2, 1/4, 1/8 at which the crop still covers the output: DCT-domain downscaling
  // (libjpeg-turbo has SIMD for these; other k/8 scales run slower C code than a full decode).
  unsigned int denom = 1;
  while (denom < 8 && plan.width >= plan.out_width * 2 * denom &&
         plan.height >= plan.out_height * 2 * denom)
    denom *= 2;
  cinfo.scale_num = 1;
  cinfo.scale_denom = denom;
  jpeg_start_decompress(&cinfo);
  // The crop in the scaled image's coordinates.
  auto scaled = [](int64_t v, int64_t full, int64_t out) { return v * out / full; };
  const int64_t out_h = cinfo.output_height, out_w = cinfo.output_width;
  int64_t top = scaled(plan.top, full_height, out_h), left = scaled(plan.left, full_width, out_w);
  int64_t bottom = std::max(
      top + 1, std::min<int64_t>(out_h, scaled(plan.top + plan.height, full_height, out_h)));
  int64_t right = std::max(
      left + 1, std::min<int64_t>(out_w, scaled(plan.left + plan.width, full_width, out_w)));
  // libjpeg widens the column range to whole iMCUs; x_offset is where it starts.
  JDIMENSION x_offset = static_cast<JDIMENSION>(left),
             crop_width = static_cast<JDIMENSION>(right - left);
  jpeg_crop_scanline(&cinfo, &x_offset, &crop_width);
  state->channels = cinfo.output_components;
  state->x_offset = static_cast<int64_t>(x_offset);
  state->width = static_cast<int64_t>(cinfo.output_width);  // the cropped width
  state->height = bottom - top;
  if (top > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(top));
  const size_t stride = static_cast<size_t>(state->width * state->channels);
  // Grown row by row: rows come only from data the file holds (its end is an error, above).
  while (static_cast<int64_t>(cinfo.output_scanline) < bottom) {
    const size_t at =
        stride * static_cast<size_t>(static_cast<int64_t>(cinfo.output_scanline) - top);
    state->rows.resize(at + stride);
    JSAMPROW row = state->rows.data() + at;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);

  const int type = state->channels == 1 ? CV_8UC1 : CV_8UC3;
  cv::Mat decoded(static_cast<int>(state->height), static_cast<int>(state->width), type,
                  state->rows.data(), stride);
  cv::Mat crop = decoded(cv::Rect(static_cast<int>(left - state->x_offset), 0,
                                  static_cast<int>(right - left), static_cast<int>(state->height)));
  auto out = torch::empty({plan.out_height, plan.out_width, state->channels}, torch::kUInt8);
  cv::Mat resized(static_cast<int>(plan.out_height), static_cast<int>(plan.out_width), type,
                  out.data_ptr<uint8_t>());
  if (crop.rows == resized.rows && crop.cols == resized.cols) {
    crop.copyTo(resized);
  } else {
    // After the DCT scaling the crop is under twice the output: bilinear does not alias.
    cv::resize(crop, resized, resized.size(), 0, 0, cv::INTER_LINEAR);
  }
  return out;
}

}  // namespace kiln::data
