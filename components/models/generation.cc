#include "components/models/generation.h"

#include <algorithm>
#include <limits>

namespace kiln {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Rows padded on the left to one length: ids [B, P] (pad_id in the padding), which entries are
// tokens, and each token's position in its own row (0 in the padding).
struct LeftPadded {
  torch::Tensor ids, real, positions;
};

LeftPadded PadLeft(const std::vector<std::vector<int64_t>>& rows, int64_t pad_id) {
  size_t longest = 0;
  for (const auto& row : rows) longest = std::max(longest, row.size());
  const auto b = static_cast<int64_t>(rows.size()), p = static_cast<int64_t>(longest);
  LeftPadded out{torch::full({b, p}, pad_id, torch::kInt64), torch::zeros({b, p}, torch::kBool),
                 torch::zeros({b, p}, torch::kInt64)};
  auto ids = out.ids.accessor<int64_t, 2>();
  auto real = out.real.accessor<bool, 2>();
  auto positions = out.positions.accessor<int64_t, 2>();
  for (int64_t r = 0; r < b; ++r) {
    const auto& row = rows[static_cast<size_t>(r)];
    const int64_t offset = p - static_cast<int64_t>(row.size());
    for (size_t i = 0; i < row.size(); ++i) {
      ids[r][offset + static_cast<int64_t>(i)] = row[i];
      real[r][offset + static_cast<int64_t>(i)] = true;
      positions[r][offset + static_cast<int64_t>(i)] = static_cast<int64_t>(i);
    }
  }
  return out;
}

// [B, T]: each row's ids, padded on the right with its own first id (which the repetition
// penalty counts once however often it appears).
torch::Tensor Seen(const std::vector<std::vector<int64_t>>& rows) {
  size_t longest = 1;
  for (const auto& row : rows) longest = std::max(longest, row.size());
  torch::Tensor seen = torch::zeros(
      {static_cast<int64_t>(rows.size()), static_cast<int64_t>(longest)}, torch::kInt64);
  auto a = seen.accessor<int64_t, 2>();
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t i = 0; i < longest; ++i) {
      a[static_cast<int64_t>(r)][static_cast<int64_t>(i)] =
          i < rows[r].size() ? rows[r][i] : (rows[r].empty() ? 0 : rows[r][0]);
    }
  }
  return seen;
}

}  // namespace

void KvCache::Extend(const torch::Tensor& real) {
  if (!padded_) padded_ = !real.all().item<bool>();
  real_ = real_.defined() ? torch::cat({real_, real}, 1) : real;
  added_ = real.size(1);
  length_ += added_;
}

std::pair<torch::Tensor, torch::Tensor> KvCache::Append(size_t layer, const torch::Tensor& k,
                                                        const torch::Tensor& v) {
  if (keys_.size() <= layer) {
    keys_.resize(layer + 1);
    values_.resize(layer + 1);
  }
  torch::Tensor& keys = keys_[layer];
  torch::Tensor& values = values_[layer];
  const int64_t start = length_ - added_;
  if (!keys.defined() && capacity_ >= length_) {
    keys = torch::empty({k.size(0), k.size(1), capacity_, k.size(3)}, k.options());
    values = torch::empty({v.size(0), v.size(1), capacity_, v.size(3)}, v.options());
  }
  if (keys.defined() && keys.size(2) >= length_ && keys.size(2) == capacity_) {
    keys.narrow(2, start, added_).copy_(k);
    values.narrow(2, start, added_).copy_(v);
    return {keys.narrow(2, 0, length_), values.narrow(2, 0, length_)};
  }
  // No room reserved (or too little): the cache grows by copying.
  if (keys.defined() && keys.size(2) != start) {
    keys = keys.narrow(2, 0, start);
    values = values.narrow(2, 0, start);
  }
  keys = keys.defined() ? torch::cat({keys, k}, 2) : k;
  values = values.defined() ? torch::cat({values, v}, 2) : v;
  return {keys, values};
}

KvCache::Mask KvCache::AttentionMask(torch::ScalarType dtype, int64_t window) const {
  if (!padded_ && (window <= 0 || window >= length_) && (added_ == 1 || added_ == length_))
    return {std::nullopt, added_ > 1};
  const auto index = torch::TensorOptions().dtype(torch::kInt64).device(real_.device());
  torch::Tensor query = torch::arange(length_ - added_, length_, index).view({added_, 1});
  torch::Tensor key = torch::arange(length_, index).view({1, length_});
  torch::Tensor allowed = key.le(query).unsqueeze(0).logical_and(real_.unsqueeze(1));
  allowed = allowed.logical_or(key.eq(query).unsqueeze(0));
  if (window > 0) allowed = allowed.logical_and(key.gt(query - window).unsqueeze(0));
  return {torch::zeros({real_.size(0), 1, added_, length_},
                       torch::TensorOptions().dtype(dtype).device(real_.device()))
              .masked_fill(allowed.logical_not().unsqueeze(1), kNegInf),
          false};
}

torch::Tensor RecomputingLm::forward_cached(const torch::Tensor& ids, const torch::Tensor&,
                                            KvCache& cache) {
  const bool fresh = cache.length() == cache.added();  // a new cache: the history starts again
  history_ = fresh || !history_.defined() ? ids : torch::cat({history_, ids}, 1);
  return model_->forward(history_).narrow(1, history_.size(1) - ids.size(1), ids.size(1));
}

torch::Tensor ProcessLogits(torch::Tensor logits, const torch::Tensor& seen,
                            const SamplingOptions& o) {
  logits = logits.to(torch::kFloat32).clone();
  if (o.repetition_penalty != 1.0 && seen.defined() && seen.numel() > 0) {
    torch::Tensor s = logits.gather(1, seen);
    s = torch::where(s < 0, s * o.repetition_penalty, s / o.repetition_penalty);
    logits.scatter_(1, seen, s);
  }
  if (o.temperature <= 0) return logits;  // greedy: transformers ignores the warpers too
  logits = logits / o.temperature;
  if (o.top_k > 0 && o.top_k < logits.size(1)) {
    torch::Tensor kth = std::get<0>(logits.topk(o.top_k, 1)).narrow(1, o.top_k - 1, 1);
    logits.masked_fill_(logits < kth, kNegInf);
  }
  if (o.top_p < 1.0) {
    auto [sorted, order] = logits.sort(1, /*descending=*/false);
    torch::Tensor cumulative = sorted.softmax(1).cumsum(1);
    torch::Tensor remove = cumulative <= (1 - o.top_p);
    remove.narrow(1, remove.size(1) - 1, 1).fill_(false);  // the likeliest token stays
    logits.masked_fill_(remove.scatter(1, order, remove), kNegInf);
  }
  return logits;
}

std::vector<std::vector<int64_t>> Generate(CausalLm& model,
                                           const std::vector<std::vector<int64_t>>& prompts,
                                           const SamplingOptions& o, const StopCheck& stop) {
  torch::NoGradGuard no_grad;
  const size_t b = prompts.size();
  std::vector<std::vector<int64_t>> sequences = prompts, generated(b);
  std::vector<bool> done(b, false);
  if (b == 0 || o.max_new_tokens <= 0) return generated;
  const auto parameters = model.parameters();
  const torch::Device device =
      parameters.empty() ? torch::Device(torch::kCPU) : parameters.front().device();
  at::Generator generator = at::detail::createCPUGenerator(o.seed);
  int64_t limit = o.context;
  if (model.learned_positions() && model.max_positions() > 0 &&
      (limit <= 0 || limit > model.max_positions()))
    limit = model.max_positions();

  std::optional<KvCache> cache;
  torch::Tensor positions;  // [B, 1]: the newest token's position in each row
  int64_t furthest = 0;     // the largest of them
  // The cache from scratch on each row's last tokens (all of them, or as many as 3/4 of the
  // positions a learned-position model has): the logits after each row's last token.
  auto prefill = [&]() {
    std::vector<std::vector<int64_t>> contexts = sequences;
    if (limit > 0) {
      const size_t keep = static_cast<size_t>(std::max<int64_t>(1, limit * 3 / 4));
      for (auto& row : contexts) {
        if (row.size() > static_cast<size_t>(limit))
          row.erase(row.begin(), row.end() - static_cast<std::ptrdiff_t>(keep));
      }
    }
    LeftPadded padded = PadLeft(contexts, o.pad_token_id);
    cache.emplace(padded.ids.size(1) + o.max_new_tokens);
    cache->Extend(padded.real.to(device));
    positions = padded.positions.narrow(1, padded.ids.size(1) - 1, 1).to(device);
    furthest = positions.max().item<int64_t>();
    return model.forward_cached(padded.ids.to(device), padded.positions.to(device), *cache)
        .select(1, -1);
  };
  torch::Tensor last = prefill();
  const torch::Tensor never =
      o.never.empty() ? torch::Tensor() : torch::tensor(o.never, torch::kInt64);
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    torch::Tensor scores = last.to(torch::kCPU, torch::kFloat32);
    if (never.defined()) scores.index_fill_(1, never, kNegInf);
    if (o.repetition_penalty != 1.0 || o.temperature > 0) {
      torch::Tensor seen;
      if (o.repetition_penalty != 1.0) seen = Seen(sequences);
      scores = ProcessLogits(scores, seen, o);
    }
    torch::Tensor next = o.temperature <= 0
                             ? scores.argmax(1)
                             : torch::multinomial(scores.softmax(1), 1, false, generator).view(-1);
    auto next_ids = next.accessor<int64_t, 1>();
    bool all_done = true;
    for (size_t r = 0; r < b; ++r) {
      if (done[r]) continue;
      const int64_t id = next_ids[static_cast<int64_t>(r)];
      if (std::find(o.eos_token_ids.begin(), o.eos_token_ids.end(), id) != o.eos_token_ids.end()) {
        done[r] = true;
        continue;
      }
      generated[r].push_back(id);
      sequences[r].push_back(id);
      if (stop && stop(r, generated[r])) done[r] = true;
      all_done = all_done && done[r];
    }
    if (all_done || step + 1 == o.max_new_tokens) break;
    positions = positions + 1;
    if (limit > 0 && ++furthest >= limit) {
      last = prefill();
      continue;
    }
    for (size_t r = 0; r < b; ++r) {
      if (done[r]) next_ids[static_cast<int64_t>(r)] = o.pad_token_id;
    }
    cache->Extend(torch::ones({static_cast<int64_t>(b), 1}, torch::kBool).to(device));
    last = model.forward_cached(next.view({-1, 1}).to(device), positions, *cache).select(1, -1);
  }
  return generated;
}

PackedRows Unpack(const torch::Tensor& segments) {
  const int64_t t = segments.size(1);
  torch::Tensor index = torch::arange(t, segments.options()).expand_as(segments);
  // Where each example starts: the first position, and every change of segment.
  torch::Tensor starts = torch::ones_like(segments, torch::kBool);
  if (t > 1)
    starts.narrow(1, 1, t - 1).copy_(segments.narrow(1, 1, t - 1).ne(segments.narrow(1, 0, t - 1)));
  torch::Tensor start = std::get<0>(torch::where(starts, index, 0).cummax(1));
  PackedRows rows;
  rows.positions = index - start;
  torch::Tensor causal = torch::ones({t, t}, segments.options().dtype(torch::kBool)).tril();
  rows.allowed = segments.unsqueeze(2).eq(segments.unsqueeze(1)).logical_and(causal).unsqueeze(1);
  return rows;
}

}  // namespace kiln
