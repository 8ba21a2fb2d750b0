#include "tasks/speech/ngram_lm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kiln::speech {

NgramLm::NgramLm(int order, int64_t vocab_size, int64_t bos, int64_t eos)
    : order_(std::max(order, 1)), vocab_(std::max<int64_t>(vocab_size, 1)), bos_(bos), eos_(eos) {}

std::string NgramLm::Key(const int64_t* begin, const int64_t* end) {
  std::string key;
  key.reserve(static_cast<size_t>(end - begin) * 4);
  for (const int64_t* p = begin; p != end; ++p) {
    const auto id = static_cast<uint32_t>(*p);
    char bytes[4];
    std::memcpy(bytes, &id, 4);
    key.append(bytes, 4);
  }
  return key;
}

void NgramLm::Add(const std::vector<int64_t>& sentence) {
  std::vector<int64_t> seq(static_cast<size_t>(order_ - 1), bos_);
  seq.insert(seq.end(), sentence.begin(), sentence.end());
  seq.push_back(eos_);
  for (size_t i = static_cast<size_t>(order_ - 1); i < seq.size(); ++i) {
    for (size_t k = 0; k < static_cast<size_t>(order_); ++k) {
      Context& c = contexts_[Key(seq.data() + i - k, seq.data() + i)];
      ++c.next[seq[i]];
      ++c.total;
    }
  }
  ++sentences_;
}

double NgramLm::LogProb(const std::vector<int64_t>& history, int64_t next) const {
  // The last order-1 ids of <bos>... + history.
  std::vector<int64_t> context(static_cast<size_t>(order_ - 1), bos_);
  const size_t take = std::min(history.size(), context.size());
  std::copy(history.end() - static_cast<std::ptrdiff_t>(take), history.end(),
            context.end() - static_cast<std::ptrdiff_t>(take));
  double p = 1.0 / static_cast<double>(vocab_);
  for (size_t k = 0; k < static_cast<size_t>(order_); ++k) {  // shortest context first
    auto it = contexts_.find(Key(context.data() + context.size() - k, context.data() + context.size()));
    if (it == contexts_.end()) break;  // a longer context containing this one was not seen either
    const Context& c = it->second;
    auto n = c.next.find(next);
    const double count = n == c.next.end() ? 0.0 : static_cast<double>(n->second);
    const auto types = static_cast<double>(c.next.size());
    p = (count + types * p) / (static_cast<double>(c.total) + types);
  }
  return std::log(p);
}

}  // namespace kiln::speech
