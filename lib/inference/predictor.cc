#include "lib/inference/predictor.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/error_text.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/config/merge.h"
#include "lib/config/override.h"
#include "lib/config/yaml_io.h"
#include "lib/data/sampler.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/trainer/connectors/checkpoint_connector.h"
#include "lib/trainer/internal/cuda_module.h"
#include "lib/trainer/lora.h"
#include "lib/trainer/model_start.h"
#include "lib/trainer/process_settings.h"
#include "lib/weights/checkpoint.h"
#include "lib/weights/safetensors.h"
#include "lib/weights/torchscript.h"

namespace kiln {
namespace {

// The resolved config a kiln checkpoint holds (meta/config).
absl::StatusOr<config::NodePtr> CheckpointConfig(const std::string& path) {
  torch::serialize::InputArchive archive;
  KILN_RETURN_IF_ERROR(ReadCheckpoint(path, &archive));
  c10::IValue yaml;
  if (!archive.try_read("meta/config", yaml) || !yaml.isString() || yaml.toStringRef().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the checkpoint holds no config (meta/config)"));
  }
  return config::ParseYaml(yaml.toStringRef(), path + " (meta/config)");
}

// The first line of a LibTorch error (the rest is its C++ stack).
std::string FirstLine(const std::string& what) { return ErrorLine(what); }

// Where the model's weights are and the config it was trained with.
struct Located {
  std::string weights;
  config::NodePtr job;
};

absl::StatusOr<Located> Locate(const std::string& path) {
  Located found;
  if (IsDirectory(path)) {
    if (IsRegularFile(path + "/model.safetensors") &&
        IsRegularFile(path + "/config.yaml")) {  // kiln export
      found.weights = path + "/model.safetensors";
      KILN_ASSIGN_OR_RETURN(found.job, config::LoadYamlFile(path + "/config.yaml"));
      return found;
    }
    if (!IsRegularFile(path + "/checkpoints/last.ckpt")) {
      return absl::NotFoundError(
          absl::StrCat(path,
                       ": neither a run directory (no checkpoints/last.ckpt) nor an "
                       "export folder (model.safetensors and config.yaml)"));
    }
    found.weights = path + "/checkpoints/last.ckpt";
  } else if (IsRegularFile(path)) {
    found.weights = path;
  } else {
    return absl::NotFoundError(
        absl::StrCat(path, ": no such run directory, checkpoint or export folder"));
  }
  KILN_ASSIGN_OR_RETURN(found.job, CheckpointConfig(found.weights));
  return found;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::Load(const std::string& path,
                                                           const PredictorOptions& options) {
  KILN_ASSIGN_OR_RETURN(Located found, Locate(path));
  if (found.job == nullptr || !found.job->is_map()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the stored config is not a mapping"));
  }
  for (const std::string& text : options.overrides) {
    KILN_ASSIGN_OR_RETURN(config::Override o, config::ParseOverride(text));
    KILN_RETURN_IF_ERROR(config::ApplyConfigOverride(*found.job, o));
  }
  return FromConfig(config::Config(found.job), found.weights, options);
}

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::FromConfig(const config::Config& job,
                                                                 const std::string& weights,
                                                                 const PredictorOptions& options) {
  std::unique_ptr<Predictor> p(new Predictor());
  p->job_ = job;
  p->weights_ = weights;
  // model.init_from and model.freeze say how training started; the weights below replace them
  // (but for a LoRA run's frozen base).
  KILN_ASSIGN_OR_RETURN(ModelParts parts, BuildModelParts(job));
  p->model_name_ = std::move(parts.model_name);
  p->trainer_options_ = std::move(parts.options);
  p->task_ = std::move(parts.task);
  p->data_ = std::move(parts.data);
  if (weights.empty()) {
    // The model loaded its weights as it was built (model.pretrained: a Hugging Face folder).
    auto pretrained = job.Get<std::string>("model.pretrained");
    if (!pretrained.ok() || pretrained->empty()) {
      return absl::InvalidArgumentError(
          "the predictor needs weights: a checkpoint, or model.pretrained=DIR");
    }
    p->weights_ = *pretrained;
  } else if (absl::EndsWith(weights, ".safetensors")) {
    KILN_ASSIGN_OR_RETURN(auto state, ReadSafetensors(weights));
    KILN_RETURN_IF_ERROR(LoadModelState(state, p->task_->module(), weights));
  } else {
    // A LoRA run's checkpoint on a base from model.init_from holds the adapters alone: the base
    // comes from that file first, as in training.
    auto init_from = job.Get<std::string>("model.init_from");
    if (HasLora(p->task_->module()) && init_from.ok() && !init_from->empty()) {
      std::vector<std::shared_ptr<Callback>> unused;
      KILN_RETURN_IF_ERROR(
          ApplyModelStart(parts.start, p->task_->module(), /*fit=*/false, &unused));
    }
    KILN_RETURN_IF_ERROR(LoadCheckpointWeights(weights, *p->task_, p->model_name_));
  }
  if (options.device.has_value()) {
    if (*options.device == "cpu") {
      p->trainer_options_.accelerator = TrainerOptions::Accelerator::kCpu;
    } else if (*options.device == "cuda") {
      if (!torch::cuda::is_available()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the predictor's device is cuda (serve.device=cuda), but ", NoCudaDeviceAvailable()));
      }
      p->trainer_options_.accelerator = TrainerOptions::Accelerator::kCuda;
    } else if (*options.device == "auto") {
      p->trainer_options_.accelerator = TrainerOptions::Accelerator::kAuto;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "the predictor's device must be cpu, cuda or auto, not '", *options.device, "'"));
    }
  }
  p->strategy_ = std::make_unique<Strategy>(p->trainer_options_);
  KILN_RETURN_IF_ERROR(p->strategy_->SelectDevice());
  KILN_RETURN_IF_ERROR(p->strategy_->PlaceModule(p->task_->module()));
  p->task_->module().eval();
  // A task that generates refuses an empty prompt; any other says it does not generate.
  p->generates_ = p->task_->GenerateFrom("").status().code() != absl::StatusCode::kUnimplemented;
  if (!p->generates_) {
    KILN_RETURN_IF_ERROR(p->data_->PrepareRawInputs());
    p->collate_ = p->data_->loader_options().collate;
    if (!p->collate_)
      p->collate_ = [](std::vector<data::Example>& examples) { return data::Collate(examples); };
    p->class_names_ = p->data_->class_names();
  }
  if (options.quantize.has_value()) KILN_RETURN_IF_ERROR(p->Quantize(*options.quantize));
  return p;
}

absl::Status Predictor::Quantize(const std::string& method) {
  const std::string what = absl::StrCat("quantize=", method);
  if (method != "dynamic_int8")
    return absl::InvalidArgumentError(absl::StrCat(what, ": kiln knows dynamic_int8"));
  if (generates_)
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": serves classifiers, not a model that generates"));
  TensorFn forward = task_->ModelForward();
  if (forward == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the task has no single model forward to trace"));
  }
  std::optional<int64_t> length;
  KILN_ASSIGN_OR_RETURN(int64_t data_length, job_.GetOr<int64_t>("data.max_length", 0));
  if (data_length > 0) length = data_length;
  // The same trace, check and quantization as `kiln export format=torchscript quantize=...`.
  KILN_ASSIGN_OR_RETURN(torch::Tensor example, TraceExampleBatch(*data_, length));
  try {
    torch::NoGradGuard no_grad;
    KILN_ASSIGN_OR_RETURN(
        torch::jit::Module traced,
        TraceModel(task_->module(), forward, example.narrow(0, 0, 2), model_name_));
    KILN_RETURN_IF_ERROR(CheckTraceAgrees(traced, forward, {example.narrow(0, 0, 1), example}, 1e-4,
                                          absl::StrCat("model '", model_name_, "'")));
    // Only where the task's prediction is the softmax of that forward can the traced one replace
    // it.
    data::Batch batch;
    batch.input = example;
    KILN_ASSIGN_OR_RETURN(torch::Tensor predicted, task_->PredictStep(batch));
    torch::Tensor softmax =
        torch::softmax(traced.forward({example}).toTensor().to(torch::kFloat32), 1);
    if (!predicted.sizes().equals(softmax.sizes()) ||
        !torch::allclose(predicted.to(torch::kFloat32), softmax, 1e-4, 1e-5)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the task's prediction is not the softmax of model '", model_name_,
                       "''s output"));
    }
    KILN_RETURN_IF_ERROR(QuantizeDynamicInt8(traced).status());
    quantized_ = std::move(traced);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", FirstLine(e.what())));
  }
  if (example.scalar_type() == torch::kInt64 && example.dim() == 2)
    quantized_length_ = example.size(1);
  return absl::OkStatus();
}

absl::StatusOr<Prediction> Predictor::Predict(std::string_view input) const {
  std::vector<absl::StatusOr<Prediction>> answers = PredictBatch({input});
  return std::move(answers[0]);
}

std::vector<absl::StatusOr<Prediction>> Predictor::PredictBatch(
    const std::vector<std::string_view>& inputs) const {
  std::vector<absl::StatusOr<Prediction>> answers(inputs.size(),
                                                  absl::UnknownError("not predicted"));
  std::vector<data::Example> examples;
  std::vector<size_t> where;
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::StatusOr<data::Example> example = Prepare(inputs[i]);
    if (!example.ok()) {
      answers[i] = example.status();
      continue;
    }
    examples.push_back(*std::move(example));
    where.push_back(i);
  }
  if (examples.empty()) return answers;
  std::vector<absl::StatusOr<Prediction>> computed = PredictPrepared(std::move(examples));
  for (size_t k = 0; k < where.size(); ++k) answers[where[k]] = std::move(computed[k]);
  return answers;
}

absl::StatusOr<data::Example> Predictor::Prepare(std::string_view input) const {
  if (generates_)
    return absl::InvalidArgumentError("this model generates text: give it a prompt (Generate)");
  try {
    return data_->RawExample(input);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot preprocess the input: ", FirstLine(e.what())));
  }
}

std::vector<absl::StatusOr<Prediction>> Predictor::PredictPrepared(
    std::vector<data::Example> examples) const {
  if (examples.empty()) return {};
  absl::StatusOr<std::vector<Prediction>> together = ForwardTogether(examples);
  std::vector<absl::StatusOr<Prediction>> answers;
  if (together.ok()) {
    for (auto& p : *together) answers.emplace_back(std::move(p));
    return answers;
  }
  if (examples.size() == 1) return {together.status()};
  // Inputs that cannot share a batch (images of different sizes) or one the model refuses: each
  // alone, so only the one at fault fails.
  for (auto& example : examples) {
    std::vector<data::Example> one = {example};
    absl::StatusOr<std::vector<Prediction>> alone = ForwardTogether(one);
    answers.push_back(alone.ok() ? absl::StatusOr<Prediction>(std::move((*alone)[0]))
                                 : absl::StatusOr<Prediction>(alone.status()));
  }
  return answers;
}

absl::StatusOr<std::vector<Prediction>> Predictor::ForwardTogether(
    std::vector<data::Example>& examples) const {
  data::Batch batch;
  try {
    KILN_ASSIGN_OR_RETURN(batch, collate_(examples));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model cannot take this input: ", FirstLine(e.what())));
  }
  return ForwardBatch(batch, class_names_);
}

absl::StatusOr<std::vector<Prediction>> Predictor::ForwardBatch(
    data::Batch& batch, const std::vector<std::string>& class_names) const {
  const int64_t n = batch.size();
  torch::Tensor output;
  std::vector<PredictionRecord> records;
  try {
    std::lock_guard<std::mutex> lock(forward_mutex_);
    torch::NoGradGuard no_grad;
    batch.input = strategy_->InputToDevice(batch.input);
    // The quantized forward takes token ids at the length it was traced at (padding is 0).
    auto QuantizedPrediction = [this](torch::Tensor input) -> absl::StatusOr<torch::Tensor> {
      if (quantized_length_ > 0) {
        input = input.size(1) >= quantized_length_
                    ? input.narrow(1, 0, quantized_length_)
                    : torch::constant_pad_nd(input, {0, quantized_length_ - input.size(1)}, 0);
      }
      return torch::softmax(
          quantized_->forward({input.contiguous()}).toTensor().to(torch::kFloat32), 1);
    };
    absl::StatusOr<torch::Tensor> out =
        quantized_.has_value() ? QuantizedPrediction(batch.input) : task_->PredictStep(batch);
    if (!out.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("the model cannot take this input: ", out.status().message()));
    output = out->to(torch::kCPU);
    KILN_ASSIGN_OR_RETURN(records, task_->PredictionRecords(output, class_names));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model cannot take this input: ", FirstLine(e.what())));
  }
  if (static_cast<int64_t>(records.size()) != n) {
    return absl::InternalError(
        absl::StrCat("the task made ", records.size(), " predictions of ", n, " inputs"));
  }
  // Every class's probability: the output as float64 once, each answer its row.
  torch::Tensor probabilities;
  if (output.dim() == 2 && output.is_floating_point())
    probabilities = output.to(torch::kFloat64).contiguous();
  std::vector<Prediction> answers(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    Prediction& p = answers[static_cast<size_t>(i)];
    p.fields = std::move(records[static_cast<size_t>(i)].fields);
    for (const auto& [key, value] : p.fields) {
      if (key == "class_index" && value->kind() == config::NodeKind::kInt)
        p.class_index = value->as_int();
      if (key == "class" && value->kind() == config::NodeKind::kString)
        p.label = value->as_string();
      if (key == "probability" && value->kind() == config::NodeKind::kFloat)
        p.probability = value->as_float();
      if (key == "text" && value->kind() == config::NodeKind::kString) p.text = value->as_string();
    }
    if (p.class_index >= 0 && probabilities.defined()) {
      const double* row = probabilities.data_ptr<double>() + i * probabilities.size(1);
      p.probabilities.assign(row, row + probabilities.size(1));
    }
  }
  return answers;
}

absl::StatusOr<std::vector<Prediction>> Predictor::PredictSplit() const {
  if (generates_)
    return absl::FailedPreconditionError("this model generates text: give it a prompt (Generate)");
  std::lock_guard<std::mutex> lock(split_mutex_);
  StopSignals stop_signals;  // SIGINT/SIGTERM end it between batches
  KILN_RETURN_IF_ERROR(data_->PrepareData());
  KILN_RETURN_IF_ERROR(data_->Setup(data::Stage::kPredict));
  std::shared_ptr<const data::Dataset> split = data_->predict_dataset();
  if (!split) return absl::FailedPreconditionError("the data module has no prediction inputs");
  // The names as the module has them once set up for prediction (an image folder's sub-folders).
  const std::vector<std::string> class_names = data_->class_names();
  data::DataLoader loader(split, data::SamplerFor(*split, /*shuffle=*/false, 0),
                          data_->loader_options());
  const int64_t batches = trainer_options_.limit_predict_batches.Of(loader.num_batches());
  std::vector<Prediction> answers;
  Logger::Instance().Info(absl::StrCat("predicting: ", batches, " batches"));
  int64_t done = 0;
  KILN_RETURN_IF_ERROR(loader.Run(0, 0, batches, [&](data::Batch& batch) -> absl::StatusOr<bool> {
    KILN_RETURN_IF_ERROR(
        CheckStopSignal(absl::StrCat("while predicting (after ", done++, " of ", batches,
                                     " batches); no predictions were written")));
    KILN_ASSIGN_OR_RETURN(std::vector<Prediction> batch_answers, ForwardBatch(batch, class_names));
    for (Prediction& answer : batch_answers) {
      const int64_t row = static_cast<int64_t>(answers.size());
      answer.source = split->Source(row);
      if (answer.source.empty()) answer.source = std::to_string(row);
      answers.push_back(std::move(answer));
    }
    return true;
  }));
  return answers;
}

absl::StatusOr<std::string> Predictor::Generate(const std::string& prompt) const {
  return GenerateAfter(&prompt);
}

absl::StatusOr<std::string> Predictor::Generate() const { return GenerateAfter(nullptr); }

absl::StatusOr<std::vector<Completion>> Predictor::Complete(const CompletionRequest& request,
                                                            const CompletionSink& sink) const {
  if (!generates_)
    return absl::UnimplementedError("this model does not generate text: give it inputs (Predict)");
  std::lock_guard<std::mutex> lock(forward_mutex_);
  try {
    return task_->Complete(request, sink);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot generate: ", FirstLine(e.what())));
  }
}

absl::StatusOr<std::string> Predictor::GenerateAfter(const std::string* prompt) const {
  if (!generates_)
    return absl::UnimplementedError("this model does not generate text: give it inputs (Predict)");
  std::lock_guard<std::mutex> lock(forward_mutex_);
  try {
    if (prompt != nullptr) return task_->GenerateFrom(*prompt);
    KILN_ASSIGN_OR_RETURN(std::optional<std::string> text, task_->Generate());
    if (!text.has_value())
      return absl::UnimplementedError("the task has no prompt of its own to continue");
    return *std::move(text);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("cannot generate: ", FirstLine(e.what())));
  }
}

}  // namespace kiln
