// kiln::Predictor: a trained model answering raw inputs, as a library. It loads a run directory,
// a checkpoint or an export folder together with the config the model was trained with (nothing
// is composed), and puts each input through exactly the evaluation pipeline of the run's data
// module (the eval transforms of an image, the tokenizer of a text, the features of a WAV/FLAC)
// before the task's predict step: the answers are those `kiln predict` writes for the same input.
//
//   auto predictor = kiln::Predictor::Load("outputs/2026-01-01/12-00-00");
//   auto answer = (*predictor)->Predict(png_bytes);       // answer->label, answer->probability
//
// `kiln predict` is a Predictor over the data module's prediction split (PredictSplit), or, for a
// language model, the task's own prompt (Generate()).
//
// Thread safety: every method may be called from several threads at once. Decoding and
// preprocessing run in the calling thread, concurrently; the model's forward passes (and text
// generation) take turns under one mutex, since a task's predict step is not promised to be
// reentrant. Each forward uses LibTorch's intra-op threads, so callers wanting throughput batch
// their inputs (PredictBatch) rather than add threads; `kiln serve` batches for them.
#pragma once

#include <torch/script.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/config.h"
#include "lib/data/datamodule.h"
#include "lib/trainer/strategy.h"
#include "lib/trainer/task.h"
#include "lib/trainer/trainer_options.h"

namespace kiln {

// The answer for one input.
struct Prediction {
  // Classification: the most likely class, its name (its index as text when the data names no
  // classes), its probability and the probability of every class, in class order.
  int64_t class_index = -1;
  std::string label;
  double probability = 0;
  std::vector<double> probabilities;
  // Speech recognition: the transcript.
  std::string text;
  // The task's record, as `kiln predict` writes it (class_index, class, probability; or text).
  std::vector<std::pair<std::string, config::NodePtr>> fields;
  // PredictSplit: the input's name in the split (its file, a text's first line, or its row
  // number where the split names none); empty for a raw input.
  std::string source;
};

struct PredictorOptions {
  // key=value overrides on top of the stored config (a moved data folder: data.root=/new/place).
  std::vector<std::string> overrides;
  // "dynamic_int8": the model's forward is traced and its Linear layers run as int8 with
  // activations quantized per batch, as `kiln export format=torchscript quantize=dynamic_int8`
  // writes it (the same outputs). For classifiers whose prediction is the softmax of the model's
  // output; others, and models without a Linear layer or that do not trace, are refused.
  std::optional<std::string> quantize;
  // "cpu", "cuda" or "auto": where the model runs, in place of the run's trainer.accelerator
  // (`kiln serve`'s serve.device); unset: the run's.
  std::optional<std::string> device;
};

class Predictor {
 public:
  // `path` is a run directory (its checkpoints/last.ckpt), a kiln checkpoint (it holds its
  // resolved config), or a `kiln export` folder (model.safetensors and config.yaml). The data the
  // evaluation pipeline needs is read as the run named it (a text tokenizer is fitted on the
  // training texts again, as `kiln predict` does).
  static absl::StatusOr<std::unique_ptr<Predictor>> Load(const std::string& path,
                                                         const PredictorOptions& options = {});
  // From a resolved job config and the file holding the weights (a kiln checkpoint or a
  // safetensors file with PyTorch names); `options.overrides` are not applied (the config is
  // taken as it is).
  static absl::StatusOr<std::unique_ptr<Predictor>> FromConfig(
      const config::Config& job, const std::string& weights, const PredictorOptions& options = {});

  // One input: the bytes of an image or audio file, or a UTF-8 text. An input the pipeline or the
  // model cannot take is an InvalidArgument status saying why.
  absl::StatusOr<Prediction> Predict(std::string_view input) const;
  // Several inputs in one forward pass (the same answers as one at a time, up to float rounding);
  // each answer has its own status, so a bad input fails alone.
  std::vector<absl::StatusOr<Prediction>> PredictBatch(
      const std::vector<std::string_view>& inputs) const;
  // PredictBatch in two steps, for a caller that gathers inputs from several threads (`kiln
  // serve`): Prepare decodes and preprocesses one input in the calling thread (no lock is taken);
  // PredictPrepared runs prepared examples through the model together.
  absl::StatusOr<data::Example> Prepare(std::string_view input) const;
  std::vector<absl::StatusOr<Prediction>> PredictPrepared(
      std::vector<data::Example> examples) const;

  // The answers for the data module's prediction split, in its order: what `kiln predict` writes.
  // The split is what the config names (`data.predict`: files, a folder, a manifest, texts from a
  // file or `-`; else the module's default, such as the IDX test set), read by the data module's
  // loader as Trainer::Predict reads it: batches of its batch size, its workers decoding ahead of
  // the model, at most trainer.limit_predict_batches batches. An input that cannot be read stops
  // it with the data module's error (naming the file), as a training run stops. Calls take turns.
  absl::StatusOr<std::vector<Prediction>> PredictSplit() const;

  // A language model: `prompt` continued with the task's generation options (temperature, top_k,
  // seed, max_tokens). Unimplemented for a model that does not generate.
  absl::StatusOr<std::string> Generate(const std::string& prompt) const;
  // A language model continuing the task's own prompt (task.prompt), as `kiln predict` does.
  absl::StatusOr<std::string> Generate() const;
  // A language model continuing several prompts together with the request's options over the
  // task's (what /v1/completions answers); `sink` sees the new text as it comes. A request the
  // model cannot take is an InvalidArgument status.
  absl::StatusOr<std::vector<Completion>> Complete(const CompletionRequest& request,
                                                   const CompletionSink& sink = {}) const;
  // Whether the model answers prompts (Generate) rather than inputs (Predict).
  bool generates() const { return generates_; }

  const std::vector<std::string>& class_names() const { return class_names_; }
  const std::string& model_name() const { return model_name_; }
  // The file the weights came from (model.pretrained's folder when they are that one's).
  const std::string& weights() const { return weights_; }
  // The resolved config the model was built from.
  const config::Config& config() const { return job_; }

 private:
  Predictor() = default;
  // Generate's work: after `prompt`, or after the task's own prompt when it is null.
  absl::StatusOr<std::string> GenerateAfter(const std::string* prompt) const;
  absl::StatusOr<std::vector<Prediction>> ForwardTogether(
      std::vector<data::Example>& examples) const;
  // A collated batch through the model (or its quantized forward) into answers; the one forward
  // path of the Predict* methods and PredictSplit.
  absl::StatusOr<std::vector<Prediction>> ForwardBatch(
      data::Batch& batch, const std::vector<std::string>& class_names) const;

  config::Config job_;
  std::string model_name_, weights_;
  std::shared_ptr<Task> task_;
  std::shared_ptr<data::DataModule> data_;
  TrainerOptions trainer_options_;  // the strategy holds a reference
  std::unique_ptr<Strategy> strategy_;
  data::CollateFn collate_;
  std::vector<std::string> class_names_;
  bool generates_ = false;
  // With quantize=dynamic_int8: the traced, quantized forward, and the token length a text model
  // was traced at (0: not a text model).
  absl::Status Quantize(const std::string& method);
  mutable std::optional<torch::jit::Module> quantized_;
  int64_t quantized_length_ = 0;
  mutable std::mutex forward_mutex_;
  mutable std::mutex split_mutex_;  // PredictSplit sets the data module up for its split
};

}  // namespace kiln
