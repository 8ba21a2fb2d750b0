#include "lib/data/padding.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "lib/data/sample_rng.h"

namespace kiln::data {

absl::StatusOr<Batch> PadCollate(std::vector<Example>& examples, int64_t pad,
                                 std::optional<int64_t> target_pad) {
  Batch batch;
  if (examples.empty()) return batch;
  const int64_t n = static_cast<int64_t>(examples.size());
  int64_t longest = 0;
  const torch::Tensor& first = examples[0].input;
  const torch::Tensor& first_segments = examples[0].segments;
  for (const auto& e : examples) {
    if (e.input.dim() < 1 || e.input.dim() != first.dim() ||
        e.input.sizes().slice(1) != first.sizes().slice(1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("padding collation needs sequences [T, ...] with one trailing shape, got "
                       "inputs of shape ",
                       c10::str(first.sizes()), " and ", c10::str(e.input.sizes())));
    }
    longest = std::max(longest, e.input.size(0));
  }
  longest = std::max<int64_t>(longest, 1);
  std::vector<int64_t> shape = {n, longest};
  for (int64_t d = 1; d < first.dim(); ++d) shape.push_back(first.size(d));
  batch.input = torch::full(shape, pad, first.options());
  batch.lengths = torch::empty({n}, torch::kInt64);
  auto lengths = batch.lengths.accessor<int64_t, 1>();
  bool same_target_shape = true;
  for (int64_t i = 0; i < n; ++i) {
    const torch::Tensor& in = examples[static_cast<size_t>(i)].input;
    lengths[i] = in.size(0);
    if (in.size(0) > 0) batch.input[i].narrow(0, 0, in.size(0)).copy_(in);
    same_target_shape = same_target_shape && examples[static_cast<size_t>(i)].target.sizes() ==
                                                 examples[0].target.sizes();
  }
  batch.mask = torch::arange(longest).unsqueeze(0) < batch.lengths.unsqueeze(1);
  if (first_segments.defined()) {
    batch.segments = torch::full({n, longest}, -1, torch::kInt64);
    for (int64_t i = 0; i < n; ++i) {
      const torch::Tensor& s = examples[static_cast<size_t>(i)].segments;
      if (!s.defined() || s.sizes() != examples[static_cast<size_t>(i)].input.sizes().slice(0, 1))
        return absl::InvalidArgumentError(
            "packed sequences need one segment number per position, in every example");
      if (s.size(0) > 0) batch.segments[i].narrow(0, 0, s.size(0)).copy_(s);
    }
  }
  std::vector<torch::Tensor> targets;
  targets.reserve(examples.size());
  for (auto& e : examples) targets.push_back(std::move(e.target));
  if (same_target_shape) {
    batch.target = torch::stack(targets);
  } else {
    int64_t longest_target = 0;
    for (const auto& t : targets)
      longest_target = std::max(longest_target, t.dim() == 1 ? t.size(0) : int64_t{-1});
    if (longest_target < 0)
      return absl::InvalidArgumentError(
          "cannot batch targets of different shapes that are not 1-d");
    batch.target = torch::full({n, longest_target}, target_pad.value_or(pad), torch::kInt64);
    for (int64_t i = 0; i < n; ++i) {
      const torch::Tensor& t = targets[static_cast<size_t>(i)];
      if (t.size(0) > 0) batch.target[i].narrow(0, 0, t.size(0)).copy_(t);
    }
  }
  return batch;
}

std::vector<int64_t> BucketByLength(std::vector<int64_t> order, const Dataset& dataset,
                                    int64_t batch_size, int64_t window_batches, uint64_t seed,
                                    int64_t epoch) {
  const size_t batch = static_cast<size_t>(std::max<int64_t>(batch_size, 1));
  const size_t window = batch * static_cast<size_t>(std::max<int64_t>(window_batches, 1));
  std::vector<int64_t> lengths(order.size());
  for (size_t i = 0; i < order.size(); ++i) lengths[i] = dataset.Length(order[i]);
  std::vector<size_t> position(order.size());
  for (size_t i = 0; i < order.size(); ++i) position[i] = i;
  for (size_t begin = 0; begin < order.size(); begin += window) {
    auto first = position.begin() + static_cast<std::ptrdiff_t>(begin);
    auto last =
        position.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), begin + window));
    std::stable_sort(first, last, [&](size_t a, size_t b) { return lengths[a] < lengths[b]; });
  }
  std::vector<int64_t> sorted(order.size());
  for (size_t i = 0; i < order.size(); ++i) sorted[i] = order[position[i]];
  order = std::move(sorted);
  const size_t full = order.size() / batch;
  std::vector<size_t> batches(full);
  for (size_t i = 0; i < full; ++i) batches[i] = i;
  std::mt19937_64 engine(MixSeed(seed, static_cast<uint64_t>(epoch), 0x6275636b6574ULL));
  for (size_t i = batches.size(); i > 1; --i)
    std::swap(batches[i - 1], batches[static_cast<size_t>(engine() % i)]);
  std::vector<int64_t> out;
  out.reserve(order.size());
  for (size_t b : batches)
    out.insert(out.end(), order.begin() + static_cast<std::ptrdiff_t>(b * batch),
               order.begin() + static_cast<std::ptrdiff_t>((b + 1) * batch));
  out.insert(out.end(), order.begin() + static_cast<std::ptrdiff_t>(full * batch), order.end());
  return out;
}

std::vector<int64_t> SortByLength(std::vector<int64_t> order, const Dataset& dataset) {
  std::vector<std::pair<int64_t, int64_t>> keyed(order.size());
  for (size_t i = 0; i < order.size(); ++i) keyed[i] = {dataset.Length(order[i]), order[i]};
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < order.size(); ++i) order[i] = keyed[i].second;
  return order;
}

BatchOrderFn LengthBucketing(int64_t batch_size, int64_t window_batches, uint64_t seed) {
  return [=](std::vector<int64_t> order, int64_t epoch, const Dataset& dataset) {
    return BucketByLength(std::move(order), dataset, batch_size, window_batches, seed, epoch);
  };
}

BatchOrderFn SortaGrad(int64_t sorted_epochs, BatchOrderFn then) {
  if (sorted_epochs <= 0) return then;
  return [sorted_epochs, then = std::move(then)](std::vector<int64_t> order, int64_t epoch,
                                                 const Dataset& dataset) {
    if (epoch < sorted_epochs) return SortByLength(std::move(order), dataset);
    return then ? then(std::move(order), epoch, dataset) : order;
  };
}

}  // namespace kiln::data
