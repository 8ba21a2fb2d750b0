// Dynamic batching for `kiln serve` (TorchServe's and Triton's batch delay): requests wait in a
// bounded queue; one worker thread runs them together through the Predictor as soon as
// `max_batch` inputs wait or the oldest request has waited `max_delay_ms`. A full queue refuses
// at once (the server answers 503 with Retry-After) instead of growing without limit.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/inference/predictor.h"

namespace kiln::serve {

struct BatcherOptions {
  int64_t max_batch = 64;   // inputs per forward pass at most (1: no batching)
  double max_delay_ms = 0;  // how long the oldest request may wait for others (0: not at all)
  int64_t max_queue = 256;  // requests waiting at most
};

// The answers to one request, in its inputs' order, and the size of the batch it ran in.
struct BatchAnswer {
  std::vector<absl::StatusOr<Prediction>> predictions;  // inputs to classify or transcribe
  std::vector<absl::StatusOr<std::string>> generated;   // prompts of a language model
  int64_t batch_size = 0;
};

// One request's work: the examples its inputs became (Predictor::Prepare, in the request's thread),
// or the prompts of a language model.
struct BatchRequest {
  std::vector<data::Example> examples;
  std::vector<std::string> prompts;
  size_t size() const { return examples.size() + prompts.size(); }
};

// Called with the size of each batch run (for the batch-size histogram).
using BatchObserver = std::function<void(int64_t)>;

class Batcher {
 public:
  Batcher(const Predictor& predictor, BatcherOptions options, BatchObserver observer);
  // Answers every request still queued, then stops the worker.
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues one request; nullopt when the queue is full. A request whose caller gave up waiting
  // (`abandoned` set) is skipped.
  std::optional<std::future<BatchAnswer>> Submit(BatchRequest work,
                                                 std::shared_ptr<std::atomic<bool>> abandoned);
  // Refuses new requests from now on and runs the queued ones without waiting for more.
  void BeginStop();
  // Requests waiting now.
  int64_t queue_depth() const;

 private:
  struct Request {
    BatchRequest work;
    std::shared_ptr<std::atomic<bool>> abandoned;
    std::promise<BatchAnswer> answer;
    std::chrono::steady_clock::time_point queued;
  };
  void Run();
  void RunBatch(std::vector<Request>& batch);

  const Predictor& predictor_;
  BatcherOptions options_;
  BatchObserver observer_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Request> queue_;
  int64_t queued_inputs_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace kiln::serve
