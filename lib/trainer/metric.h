// A metric (torchmetrics' Metric): Update() adds a batch to its state, Compute() turns the state
// into values, Reset() starts over. The state is a few named tensors that add up across ranks
// (Sync) and round-trip through StateDict(), so a value over a whole epoch is exact however the
// data was split. Built by name from a config node through Registry<Metric>; a task lists its
// metrics under `task.metrics` (see lib/trainer/metric_collection.h). Metrics live in
// components/metrics/.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/registry/options.h"

namespace kiln {

// One batch as metrics see it. A task fills what it has.
struct MetricBatch {
  // The model's scores over classes (logits or probabilities) [..., classes], e.g. [B, C] for
  // classification, [B, T, V] for language modeling; and the true class ids [...].
  torch::Tensor preds;
  torch::Tensor target;
  // Which target positions count (bool, the shape of target); undefined: all (padding is not).
  torch::Tensor mask;
  // Optional: the cross-entropy of each target position under preds (float32, the shape of
  // target), as the task's loss computed it; the metrics of that loss (perplexity,
  // bits_per_character) read it rather than computing it again.
  torch::Tensor losses;
  // Decoded texts, one per example (speech recognition): what the model said and the reference.
  std::vector<std::string> predicted_texts;
  std::vector<std::string> target_texts;
  // How many characters the batch's counted target tokens stand for (language modeling, for
  // bits per character); 0 when unknown.
  double characters = 0;
};

// What a metric may need to know of the task before the first batch.
struct MetricSetup {
  int64_t num_classes = 0;  // a classification task's; 0 for other tasks
};

// A metric's values by name relative to its entry in `task.metrics`: "" is the entry's own name
// (val/acc), "NAME" is ENTRY/NAME (test/f1_class/cat for entry f1_class).
using MetricValues = std::map<std::string, double>;

// Sums a state tensor over all ranks, in place (the trainer passes an all-reduce; one process:
// nothing to do). Taking a function keeps metrics independent of lib/distributed.
using SumOverRanks = std::function<absl::Status(torch::Tensor&)>;

// Options every metric has; a metric's options struct derives from it (MetricOptionBinding).
struct MetricOptions {
  // The stages it runs in: train (each batch's value, logged every log_every_n_steps, and the
  // value over the epoch's batches at its end), val and test (over the whole epoch).
  std::vector<std::string> stages = {"val", "test"};
};

class Metric {
 public:
  static constexpr const char* kKind = "metric";
  explicit Metric(const MetricOptions& options) : stages_(options.stages) {}
  virtual ~Metric() = default;
  Metric(const Metric&) = delete;  // the state registry holds pointers to members
  Metric& operator=(const Metric&) = delete;

  // Called once before the first Update. A metric that needs what the task lacks (a per-class
  // metric in a task without classes) refuses here, naming it.
  virtual absl::Status Setup(const MetricSetup& /*setup*/) { return absl::OkStatus(); }
  virtual absl::Status Update(const MetricBatch& batch) = 0;
  // The values of the state so far; none while the state is empty. `class_names` names classes
  // by index when the data knows them (else classes are named by their index).
  virtual absl::StatusOr<MetricValues> Compute(
      const std::vector<std::string>& class_names) const = 0;
  // At the end of a test: files beside the run's other outputs (a confusion matrix). Most
  // metrics write none.
  virtual absl::Status WriteReport(const std::string& /*output_dir*/, const std::string& /*stage*/,
                                   const std::vector<std::string>& /*class_names*/) const {
    return absl::OkStatus();
  }

  // torchmetrics' forward: the value of `batch` alone, while the batch is also added to the
  // state (training logs each step's value and computes the epoch's over the whole state).
  absl::StatusOr<MetricValues> Forward(const MetricBatch& batch,
                                       const std::vector<std::string>& class_names);
  // Every state tensor back to its initial value.
  void Reset();
  // Replaces each state tensor by its sum over ranks (in declaration order, the same on every
  // rank); afterwards Compute gives the value over all ranks' batches.
  absl::Status Sync(const SumOverRanks& sum_over_ranks);
  // The state by name (copies), and back; LoadStateDict refuses a missing name or another shape.
  std::map<std::string, torch::Tensor> StateDict() const;
  absl::Status LoadStateDict(const std::map<std::string, torch::Tensor>& state);

  const std::vector<std::string>& stages() const { return stages_; }

 protected:
  // Declares `*tensor` (a member of the derived metric, on the CPU) as state, torchmetrics'
  // add_state: summed over ranks, reset to its value now, saved by StateDict.
  void AddState(std::string name, torch::Tensor* tensor);

 private:
  struct State {
    std::string name;
    torch::Tensor* tensor;
    torch::Tensor initial;
  };
  std::vector<State> states_;
  std::vector<std::string> stages_;
};

// The metric's value part / whole, from two state scalars (correct and total rows, errors and
// reference characters); no value while whole is 0.
MetricValues Share(const torch::Tensor& part, const torch::Tensor& whole);

// The `stages` option, declared once for every metric; a metric adds its own options to the
// binding it returns. S derives from MetricOptions.
OptionCheck StageList();  // each item is train, val or test (after the list-of-strings check)
template <typename S>
OptionBinding<S> MetricOptionBinding() {
  static_assert(std::is_base_of_v<MetricOptions, S>);
  return OptionBinding<S>().Field(
      "stages", static_cast<std::vector<std::string> S::*>(&MetricOptions::stages),
      "stages it runs in: train (per batch and per epoch), val, test (per epoch)", StageList());
}

}  // namespace kiln
