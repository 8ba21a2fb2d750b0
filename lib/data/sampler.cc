#include "lib/data/sampler.h"

#include <numeric>
#include <random>

#include "lib/data/dataset.h"
#include "lib/data/sample_rng.h"

namespace kiln::data {
namespace {

class Sequential : public Sampler {
 public:
  explicit Sequential(int64_t size) : size_(size) {}
  std::vector<int64_t> EpochOrder(int64_t) const override {
    std::vector<int64_t> order(static_cast<size_t>(size_));
    std::iota(order.begin(), order.end(), 0);
    return order;
  }

 private:
  int64_t size_;
};

class Random : public Sampler {
 public:
  Random(int64_t size, uint64_t seed) : size_(size), seed_(seed) {}
  std::vector<int64_t> EpochOrder(int64_t epoch) const override {
    std::vector<int64_t> order(static_cast<size_t>(size_));
    std::iota(order.begin(), order.end(), 0);
    // Fisher-Yates with our own draws: std::shuffle's output differs between standard libraries.
    std::mt19937_64 engine(MixSeed(seed_, static_cast<uint64_t>(epoch), 0x5a4d504c45ULL));
    for (size_t i = order.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(engine() % i);
      std::swap(order[i - 1], order[j]);
    }
    return order;
  }

 private:
  int64_t size_;
  uint64_t seed_;
};

class Distributed : public Sampler {
 public:
  Distributed(std::shared_ptr<Sampler> base, int64_t rank, int64_t world)
      : base_(std::move(base)), rank_(rank), world_(world) {}
  std::vector<int64_t> EpochOrder(int64_t epoch) const override {
    std::vector<int64_t> all = base_->EpochOrder(epoch);
    if (all.empty()) return all;
    size_t per_rank = (all.size() + static_cast<size_t>(world_) - 1) / static_cast<size_t>(world_);
    std::vector<int64_t> mine;
    for (size_t i = 0; i < per_rank; ++i) {
      mine.push_back(
          all[(i * static_cast<size_t>(world_) + static_cast<size_t>(rank_)) % all.size()]);
    }
    return mine;
  }

 private:
  std::shared_ptr<Sampler> base_;
  int64_t rank_, world_;
};

}  // namespace

std::shared_ptr<Sampler> SequentialSampler(int64_t size) {
  return std::make_shared<Sequential>(size);
}
std::shared_ptr<Sampler> RandomSampler(int64_t size, uint64_t seed) {
  return std::make_shared<Random>(size, seed);
}
std::shared_ptr<Sampler> DistributedSampler(std::shared_ptr<Sampler> base, int64_t rank,
                                            int64_t world_size) {
  return std::make_shared<Distributed>(std::move(base), rank, world_size);
}

std::shared_ptr<Sampler> SamplerFor(const Dataset& dataset, bool shuffle, uint64_t seed,
                                    int64_t rank, int64_t world_size) {
  if (auto own = dataset.StreamSampler(shuffle, seed, rank, world_size)) return own;
  std::shared_ptr<Sampler> sampler =
      shuffle ? RandomSampler(dataset.size(), seed) : SequentialSampler(dataset.size());
  return world_size > 1 ? DistributedSampler(std::move(sampler), rank, world_size) : sampler;
}

}  // namespace kiln::data
