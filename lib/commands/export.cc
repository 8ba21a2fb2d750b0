// `kiln export`: a checkpoint's weights as safetensors under PyTorch names, the traced model as
// TorchScript (format=torchscript, quantize=dynamic_int8) with what a server needs to run it, or
// a Hugging Face folder that transformers' from_pretrained loads (format=hf).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lib/base/files.h"
#include "lib/commands/command_options.h"
#include "lib/commands/job.h"
#include "lib/config/json.h"
#include "lib/config/secrets.h"
#include "lib/config/yaml_io.h"
#include "lib/logging/logger.h"
#include "lib/run/command.h"
#include "lib/trainer/lora.h"
#include "lib/trainer/process_settings.h"
#include "lib/weights/hf_export.h"
#include "lib/weights/safetensors.h"
#include "lib/weights/torchscript.h"

namespace kiln {
namespace {

// `export`: what it writes (train.yaml documents the keys).
struct ExportOptions {
  std::string format = "safetensors";
  std::optional<std::string> quantize;
  std::optional<int64_t> length;
};

const OptionBinding<ExportOptions>& ExportBinding() {
  using O = ExportOptions;
  static const auto* binding = new OptionBinding<O>(
      OptionBinding<O>()
          .Field("format", &O::format,
                 "safetensors (weights), torchscript (a traced model.pt), hf (a Hugging Face "
                 "folder: config.json, model.safetensors; LoRA adapters merged in) or peft (the "
                 "LoRA adapters alone, as PEFT saves them)",
                 OneOf({"safetensors", "torchscript", "hf", "peft"}))
          .Field("quantize", &O::quantize, "torchscript: dynamic_int8 (int8 Linear layers) or null",
                 OneOf({"dynamic_int8"}))
          .Field("length", &O::length,
                 "torchscript: the token length a text model is traced at (null: data.max_length)",
                 GreaterThan(0)));
  return *binding;
}

// The job's resolved config beside what an export wrote, secrets redacted.
absl::Status WriteExportConfig(const run::JobContext& ctx) {
  return WriteFileAtomically(ctx.output_dir + "/config.yaml",
                             config::ToYaml(*config::RedactSecrets(*ctx.cfg.node())));
}

nlohmann::json ConfigJson(const config::Config& cfg, const std::string& key) {
  if (IsNull(cfg, key)) return nullptr;
  return nlohmann::json::parse(config::NodeToJson(*cfg.Get<config::NodePtr>(key).value()));
}

// `export format=torchscript`: model.pt (traced; quantized with quantize=dynamic_int8) and
// model.json (its input, output and preprocessing) in the run directory.
absl::Status ExportTorchScript(run::JobContext& ctx, Job& job, const ExportOptions& o,
                               const std::string& source) {
  TensorFn forward = job.task().ModelForward();
  if (forward == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("kiln export format=torchscript: task '",
                     ctx.cfg.Get<std::string>("task._target_").value_or("?"),
                     "' has no single model forward to trace"));
  }
  std::string what = absl::StrCat("model '", job.model_name(), "'");
  std::optional<int64_t> length = o.length;
  if (!length.has_value()) {
    KILN_ASSIGN_OR_RETURN(int64_t data_length, ctx.cfg.GetOr<int64_t>("data.max_length", 0));
    if (data_length > 0) length = data_length;
  }
  KILN_ASSIGN_OR_RETURN(torch::Tensor example, TraceExampleBatch(job.data(), length));
  KILN_ASSIGN_OR_RETURN(
      torch::jit::Module traced,
      TraceModel(job.task().module(), forward, example.narrow(0, 0, 2), job.model_name()));
  KILN_RETURN_IF_ERROR(
      CheckTraceAgrees(traced, forward, {example.narrow(0, 0, 1), example}, 1e-4, what));
  nlohmann::json quantization = nullptr;
  if (o.quantize.has_value()) {
    torch::NoGradGuard no_grad;
    torch::Tensor before = traced.forward({example}).toTensor();
    KILN_ASSIGN_OR_RETURN(int layers, QuantizeDynamicInt8(traced));
    torch::Tensor after = traced.forward({example}).toTensor();
    double diff = (after - before).abs().max().item<double>();
    quantization = {{"method", *o.quantize},
                    {"linear_layers", layers},
                    {"engine", SelectQuantizedEngine()},
                    {"max_output_change_on_example", diff}};
    Logger::Instance().Info(
        absl::StrFormat("quantize=dynamic_int8: %d Linear layers int8 (%s); outputs on the example "
                        "batch change by at most %.3g",
                        layers, SelectQuantizedEngine(), diff));
  }
  std::string file = ctx.output_dir + "/model.pt";
  KILN_RETURN_IF_ERROR(CheckStopSignal("while tracing the model; nothing was written"));
  KILN_RETURN_IF_ERROR(SaveModule(traced, file));
  torch::Tensor output;
  {
    torch::NoGradGuard no_grad;
    output = traced.forward({example.narrow(0, 0, 1)}).toTensor();
  }
  auto dtype = [](const torch::Tensor& t) {
    switch (t.scalar_type()) {
      case torch::kFloat32: return std::string("float32");
      case torch::kInt64: return std::string("int64");
      default: return std::string(c10::toString(t.scalar_type()));
    }
  };
  auto shape = [](const torch::Tensor& t) {
    std::vector<int64_t> s(t.sizes().begin(), t.sizes().end());
    s[0] = -1;  // the batch: any size
    return s;
  };
  nlohmann::json info = {
      {"format", "torchscript"},
      {"file", "model.pt"},
      {"model", job.model_name()},
      {"source", source},
      {"kiln_version", KILN_VERSION},
      {"torch_version", TORCH_VERSION},
      {"input", {{"name", "input"}, {"shape", shape(example)}, {"dtype", dtype(example)}}},
      {"output", {{"shape", shape(output)}, {"dtype", dtype(output)}}},
      {"dynamic_axes", {{"input", {0}}, {"output", {0}}}},
      {"class_names", job.data().class_names()},
      {"quantization", quantization},
      {"preprocessing",
       {{"data", ConfigJson(ctx.cfg, "data")}, {"task", ConfigJson(ctx.cfg, "task")}}},
  };
  if (example.scalar_type() == torch::kInt64) {
    info["input"]["note"] = absl::StrCat("token ids, 0 = padding; exactly ", example.size(1),
                                         " per row (pad with 0 at the end, or cut)");
  }
  KILN_RETURN_IF_ERROR(WriteFileAtomically(ctx.output_dir + "/model.json", info.dump(2) + "\n"));
  KILN_RETURN_IF_ERROR(WriteExportConfig(ctx));
  Logger::Instance().Info(absl::StrCat("exported ", source, " to ", file, " (TorchScript, input ",
                                       c10::str(example.sizes()), " with any batch size) and ",
                                       ctx.output_dir, "/model.json"));
  std::printf("%s\n", file.c_str());
  return absl::OkStatus();
}

// `export format=hf`: the model in the run directory as a Hugging Face folder, for the model
// families that register an exporter (lib/weights/hf_export.h), with its tokenizer's files.
absl::Status ExportHf(run::JobContext& ctx, Job& job, const std::string& source) {
  const HfExporter* exporter = FindHfExporter(job.model_name());
  if (exporter == nullptr) {
    std::vector<std::string> names = HfExportableModels();
    return absl::FailedPreconditionError(absl::StrCat(
        "kiln export format=hf: model '", job.model_name(),
        "' has no Hugging Face layout in kiln; these do: ", absl::StrJoin(names, ", ")));
  }
  if (HasLora(job.task().module())) {
    MergeLora(job.task().module());
    Logger::Instance().Info(
        "format=hf: the LoRA adapters are merged into their layers' weights "
        "(format=peft writes them alone)");
  }
  KILN_ASSIGN_OR_RETURN(HfFolder folder, (*exporter)(job.task().module()));
  KILN_RETURN_IF_ERROR(CheckStopSignal("while loading the checkpoint; nothing was written"));
  KILN_RETURN_IF_ERROR(WriteHfFolder(folder, ctx.output_dir));
  // The tokenizer's files beside the model: a pretrained folder's own, or the tokenizer.json that
  // kiln writes for its char and whitespace tokenizers.
  KILN_ASSIGN_OR_RETURN(auto tokenizer_files, job.task().TokenizerFiles());
  std::vector<std::string> names;
  for (const auto& [name, bytes] : tokenizer_files) {
    KILN_RETURN_IF_ERROR(WriteFileAtomically(ctx.output_dir + "/" + name, bytes));
    names.push_back(name);
  }
  KILN_RETURN_IF_ERROR(WriteExportConfig(ctx));
  const std::string tokenizer =
      ctx.cfg.Get<std::string>("data.tokenizer._target_").value_or(std::string());
  std::string tokenizer_note;
  if (!names.empty()) {
    tokenizer_note = absl::StrCat("; the tokenizer: ", absl::StrJoin(names, ", "));
  } else if (!tokenizer.empty()) {
    tokenizer_note = absl::StrCat(" (the ", tokenizer,
                                  " tokenizer has no Hugging Face form: no tokenizer files)");
  }
  Logger::Instance().Info(absl::StrCat("exported ", source,
                                       " as a Hugging Face folder: ", ctx.output_dir,
                                       "/config.json and model.safetensors", tokenizer_note));
  std::printf("%s\n", ctx.output_dir.c_str());
  return absl::OkStatus();
}

// `export format=peft`: the LoRA adapters alone in PEFT's format (adapter_config.json,
// adapter_model.safetensors), for PeftModel.from_pretrained on the base model.
absl::Status ExportPeft(run::JobContext& ctx, Job& job, const std::string& source) {
  if (!HasLora(job.task().module())) {
    return absl::FailedPreconditionError(
        "kiln export format=peft: the run's model has no LoRA adapters (model.lora)");
  }
  PeftAdapterInfo info;
  info.base_model = ctx.cfg.Get<std::string>("model.pretrained").value_or("");
  // GPT-2's layers are Conv1D in transformers: PEFT marks their adapters fan_in_fan_out.
  info.fan_in_fan_out = job.model_name() == "gpt" || job.model_name() == "gpt2";
  // model=bert is transformers' *ForSequenceClassification: PEFT's SEQ_CLS, which trains and
  // saves the head whole.
  if (job.model_name() == "bert") info.task_type = "SEQ_CLS";
  KILN_ASSIGN_OR_RETURN(std::optional<LoraOptions> lora, ReadLoraOptions(ctx.cfg));
  if (lora) {
    info.modules_to_save = lora->modules_to_save;
    info.bias = lora->bias;
  }
  KILN_RETURN_IF_ERROR(CheckStopSignal("while loading the checkpoint; nothing was written"));
  KILN_RETURN_IF_ERROR(WritePeftAdapter(job.task().module(), info, ctx.output_dir));
  KILN_RETURN_IF_ERROR(WriteExportConfig(ctx));
  Logger::Instance().Info(absl::StrCat("exported the LoRA adapters of ", source,
                                       " in PEFT's format: ", ctx.output_dir,
                                       "/adapter_config.json and adapter_model.safetensors"));
  std::printf("%s\n", ctx.output_dir.c_str());
  return absl::OkStatus();
}

// `export`: the checkpoint's weights as safetensors under PyTorch names, with the resolved config;
// or, format=torchscript, the traced model.
absl::Status ExportCommand(run::JobContext& ctx) {
  // SIGINT/SIGTERM before the files are written stop it (130/143) with nothing written; the
  // writes themselves (each atomic, milliseconds) then finish.
  StopSignals stop_signals;
  KILN_ASSIGN_OR_RETURN(ExportOptions o, CommandOptions(ctx.cfg, ExportBinding(), "export"));
  if (o.quantize.has_value() && o.format != "torchscript") {
    return absl::InvalidArgumentError(
        "kiln export: quantize=dynamic_int8 needs format=torchscript");
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Job> job,
                        Job::FromConfig(ctx.cfg, ctx.output_dir, Job::Purpose::kEvaluate));
  KILN_ASSIGN_OR_RETURN(std::string path, job->LoadCheckpoint(job->ckpt_path(), ctx.command));
  if (o.format == "torchscript") return ExportTorchScript(ctx, *job, o, path);
  if (o.format == "hf") return ExportHf(ctx, *job, path);
  if (o.format == "peft") return ExportPeft(ctx, *job, path);
  std::string weights = ctx.output_dir + "/model.safetensors";
  KILN_RETURN_IF_ERROR(CheckStopSignal("while loading the checkpoint; nothing was written"));
  KILN_RETURN_IF_ERROR(WriteSafetensors(weights, StateDict(job->task().module()),
                                        {{"format", "pt"},
                                         {"kiln_version", KILN_VERSION},
                                         {"model", job->model_name()},
                                         {"source", path}}));
  KILN_RETURN_IF_ERROR(WriteExportConfig(ctx));
  Logger::Instance().Info(
      absl::StrCat("exported ", path, " to ", weights, " and ", ctx.output_dir, "/config.yaml"));
  std::printf("%s\n", weights.c_str());
  return absl::OkStatus();
}

const bool kExportRegistered = [] {
  run::RegisterCommand("export", ExportCommand);
  return true;
}();

}  // namespace
}  // namespace kiln
