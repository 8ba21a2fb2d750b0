#include "tasks/speech/ctc_decode.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

namespace kiln::speech {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double LogAdd(double a, double b) {
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  double m = std::max(a, b);
  return m + std::log1p(std::exp(-std::abs(a - b)));
}

// One prefix's probability split by how its paths end: in a blank, or in its last label.
struct PrefixScore {
  double blank = kNegInf, label = kNegInf;
  double total() const { return LogAdd(blank, label); }
};

}  // namespace

std::vector<int64_t> CtcGreedyDecode(const torch::Tensor& log_probs, int64_t blank) {
  torch::Tensor best = log_probs.argmax(1).to(torch::kCPU, torch::kInt64).contiguous();
  const int64_t* p = best.data_ptr<int64_t>();
  std::vector<int64_t> out;
  int64_t previous = blank;
  for (int64_t t = 0; t < best.size(0); ++t) {
    if (p[t] != blank && p[t] != previous) out.push_back(p[t]);
    previous = p[t];
  }
  return out;
}

std::vector<int64_t> CtcBeamSearch(const torch::Tensor& log_probs, int64_t blank, int64_t beam_size,
                                   const LmFusion& fusion) {
  torch::Tensor lp = log_probs.to(torch::kCPU, torch::kFloat64).contiguous();
  const int64_t frames = lp.size(0), classes = lp.size(1);
  const double* p = lp.data_ptr<double>();
  beam_size = std::max<int64_t>(1, beam_size);
  // A prefix's acoustic score and its LM score (weight * log P_lm + bonus per label; 0 without).
  struct Entry {
    PrefixScore acoustic;
    double lm = 0;
    double rank() const { return acoustic.total() + lm; }
  };
  auto lm_step = [&](const std::vector<int64_t>& prefix, int64_t next) {
    return fusion.weight * fusion.lm->LogProb(prefix, next) + fusion.bonus;
  };
  std::vector<std::pair<std::vector<int64_t>, Entry>> beams = {{{}, Entry{{0.0, kNegInf}, 0.0}}};
  std::vector<int64_t> order(static_cast<size_t>(classes));
  for (int64_t t = 0; t < frames; ++t) {
    const double* frame = p + t * classes;
    // The classes worth extending by: the frame's most likely ones.
    for (int64_t c = 0; c < classes; ++c) order[static_cast<size_t>(c)] = c;
    const int64_t k = std::min(beam_size, classes);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) { return frame[a] > frame[b]; });
    std::map<std::vector<int64_t>, Entry> next;
    for (const auto& [prefix, entry] : beams) {
      const PrefixScore& score = entry.acoustic;
      // Staying on the same prefix: a blank, or the last label repeated (merged).
      auto [same, fresh] = next.try_emplace(prefix);
      if (fresh) same->second.lm = entry.lm;
      PrefixScore& stay = same->second.acoustic;
      stay.blank = LogAdd(stay.blank, score.total() + frame[blank]);
      if (!prefix.empty()) stay.label = LogAdd(stay.label, score.label + frame[prefix.back()]);
      for (int64_t i = 0; i < k; ++i) {
        const int64_t c = order[static_cast<size_t>(i)];
        if (c == blank) continue;
        std::vector<int64_t> extended = prefix;
        extended.push_back(c);
        auto [to, created] = next.try_emplace(std::move(extended));
        if (created) to->second.lm = entry.lm + (fusion.lm ? lm_step(prefix, c) : 0.0);
        // A repeated label only starts a new one after a blank.
        double from = !prefix.empty() && prefix.back() == c ? score.blank : score.total();
        to->second.acoustic.label = LogAdd(to->second.acoustic.label, from + frame[c]);
      }
    }
    beams.assign(next.begin(), next.end());
    const size_t keep = std::min(beams.size(), static_cast<size_t>(beam_size));
    std::partial_sort(
        beams.begin(), beams.begin() + static_cast<std::ptrdiff_t>(keep), beams.end(),
        [](const auto& a, const auto& b) { return a.second.rank() > b.second.rank(); });
    beams.resize(keep);
  }
  if (fusion.lm) {  // the end of the sentence is scored too
    for (auto& [prefix, entry] : beams)
      entry.lm += fusion.weight * fusion.lm->LogProb(prefix, fusion.lm->eos_id());
    std::sort(beams.begin(), beams.end(),
              [](const auto& a, const auto& b) { return a.second.rank() > b.second.rank(); });
  }
  return beams.front().first;
}

}  // namespace kiln::speech
