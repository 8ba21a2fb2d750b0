// WebDataset's shuffle buffer over a stream read in order: the first `capacity` items fill it;
// then each item pushed replaces one drawn at random, which goes out; at the end of the stream the
// rest go out in random order (Drain). The draws are our own (std::shuffle and the distributions
// differ between standard libraries), so the same seed gives the same order everywhere.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace kiln::data::shards {

template <class T>
class ShuffleBuffer {
 public:
  ShuffleBuffer(int64_t capacity, uint64_t seed)
      : capacity_(static_cast<size_t>(std::max<int64_t>(1, capacity))), engine_(seed) {}

  // Takes `item`; once the buffer is full, hands one drawn at random to `out`.
  template <class Out>
  void Push(T item, Out&& out) {
    if (pool_.size() < capacity_) {
      pool_.push_back(std::move(item));
      return;
    }
    size_t k = engine_() % pool_.size();
    out(std::move(pool_[k]));
    pool_[k] = std::move(item);
  }

  // Hands out what the buffer still holds, in random order.
  template <class Out>
  void Drain(Out&& out) {
    while (!pool_.empty()) {
      size_t k = engine_() % pool_.size();
      out(std::move(pool_[k]));
      if (k + 1 != pool_.size()) pool_[k] = std::move(pool_.back());
      pool_.pop_back();
    }
  }

  size_t held() const { return pool_.size(); }

 private:
  size_t capacity_;
  std::mt19937_64 engine_;
  std::vector<T> pool_;
};

}  // namespace kiln::data::shards
