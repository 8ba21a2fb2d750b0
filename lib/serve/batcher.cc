#include "lib/serve/batcher.h"

namespace kiln::serve {

Batcher::Batcher(const Predictor& predictor, BatcherOptions options, BatchObserver observer)
    : predictor_(predictor), options_(options), observer_(std::move(observer)) {
  worker_ = std::thread([this] { Run(); });
}

Batcher::~Batcher() {
  BeginStop();
  worker_.join();
}

void Batcher::BeginStop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
}

std::optional<std::future<BatchAnswer>> Batcher::Submit(
    BatchRequest work, std::shared_ptr<std::atomic<bool>> abandoned) {
  Request request;
  request.work = std::move(work);
  request.abandoned = std::move(abandoned);
  request.queued = std::chrono::steady_clock::now();
  std::future<BatchAnswer> future = request.answer.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || static_cast<int64_t>(queue_.size()) >= options_.max_queue) return std::nullopt;
    queued_inputs_ += static_cast<int64_t>(request.work.size());
    queue_.push_back(std::move(request));
  }
  wake_.notify_all();
  return future;
}

int64_t Batcher::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

void Batcher::Run() {
  const auto delay = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double, std::milli>(options_.max_delay_ms));
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    // Wait for a full batch, at most until the oldest request's delay is over (not when
    // stopping: what is queued runs at once).
    auto deadline = queue_.front().queued + delay;
    wake_.wait_until(lock, deadline,
                     [this] { return stopping_ || queued_inputs_ >= options_.max_batch; });
    std::vector<Request> batch;
    int64_t inputs = 0;
    // A request's inputs stay together; a request larger than max_batch runs alone.
    while (!queue_.empty()) {
      int64_t next = static_cast<int64_t>(queue_.front().work.size());
      if (!batch.empty() && inputs + next > options_.max_batch) break;
      inputs += next;
      queued_inputs_ -= next;
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    lock.unlock();
    RunBatch(batch);
    lock.lock();
  }
}

void Batcher::RunBatch(std::vector<Request>& batch) {
  std::vector<Request*> live;
  for (Request& r : batch) {
    if (r.abandoned && r.abandoned->load()) {
      r.answer.set_value(BatchAnswer());  // nobody reads it
    } else {
      live.push_back(&r);
    }
  }
  if (live.empty()) return;
  if (predictor_.generates()) {
    // Generation runs prompt by prompt: each samples its own continuation.
    for (Request* r : live) {
      BatchAnswer answer;
      answer.batch_size = 1;
      for (const std::string& prompt : r->work.prompts) {
        answer.generated.push_back(predictor_.Generate(prompt));
        if (observer_) observer_(1);
      }
      r->answer.set_value(std::move(answer));
    }
    return;
  }
  std::vector<data::Example> examples;
  for (Request* r : live) {
    for (data::Example& e : r->work.examples) examples.push_back(std::move(e));
  }
  const int64_t size = static_cast<int64_t>(examples.size());
  std::vector<absl::StatusOr<Prediction>> predictions =
      predictor_.PredictPrepared(std::move(examples));
  if (observer_) observer_(size);
  size_t next = 0;
  for (Request* r : live) {
    BatchAnswer answer;
    answer.batch_size = size;
    for (size_t i = 0; i < r->work.examples.size(); ++i)
      answer.predictions.push_back(std::move(predictions[next++]));
    r->answer.set_value(std::move(answer));
  }
}

}  // namespace kiln::serve
