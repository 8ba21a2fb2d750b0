// One line of Criteo-format click data (label, 13 integer features, 26 categorical features as
// hex hashes, tab separated), parsed without allocating: what the `criteo` data module reads and
// fuzz/criteo_line_fuzzer.cc fuzzes. Pure C++ and Abseil, no LibTorch.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::recsys {

inline constexpr int kCriteoDense = 13;
inline constexpr int kCriteoSparse = 26;
inline constexpr int kCriteoFields = 1 + kCriteoDense + kCriteoSparse;

struct CriteoRow {
  int label = -1;  // 0 or 1; -1 for a line without a label (prediction input)
  // The integer features as the DLRM reference reads them: an empty field is 0, a negative value
  // is clamped to 0, a value above INT32_MAX to INT32_MAX.
  std::array<int32_t, kCriteoDense> dense{};
  // The categorical features' hashes (an empty field hashes to 0, as the reference fills it).
  std::array<uint32_t, kCriteoSparse> sparse{};
};

// Parses `line` (a trailing '\r' is ignored) into `row`. With `label_optional`, a line of 39
// fields (no label) is accepted too. Returns "" when the line is good, else what is wrong in one
// phrase ("has 12 fields, expected 40 (label, 13 integer, 26 categorical)", "categorical feature
// C3 'xyz' is not a hex hash").
std::string ParseCriteoLine(std::string_view line, bool label_optional, CriteoRow* row);

}  // namespace kiln::recsys
