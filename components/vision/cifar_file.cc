#include "components/vision/cifar_file.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "components/vision/file_bytes.h"
#include "lib/base/status_macros.h"

namespace kiln::data {

absl::StatusOr<std::pair<torch::Tensor, torch::Tensor>> ReadCifarBatches(
    const std::vector<std::string>& paths, const CifarRecordLayout& layout) {
  constexpr int64_t kImageBytes = 3 * 32 * 32;
  const int64_t record = layout.label_bytes + kImageBytes;
  std::vector<std::string> contents;
  int64_t total = 0;
  for (const auto& path : paths) {
    KILN_ASSIGN_OR_RETURN(std::string data, ReadMaybeGzip(path));
    auto size = static_cast<int64_t>(data.size());
    if (size == 0 || size % record != 0) {
      return absl::DataLossError(absl::StrCat(path, ": truncated or not a CIFAR file: ", size,
                                              " bytes is not a whole number of ", record,
                                              "-byte records"));
    }
    for (int64_t i = 0; i < size / record; ++i) {
      auto label =
          static_cast<unsigned char>(data[static_cast<size_t>(i * record + layout.label_offset)]);
      if (label >= layout.num_classes) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": record ", i, " has label ", int{label}, ", but ",
                         layout.num_classes, " classes are expected (is data.variant right?)"));
      }
    }
    total += size / record;
    contents.push_back(std::move(data));
  }
  torch::Tensor images = torch::empty({total, 3, 32, 32}, torch::kUInt8);
  torch::Tensor labels = torch::empty({total}, torch::kInt64);
  auto* image_bytes = images.data_ptr<uint8_t>();
  auto* label_values = labels.data_ptr<int64_t>();
  int64_t n = 0;
  for (const auto& data : contents) {
    for (size_t at = 0; at < data.size(); at += static_cast<size_t>(record), ++n) {
      label_values[n] =
          static_cast<unsigned char>(data[at + static_cast<size_t>(layout.label_offset)]);
      std::memcpy(image_bytes + n * kImageBytes, data.data() + at + layout.label_bytes,
                  kImageBytes);
    }
  }
  return std::make_pair(images, labels);
}

}  // namespace kiln::data
