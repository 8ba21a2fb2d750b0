#include "lib/data/dataset.h"

#include <numeric>
#include <random>

namespace kiln::data {
namespace {

class SubsetDataset : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
      : base_(std::move(base)), indices_(std::move(indices)) {}
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  absl::StatusOr<Example> Get(int64_t index, SampleRng& rng) const override {
    return base_->Get(indices_.at(static_cast<size_t>(index)), rng);
  }
  std::string Source(int64_t index) const override { return base_->Source(indices_.at(static_cast<size_t>(index))); }
  int64_t Length(int64_t index) const override { return base_->Length(indices_.at(static_cast<size_t>(index))); }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

}  // namespace

std::shared_ptr<Dataset> Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices) {
  return std::make_shared<SubsetDataset>(std::move(base), std::move(indices));
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> RandomSplit(int64_t n, double val_fraction, int64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 engine(MixSeed(static_cast<uint64_t>(seed), 0x53504c4954ULL));
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[engine() % i]);
  auto val_count = static_cast<ptrdiff_t>(static_cast<double>(n) * val_fraction);
  std::vector<int64_t> val(order.begin(), order.begin() + val_count);
  std::vector<int64_t> train(order.begin() + val_count, order.end());
  return {std::move(train), std::move(val)};
}

}  // namespace kiln::data
