#include "lib/trainer/model_start.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/registry/options.h"
#include "lib/registry/registry.h"
#include "lib/trainer/freezing.h"
#include "lib/trainer/lora.h"
#include "lib/trainer/pretrained_weights.h"

namespace kiln {
namespace {

const OptionBinding<ModelStartOptions>& ModelStartBinding() {
  using O = ModelStartOptions;
  static const auto* binding = new OptionBinding<O>(
      OptionBinding<O>()
          .Field("init_from", &O::init_from,
                 "start from these weights: a safetensors file or a kiln checkpoint")
          .Field("init_ignore", &O::init_ignore,
                 "globs of model names not to load (a new head: [fc2.*])")
          .Node("init_map", &O::init_map, OptionType::kMap,
                "prefix renames from the file's names to the model's")
          .Field("init_strict", &O::init_strict,
                 "every model entry not ignored must be in the file")
          .Field("freeze", &O::freeze, "globs of parameters never trained"));
  return *binding;
}

}  // namespace

absl::StatusOr<ModelStart> ReadModelStart(const config::Config& cfg) {
  ModelStart start;
  start.build_cfg = cfg;
  config::NodePtr model = cfg.Has("model") ? cfg.Get<config::NodePtr>("model").value() : nullptr;
  if (model == nullptr || !model->is_map()) return start;
  config::NodePtr mine = config::Node::Map();
  config::NodePtr copy = cfg.node()->Clone();
  config::NodePtr model_copy = copy->Find("model");
  for (const auto& spec : ModelStartBinding().schema().options()) {
    if (config::NodePtr value = model->Find(spec.name)) {
      mine->Set(spec.name, value);
      model_copy->Erase(spec.name);
    }
  }
  // model.lora (lib/trainer/lora.h) is read by BuildModelParts, not by the model.
  if (model->Find("lora")) {
    model_copy->Erase("lora");
    start.build_cfg = config::Config(copy, cfg.prefix());
  }
  if (mine->size() == 0) return start;
  std::string component =
      absl::StrCat("model '", cfg.Get<std::string>("model._target_").value_or("?"), "'");
  KILN_ASSIGN_OR_RETURN(config::NodePtr filled,
                        ModelStartBinding().schema().Apply(*mine, "model", component));
  start.options = ModelStartBinding().Fill(config::Config(filled, "model"));
  if (start.options.init_map && !start.options.init_map->is_null()) {
    for (const auto& [from, to] : start.options.init_map->entries()) {
      if (!to->is_scalar() || to->is_null()) {
        return OptionValueError("model.init_map", component,
                                "a mapping of file prefix: model prefix", *start.options.init_map);
      }
    }
  }
  start.build_cfg = config::Config(copy, cfg.prefix());
  return start;
}

absl::Status ApplyModelStart(const ModelStartOptions& o, torch::nn::Module& module, bool fit,
                             std::vector<std::shared_ptr<Callback>>* callbacks) {
  if (o.init_from.has_value()) {
    WeightLoadSpec spec;
    spec.path = *o.init_from;
    spec.ignore = o.init_ignore;
    spec.strict = o.init_strict;
    // The adapters (model.lora) start as their own initialization, not from the base's file: each
    // kind the model has (a glob that matches nothing is refused).
    const auto names = module.named_parameters();
    for (const char* glob : {"*.lora_A.*", "*.lora_B.*", "*.lora_embedding_[AB]",
                             "*.lora_magnitude_vector", "*.trainable_tokens_delta"}) {
      if (std::any_of(names.begin(), names.end(),
                      [&](const auto& p) { return GlobMatches(glob, p.key()); }))
        spec.ignore.push_back(glob);
    }
    if (o.init_map && !o.init_map->is_null()) {
      for (const auto& [from, to] : o.init_map->entries())
        spec.rename.emplace_back(from, config::PythonStr(*to));
    }
    KILN_ASSIGN_OR_RETURN(auto weights, ReadPretrainedWeights(spec.path));
    KILN_ASSIGN_OR_RETURN(WeightLoadReport report, LoadPretrainedWeights(weights, module, spec));
    Logger::Instance().Info(
        absl::StrCat("model weights from ", spec.path, ": ", report.Count("loaded"), " loaded, ",
                     report.Count("ignored"), " ignored, ", report.Count("missing"), " missing, ",
                     report.Count("mismatched"), " mismatched, ", report.Count("unused"),
                     " unused\n", report.Table()));
    if (o.start_adapters_from_base) StartAdaptersFromBase(module);
  } else if (!o.init_ignore.empty() || (o.init_map && !o.init_map->is_null())) {
    // A from-scratch baseline of a fine-tuning recipe sets only model.init_from=null.
    Logger::Instance().Warning(
        "model.init_ignore and model.init_map do nothing without model.init_from");
  }
  if (o.freeze.empty()) return absl::OkStatus();
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> frozen,
                        ParametersMatching(module, o.freeze, "model.freeze"));
  SetTrainable(module, frozen, false);
  if (fit && !AnyTrainable(module)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.freeze: [", absl::StrJoin(o.freeze, ", "),
                     "] freezes every parameter of the model; nothing would train"));
  }
  Logger::Instance().Info(absl::StrCat("model.freeze: ", frozen.size(), " parameters frozen"));
  auto norms = BatchNormsWithin(module, frozen);
  if (fit && !norms.empty())
    callbacks->push_back(std::make_shared<FrozenBatchNormsInEval>(std::move(norms)));
  return absl::OkStatus();
}

absl::StatusOr<ModelParts> BuildModelParts(const config::Config& cfg) {
  ModelParts parts;
  KILN_ASSIGN_OR_RETURN(config::Config trainer_cfg, cfg.Sub("trainer"));
  KILN_ASSIGN_OR_RETURN(parts.options, TrainerOptions::FromConfig(trainer_cfg));
  KILN_ASSIGN_OR_RETURN(config::Config task_cfg, cfg.Sub("task"));
  KILN_ASSIGN_OR_RETURN(parts.task, Registry<Task>::Get().Instantiate(task_cfg));
  KILN_ASSIGN_OR_RETURN(ModelStart start, ReadModelStart(cfg));
  parts.start = start.options;
  KILN_RETURN_IF_ERROR(parts.task->Build(start.build_cfg));
  KILN_ASSIGN_OR_RETURN(std::optional<LoraOptions> lora, ReadLoraOptions(cfg));
  if (lora) {
    KILN_RETURN_IF_ERROR(AddLora(parts.task->module(), *lora).status());
    parts.start.start_adapters_from_base =
        (lora->use_dora || !lora->trainable_token_indices.empty() ||
         !lora->trainable_tokens_named.empty()) &&
        lora->from.empty();
  }
  parts.model_name = cfg.Get<std::string>("model._target_").value_or("");
  KILN_ASSIGN_OR_RETURN(config::Config data_cfg, cfg.Sub("data"));
  KILN_ASSIGN_OR_RETURN(parts.data, Registry<data::DataModule>::Get().Instantiate(data_cfg));
  KILN_RETURN_IF_ERROR(parts.task->Connect(*parts.data));
  return parts;
}

}  // namespace kiln
