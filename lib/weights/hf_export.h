// `kiln export format=hf`: a model as a Hugging Face folder (config.json, model.safetensors under
// the family's names) that transformers' from_pretrained loads. A model family that can be
// written so registers its exporter under its `_target_` name (components/models/gpt.cc: gpt and
// gpt2 as GPT-2); the export command finds it by the job's model name.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln {

struct HfFolder {
  std::string config_json;                                     // config.json's text
  std::vector<std::pair<std::string, torch::Tensor>> tensors;  // model.safetensors, HF's names
  std::string generation_config_json;                          // empty: none written
};

// `model` is the task's module, the registered model of that name.
using HfExporter = std::function<absl::StatusOr<HfFolder>(torch::nn::Module& model)>;

// At static initialization, once per name.
void RegisterHfExporter(const std::string& model_target, HfExporter exporter);
// Null when the model has none.
const HfExporter* FindHfExporter(const std::string& model_target);
// The names that have one, sorted (for the refusal's message).
std::vector<std::string> HfExportableModels();

// Writes `folder` into `dir`: config.json, model.safetensors ("format": "pt", as
// save_pretrained), generation_config.json when there is one; each file atomically.
absl::Status WriteHfFolder(const HfFolder& folder, const std::string& dir);

}  // namespace kiln
