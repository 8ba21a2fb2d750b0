#include "tasks/speech/ngram_lm.h"

#include <algorithm>
#include <cmath>

namespace kiln::speech {

NgramLm::NgramLm(int order, int64_t vocab_size, int64_t bos, int64_t eos)
    : order_(std::max(order, 1)),
      vocab_(std::max<int64_t>(vocab_size, 1)),
      bos_(bos),
      eos_(eos),
      contexts_(1) {}

void NgramLm::Add(const std::vector<int64_t>& sentence) {
  for (size_t i = 0; i <= sentence.size(); ++i) {
    const int64_t id = i < sentence.size() ? sentence[i] : eos_;
    int32_t node = 0;
    for (size_t k = 0;; ++k) {  // the contexts of 0..order-1 ids before position i
      Context& c = contexts_[static_cast<size_t>(node)];
      ++c.next[id];
      ++c.total;
      if (k + 1 == static_cast<size_t>(order_)) break;
      const int64_t older = Before(sentence.data(), i, k + 1);
      auto [child, created] = c.children.try_emplace(older, static_cast<int32_t>(contexts_.size()));
      node = child->second;
      if (created) contexts_.emplace_back();  // after the last use of `c` and `child`
    }
  }
  ++sentences_;
}

double NgramLm::LogProb(const std::vector<int64_t>& history, int64_t next) const {
  double p = 1.0 / static_cast<double>(vocab_);
  const Context* c = &contexts_[0];
  for (size_t k = 0; k < static_cast<size_t>(order_); ++k) {  // shortest context first
    if (k > 0) {
      auto child = c->children.find(Before(history.data(), history.size(), k));
      if (child == c->children.end()) break;  // a longer context containing this one is unseen too
      c = &contexts_[static_cast<size_t>(child->second)];
    }
    if (c->total == 0) break;  // nothing counted yet: the uniform distribution
    auto n = c->next.find(next);
    const double count = n == c->next.end() ? 0.0 : static_cast<double>(n->second);
    const auto types = static_cast<double>(c->next.size());
    p = (count + types * p) / (static_cast<double>(c->total) + types);
  }
  return std::log(p);
}

}  // namespace kiln::speech
