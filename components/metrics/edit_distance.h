// Edit distance (Levenshtein) and the error counts of the character and word error rates (cer,
// wer): errors of a hypothesis against a reference, with the reference's size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::metrics {

// Levenshtein distance (insertions, deletions, substitutions each cost 1).
int64_t EditDistance(const std::vector<char32_t>& a, const std::vector<char32_t>& b);
int64_t EditDistance(const std::vector<std::string>& a, const std::vector<std::string>& b);

// Errors of a hypothesis against a reference, with the reference's size (the rate's denominator).
struct ErrorCount {
  int64_t errors = 0, reference = 0;
};
// Character errors: over Unicode code points (UTF-8 text).
ErrorCount CharacterErrors(std::string_view hypothesis, std::string_view reference);
// Word errors: over whitespace-separated words.
ErrorCount WordErrors(std::string_view hypothesis, std::string_view reference);

}  // namespace kiln::metrics
