#include "lib/data/dataset.h"

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

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

}  // namespace

std::shared_ptr<Dataset> Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices) {
  return std::make_shared<SubsetDataset>(std::move(base), std::move(indices));
}

}  // namespace kiln::data
