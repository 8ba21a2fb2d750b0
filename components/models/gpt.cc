// A GPT-style decoder language model (Radford et al. 2019; nanoGPT's layout and parameter names):
// token and learned position embeddings, pre-LayerNorm blocks with causal self-attention, a final
// LayerNorm, and an output layer tied to the token embedding. Input [B, T] ids -> [B, T, vocab].
// `gpt2` is the same model built from a Hugging Face GPT-2 folder (config.json and its weights).
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "components/models/hf_checkpoint.h"
#include "components/models/model.h"
#include "components/models/text_transformer.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"
#include "lib/weights/hf_export.h"
#include "lib/weights/safetensors.h"

namespace kiln {
namespace {

class Gpt : public CausalLm {
 public:
  Gpt(const TextTransformerOptions& o, bool tie_weights) : tie_weights_(tie_weights), options_(o) {
    transformer = register_module("transformer", TextTransformer(o));
    if (!tie_weights) {
      lm_head = register_module(
          "lm_head", torch::nn::Linear(torch::nn::LinearOptions(o.dim, o.vocab_size).bias(false)));
    } else {
      // A LoRA update merged into the tied table leaves the head the base's (MergeLora).
      transformer->wte->untie_head = [this](const torch::Tensor& base) {
        lm_head = register_module(
            "lm_head",
            torch::nn::Linear(
                torch::nn::LinearOptions(options_.dim, options_.vocab_size).bias(false)));
        lm_head->weight.set_data(base);
        lm_head->weight.set_requires_grad(false);
        tie_weights_ = false;
      };
    }
    InitTransformerWeights(*this, o.depth);
  }

  torch::Tensor forward(torch::Tensor input) override {
    return Head(transformer->forward(input, AttentionMask{/*causal=*/true, {}}));
  }
  torch::Tensor forward_cached(const torch::Tensor& ids, const torch::Tensor& positions,
                               KvCache& cache) override {
    return Head(transformer->forward_cached(ids, positions, cache));
  }
  torch::Tensor forward_packed(const torch::Tensor& ids, const torch::Tensor& segments) override {
    PackedRows rows = Unpack(segments);
    // The causal part is in `allowed`: an additive mask of its own, [B, 1, T, T].
    AttentionMask mask{
        /*causal=*/false,
        torch::zeros(rows.allowed.sizes(), transformer->wte->weight.options())
            .masked_fill(rows.allowed.logical_not(), -std::numeric_limits<float>::infinity())};
    return Head(transformer->forward(ids, mask, rows.positions));
  }
  bool learned_positions() const override { return true; }
  TokenIds token_ids() const override { return {options_.vocab_size, "vocab_size"}; }
  int64_t max_positions() const override { return options_.positions; }
  const TextTransformerOptions& options() const { return options_; }
  bool tie_weights() const { return tie_weights_; }

  TextTransformer transformer{nullptr};
  torch::nn::Linear lm_head{nullptr};

 private:
  // Tied: the logits reuse the embedding matrix (one parameter, not two names for one tensor).
  torch::Tensor Head(const torch::Tensor& x) {
    return tie_weights_ ? torch::linear(x, transformer->wte->table()) : lm_head->forward(x);
  }
  bool tie_weights_;
  TextTransformerOptions options_;
};

struct GptOptions : TextTransformerOptions {
  GptOptions() : TextTransformerOptions{0, 256, 256, 4, 4, 1024, 0.0} {}
  bool tie_weights = true;
  bool activation_checkpointing = false;
};

constexpr char kCheckpointingDoc[] =
    "recompute each block's activations in the backward: less memory, one more forward";

KILN_REGISTER_BOUND(
    Model, "gpt",
    "GPT decoder LM: learned positions, pre-LayerNorm causal self-attention, tied output layer; "
    "trainer.strategy=fsdp shards it block by block",
    AddTextTransformerOptions(OptionBinding<GptOptions>().Field(
                                  "block_size",
                                  static_cast<int64_t GptOptions::*>(&GptOptions::positions),
                                  "longest context (learned positions)", AtLeast(1)))
        .Field("tie_weights", &GptOptions::tie_weights,
               "the output layer reuses the token embedding")
        .Field("activation_checkpointing", &GptOptions::activation_checkpointing,
               kCheckpointingDoc),
    [](const GptOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Model>> {
      KILN_RETURN_IF_ERROR(CheckTextTransformerOptions(o, context));
      auto model = std::make_shared<Gpt>(o, o.tie_weights);
      model->transformer->activation_checkpointing = o.activation_checkpointing;
      return std::shared_ptr<Model>(model);
    });

// GPT-2's config.json as kiln's options; refuses, in one line, what kiln's blocks do not compute
// (another activation, cross-attention, per-layer attention scaling, another LayerNorm epsilon).
absl::StatusOr<std::pair<TextTransformerOptions, bool>> Gpt2Architecture(const HfConfig& c) {
  if (c.model_type() != "gpt2")
    return c.RefuseModelType("model=gpt2 reads GPT-2 checkpoints (model_type gpt2)");
  TextTransformerOptions o;
  KILN_ASSIGN_OR_RETURN(o.vocab_size, c.Int("vocab_size"));
  KILN_ASSIGN_OR_RETURN(o.positions, c.Int("n_positions"));
  KILN_ASSIGN_OR_RETURN(o.dim, c.Int("n_embd"));
  KILN_ASSIGN_OR_RETURN(o.depth, c.Int("n_layer"));
  KILN_ASSIGN_OR_RETURN(o.heads, c.Int("n_head"));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> inner, c.OptionalInt("n_inner"));
  o.mlp_dim = inner.value_or(4 * o.dim);
  KILN_ASSIGN_OR_RETURN(std::optional<double> dropout, c.OptionalFloat("resid_pdrop"));
  o.dropout = dropout.value_or(0.1);
  if (o.vocab_size < 1 || o.positions < 1 || o.dim < 1 || o.depth < 1 || o.heads < 1 ||
      o.dim % o.heads != 0 || o.mlp_dim < 1) {
    return c.Refuse(
        "n_embd",
        absl::StrCat("sizes must be positive and n_embd a multiple of n_head (", o.heads, ")"));
  }
  if (std::string act = c.String("activation_function", "gelu_new");
      act != "gelu_new" && act != "gelu_pytorch_tanh") {
    return c.Refuse("activation_function", "kiln's GPT-2 blocks compute gelu_new (tanh GELU)");
  }
  KILN_ASSIGN_OR_RETURN(std::optional<double> eps, c.OptionalFloat("layer_norm_epsilon"));
  if (eps && std::abs(*eps - 1e-5) > 1e-12)
    return c.Refuse("layer_norm_epsilon", "kiln's GPT-2 blocks use LayerNorm's 1e-05");
  for (const char* unsupported :
       {"add_cross_attention", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    if (c.Bool(unsupported, false)) return c.Refuse(unsupported, "kiln's GPT-2 does not do this");
  }
  if (!c.Bool("scale_attn_weights", true))
    return c.Refuse("scale_attn_weights", "kiln's GPT-2 scales attention by 1/sqrt(head size)");
  return std::make_pair(o, c.Bool("tie_word_embeddings", true));
}

// GPT-2 keeps these weights as Conv1D ([in, out]); kiln's as Linear ([out, in]).
bool IsGpt2Conv1dWeight(const std::string& name, const torch::Tensor& tensor) {
  return tensor.dim() == 2 &&
         (absl::EndsWith(name, "attn.c_attn.weight") ||
          absl::EndsWith(name, "attn.c_proj.weight") || absl::EndsWith(name, "mlp.c_fc.weight") ||
          absl::EndsWith(name, "mlp.c_proj.weight"));
}

// A GPT-2 checkpoint's tensors under kiln's names: the `transformer.` prefix added where the
// file has none (GPT2Model rather than GPT2LMHeadModel), Conv1D weights ([in, out]) transposed
// into Linear's [out, in], the tied head dropped (the embedding is the head), and the causal-mask
// buffers of older files (attn.bias, attn.masked_bias) left out.
std::map<std::string, torch::Tensor> Gpt2State(std::map<std::string, torch::Tensor> file,
                                               bool tied) {
  std::map<std::string, torch::Tensor> state;
  for (auto& [name, tensor] : file) {
    if (absl::EndsWith(name, ".attn.bias") || absl::EndsWith(name, ".attn.masked_bias")) continue;
    if (name == "lm_head.weight" && tied) continue;
    std::string kiln_name =
        absl::StartsWith(name, "transformer.") || absl::StartsWith(name, "lm_head.")
            ? name
            : "transformer." + name;
    state[kiln_name] = IsGpt2Conv1dWeight(name, tensor) ? tensor.t().contiguous() : tensor;
  }
  return state;
}

struct Gpt2Options {
  std::string pretrained;
  bool activation_checkpointing = false;
};

KILN_REGISTER_BOUND(
    Model, "gpt2",
    "GPT-2 from a Hugging Face folder (config.json, model.safetensors): kiln's gpt with its sizes "
    "and weights; trainer.strategy=fsdp shards it block by block",
    OptionBinding<Gpt2Options>()
        .Required(
            "pretrained", &Gpt2Options::pretrained,
            "folder save_pretrained wrote: config.json and model.safetensors (or a sharded index)",
            NonEmpty())
        .Field("activation_checkpointing", &Gpt2Options::activation_checkpointing,
               kCheckpointingDoc),
    [](const Gpt2Options& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Model>> {
      KILN_ASSIGN_OR_RETURN(HfConfig hf, HfConfig::Read(o.pretrained));
      KILN_ASSIGN_OR_RETURN(auto options, Gpt2Architecture(hf));
      const std::string summary =
          absl::StrCat("gpt2, ", options.first.depth, " layers, dim ", options.first.dim,
                       ", vocab ", options.first.vocab_size);
      KILN_ASSIGN_OR_RETURN(auto model, BuildFromFolder(o.pretrained, summary, [&options] {
                              return std::make_shared<Gpt>(options.first, options.second);
                            }));
      model->transformer->activation_checkpointing = o.activation_checkpointing;
      KILN_ASSIGN_OR_RETURN(auto file, ReadHfWeights(o.pretrained));
      KILN_RETURN_IF_ERROR(
          LoadHfState(Gpt2State(std::move(file), options.second), *model, o.pretrained, summary));
      return std::shared_ptr<Model>(model);
    });

// kiln's gpt (or gpt2) as a Hugging Face GPT-2 folder: GPT2LMHeadModel's config and names, the
// Linear weights transposed back into Conv1D's [in, out]. kiln's one dropout is each of GPT-2's.
absl::StatusOr<HfFolder> Gpt2Folder(torch::nn::Module& module) {
  auto* gpt = dynamic_cast<Gpt*>(&module);
  if (gpt == nullptr) return absl::InternalError("format=hf: the module is not kiln's gpt");
  const TextTransformerOptions& o = gpt->options();
  HfFolder folder;
  folder.config_json = absl::StrFormat(
      "{\n"
      "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
      "  \"model_type\": \"gpt2\",\n"
      "  \"vocab_size\": %d,\n"
      "  \"n_positions\": %d,\n"
      "  \"n_embd\": %d,\n"
      "  \"n_layer\": %d,\n"
      "  \"n_head\": %d,\n"
      "  \"n_inner\": %d,\n"
      "  \"activation_function\": \"gelu_new\",\n"
      "  \"resid_pdrop\": %.17g,\n"
      "  \"embd_pdrop\": %.17g,\n"
      "  \"attn_pdrop\": %.17g,\n"
      "  \"layer_norm_epsilon\": 1e-05,\n"
      "  \"initializer_range\": 0.02,\n"
      "  \"scale_attn_weights\": true,\n"
      "  \"tie_word_embeddings\": %s,\n"
      "  \"bos_token_id\": null,\n"
      "  \"eos_token_id\": null,\n"
      "  \"dtype\": \"float32\"\n"
      "}\n",
      o.vocab_size, o.positions, o.dim, o.depth, o.heads, o.mlp_dim, o.dropout, o.dropout,
      o.dropout, gpt->tie_weights() ? "true" : "false");
  for (auto& [name, tensor] : StateDict(module)) {
    // kiln's own buffers on the model (the tokenizer's fingerprint) are not GPT-2's.
    if (!absl::StartsWith(name, "transformer.") && !absl::StartsWith(name, "lm_head.")) continue;
    torch::Tensor t = tensor.detach().to(torch::kCPU, torch::kFloat32);
    folder.tensors.emplace_back(name, IsGpt2Conv1dWeight(name, t) ? t.t().contiguous() : t);
  }
  return folder;
}

const bool kGpt2Exporters = [] {
  RegisterHfExporter("gpt", Gpt2Folder);
  RegisterHfExporter("gpt2", Gpt2Folder);
  return true;
}();

}  // namespace
}  // namespace kiln
