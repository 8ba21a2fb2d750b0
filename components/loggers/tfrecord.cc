#include "components/loggers/tfrecord.h"

#include <array>
#include <cstring>

namespace kiln::tfrecord {
namespace {

const std::array<uint32_t, 256>& CrcTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // reflected Castagnoli
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void PutFixed(std::string* out, const void* value, size_t bytes) {
  // Protocol buffers and TFRecord are little-endian, as is every machine kiln builds for.
  out->append(static_cast<const char*>(value), bytes);
}

void PutVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// Wire types: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit.
void PutTag(std::string* out, int field, int wire_type) {
  PutVarint(out, static_cast<uint64_t>(field << 3 | wire_type));
}

void PutBytes(std::string* out, int field, const std::string& bytes) {
  PutTag(out, field, 2);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

void PutDouble(std::string* out, int field, double value) {
  PutTag(out, field, 1);
  PutFixed(out, &value, 8);
}

}  // namespace

uint32_t Crc32c(const std::string& data) {
  const auto& table = CrcTable();
  uint32_t crc = 0xffffffffu;
  for (unsigned char byte : data) crc = table[(crc ^ byte) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

uint32_t MaskedCrc32c(const std::string& data) {
  uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string Frame(const std::string& data) {
  std::string length;
  uint64_t size = data.size();
  PutFixed(&length, &size, 8);
  uint32_t length_crc = MaskedCrc32c(length), data_crc = MaskedCrc32c(data);
  std::string out = length;
  PutFixed(&out, &length_crc, 4);
  out += data;
  PutFixed(&out, &data_crc, 4);
  return out;
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary). Summary: value = 1 (repeated Value). Value: tag = 1, simple_value = 2
// (float).
std::string FileVersionEvent(double wall_time) {
  std::string event;
  PutDouble(&event, 1, wall_time);
  PutBytes(&event, 3, "brain.Event:2");
  return event;
}

std::string ScalarsEvent(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const Scalar& s : scalars) {
    std::string value;
    PutBytes(&value, 1, s.tag);
    PutTag(&value, 2, 5);
    PutFixed(&value, &s.value, 4);
    PutBytes(&summary, 1, value);
  }
  std::string event;
  PutDouble(&event, 1, wall_time);
  PutTag(&event, 2, 0);
  PutVarint(&event, static_cast<uint64_t>(step));
  PutBytes(&event, 5, summary);
  return event;
}

}  // namespace kiln::tfrecord
