#include "components/text/utf8.h"

namespace kiln::text {

size_t Utf8SequenceAt(std::string_view text, size_t i, bool* valid) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char c = byte(i);
  *valid = c < 0x80;
  if (c < 0x80) return 1;
  // RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  size_t k = 1;
  for (; k < n && i + k < text.size(); ++k) {
    if (k == 1 ? (byte(i + 1) < lo || byte(i + 1) > hi) : (byte(i + k) & 0xC0) != 0x80) break;
  }
  *valid = k == n;
  return k;
}

namespace {

// The length of the valid sequence starting at text[i], or 0 when it is invalid.
size_t SequenceLength(std::string_view text, size_t i) {
  bool valid = false;
  const size_t n = Utf8SequenceAt(text, i, &valid);
  return valid ? n : 0;
}

}  // namespace

size_t FindInvalidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    size_t n = SequenceLength(text, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::vector<std::string_view> SplitCodePoints(std::string_view text) {
  std::vector<std::string_view> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t n = SequenceLength(text, i);
    if (n == 0) n = 1;
    out.push_back(text.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace kiln::text
