// Low-rank adaptation (LoRA; Hu et al. 2021) as PEFT does it: beside a frozen weight W of each
// targeted layer, two trained matrices A [r, in] and B [out, r], the layer's output
// W x + (alpha / r) B A dropout(x). A starts as nn.Linear's own initialization (Kaiming uniform)
// and B as zeros, so training starts from the base model. Every other parameter is frozen, so
// only the adapters reach the optimizer.
//
// `model.lora: {r, alpha, dropout, target_modules}` adds adapters to the layers target_modules
// names as PEFT's list does: a layer matches a name that is its full name or ends it after a dot
// (q_proj, v_proj, c_attn, model.layers.0.self_attn.q_proj; a token embedding too, embed_tokens,
// wte), and `all-linear` (PEFT's shorthand) every Linear layer but the output head (lm_head), and
// another string is a regular
// expression a layer's full name matches whole (LoraSelection); `model.lora.from=DIR` reads an
// adapter PEFT saved (adapter_config.json, adapter_model.safetensors) instead. The adapter
// is written back in PEFT's format (WritePeftAdapter) or merged into W (MergeLora) for a plain
// export.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/config.h"

namespace kiln {

// PEFT's target_modules="all-linear": every Linear layer but the output head (lm_head).
inline constexpr char kAllLinear[] = "all-linear";

struct LoraOptions {
  int64_t r = 8;
  double alpha = 16;
  double dropout = 0.0;
  // Layer names (last names, or full names, as PEFT's list), or {kAllLinear}.
  std::vector<std::string> target_modules;
  // Layers left without an adapter although target_modules names them, named alike (PEFT's
  // exclude_modules as a list): all-linear but the MLP's down_proj, say.
  std::vector<std::string> exclude_modules;
  // PEFT's target_modules and exclude_modules given as a string (not all-linear): a regular
  // expression that a layer's full name matches whole (Python's re.fullmatch), used instead of
  // (target) or beside (exclude) the lists above. Empty: none. See LoraSelection.
  std::string target_regex, exclude_regex;
  // PEFT's layers_to_transform and layers_pattern: only the targeted layers inside these numbered
  // blocks get adapters (a layer that target_modules names by its full name always does). A
  // layer's index is the number after the first of `layers_pattern` found in its name (layers,
  // h, layer, blocks), or with none, the first number that follows the name's second segment or
  // a later one, as PEFT finds it. Empty: every block.
  std::vector<int64_t> layers_to_transform;
  std::vector<std::string> layers_pattern;
  // Modules that train whole beside the adapters and are saved with them: each module whose full
  // name ends with one of these, the outermost (PEFT's modules_to_save, a plain suffix: `norm`
  // is every norm, `model.norm` the final one). A sequence classifier's head (`classifier`,
  // `score`) always is, as PEFT's SEQ_CLS task adds it: a head fitted to new labels must train.
  std::vector<std::string> modules_to_save;
  // rsLoRA (Kalajdzievski 2023, PEFT's use_rslora): the adapter's output scaled by alpha / sqrt(r)
  // instead of alpha / r, so that its updates keep their size as r grows.
  bool use_rslora = false;
  // DoRA (Liu et al. 2024, PEFT's use_dora): the adapted weight W + s B A split into a direction,
  // each output row divided by its norm, and a trained magnitude m per output
  // (lora_magnitude_vector, which starts as the base's row norms): m / |W + s B A| (W x + s B A x)
  // + b. The norm is held constant in the backward, as the paper's section 4.3 and PEFT do.
  bool use_dora = false;
  // PEFT's rank_pattern and alpha_pattern: {KEY: r} and {KEY: alpha}, each KEY a regular
  // expression that a layer's full name matches after a dot or whole (PEFT's get_pattern_key:
  // `(.*\.)?(KEY)`, so q_proj as target_modules names it, and `^NAME` a full name only); the first
  // key that matches, in the mapping's order, gives the layer its r or alpha; the other layers take
  // r and alpha. Null, or an empty mapping: none.
  config::NodePtr rank_pattern, alpha_pattern;
  // PEFT's bias: "none"; "all", every parameter named bias (`.bias`: the Linear layers', the
  // norms') trains beside the adapters; "lora_only", the adapted layers' biases do. Trained
  // biases are checkpointed and saved with the adapters, as PEFT saves them.
  std::string bias = "none";
  // PEFT's lora_bias: lora_B carries a bias too (starting at zero, scaled with B A), which merging
  // adds to the layer's own bias. Each adapted layer needs a bias of its own to merge it into.
  bool lora_bias = false;
  // PEFT's trainable_token_indices: these rows of the model's token table train (each a parameter
  // row of trainable_tokens_delta that starts as the base's row and replaces it), the rest of the
  // table stays frozen; a head tied to the table reads the trained rows too (PEFT ties them).
  // For tokens a fine-tune gives a meaning to, say a chat template's in the vocabulary's reserved
  // rows. In model.lora and adapter_config.json a list of token ids (the token table's), or
  // {MODULE: ids}, kept in trainable_tokens_named: the layers whose full names end with MODULE
  // (PEFT's suffix), each a token table (embed_tokens, wte, word_embeddings) or an untied output
  // head (lm_head, whose rows are the tokens' logits). Empty: none.
  std::vector<int64_t> trainable_token_indices;
  std::vector<std::pair<std::string, std::vector<int64_t>>> trainable_tokens_named;
  std::string from;  // a PEFT adapter folder: r, alpha, dropout and targets come from it
  // The frozen Linear weights' dtype: float32, or bfloat16 (half their memory; the adapters, the
  // embeddings and the norms stay float32, as PEFT trains adapters on a bf16 base).
  std::string base_dtype = "float32";
};

// A layer that can carry an adapter: kiln's Linear layers (components/models/autocast_linear.h) and
// token embeddings (components/models/lora_embedding.h).
class LoraLayer {
 public:
  virtual ~LoraLayer() = default;
  // Registers lora_A and lora_B (PEFT's names) as submodules, from `o`'s r, alpha, dropout,
  // use_rslora and use_dora (then also the parameter lora_magnitude_vector, the base's row norms);
  // the adapter's output is scaled by LoraScaling(r, alpha, rslora).
  virtual void AddLora(const LoraOptions& o) = 0;
  virtual bool has_lora() const = 0;
  // W + scaling B A (DoRA: its rows scaled to the magnitudes): the weight the adapted layer
  // computes with.
  virtual torch::Tensor MergedWeight() const = 0;
  // Adds the adapter's product to W and drops the adapter.
  virtual void MergeLora() = 0;
  virtual int64_t lora_r() const = 0;
  virtual double lora_alpha() const = 0;
  virtual double lora_dropout() const = 0;
  virtual bool lora_rslora() const = 0;
  virtual bool lora_dora() const = 0;
  // Whether lora_B carries a bias (PEFT's lora_bias).
  virtual bool lora_has_bias() const = 0;
  // DoRA: sets the magnitudes to the current |W + s B A| row norms (what AddLora starts them at),
  // for a base whose weights were loaded after the adapters were added.
  virtual void ResetDoraMagnitude() = 0;

  // PEFT's trainable tokens (LoraOptions::trainable_token_indices), which a model's token table
  // (components/models/lora_embedding.h) and its untied output head (autocast_linear.h) can carry:
  // whether this layer is the token table, whether it can carry them, its trained rows' ids, adding
  // them (parameter trainable_tokens_delta, the base's rows; the caller checks the ids) and setting
  // them to the base's rows again (for a base loaded after AddLora).
  virtual bool is_token_table() const { return false; }
  virtual bool can_train_tokens() const { return is_token_table(); }
  virtual const std::vector<int64_t>& trainable_tokens() const {
    static const std::vector<int64_t> none;
    return none;
  }
  virtual void AddTrainableTokens(const std::vector<int64_t>& ids) {}
  virtual void ResetTrainableTokens() {}
};

// The trained rows of a layer that carries trainable tokens (LoraLayer), for the layers to share:
// their ids, and the parameter trainable_tokens_delta they register on the layer.
class TrainableTokenRows {
 public:
  // Registers `delta` on `layer` as trainable_tokens_delta: the rows `ids` of `weight`, in float32.
  void Add(torch::nn::Module& layer, const torch::Tensor& weight, const std::vector<int64_t>& ids);
  // Sets the rows to `weight`'s again.
  void Reset(const torch::Tensor& weight);
  // `weight` with the rows in place (differentiable in them).
  torch::Tensor Replaced(const torch::Tensor& weight) const;
  // Writes the rows into `weight` and lets go of them (the layer drops its parameter).
  void Merge(torch::Tensor& weight);
  bool defined() const { return delta.defined(); }
  const std::vector<int64_t>& ids() const { return ids_; }
  // The ids as a tensor on `device` (no copy once MoveTo has moved them there).
  torch::Tensor index(const torch::Device& device) const { return index_.to(device); }
  // Keeps the ids on `device`: a layer's to() calls it, as the ids are no parameter or buffer
  // (PEFT's files and kiln's checkpoints do not hold them) for Module::to to move.
  void MoveTo(const torch::Device& device) {
    if (index_.defined()) index_ = index_.to(device);
  }

  torch::Tensor delta;  // PEFT's trainable_tokens_delta

 private:
  std::vector<int64_t> ids_;
  torch::Tensor index_;
};

// The settings an adapted layer keeps from AddLora's options (LoraLayer's r, alpha, dropout and
// rsLoRA), and its scaling; for the layers to share.
class LoraLayerSettings : public LoraLayer {
 public:
  int64_t lora_r() const override { return lora_r_; }
  double lora_alpha() const override { return lora_alpha_; }
  double lora_dropout() const override { return lora_dropout_; }
  bool lora_rslora() const override { return lora_rslora_; }

 protected:
  void KeepLoraSettings(const LoraOptions& o);

  int64_t lora_r_ = 0;
  double lora_alpha_ = 0, lora_dropout_ = 0, lora_scaling_ = 0;
  bool lora_rslora_ = false;
};

// The layers LoraOptions selects, by full name, as PEFT's check_target_module_exists: those
// target_modules names (a list of names, all-linear, or target_regex), but not those
// exclude_modules or exclude_regex names, within layers_to_transform's blocks (not for a layer
// named by its full name, nor with target_regex, as PEFT).
// The regular expressions are PEFT's, written for Python's re; kiln matches them with std::regex's
// ECMAScript grammar, which shares Python's for what layer names need (., *, +, ?, {m,n}, |,
// groups, (?:...), classes, \d, \w, \., ^, $, lookahead), without backtracking (libstdc++'s
// polynomial executor). What Python reads otherwise ((?P<name>...), inline flags, lookbehind, \A,
// \Z, back-references) is refused in one line rather than matched as something else.
class LoraSelection {
 public:
  // Refused in one line that starts with `where` (model.lora., or the adapter_config.json's path):
  // a regular expression kiln cannot read as PEFT does, layers_to_transform or layers_pattern
  // beside target_regex.
  static absl::StatusOr<LoraSelection> Make(const LoraOptions& o, const std::string& where);
  // Whether the layer named `name` (full name) gets an adapter; for all-linear, every name but
  // lm_head (the caller keeps the layers that can carry one).
  bool Selects(const std::string& name) const;

 private:
  LoraOptions o_;
  std::function<bool(const std::string&)> target_regex_, exclude_regex_;
};

// The factor on an adapter's B A: alpha / r, or alpha / sqrt(r) for rsLoRA (PEFT's LoraLayer).
double LoraScaling(int64_t r, double alpha, bool rslora);

// model.lora read from a job config (none when the key is absent or null); with `from`, the
// settings are the adapter folder's (adapter_config.json), as AddLora reads them.
absl::StatusOr<std::optional<LoraOptions>> ReadLoraOptions(const config::Config& job);

// Adds adapters to `model`'s targeted layers and freezes the rest; returns the adapted layers'
// names. Refused in one line: a target that names no layer, or a layer that cannot carry one.
// With `from`, the adapter's config and tensors come from that folder.
absl::StatusOr<std::vector<std::string>> AddLora(torch::nn::Module& model, LoraOptions options);

// The full names of the modules of `model` that train whole beside the adapters:
// `modules_to_save` and a classifier's head (PEFT's `classifier` and `score`), each a suffix of
// the module's full name (the outermost such module).
std::vector<std::string> ModulesToSave(torch::nn::Module& model,
                                       const std::vector<std::string>& modules_to_save);

// Whether any layer of `model` carries an adapter; a DoRA one.
bool HasLora(torch::nn::Module& model);
bool HasDora(torch::nn::Module& model);

// The adapters that start from the base's weights set again from the weights `model` now holds, for
// new adapters on a base loaded after AddLora (model.init_from): DoRA's magnitudes (LoraLayer's
// ResetDoraMagnitude) and trainable tokens' rows (ResetTrainableTokens).
void StartAdaptersFromBase(torch::nn::Module& model);

// How an adapter folder describes its model (adapter_config.json).
struct PeftAdapterInfo {
  std::string base_model;                    // base_model_name_or_path
  std::string task_type = "CAUSAL_LM";       // PEFT's: CAUSAL_LM, SEQ_CLS
  bool fan_in_fan_out = false;               // GPT-2's Conv1D layers
  std::vector<std::string> modules_to_save;  // as LoraOptions
  std::string bias = "none";                 // as LoraOptions: which biases trained
};

// Writes the adapters in PEFT's format into `dir`: adapter_config.json and
// adapter_model.safetensors (base_model.model.NAME.lora_A.weight, ...; a saved module's own
// tensors as base_model.model.NAME.weight, trainable tokens as
// base_model.model.NAME.token_adapter.trainable_tokens_delta, as PEFT writes them).
absl::Status WritePeftAdapter(torch::nn::Module& model, const PeftAdapterInfo& info,
                              const std::string& dir);

// Adds each adapter's product to its weight (trainable tokens: their rows replace the table's) and
// removes the adapters: a plain model again. A tied
// output head whose embedding carried an adapter gets the base table as a weight of its own
// (components/models/lora_embedding.h), so the logits stay what they were.
void MergeLora(torch::nn::Module& model);

}  // namespace kiln
