#include "components/recsys/criteo_line.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace kiln::recsys {
namespace {

// A field as messages quote it: at most 20 bytes, control bytes as '?'.
std::string Quoted(std::string_view field) {
  std::string out = "'";
  for (size_t i = 0; i < field.size() && i < 20; ++i) {
    auto c = static_cast<unsigned char>(field[i]);
    out += (c < 0x20 || c >= 0x7f) ? '?' : static_cast<char>(c);
  }
  if (field.size() > 20) out += "...";
  return out + "'";
}

bool ParseInteger(std::string_view field, int32_t* out) {
  if (field.empty()) {
    *out = 0;
    return true;
  }
  bool negative = field[0] == '-';
  size_t i = negative ? 1 : 0;
  if (i == field.size()) return false;
  int64_t value = 0;
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (; i < field.size(); ++i) {
    char c = field[i];
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
    if (value > kMax) value = kMax;  // saturates; stays far from int64 overflow
  }
  *out = negative ? 0 : static_cast<int32_t>(value);
  return true;
}

bool ParseHash(std::string_view field, uint32_t* out) {
  if (field.empty()) {
    *out = 0;
    return true;
  }
  if (field.size() > 8) return false;
  uint32_t value = 0;
  for (char c : field) {
    uint32_t digit;
    if (c >= '0' && c <= '9') {
      digit = static_cast<uint32_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<uint32_t>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<uint32_t>(c - 'A' + 10);
    } else {
      return false;
    }
    value = value << 4 | digit;
  }
  *out = value;
  return true;
}

}  // namespace

std::string ParseCriteoLine(std::string_view line, bool label_optional, CriteoRow* row) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::array<std::string_view, kCriteoFields> fields;
  size_t count = 0, start = 0;
  while (true) {
    size_t tab = line.find('\t', start);
    std::string_view field = line.substr(start, tab == std::string_view::npos ? tab : tab - start);
    if (count < fields.size()) fields[count] = field;
    ++count;
    if (tab == std::string_view::npos) break;
    start = tab + 1;
  }
  size_t first = 0;
  if (count == kCriteoFields) {
    std::string_view label = fields[0];
    if (label != "0" && label != "1")
      return absl::StrCat("label ", Quoted(label), " is not 0 or 1");
    row->label = label[0] - '0';
    first = 1;
  } else if (label_optional && count == kCriteoFields - 1) {
    row->label = -1;
  } else {
    return absl::StrCat("has ", count, " fields, expected ", kCriteoFields,
                        label_optional ? " (or 39 without the label)" : "",
                        " (label, 13 integer, 26 categorical, tab separated)");
  }
  for (int i = 0; i < kCriteoDense; ++i) {
    std::string_view field = fields[first + static_cast<size_t>(i)];
    if (!ParseInteger(field, &row->dense[static_cast<size_t>(i)]))
      return absl::StrCat("integer feature I", i + 1, " ", Quoted(field), " is not an integer");
  }
  for (int j = 0; j < kCriteoSparse; ++j) {
    std::string_view field = fields[first + kCriteoDense + static_cast<size_t>(j)];
    if (!ParseHash(field, &row->sparse[static_cast<size_t>(j)]))
      return absl::StrCat("categorical feature C", j + 1, " ", Quoted(field),
                          " is not a hex hash (1 to 8 hex digits)");
  }
  return "";
}

}  // namespace kiln::recsys
