#include "components/vision/idx_file.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "components/vision/file_bytes.h"
#include "lib/base/status_macros.h"

namespace kiln::data {
namespace {

uint32_t BigEndian(const std::string& data, size_t offset) {
  auto b = [&](size_t i) {
    return static_cast<uint32_t>(static_cast<unsigned char>(data[offset + i]));
  };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

}  // namespace

absl::StatusOr<torch::Tensor> ReadIdx(const std::string& path, int expected_dims) {
  KILN_ASSIGN_OR_RETURN(std::string data, ReadMaybeGzip(path));
  if (data.size() < 4 || data[0] != 0 || data[1] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an IDX file (bad magic number)"));
  }
  if (static_cast<unsigned char>(data[2]) != 0x08) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": IDX element type must be unsigned byte (0x08)"));
  }
  int dims = static_cast<unsigned char>(data[3]);
  if (dims != expected_dims) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected an IDX file with ",
                                                   expected_dims, " dimensions, found ", dims));
  }
  size_t header = 4 + 4 * static_cast<size_t>(dims);
  if (data.size() < header)
    return absl::DataLossError(absl::StrCat(path, ": truncated IDX header"));
  std::vector<int64_t> shape;
  // The product of the sizes, zeros taken as 1 (what the tensor's strides multiply up to), must
  // fit: a 16-byte header can claim 2^96 elements, or 0 x 2^64.
  uint64_t extent = 1;
  bool empty = false;
  for (int d = 0; d < dims; ++d) {
    uint32_t n = BigEndian(data, 4 + 4 * static_cast<size_t>(d));
    shape.push_back(n);
    empty = empty || n == 0;
    if (n != 0 && (__builtin_mul_overflow(extent, n, &extent) || extent > (uint64_t{1} << 62))) {
      return absl::DataLossError(absl::StrCat(path, ": corrupt IDX header: its sizes (",
                                              absl::StrJoin(shape, " x "), " ...) are too large"));
    }
  }
  const size_t count = empty ? 0 : static_cast<size_t>(extent);
  if (data.size() - header != count) {
    return absl::DataLossError(absl::StrCat(path, ": truncated IDX file: the header promises ",
                                            count, " bytes of data, the file has ",
                                            data.size() - header));
  }
  torch::Tensor tensor = torch::empty(shape, torch::kUInt8);
  if (count > 0)
    std::memcpy(tensor.data_ptr(), data.data() + header, count);  // an empty tensor has no data
  return tensor;
}

}  // namespace kiln::data
