// TensorBoard's event file format, hand-encoded: TFRecord framing (length, masked CRC32C of the
// length, data, masked CRC32C of the data) around tensorflow.Event protocol buffers holding
// scalar summaries. Enough to write what TensorBoard reads, without a protobuf dependency.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::tfrecord {

// CRC-32C (Castagnoli), as TFRecord uses it.
uint32_t Crc32c(const std::string& data);
// TFRecord's masked CRC: rotate right by 15 bits, add 0xa282ead8.
uint32_t MaskedCrc32c(const std::string& data);

// One TFRecord: the framing around `data`.
std::string Frame(const std::string& data);

// An Event with only wall_time and file_version ("brain.Event:2"): the first record of a file.
std::string FileVersionEvent(double wall_time);

struct Scalar {
  std::string tag;
  float value;
};
// An Event at `step` whose summary holds one simple_value per scalar.
std::string ScalarsEvent(double wall_time, int64_t step, const std::vector<Scalar>& scalars);

}  // namespace kiln::tfrecord
