#include "lib/config/suggest.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln::config {

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = absl::ascii_tolower(a[i - 1]) == absl::ascii_tolower(b[j - 1]) ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      // Adjacent transposition counts as one edit ("lr" vs "rl").
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        cur[j] = std::min(cur[j], prev[j - 1]);
      }
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> ClosestNames(absl::string_view name,
                                      const std::vector<std::string>& candidates, size_t limit) {
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& c : candidates) {
    if (c == name) continue;
    size_t d = EditDistance(name, c);
    size_t longest = std::max(name.size(), c.size());
    bool prefix =
        !name.empty() && (c.rfind(std::string(name), 0) == 0 || std::string(name).rfind(c, 0) == 0);
    // Plausible: within a third of the length (at least 2 edits), or one is a prefix of the other.
    if (d <= std::max<size_t>(2, longest / 3) || (prefix && c.size() >= 2))
      scored.emplace_back(d, c);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& [d, c] : scored) {
    if (out.size() >= limit) break;
    out.push_back(c);
  }
  return out;
}

std::string DidYouMean(absl::string_view name, const std::vector<std::string>& candidates) {
  auto close = ClosestNames(name, candidates, 2);
  if (close.empty()) return "";
  if (close.size() == 1) return absl::StrCat(" (did you mean '", close[0], "'?)");
  return absl::StrCat(" (did you mean '", close[0], "' or '", close[1], "'?)");
}

}  // namespace kiln::config
