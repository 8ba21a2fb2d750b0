// A model folder in the Hugging Face layout (what `save_pretrained` writes): config.json, and the
// weights in model.safetensors or in shards listed by model.safetensors.index.json. The families
// that read one (gpt2, ...) take their architecture from HfConfig and their weights from
// ReadHfWeights, renamed into kiln's names by the family.
#pragma once

#include <torch/torch.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "lib/base/error_text.h"
#include "lib/config/node.h"
#include "lib/registry/options.h"
#include "lib/trainer/pretrained_weights.h"
#include "nlohmann/json_fwd.hpp"

namespace kiln {

// config.json, read with its folder's name for messages.
class HfConfig {
 public:
  static absl::StatusOr<HfConfig> Read(const std::string& dir);

  // model_type ("gpt2", "llama", ...).
  const std::string& model_type() const { return model_type_; }
  // A number the file must have (an integer for Int), or one line naming the file and the key.
  absl::StatusOr<int64_t> Int(const std::string& key) const;
  absl::StatusOr<double> Float(const std::string& key) const;
  // The value when the key is there and not null.
  absl::StatusOr<std::optional<int64_t>> OptionalInt(const std::string& key) const;
  absl::StatusOr<std::optional<double>> OptionalFloat(const std::string& key) const;
  bool Bool(const std::string& key, bool fallback) const;
  std::string String(const std::string& key, const std::string& fallback) const;
  // "DIR/config.json: KEY is VALUE; WHAT": for a value the family cannot take.
  absl::Status Refuse(const std::string& key, const std::string& what) const;
  // Refuse("model_type", WHAT) for a family that does not read this model_type, saying which
  // kiln model does (KilnModelFor), or listing the model_types kiln reads.
  absl::Status RefuseModelType(const std::string& what) const;
  // The object under `key` (rope_parameters), whose messages name "KEY.INNER"; none when the key
  // is missing or null; an error when it is something else.
  absl::StatusOr<std::optional<HfConfig>> Object(const std::string& key) const;
  // The strings of a list (layer_types); empty when the key is missing.
  absl::StatusOr<std::vector<std::string>> Strings(const std::string& key) const;
  // The keys and string values of an object (id2label), in the file's order; empty when the key
  // is missing or null.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> StringPairs(
      const std::string& key) const;
  // A classifier's labels by id: id2label (its keys must be the ids 0 .. n - 1, once each), or
  // LABEL_0 .. from num_labels (`fallback` when neither is there), at least one.
  absl::StatusOr<std::vector<std::string>> Labels(int64_t fallback) const;

 private:
  std::string Where(const std::string& key) const { return path_ + ": " + prefix_ + key; }

  std::string path_, model_type_, prefix_;
  config::NodePtr root_;
};

// The kiln model (its registered name) that reads a config.json of `model_type`: llama for llama,
// mistral, qwen2 and qwen3; gpt2; bert for bert, roberta and xlm-roberta; hf_vit for vit; "" for a
// model_type kiln has no model for.
std::string KilnModelFor(const std::string& model_type);
// The model_types kiln reads, sorted.
std::vector<std::string> KilnModelTypes();

// Every tensor of the folder's weights: model.safetensors, or the shards its index names.
absl::StatusOr<std::map<std::string, torch::Tensor>> ReadHfWeights(const std::string& dir);

// Copies `state` (the folder's tensors under the model's names) into `model`, strictly, and logs
// "model.pretrained DIR: SUMMARY; N loaded, N missing, N unused" (with the table when the file
// has tensors the model does not use). A missing tensor or another shape is refused in one line.
absl::Status LoadHfState(const std::map<std::string, torch::Tensor>& state,
                         torch::nn::Module& model, const std::string& dir,
                         const std::string& summary);

// Builds the model that DIR/config.json describes (`build` constructs it; `summary` as
// LoadHfState's): an allocation that fails meanwhile, as the sizes of a corrupt or mistyped
// config.json make it, is refused in one line that names the file and those sizes, before any
// weights are read, rather than reaching the job's out-of-memory advice about batches.
template <class Build>
auto BuildFromFolder(const std::string& dir, const std::string& summary, Build build)
    -> absl::StatusOr<decltype(build())> {
  try {
    return build();
  } catch (const std::exception& e) {
    if (!IsOutOfMemory(e)) throw;
    return absl::ResourceExhaustedError(absl::StrCat(
        dir, "/config.json describes ", summary,
        ", which does not fit in this machine's memory (building it, an allocation failed)"));
  }
}

// A size option of a family that reads folders, beside model.pretrained: what the option says
// (none: unset) and what DIR/config.json says under `hf_key`.
struct SizeBesideFolder {
  const char* option;
  std::optional<int64_t> value;
  int64_t in_file;
  const char* hf_key;
};
// Refuses, in one line naming the option, the first size set to another value than the folder's.
absl::Status CheckSizesBesideFolder(const std::vector<SizeBesideFolder>& sizes,
                                    const std::string& dir, const OptionContext& context);

// The module's tensors whose names start with one of `prefixes` (the family's own, not kiln's
// buffers such as the tokenizer's fingerprint), in float32 on the CPU: an HfFolder's tensors.
std::vector<std::pair<std::string, torch::Tensor>> HfTensors(
    torch::nn::Module& module, const std::vector<std::string>& prefixes);

// A classifier's config.json entries for `labels` (by id): id2label, label2id and problem_type
// single_label_classification.
void SetHfLabels(const std::vector<std::string>& labels, nlohmann::ordered_json& config);

}  // namespace kiln
