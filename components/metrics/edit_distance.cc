#include "components/metrics/edit_distance.h"

#include <algorithm>

#include "absl/strings/str_split.h"
#include "components/text/utf8.h"

namespace kiln::metrics {
namespace {

template <typename T>
int64_t Levenshtein(const std::vector<T>& a, const std::vector<T>& b) {
  std::vector<int64_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int64_t diagonal = row[0];
    row[0] = static_cast<int64_t>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int64_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> Words(std::string_view text) {
  return absl::StrSplit(absl::string_view(text.data(), text.size()), absl::ByAnyChar(" \t\r\n"),
                        absl::SkipEmpty());
}

}  // namespace

int64_t EditDistance(const std::vector<char32_t>& a, const std::vector<char32_t>& b) {
  return Levenshtein(a, b);
}

int64_t EditDistance(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  return Levenshtein(a, b);
}

ErrorCount CharacterErrors(std::string_view hypothesis, std::string_view reference) {
  // Each code point's UTF-8 bytes (views into the arguments), compared as strings.
  std::vector<std::string_view> ref = text::SplitCodePoints(reference);
  return {Levenshtein(text::SplitCodePoints(hypothesis), ref), static_cast<int64_t>(ref.size())};
}

ErrorCount WordErrors(std::string_view hypothesis, std::string_view reference) {
  std::vector<std::string> ref = Words(reference);
  return {Levenshtein(Words(hypothesis), ref), static_cast<int64_t>(ref.size())};
}

}  // namespace kiln::metrics
