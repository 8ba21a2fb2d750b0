#include "lib/data/loader.h"

#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/base/error_text.h"
#include "lib/base/status_macros.h"

namespace kiln::data {

absl::StatusOr<Batch> Collate(std::vector<Example>& examples, const BufferFn& input_buffer) {
  Batch batch;
  if (examples.empty()) return batch;
  std::vector<torch::Tensor> inputs, targets, segments;
  inputs.reserve(examples.size());
  targets.reserve(examples.size());
  const std::vector<int64_t> shape = examples[0].input.sizes().vec();
  for (auto& e : examples) {
    if (e.input.sizes().vec() != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot batch inputs of different shapes: ", c10::str(shape), " and ",
                       c10::str(e.input.sizes())));
    }
    if (e.segments.defined() != examples[0].segments.defined())
      return absl::InvalidArgumentError("cannot batch packed and unpacked sequences together");
    inputs.push_back(std::move(e.input));
    targets.push_back(std::move(e.target));
    if (e.segments.defined()) segments.push_back(std::move(e.segments));
  }
  if (input_buffer) {
    std::vector<int64_t> sizes = shape;
    sizes.insert(sizes.begin(), static_cast<int64_t>(inputs.size()));
    batch.input = input_buffer(sizes, inputs[0].scalar_type());
    torch::stack_out(batch.input, inputs);
  } else {
    batch.input = torch::stack(inputs);
  }
  batch.target = torch::stack(targets);
  if (!segments.empty()) batch.segments = torch::stack(segments);
  return batch;
}

torch::Tensor DataLoader::InputBuffer(c10::IntArrayRef sizes, c10::ScalarType type) const {
  // Only batches of a few MB and more are worth keeping (small ones come from the heap).
  constexpr int64_t kMinBytes = 4 << 20;
  int64_t bytes = static_cast<int64_t>(c10::elementSize(type));
  for (int64_t size : sizes) bytes *= size;
  if (bytes < kMinBytes) return torch::empty(sizes, torch::TensorOptions().dtype(type));
  std::lock_guard<std::mutex> lock(buffers_mu_);
  for (auto& buffer : buffers_) {
    // Free: no tensor but ours uses it, and no view of it is alive either.
    if (buffer.use_count() == 1 && buffer.storage().use_count() == 1 && buffer.sizes() == sizes &&
        buffer.scalar_type() == type) {
      return buffer;
    }
  }
  torch::Tensor fresh = torch::empty(sizes, torch::TensorOptions().dtype(type));
  // At most the batches that can be in flight at once, plus the one being consumed.
  if (buffers_.size() < static_cast<size_t>(options_.prefetch + options_.num_workers + 2))
    buffers_.push_back(fresh);
  return fresh;
}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
                       LoaderOptions options)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options) {
  if (options_.batch_size < 1) options_.batch_size = 1;
  if (options_.prefetch < 1) options_.prefetch = 1;
}

int64_t DataLoader::num_batches() const {
  int64_t n = static_cast<int64_t>(sampler_->EpochOrder(0).size());
  return options_.drop_last ? n / options_.batch_size
                            : (n + options_.batch_size - 1) / options_.batch_size;
}

absl::StatusOr<Batch> DataLoader::LoadBatch(const std::vector<int64_t>& order, int64_t epoch,
                                            int64_t index, EpochSource* source) const {
  size_t begin = static_cast<size_t>(index * options_.batch_size);
  size_t end = std::min(order.size(), begin + static_cast<size_t>(options_.batch_size));
  // A precomputed dataset or a source that can gathers the batch in one go (the same tensors
  // Get + Collate give); a source may skip bad samples in it.
  if (!options_.collate) {
    std::vector<int64_t> indices(order.begin() + static_cast<ptrdiff_t>(begin),
                                 order.begin() + static_cast<ptrdiff_t>(end));
    int64_t skipped = 0;
    std::optional<Example> stacked;
    if (source != nullptr) {
      KILN_ASSIGN_OR_RETURN(stacked, source->GetStacked(indices, &skipped));
    } else {
      stacked = dataset_->GetStacked(indices);
    }
    if (stacked) {
      if (stacked->input.size(0) == 0) {
        return absl::DataLossError(absl::StrCat("batch ", index, " of epoch ", epoch, ": all ",
                                                skipped, " of its samples were skipped as bad"));
      }
      Batch batch;
      batch.input = std::move(stacked->input);
      batch.target = std::move(stacked->target);
      batch.epoch = epoch;
      batch.index = index;
      batch.skipped = skipped;
      return batch;
    }
  }
  std::vector<Example> examples;
  examples.reserve(end - begin);
  int64_t skipped = 0;
  for (size_t i = begin; i < end; ++i) {
    SampleRng rng(options_.seed, epoch, order[i]);
    // Transforms run LibTorch ops that throw on mismatched shapes; an exception must not escape a
    // loader thread (it would end the process), so it becomes an error naming the sample.
    try {
      auto example = source != nullptr ? source->Get(order[i], rng) : dataset_->Get(order[i], rng);
      if (!example.ok()) return example.status();
      if (!example->input.defined()) {
        ++skipped;
        continue;
      }
      examples.push_back(*std::move(example));
    } catch (const std::exception& e) {
      std::string what = e.what();
      return absl::InvalidArgumentError(
          absl::StrCat("cannot load sample ", order[i], ": ", ErrorLine(what)));
    }
  }
  if (examples.empty()) {
    return absl::DataLossError(absl::StrCat("batch ", index, " of epoch ", epoch, ": all ", skipped,
                                            " of its samples were skipped as corrupt"));
  }
  auto batch = options_.collate
                   ? options_.collate(examples)
                   : Collate(examples, [this](c10::IntArrayRef sizes, c10::ScalarType type) {
                       return InputBuffer(sizes, type);
                     });
  if (!batch.ok()) return batch.status();
  batch->epoch = epoch;
  batch->index = index;
  batch->skipped = skipped;
  return batch;
}

namespace {

// The hand-over point between the loading pipeline and the consumer.
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}

  // False when the consumer has stopped listening.
  bool Push(absl::StatusOr<Batch> item) {
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [&] { return items_.size() < capacity_ || cancelled_; });
    if (cancelled_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }
  absl::StatusOr<Batch> Pop() {
    std::unique_lock<std::mutex> lock(mu_);
    not_empty_.wait(lock, [&] { return !items_.empty(); });
    auto item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }
  void Cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    not_full_.notify_all();
  }
  bool cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

 private:
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<absl::StatusOr<Batch>> items_;
  size_t capacity_;
  bool cancelled_ = false;
};

}  // namespace

absl::Status DataLoader::Run(int64_t epoch, int64_t first, int64_t last,
                             const Consumer& consume) const {
  std::vector<int64_t> order = sampler_->EpochOrder(epoch);
  if (options_.batch_order) order = options_.batch_order(std::move(order), epoch, *dataset_);
  if (options_.drop_last)
    order.resize(order.size() - order.size() % static_cast<size_t>(options_.batch_size));
  last = std::min(last, num_batches());
  if (first >= last) return absl::OkStatus();
  // A stream (shards) is read from where batch `first` starts, a bounded distance ahead.
  auto batch_size = static_cast<size_t>(options_.batch_size);
  KILN_ASSIGN_OR_RETURN(
      std::unique_ptr<EpochSource> source,
      dataset_->OpenEpoch(
          *sampler_, epoch, order, static_cast<size_t>(first) * batch_size,
          static_cast<size_t>(options_.prefetch + 1 + options_.num_workers) * batch_size));

  if (options_.num_workers <= 0) {
    for (int64_t b = first; b < last; ++b) {
      auto batch = LoadBatch(order, epoch, b, source.get());
      if (!batch.ok()) return batch.status();
      auto more = consume(*batch);
      if (!more.ok()) return more.status();
      if (!*more) break;
    }
    return absl::OkStatus();
  }

  BoundedQueue queue(static_cast<size_t>(options_.prefetch));
  std::thread producer([&] {
    tbb::task_arena arena(options_.num_workers);
    arena.execute([&] {
      int64_t next = first;
      bool failed = false;
      tbb::parallel_pipeline(
          static_cast<size_t>(options_.prefetch),
          tbb::make_filter<void, int64_t>(tbb::filter_mode::serial_in_order,
                                          [&](tbb::flow_control& fc) -> int64_t {
                                            if (next >= last || failed || queue.cancelled()) {
                                              fc.stop();
                                              return 0;
                                            }
                                            return next++;
                                          }) &
              tbb::make_filter<int64_t, absl::StatusOr<Batch>>(
                  tbb::filter_mode::parallel,
                  [&](int64_t b) { return LoadBatch(order, epoch, b, source.get()); }) &
              tbb::make_filter<absl::StatusOr<Batch>, void>(tbb::filter_mode::serial_in_order,
                                                            [&](absl::StatusOr<Batch> batch) {
                                                              if (failed) return;
                                                              failed = !batch.ok();
                                                              queue.Push(std::move(batch));
                                                            }));
    });
  });
  // Stops and joins the producer on every way out, including an exception from `consume`
  // (destroying a joinable std::thread would end the process).
  struct StopProducer {
    BoundedQueue& queue;
    std::thread& thread;
    ~StopProducer() {
      queue.Cancel();
      thread.join();
    }
  } stop{queue, producer};
  absl::Status status;
  for (int64_t b = first; b < last; ++b) {
    auto batch = queue.Pop();
    if (!batch.ok()) {
      status = batch.status();
      break;
    }
    auto more = consume(*batch);
    if (!more.ok()) {
      status = more.status();
      break;
    }
    if (!*more) break;
  }
  return status;
}

}  // namespace kiln::data
