// A Task (Lightning's LightningModule): owns the model, computes the loss of a training batch,
// logs evaluation metrics, predicts. Built by name from the `task` config node through
// Registry<Task>; Build() then reads the rest of the job config (model, loss options). Metrics
// over whole epochs are Metric objects (lib/trainer/metric.h) that the task lists in its config.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/data/datamodule.h"
#include "lib/data/loader.h"
#include "lib/trainer/completion.h"
#include "lib/trainer/metric.h"
#include "lib/trainer/metric_log.h"
#include "lib/trainer/prediction_writer.h"

namespace kiln {

class Task {
 public:
  static constexpr const char* kKind = "task";
  virtual ~Task() = default;

  // Builds the model and whatever else the task needs from the whole job config.
  virtual absl::Status Build(const config::Config& job) = 0;
  // The trainable module: its parameters are optimized, its state is checkpointed.
  virtual torch::nn::Module& module() = 0;
  // Called by every command once the data module is built, before training, evaluation or
  // checkpoint loading: a task that needs what the data learned (a tokenizer) takes it here.
  virtual absl::Status Connect(data::DataModule& /*data*/) { return absl::OkStatus(); }

  // Returns the loss to minimize; logs "train/..." metrics.
  virtual absl::StatusOr<torch::Tensor> TrainingStep(const data::Batch& batch, MetricLog& log) = 0;

  // The training step in two halves: TrainingLoss is device work alone (the forward and the loss,
  // no read of a value on the host), and LogTrainingStep logs and updates the training metrics
  // from its outputs. A task that has them says so in splits_training_step() and makes
  // TrainingStep their composition; the trainer then reads the loss once, after the backward (a
  // GPU runs the whole step meanwhile), and trainer.cuda_graphs can capture TrainingLoss into a
  // CUDA graph and replay it. A task that does not (its step reads values on the host) keeps the
  // defaults: the trainer calls TrainingStep, and cuda_graphs is refused for it.
  struct TrainingOutputs {
    torch::Tensor loss;   // the scalar to minimize
    torch::Tensor preds;  // what the training metrics see (logits), outside autograd
    // Optional: the loss of each target position, outside autograd (MetricBatch::losses).
    torch::Tensor losses;
  };
  virtual bool splits_training_step() const { return false; }
  virtual absl::StatusOr<TrainingOutputs> TrainingLoss(const data::Batch& /*batch*/) {
    return absl::UnimplementedError("its training step reads values on the host");
  }
  virtual absl::Status LogTrainingStep(const data::Batch& /*batch*/,
                                       const TrainingOutputs& /*outputs*/, MetricLog& /*log*/) {
    return absl::UnimplementedError("its training step reads values on the host");
  }
  // Logs metrics named "<stage>/..." (stage: "val" or "test") for one evaluation batch.
  virtual absl::Status EvaluationStep(const data::Batch& batch, const std::string& stage,
                                      MetricLog& log) = 0;
  // At the end of an evaluation epoch: the values of the task's metric objects over the whole
  // epoch, their state first summed over ranks with `sum_over_ranks` (torchmetrics' sync and
  // compute). The trainer adds them to the epoch means of what the steps logged.
  virtual absl::StatusOr<std::map<std::string, double>> EvaluationEnd(
      const std::string& /*stage*/, const SumOverRanks& /*sum_over_ranks*/) {
    return std::map<std::string, double>();
  }
  // At the end of a training epoch: the values of the task's training metrics over the whole
  // epoch (their state summed over ranks, as EvaluationEnd), torchmetrics' on_epoch=True. They
  // replace the means of the per-batch values the steps logged under the same names.
  virtual absl::StatusOr<std::map<std::string, double>> TrainingEpochEnd(
      const SumOverRanks& /*sum_over_ranks*/) {
    return std::map<std::string, double>();
  }
  // The model's output for one batch (e.g. class probabilities).
  virtual absl::StatusOr<torch::Tensor> PredictStep(const data::Batch& batch) = 0;

  // One record per row of a PredictStep output, for the prediction writer (the command fills in
  // each record's source). By default the output is class probabilities [batch, classes]:
  // class_index, class, probability. A task whose predictions are texts (speech recognition)
  // returns {text}.
  virtual absl::StatusOr<std::vector<PredictionRecord>> PredictionRecords(
      const torch::Tensor& output, const std::vector<std::string>& class_names) {
    return ClassProbabilityRecords(output, class_names);
  }

  // The model's forward on an input batch, without loss or post-processing (logits): what
  // `kiln export format=torchscript` traces. Null: the task has no such single forward.
  virtual std::function<torch::Tensor(const torch::Tensor&)> ModelForward() { return nullptr; }

  // A task that answers `kiln predict` itself (a language model generating text) returns the text
  // to print and keep; nullopt means the usual batch predictions.
  virtual absl::StatusOr<std::optional<std::string>> Generate() {
    return std::optional<std::string>();
  }
  // Such a task's text after a prompt given at inference time (kiln::Predictor, `kiln serve`),
  // sampled with the task's own generation options. Unimplemented for a task that does not
  // generate.
  virtual absl::StatusOr<std::string> GenerateFrom(const std::string& /*prompt*/) {
    return absl::UnimplementedError("this task does not generate text");
  }
  // Such a task's continuations of several prompts, generated together, the request's options
  // over the task's own; `sink` (may be empty) sees the text as it comes.
  virtual absl::StatusOr<std::vector<Completion>> Complete(const CompletionRequest& /*request*/,
                                                           const CompletionSink& /*sink*/) {
    return absl::UnimplementedError("this task does not generate text");
  }

  // The files with which transformers' AutoTokenizer.from_pretrained reads the tokenizer the
  // model was trained with, by name, for `kiln export format=hf`; empty for a task without one
  // (or a tokenizer with no Hugging Face form).
  virtual absl::StatusOr<std::map<std::string, std::string>> TokenizerFiles() const {
    return std::map<std::string, std::string>();
  }

  // After a test run: writes what the task gathered (a confusion matrix, transcripts) into
  // `output_dir` and returns any metrics derived from it that EvaluationEnd did not.
  // `class_names` names the classes by index when the data module knows them.
  virtual absl::StatusOr<std::map<std::string, double>> TestReport(
      const std::string& /*output_dir*/, const std::vector<std::string>& /*class_names*/) {
    return std::map<std::string, double>();
  }
};

}  // namespace kiln
