// BERT-family encoders with the sequence-classification head (Devlin et al. 2019; Liu et al. 2019;
// Conneau et al. 2020), in Hugging Face's layout and parameter names: BertForSequenceClassification
// (bert.embeddings, bert.encoder.layer.N.{attention.self.{query,key,value},attention.output,
// intermediate,output}, bert.pooler.dense, classifier) and RobertaForSequenceClassification /
// XLMRobertaForSequenceClassification (roberta.*, classifier.{dense,out_proj}). Post-LayerNorm
// layers; padding (the pad id) is masked out of attention; RoBERTa's positions count the non-pad
// tokens from pad_token_id + 1, as fairseq's. Input [B, T] ids -> [B, num_labels] logits.
//
// `model.pretrained=DIR` builds it from a folder that save_pretrained wrote: the sizes, labels and
// pad id from its config.json, the weights from its safetensors. Without it the sizes are options
// and the weights are drawn as transformers draws them.
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "components/models/autocast_linear.h"
#include "components/models/hf_checkpoint.h"
#include "components/models/lora_embedding.h"
#include "components/models/model.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"
#include "lib/weights/hf_export.h"
#include "lib/weights/safetensors.h"
#include "nlohmann/json.hpp"

namespace kiln {
namespace {

// Everything that shapes a BERT-family classifier, as config.json says it.
struct BertArchitecture {
  std::string model_type = "bert";  // bert, roberta, xlm-roberta: what export writes back
  int64_t vocab_size = 0, dim = 256, depth = 4, heads = 4, mlp_dim = 1024, max_positions = 512,
          type_vocab_size = 2, pad_token_id = 0;
  double layer_norm_eps = 1e-12, dropout = 0.1, attention_dropout = 0.1, initializer_range = 0.02;
  std::optional<double> classifier_dropout;
  std::string hidden_act = "gelu";  // gelu (erf), gelu_new / gelu_pytorch_tanh (tanh), relu
  std::vector<std::string> labels = {"LABEL_0", "LABEL_1"};  // id2label, by id
  std::optional<int64_t> bos_token_id, eos_token_id;
  bool roberta() const { return model_type != "bert"; }
};

torch::Tensor BertActivation(const torch::Tensor& x, const std::string& act) {
  if (act == "gelu") return torch::gelu(x);
  if (act == "relu") return torch::relu(x);
  return torch::gelu(x, "tanh");
}

// One Linear, then dropout, the residual and LayerNorm: attention.output and output.
class BertResidualOutputImpl : public torch::nn::Module {
 public:
  BertResidualOutputImpl(int64_t in, const BertArchitecture& a) : dropout_(a.dropout) {
    dense = register_module("dense", AutocastLinear(in, a.dim));
    LayerNorm = register_module(
        "LayerNorm",
        torch::nn::LayerNorm(torch::nn::LayerNormOptions({a.dim}).eps(a.layer_norm_eps)));
  }
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& residual) {
    return LayerNorm->forward(torch::dropout(dense->forward(h), dropout_, is_training()) +
                              residual);
  }
  AutocastLinear dense{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};  // NOLINT: Hugging Face's name

 private:
  double dropout_;
};
TORCH_MODULE(BertResidualOutput);

class BertSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit BertSelfAttentionImpl(const BertArchitecture& a)
      : heads_(a.heads), dropout_(a.attention_dropout) {
    query = register_module("query", AutocastLinear(a.dim, a.dim));
    key = register_module("key", AutocastLinear(a.dim, a.dim));
    value = register_module("value", AutocastLinear(a.dim, a.dim));
  }
  // x [B, T, D]; keep [B, 1, 1, T], true where a key is a token (not padding).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& keep) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    auto heads = [&](const torch::Tensor& y) {
      return y.view({b, t, heads_, d / heads_}).transpose(1, 2);
    };
    torch::Tensor y = at::scaled_dot_product_attention(
        heads(query->forward(x)), heads(key->forward(x)), heads(value->forward(x)), keep,
        is_training() ? dropout_ : 0.0);
    return y.transpose(1, 2).reshape({b, t, d});
  }
  AutocastLinear query{nullptr}, key{nullptr}, value{nullptr};

 private:
  int64_t heads_;
  double dropout_;
};
TORCH_MODULE(BertSelfAttention);

class BertAttentionImpl : public torch::nn::Module {
 public:
  explicit BertAttentionImpl(const BertArchitecture& a) {
    self = register_module("self", BertSelfAttention(a));
    output = register_module("output", BertResidualOutput(a.dim, a));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& keep) {
    return output->forward(self->forward(x, keep), x);
  }
  BertSelfAttention self{nullptr};
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(BertAttention);

class BertIntermediateImpl : public torch::nn::Module {
 public:
  explicit BertIntermediateImpl(const BertArchitecture& a) : act_(a.hidden_act) {
    dense = register_module("dense", AutocastLinear(a.dim, a.mlp_dim));
  }
  torch::Tensor forward(const torch::Tensor& x) { return BertActivation(dense->forward(x), act_); }
  AutocastLinear dense{nullptr};

 private:
  std::string act_;
};
TORCH_MODULE(BertIntermediate);

class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const BertArchitecture& a) {
    attention = register_module("attention", BertAttention(a));
    intermediate = register_module("intermediate", BertIntermediate(a));
    output = register_module("output", BertResidualOutput(a.mlp_dim, a));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& keep) {
    torch::Tensor h = attention->forward(x, keep);
    return output->forward(intermediate->forward(h), h);
  }
  BertAttention attention{nullptr};
  BertIntermediate intermediate{nullptr};
  BertResidualOutput output{nullptr};
};
TORCH_MODULE(BertLayer);

class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertArchitecture& a) : dropout_(a.dropout) {
    word_embeddings = register_module("word_embeddings", LoraEmbedding(a.vocab_size, a.dim));
    word_embeddings->token_table = true;
    position_embeddings =
        register_module("position_embeddings", LoraEmbedding(a.max_positions, a.dim));
    token_type_embeddings =
        register_module("token_type_embeddings", torch::nn::Embedding(a.type_vocab_size, a.dim));
    LayerNorm = register_module(
        "LayerNorm",
        torch::nn::LayerNorm(torch::nn::LayerNormOptions({a.dim}).eps(a.layer_norm_eps)));
  }
  // Every token of type 0 (one text per row).
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& positions) {
    torch::Tensor x = word_embeddings->forward(ids) + token_type_embeddings->weight[0] +
                      position_embeddings->forward(positions);
    return torch::dropout(LayerNorm->forward(x), dropout_, is_training());
  }
  LoraEmbedding word_embeddings{nullptr}, position_embeddings{nullptr};
  torch::nn::Embedding token_type_embeddings{nullptr};  // row 0 read directly: no adapter
  torch::nn::LayerNorm LayerNorm{nullptr};              // NOLINT: Hugging Face's name

 private:
  double dropout_;
};
TORCH_MODULE(BertEmbeddings);

class BertEncoderImpl : public torch::nn::Module {
 public:
  explicit BertEncoderImpl(const BertArchitecture& a) {
    layer = register_module("layer", torch::nn::ModuleList());
    for (int64_t i = 0; i < a.depth; ++i) layer->push_back(BertLayer(a));
  }
  torch::nn::ModuleList layer{nullptr};
};
TORCH_MODULE(BertEncoder);

// `bert` / `roberta`: the embeddings and the encoder (and BERT's pooler).
class BertBodyImpl : public torch::nn::Module {
 public:
  explicit BertBodyImpl(const BertArchitecture& a) {
    embeddings = register_module("embeddings", BertEmbeddings(a));
    encoder = register_module("encoder", BertEncoder(a));
    if (!a.roberta()) {
      pooler = register_module("pooler", std::make_shared<torch::nn::Module>());
      pooler_dense = pooler->register_module("dense", AutocastLinear(a.dim, a.dim));
    }
  }
  BertEmbeddings embeddings{nullptr};
  BertEncoder encoder{nullptr};
  std::shared_ptr<torch::nn::Module> pooler;
  AutocastLinear pooler_dense{nullptr};
};
TORCH_MODULE(BertBody);

class BertClassifier : public Model {
 public:
  explicit BertClassifier(BertArchitecture a) : a_(std::move(a)) {
    const auto labels = static_cast<int64_t>(a_.labels.size());
    body = register_module(a_.roberta() ? "roberta" : "bert", BertBody(a_));
    if (a_.roberta()) {
      auto head = register_module("classifier", std::make_shared<torch::nn::Module>());
      head_dense = head->register_module("dense", AutocastLinear(a_.dim, a_.dim));
      head_out = head->register_module("out_proj", AutocastLinear(a_.dim, labels));
    } else {
      head_out = register_module("classifier", AutocastLinear(a_.dim, labels));
    }
    // transformers' _init_weights: N(0, initializer_range) for matrices and embeddings (the pad
    // row of the word embeddings zero), zero biases, LayerNorm weights 1.
    torch::NoGradGuard no_grad;
    for (auto& item : named_parameters()) {
      torch::Tensor p = item.value();
      if (absl::StrContains(item.key(), "LayerNorm")) {
        p.fill_(absl::EndsWith(item.key(), ".weight") ? 1.0 : 0.0);
      } else if (p.dim() == 2) {
        p.normal_(0.0, a_.initializer_range);
      } else {
        p.zero_();
      }
    }
    if (a_.pad_token_id >= 0 && a_.pad_token_id < a_.vocab_size)
      body->embeddings->word_embeddings->weight[a_.pad_token_id].zero_();
  }

  torch::Tensor forward(torch::Tensor ids) override {
    const torch::Tensor tokens = ids.ne(a_.pad_token_id);
    torch::Tensor positions;
    if (a_.roberta()) {
      // fairseq's make_positions: pad_token_id + the running count of non-pad tokens; pad itself
      // at padding positions.
      positions = tokens.to(torch::kInt64).cumsum(1) * tokens + a_.pad_token_id;
    } else {
      positions = torch::arange(ids.size(1), ids.options()).unsqueeze(0).expand_as(ids);
    }
    TORCH_CHECK(ids.size(1) <= max_positions(), "bert: rows of ", ids.size(1),
                " tokens, more than its ", max_positions(), " positions (data.max_length)");
    const torch::Tensor keep = tokens.view({ids.size(0), 1, 1, ids.size(1)});
    torch::Tensor x = body->embeddings->forward(ids, positions);
    for (const auto& layer : *body->encoder->layer)
      x = layer->as<BertLayerImpl>()->forward(x, keep);
    torch::Tensor first = x.select(1, 0);
    const double p = a_.classifier_dropout.value_or(a_.dropout);
    if (a_.roberta()) {
      torch::Tensor h = torch::tanh(head_dense->forward(torch::dropout(first, p, is_training())));
      return head_out->forward(torch::dropout(h, p, is_training()));
    }
    torch::Tensor pooled = torch::tanh(body->pooler_dense->forward(first));
    return head_out->forward(torch::dropout(pooled, p, is_training()));
  }

  TokenIds token_ids() const override { return {a_.vocab_size, "vocab_size"}; }
  int64_t max_positions() const override {
    return a_.roberta() ? a_.max_positions - a_.pad_token_id - 1 : a_.max_positions;
  }
  std::optional<TextFraming> text_framing() const override {
    return TextFraming{true, true, a_.pad_token_id};
  }
  std::vector<std::string> class_names() const override { return a_.labels; }
  void set_class_names(const std::vector<std::string>& names) override {
    if (names.size() == a_.labels.size()) a_.labels = names;
  }
  const BertArchitecture& architecture() const { return a_; }

  BertBody body{nullptr};
  AutocastLinear head_dense{nullptr}, head_out{nullptr};

 private:
  BertArchitecture a_;
};

// config.json (bert, roberta or xlm-roberta) as a BertArchitecture; what kiln's layers do not
// compute (relative positions, a decoder, another activation) is refused in one line.
absl::StatusOr<BertArchitecture> ReadBertArchitecture(const HfConfig& c) {
  BertArchitecture a;
  a.model_type = c.model_type();
  if (a.model_type != "bert" && a.model_type != "roberta" && a.model_type != "xlm-roberta") {
    return c.RefuseModelType(
        "model=bert reads BERT, RoBERTa and XLM-RoBERTa checkpoints (model_type bert, "
        "roberta or xlm-roberta)");
  }
  KILN_ASSIGN_OR_RETURN(a.vocab_size, c.Int("vocab_size"));
  KILN_ASSIGN_OR_RETURN(a.dim, c.Int("hidden_size"));
  KILN_ASSIGN_OR_RETURN(a.depth, c.Int("num_hidden_layers"));
  KILN_ASSIGN_OR_RETURN(a.heads, c.Int("num_attention_heads"));
  KILN_ASSIGN_OR_RETURN(a.mlp_dim, c.Int("intermediate_size"));
  KILN_ASSIGN_OR_RETURN(a.max_positions, c.Int("max_position_embeddings"));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> types, c.OptionalInt("type_vocab_size"));
  a.type_vocab_size = types.value_or(2);
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> pad, c.OptionalInt("pad_token_id"));
  a.pad_token_id = pad.value_or(a.roberta() ? 1 : 0);
  KILN_ASSIGN_OR_RETURN(std::optional<double> eps, c.OptionalFloat("layer_norm_eps"));
  a.layer_norm_eps = eps.value_or(1e-12);
  KILN_ASSIGN_OR_RETURN(std::optional<double> dropout, c.OptionalFloat("hidden_dropout_prob"));
  a.dropout = dropout.value_or(0.1);
  KILN_ASSIGN_OR_RETURN(std::optional<double> attention,
                        c.OptionalFloat("attention_probs_dropout_prob"));
  a.attention_dropout = attention.value_or(0.1);
  KILN_ASSIGN_OR_RETURN(a.classifier_dropout, c.OptionalFloat("classifier_dropout"));
  KILN_ASSIGN_OR_RETURN(std::optional<double> init, c.OptionalFloat("initializer_range"));
  a.initializer_range = init.value_or(0.02);
  KILN_ASSIGN_OR_RETURN(a.bos_token_id, c.OptionalInt("bos_token_id"));
  KILN_ASSIGN_OR_RETURN(a.eos_token_id, c.OptionalInt("eos_token_id"));
  if (a.vocab_size < 1 || a.dim < 1 || a.depth < 1 || a.heads < 1 || a.dim % a.heads != 0 ||
      a.mlp_dim < 1 || a.max_positions < 1 || a.type_vocab_size < 1) {
    return c.Refuse("hidden_size",
                    absl::StrCat("sizes must be positive and hidden_size a multiple of "
                                 "num_attention_heads (",
                                 a.heads, ")"));
  }
  if (a.pad_token_id < 0 || a.pad_token_id >= a.vocab_size)
    return c.Refuse("pad_token_id", "must be an id below vocab_size (padding is masked by it)");
  a.hidden_act = c.String("hidden_act", "gelu");
  if (a.hidden_act != "gelu" && a.hidden_act != "gelu_new" && a.hidden_act != "gelu_pytorch_tanh" &&
      a.hidden_act != "relu") {
    return c.Refuse("hidden_act", "kiln's BERT layers compute gelu, gelu_new or relu");
  }
  if (std::string positions = c.String("position_embedding_type", "absolute");
      positions != "absolute") {
    return c.Refuse("position_embedding_type", "kiln's BERT reads absolute positions");
  }
  for (const char* unsupported : {"is_decoder", "add_cross_attention"}) {
    if (c.Bool(unsupported, false)) return c.Refuse(unsupported, "kiln's BERT is an encoder");
  }
  // The labels: id2label by id (transformers writes it; num_labels alone in older files).
  KILN_ASSIGN_OR_RETURN(a.labels, c.Labels(2));
  if (a.roberta() && a.max_positions <= a.pad_token_id + 1)
    return c.Refuse("max_position_embeddings", "must exceed pad_token_id + 1 (RoBERTa's offset)");
  return a;
}

// The options: with `pretrained` the folder gives every size (an option also written must say the
// same); without it the options do.
struct BertOptions {
  std::string pretrained;
  std::string family = "bert";
  std::optional<int64_t> vocab_size, dim, depth, heads, mlp_dim, max_positions, num_labels,
      pad_token_id;
  std::optional<double> layer_norm_eps, dropout;
  std::string hidden_act = "gelu";
};

absl::StatusOr<BertArchitecture> BertArchitectureOf(const BertOptions& o,
                                                    const OptionContext& context) {
  struct Size {
    const char* option;
    const std::optional<int64_t>& value;
    int64_t BertArchitecture::*field;
    const char* hf_key;
  };
  const std::vector<Size> sizes = {
      {"vocab_size", o.vocab_size, &BertArchitecture::vocab_size, "vocab_size"},
      {"dim", o.dim, &BertArchitecture::dim, "hidden_size"},
      {"depth", o.depth, &BertArchitecture::depth, "num_hidden_layers"},
      {"heads", o.heads, &BertArchitecture::heads, "num_attention_heads"},
      {"mlp_dim", o.mlp_dim, &BertArchitecture::mlp_dim, "intermediate_size"},
      {"max_positions", o.max_positions, &BertArchitecture::max_positions,
       "max_position_embeddings"},
      {"pad_token_id", o.pad_token_id, &BertArchitecture::pad_token_id, "pad_token_id"}};
  if (!o.pretrained.empty()) {
    KILN_ASSIGN_OR_RETURN(HfConfig hf, HfConfig::Read(o.pretrained));
    KILN_ASSIGN_OR_RETURN(BertArchitecture a, ReadBertArchitecture(hf));
    std::vector<SizeBesideFolder> beside;
    for (const Size& s : sizes) beside.push_back({s.option, s.value, a.*s.field, s.hf_key});
    KILN_RETURN_IF_ERROR(CheckSizesBesideFolder(beside, o.pretrained, context));
    if (o.num_labels && *o.num_labels != static_cast<int64_t>(a.labels.size()))
      return context.Refuse("num_labels", absl::StrCat(a.labels.size(), " as ", o.pretrained,
                                                       "/config.json's id2label says"));
    if (o.dropout) a.dropout = a.attention_dropout = *o.dropout;  // a training choice
    return a;
  }
  BertArchitecture a;
  a.model_type = o.family;
  if (a.roberta()) {  // RoBERTa's defaults: fairseq's pad id 1, one token type, LayerNorm 1e-5
    a.pad_token_id = 1;
    a.type_vocab_size = 1;
    a.layer_norm_eps = 1e-5;
    a.max_positions = 514;
    a.bos_token_id = 0;
    a.eos_token_id = 2;
  }
  if (!o.vocab_size)
    return context.Refuse("vocab_size",
                          "set (the tokenizer's vocab_size) unless model.pretrained names a "
                          "Hugging Face folder");
  for (const Size& s : sizes) {
    if (s.value) a.*s.field = *s.value;
  }
  if (a.dim % a.heads != 0)
    return context.Refuse("dim", absl::StrCat("a multiple of heads (", a.heads, ")"));
  if (a.pad_token_id >= a.vocab_size)
    return context.Refuse("pad_token_id", absl::StrCat("below vocab_size (", a.vocab_size, ")"));
  if (a.roberta() && a.max_positions <= a.pad_token_id + 1)
    return context.Refuse("max_positions", "more than pad_token_id + 1 (RoBERTa's offset)");
  a.labels.clear();
  for (int64_t i = 0; i < o.num_labels.value_or(2); ++i)
    a.labels.push_back(absl::StrCat("LABEL_", i));
  a.layer_norm_eps = o.layer_norm_eps.value_or(a.layer_norm_eps);
  a.dropout = a.attention_dropout = o.dropout.value_or(0.1);
  a.hidden_act = o.hidden_act;
  return a;
}

std::string DescribeBert(const BertArchitecture& a) {
  return absl::StrCat(a.model_type, ", ", a.depth, " layers, dim ", a.dim, ", ", a.heads,
                      " heads, vocab ", a.vocab_size, ", ", a.labels.size(), " labels (",
                      absl::StrJoin(a.labels, ", "), ")");
}

KILN_REGISTER_BOUND(
    Model, "bert",
    "BERT-family text classifier (BERT, RoBERTa, XLM-RoBERTa): post-LayerNorm encoder, padding "
    "masked, the sequence-classification head; Hugging Face's names; from a folder (pretrained) "
    "or from the sizes",
    OptionBinding<BertOptions>()
        .Field("pretrained", &BertOptions::pretrained,
               "folder save_pretrained wrote (config.json, model.safetensors or a sharded index) "
               "for a *ForSequenceClassification: the sizes, labels and weights come from it; "
               "empty: from the options below")
        .Field("family", &BertOptions::family,
               "without pretrained: bert (pooler, pad 0) or roberta / xlm-roberta (pad 1, "
               "positions from pad + 1)",
               OneOf({"bert", "roberta", "xlm-roberta"}))
        .Field("vocab_size", &BertOptions::vocab_size,
               "token ids are below it (the tokenizer's vocab_size)", AtLeast(1))
        .Field("dim", &BertOptions::dim, "hidden size (256 when unset)", AtLeast(1))
        .Field("depth", &BertOptions::depth, "encoder layers (4 when unset)", AtLeast(1))
        .Field("heads", &BertOptions::heads, "attention heads (4 when unset)", AtLeast(1))
        .Field("mlp_dim", &BertOptions::mlp_dim, "feed-forward width (1024 when unset)", AtLeast(1))
        .Field("max_positions", &BertOptions::max_positions,
               "position embeddings (512 when unset; 514 for roberta)", AtLeast(1))
        .Field("num_labels", &BertOptions::num_labels,
               "classes of the head (2 when unset; task.num_classes must agree)", AtLeast(1))
        .Field("pad_token_id", &BertOptions::pad_token_id,
               "the id masked as padding: the tokenizer's pad id (0 for bert, 1 for roberta when "
               "unset)",
               AtLeast(0))
        .Field("layer_norm_eps", &BertOptions::layer_norm_eps,
               "LayerNorm epsilon (1e-12 for bert, 1e-5 for roberta when unset)", GreaterThan(0))
        .Field("dropout", &BertOptions::dropout,
               "dropout on hidden states and attention weights (the folder's when unset, else "
               "0.1)",
               InHalfOpenRange(0, 1))
        .Field("hidden_act", &BertOptions::hidden_act,
               "without pretrained: the feed-forward activation",
               OneOf({"gelu", "gelu_new", "relu"})),
    [](const BertOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Model>> {
      KILN_ASSIGN_OR_RETURN(BertArchitecture a, BertArchitectureOf(o, context));
      auto build = [&a] { return std::make_shared<BertClassifier>(a); };
      if (o.pretrained.empty()) return std::shared_ptr<Model>(build());
      KILN_ASSIGN_OR_RETURN(auto model, BuildFromFolder(o.pretrained, DescribeBert(a), build));
      KILN_ASSIGN_OR_RETURN(auto file, ReadHfWeights(o.pretrained));
      KILN_RETURN_IF_ERROR(LoadHfState(file, *model, o.pretrained, DescribeBert(a)));
      return std::shared_ptr<Model>(model);
    });

// A BERT-family classifier as a Hugging Face *ForSequenceClassification folder: config.json for
// its model_type, the tensors under the names they already have.
absl::StatusOr<HfFolder> BertFolder(torch::nn::Module& module) {
  auto* bert = dynamic_cast<BertClassifier*>(&module);
  if (bert == nullptr) return absl::InternalError("format=hf: the module is not kiln's bert");
  const BertArchitecture& a = bert->architecture();
  static const std::map<std::string, std::string> kArchitectures = {
      {"bert", "BertForSequenceClassification"},
      {"roberta", "RobertaForSequenceClassification"},
      {"xlm-roberta", "XLMRobertaForSequenceClassification"}};
  nlohmann::ordered_json c;
  c["architectures"] = {kArchitectures.at(a.model_type)};
  c["model_type"] = a.model_type;
  c["vocab_size"] = a.vocab_size;
  c["hidden_size"] = a.dim;
  c["num_hidden_layers"] = a.depth;
  c["num_attention_heads"] = a.heads;
  c["intermediate_size"] = a.mlp_dim;
  c["hidden_act"] = a.hidden_act;
  c["hidden_dropout_prob"] = a.dropout;
  c["attention_probs_dropout_prob"] = a.attention_dropout;
  c["classifier_dropout"] =
      a.classifier_dropout ? nlohmann::json(*a.classifier_dropout) : nlohmann::json(nullptr);
  c["max_position_embeddings"] = a.max_positions;
  c["type_vocab_size"] = a.type_vocab_size;
  c["initializer_range"] = a.initializer_range;
  c["layer_norm_eps"] = a.layer_norm_eps;
  c["position_embedding_type"] = "absolute";
  c["pad_token_id"] = a.pad_token_id;
  c["bos_token_id"] = a.bos_token_id ? nlohmann::json(*a.bos_token_id) : nullptr;
  c["eos_token_id"] = a.eos_token_id ? nlohmann::json(*a.eos_token_id) : nullptr;
  SetHfLabels(a.labels, c);
  c["dtype"] = "float32";
  HfFolder folder;
  folder.config_json = c.dump(2) + "\n";
  folder.tensors = HfTensors(module, {a.roberta() ? "roberta." : "bert.", "classifier."});
  return folder;
}

const bool kBertExporter = [] {
  RegisterHfExporter("bert", BertFolder);
  return true;
}();

}  // namespace
}  // namespace kiln
