#include "lib/data/shards/shard_dataset.h"

#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/data/sample_rng.h"
#include "lib/data/shards/read_ahead.h"
#include "lib/data/shards/shuffle_buffer.h"

namespace kiln::data::shards {

ShardOrder::ShardOrder(std::vector<int64_t> counts, bool shuffle, uint64_t seed, int64_t rank,
                       int64_t world_size, int64_t buffer)
    : counts_(std::move(counts)),
      shuffle_(shuffle),
      seed_(seed),
      rank_(rank),
      world_(std::max<int64_t>(1, world_size)),
      buffer_(std::max<int64_t>(1, buffer)) {
  for (int64_t count : counts_) {
    starts_.push_back(total_);
    total_ += count;
  }
}

std::pair<size_t, int64_t> ShardOrder::Locate(int64_t id) const {
  auto it = std::upper_bound(starts_.begin(), starts_.end(), id);
  size_t shard = static_cast<size_t>(it - starts_.begin()) - 1;
  // Shards without samples share their start with the next one: take the one that holds `id`.
  while (counts_[shard] == 0) ++shard;
  return {shard, id - starts_[shard]};
}

std::vector<int64_t> ShardOrder::ReadOrder(int64_t epoch) const {
  std::vector<size_t> shard_order(counts_.size());
  for (size_t i = 0; i < shard_order.size(); ++i) shard_order[i] = i;
  if (shuffle_) {
    // Fisher-Yates with our own draws (std::shuffle differs between standard libraries).
    std::mt19937_64 engine(MixSeed(seed_, static_cast<uint64_t>(epoch), 0x5348415244ULL));
    for (size_t i = shard_order.size(); i > 1; --i)
      std::swap(shard_order[i - 1], shard_order[engine() % i]);
  }
  std::vector<int64_t> read;
  if (total_ == 0) return read;
  const int64_t per_rank = (total_ + world_ - 1) / world_;
  // Stream position p holds the sample at p of the shards laid end to end in shard_order.
  std::vector<int64_t> stream;
  stream.reserve(static_cast<size_t>(total_));
  for (size_t s : shard_order) {
    for (int64_t j = 0; j < counts_[s]; ++j) stream.push_back(starts_[s] + j);
  }
  read.reserve(static_cast<size_t>(per_rank));
  for (int64_t p = rank_ * per_rank; p < (rank_ + 1) * per_rank; ++p)
    read.push_back(stream[static_cast<size_t>(p % total_)]);
  return read;
}

std::vector<int64_t> ShardOrder::EpochOrder(int64_t epoch) const {
  std::vector<int64_t> read = ReadOrder(epoch);
  if (!shuffle_) return read;
  ShuffleBuffer<int64_t> buffer(buffer_, MixSeed(seed_, static_cast<uint64_t>(epoch),
                                                 0x4255464652ULL + static_cast<uint64_t>(rank_)));
  std::vector<int64_t> out;
  out.reserve(read.size());
  auto emit = [&out](int64_t id) { out.push_back(id); };
  for (int64_t id : read) buffer.Push(id, emit);
  buffer.Drain(emit);
  return out;
}

namespace {

// One epoch's reading: a thread streams this rank's part of the shards in read order, keeping the
// samples still to be delivered until the loader's threads take them. It reads at most `ahead` +
// the shuffle buffer past the furthest sample asked for, so memory stays bounded.
class ShardEpochSource : public ReadAheadSource {
 public:
  ShardEpochSource(const ShardSet& set, const ShardOrder& order, const ShardSampleDecoder& decode,
                   std::vector<int64_t> read, const std::vector<int64_t>& deliver, size_t first,
                   size_t ahead)
      : set_(set),
        order_(order),
        decode_(decode),
        read_(std::move(read)),
        slack_(static_cast<int64_t>(ahead) + order.buffer() + 1) {
    for (size_t p = first; p < deliver.size(); ++p) {
      int64_t id = deliver[p];
      auto [it, inserted] = wanted_.try_emplace(id, Wanted{static_cast<int64_t>(p), 0});
      ++it->second.uses;
    }
    asked_ = static_cast<int64_t>(first);
    Start();
  }

  ~ShardEpochSource() override { Stop(); }

  absl::StatusOr<Example> Get(int64_t index, SampleRng& rng) override {
    ShardSample sample;
    size_t shard = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto wanted = wanted_.find(index);
      if (wanted == wanted_.end())
        return absl::InternalError(absl::StrCat("shard sample ", index, " is not in this epoch"));
      if (wanted->second.position > asked_) {
        asked_ = wanted->second.position;
        room_.notify_all();
      }
      arrived_.wait(lock, [&] { return held_.count(index) > 0 || finished_; });
      auto it = held_.find(index);
      if (it == held_.end()) {
        if (!status_.ok()) return status_;
        return absl::InternalError(absl::StrCat("shard sample ", index, " was not read"));
      }
      shard = it->second.shard;
      if (--it->second.uses == 0) {
        sample = std::move(it->second.sample);
        held_.erase(it);
      } else {
        sample = it->second.sample;
      }
    }
    return decode_(sample, set_.shards[shard].url, rng);
  }

 private:
  struct Wanted {
    int64_t position;  // first delivery position
    int64_t uses;
  };
  struct Held {
    ShardSample sample;
    size_t shard;
    int64_t uses;
  };

  absl::Status ReadAll() override {
    std::unique_ptr<ShardReader> reader;
    size_t open_shard = 0;
    int64_t next_in_shard = 0;  // position of the reader's next sample
    for (size_t p = 0; p < read_.size(); ++p) {
      const int64_t id = read_[p];
      int64_t uses = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        room_.wait(lock, [&] { return cancelled_ || static_cast<int64_t>(p) <= asked_ + slack_; });
        if (cancelled_) return absl::OkStatus();
        auto it = wanted_.find(id);
        if (it != wanted_.end() && held_.count(id) == 0) uses = it->second.uses;
        if (it != wanted_.end()) it->second.uses = 0;  // a second copy (padding) is already held
      }
      // Samples before the resume point are never opened: whole shards are skipped.
      if (uses == 0) continue;
      auto [shard, position] = order_.Locate(id);
      if (reader == nullptr || open_shard != shard || next_in_shard > position) {
        reader.reset();
        KILN_ASSIGN_OR_RETURN(reader, ShardReader::Open(set_.shards[shard].url));
        open_shard = shard;
        next_in_shard = 0;
      }
      std::optional<ShardSample> sample;
      for (; next_in_shard <= position; ++next_in_shard) {
        KILN_ASSIGN_OR_RETURN(sample, reader->Next(/*keep=*/next_in_shard == position));
        if (!sample) {
          return absl::DataLossError(absl::StrCat("shard ", set_.shards[shard].url, ": holds ",
                                                  next_in_shard, " samples, its index says ",
                                                  set_.shards[shard].samples));
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      held_[id] = Held{std::move(*sample), shard, uses};
      arrived_.notify_all();
    }
    return absl::OkStatus();
  }

  const ShardSet& set_;
  const ShardOrder& order_;
  const ShardSampleDecoder& decode_;
  const std::vector<int64_t> read_;
  const int64_t slack_;
  std::unordered_map<int64_t, Wanted> wanted_;
  std::unordered_map<int64_t, Held> held_;
  int64_t asked_ = 0;
};

}  // namespace

ShardDataset::ShardDataset(ShardSet set, ShardSampleDecoder decode, int64_t shuffle_buffer)
    : set_(std::move(set)), decode_(std::move(decode)), shuffle_buffer_(shuffle_buffer) {
  for (const auto& shard : set_.shards) counts_.push_back(shard.samples);
}

absl::StatusOr<Example> ShardDataset::Get(int64_t, SampleRng&) const {
  return absl::FailedPreconditionError(
      "shards are read in order, not by index: this use (overfit_batches, a subset) needs a data "
      "module "
      "with random access");
}

std::shared_ptr<Sampler> ShardDataset::StreamSampler(bool shuffle, uint64_t seed, int64_t rank,
                                                     int64_t world_size) const {
  return std::make_shared<ShardOrder>(counts_, shuffle, seed, rank, world_size, shuffle_buffer_);
}

absl::StatusOr<std::unique_ptr<EpochSource>> ShardDataset::OpenEpoch(
    const Sampler& sampler, int64_t epoch, const std::vector<int64_t>& order, size_t first,
    size_t ahead) const {
  const auto* shard_order = dynamic_cast<const ShardOrder*>(&sampler);
  if (shard_order == nullptr) {
    return absl::FailedPreconditionError(
        "shards are read in their own order (ShardDataset::StreamSampler)");
  }
  return std::unique_ptr<EpochSource>(new ShardEpochSource(
      set_, *shard_order, decode_, shard_order->ReadOrder(epoch), order, first, ahead));
}

}  // namespace kiln::data::shards
