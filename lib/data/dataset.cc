#include "lib/data/dataset.h"

#include <cstdlib>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "lib/base/error_text.h"

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
  std::string Source(int64_t index) const override {
    return base_->Source(indices_.at(static_cast<size_t>(index)));
  }
  int64_t Length(int64_t index) const override {
    return base_->Length(indices_.at(static_cast<size_t>(index)));
  }
  bool deterministic() const override { return base_->deterministic(); }
  std::optional<Example> GetStacked(const std::vector<int64_t>& indices) const override {
    std::vector<int64_t> mapped;
    mapped.reserve(indices.size());
    for (int64_t i : indices) mapped.push_back(indices_.at(static_cast<size_t>(i)));
    return base_->GetStacked(mapped);
  }
  absl::StatusOr<EncodedSample> Encoded(int64_t index) const override {
    return base_->Encoded(indices_.at(static_cast<size_t>(index)));
  }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

class PrecomputedDataset : public Dataset {
 public:
  PrecomputedDataset(std::shared_ptr<const Dataset> base, torch::Tensor inputs,
                     torch::Tensor targets)
      : base_(std::move(base)), inputs_(std::move(inputs)), targets_(std::move(targets)) {}
  int64_t size() const override { return inputs_.size(0); }
  absl::StatusOr<Example> Get(int64_t index, SampleRng&) const override {
    return Example{inputs_[index], targets_[index]};
  }
  std::string Source(int64_t index) const override { return base_->Source(index); }
  int64_t Length(int64_t index) const override { return base_->Length(index); }
  bool deterministic() const override { return true; }
  std::optional<Example> GetStacked(const std::vector<int64_t>& indices) const override {
    torch::Tensor at = torch::tensor(indices, torch::kInt64);
    if (!inputs_.is_cpu()) at = at.to(inputs_.device(), /*non_blocking=*/true);
    return Example{inputs_.index_select(0, at), targets_.index_select(0, at)};
  }
  absl::StatusOr<EncodedSample> Encoded(int64_t index) const override {
    return base_->Encoded(index);
  }

 private:
  std::shared_ptr<const Dataset> base_;
  torch::Tensor inputs_, targets_;
};

}  // namespace

std::shared_ptr<Dataset> Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices) {
  return std::make_shared<SubsetDataset>(std::move(base), std::move(indices));
}

torch::Device TrainingGpu() {
  if (!torch::cuda::is_available()) return torch::kCPU;
  const char* local_rank = std::getenv("LOCAL_RANK");
  int index = local_rank != nullptr ? std::atoi(local_rank) : 0;
  return torch::Device(torch::kCUDA,
                       static_cast<c10::DeviceIndex>(index % torch::cuda::device_count()));
}

absl::StatusOr<std::shared_ptr<const Dataset>> Precomputed(std::shared_ptr<const Dataset> base,
                                                           int64_t max_bytes,
                                                           torch::Device device) {
  int64_t n = base->size();
  if (n == 0 || !base->deterministic()) return base;
  torch::Tensor inputs, targets;
  SampleRng rng(0, 0, 0);  // drawn from by nothing (the dataset is deterministic): one serves all
  for (int64_t i = 0; i < n; ++i) {
    absl::StatusOr<Example> example;
    try {
      example = base->Get(i, rng);
    } catch (const std::exception& e) {
      std::string what = e.what();
      return absl::InvalidArgumentError(
          absl::StrCat("cannot load sample ", i, ": ", ErrorLine(what)));
    }
    if (!example.ok()) return example.status();
    if (i == 0) {
      int64_t bytes =
          n * (example->input.numel() * static_cast<int64_t>(example->input.element_size()) +
               example->target.numel() * static_cast<int64_t>(example->target.element_size()));
      if (bytes > max_bytes) return base;
      std::vector<int64_t> shape = {n};
      for (int64_t d : example->input.sizes()) shape.push_back(d);
      inputs = torch::empty(shape, example->input.options());
      shape = {n};
      for (int64_t d : example->target.sizes()) shape.push_back(d);
      targets = torch::empty(shape, example->target.options());
    }
    // Samples of another shape cannot be stacked (Collate would refuse them batch by batch).
    if (example->input.sizes() != inputs.sizes().slice(1) ||
        example->target.sizes() != targets.sizes().slice(1) ||
        example->input.scalar_type() != inputs.scalar_type() ||
        example->target.scalar_type() != targets.scalar_type()) {
      return base;
    }
    inputs[i].copy_(example->input);
    targets[i].copy_(example->target);
  }
  if (!device.is_cpu()) {
    inputs = inputs.to(device);
    targets = targets.to(device);
  }
  return std::shared_ptr<const Dataset>(
      std::make_shared<PrecomputedDataset>(std::move(base), inputs, targets));
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> RandomSplit(int64_t n, double val_fraction,
                                                                  int64_t seed) {
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
