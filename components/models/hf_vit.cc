// Hugging Face's Vision Transformer (Dosovitskiy et al. 2021) with the image-classification head,
// in transformers' layout and parameter names: ViTForImageClassification
// (vit.embeddings.{cls_token, position_embeddings, patch_embeddings.projection},
// vit.encoder.layer.N.{layernorm_before, attention.attention.{query,key,value},
// attention.output.dense, layernorm_after, intermediate.dense, output.dense}, vit.layernorm,
// classifier). Pre-LayerNorm layers; the head reads the class token. Input [B, C, H, W] images ->
// [B, num_labels] logits.
//
// A model of its own beside `vit` (torchvision's names: conv_proj, encoder.layers, heads.head): the
// two layouts name every tensor differently, and each exports its own; `vit`'s checkpoints stay
// what they are. `model.pretrained=DIR` builds it from a folder that save_pretrained wrote: the
// sizes, image size, channels and labels from its config.json, the weights from its safetensors.
// Without it the sizes are options and the weights are drawn as transformers draws them.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "components/models/hf_checkpoint.h"
#include "components/models/model.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"
#include "lib/weights/hf_export.h"
#include "nlohmann/json.hpp"

namespace kiln {
namespace {

// Everything that shapes a ViT classifier, as config.json says it.
struct HfVitArchitecture {
  int64_t image_size = 224, patch_size = 16, num_channels = 3, dim = 768, depth = 12, heads = 12,
          mlp_dim = 3072, encoder_stride = 16;
  double layer_norm_eps = 1e-12, dropout = 0.0, attention_dropout = 0.0, initializer_range = 0.02;
  bool qkv_bias = true;
  std::vector<std::string> labels = {"LABEL_0", "LABEL_1"};  // id2label, by id
  int64_t patches() const { return (image_size / patch_size) * (image_size / patch_size); }
};

// A Linear (with its dropout): ViTSelfOutput and ViTOutput, whose residual the layer adds.
class HfVitDenseImpl : public torch::nn::Module {
 public:
  HfVitDenseImpl(int64_t in, int64_t out, double dropout) : dropout_(dropout) {
    dense = register_module("dense", torch::nn::Linear(in, out));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::dropout(dense->forward(x), dropout_, is_training());
  }
  torch::nn::Linear dense{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(HfVitDense);

class HfVitSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit HfVitSelfAttentionImpl(const HfVitArchitecture& a)
      : heads_(a.heads), dropout_(a.attention_dropout) {
    auto options = torch::nn::LinearOptions(a.dim, a.dim).bias(a.qkv_bias);
    query = register_module("query", torch::nn::Linear(options));
    key = register_module("key", torch::nn::Linear(options));
    value = register_module("value", torch::nn::Linear(options));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    auto heads = [&](const torch::Tensor& y) {
      return y.view({b, t, heads_, d / heads_}).transpose(1, 2);
    };
    torch::Tensor y = at::scaled_dot_product_attention(
        heads(query->forward(x)), heads(key->forward(x)), heads(value->forward(x)), {},
        is_training() ? dropout_ : 0.0);
    return y.transpose(1, 2).reshape({b, t, d});
  }
  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr};

 private:
  int64_t heads_;
  double dropout_;
};
TORCH_MODULE(HfVitSelfAttention);

// ViTAttention: attention.attention (query, key, value) and attention.output.dense.
class HfVitAttentionImpl : public torch::nn::Module {
 public:
  explicit HfVitAttentionImpl(const HfVitArchitecture& a) {
    attention = register_module("attention", HfVitSelfAttention(a));
    output = register_module("output", HfVitDense(a.dim, a.dim, a.dropout));
  }
  torch::Tensor forward(const torch::Tensor& x) { return output->forward(attention->forward(x)); }
  HfVitSelfAttention attention{nullptr};
  HfVitDense output{nullptr};
};
TORCH_MODULE(HfVitAttention);

class HfVitLayerImpl : public torch::nn::Module {
 public:
  explicit HfVitLayerImpl(const HfVitArchitecture& a) {
    auto norm = torch::nn::LayerNormOptions({a.dim}).eps(a.layer_norm_eps);
    layernorm_before = register_module("layernorm_before", torch::nn::LayerNorm(norm));
    attention = register_module("attention", HfVitAttention(a));
    layernorm_after = register_module("layernorm_after", torch::nn::LayerNorm(norm));
    intermediate = register_module("intermediate", HfVitDense(a.dim, a.mlp_dim, 0.0));
    output = register_module("output", HfVitDense(a.mlp_dim, a.dim, a.dropout));
  }
  // Pre-LN: x + attention(LN(x)), then h + MLP(LN(h)), the MLP's activation exact GELU.
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x + attention->forward(layernorm_before->forward(x));
    return h + output->forward(torch::gelu(intermediate->forward(layernorm_after->forward(h))));
  }
  torch::nn::LayerNorm layernorm_before{nullptr}, layernorm_after{nullptr};
  HfVitAttention attention{nullptr};
  HfVitDense intermediate{nullptr}, output{nullptr};
};
TORCH_MODULE(HfVitLayer);

class HfVitEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit HfVitEmbeddingsImpl(const HfVitArchitecture& a) : dropout_(a.dropout) {
    cls_token = register_parameter("cls_token", torch::zeros({1, 1, a.dim}));
    position_embeddings =
        register_parameter("position_embeddings", torch::zeros({1, a.patches() + 1, a.dim}));
    auto patch = register_module("patch_embeddings", std::make_shared<torch::nn::Module>());
    projection = patch->register_module(
        "projection",
        torch::nn::Conv2d(
            torch::nn::Conv2dOptions(a.num_channels, a.dim, a.patch_size).stride(a.patch_size)));
  }
  torch::Tensor forward(const torch::Tensor& images) {
    torch::Tensor patches = projection->forward(images).flatten(2).transpose(1, 2);
    torch::Tensor x = torch::cat({cls_token.expand({images.size(0), -1, -1}), patches}, 1);
    return torch::dropout(x + position_embeddings, dropout_, is_training());
  }
  torch::Tensor cls_token, position_embeddings;
  torch::nn::Conv2d projection{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(HfVitEmbeddings);

// `vit`: the embeddings, the encoder and the final LayerNorm (no pooler: the classifier's).
class HfVitBodyImpl : public torch::nn::Module {
 public:
  explicit HfVitBodyImpl(const HfVitArchitecture& a) {
    embeddings = register_module("embeddings", HfVitEmbeddings(a));
    auto encoder = register_module("encoder", std::make_shared<torch::nn::Module>());
    layer = encoder->register_module("layer", torch::nn::ModuleList());
    for (int64_t i = 0; i < a.depth; ++i) layer->push_back(HfVitLayer(a));
    layernorm = register_module(
        "layernorm",
        torch::nn::LayerNorm(torch::nn::LayerNormOptions({a.dim}).eps(a.layer_norm_eps)));
  }
  HfVitEmbeddings embeddings{nullptr};
  torch::nn::ModuleList layer{nullptr};
  torch::nn::LayerNorm layernorm{nullptr};
};
TORCH_MODULE(HfVitBody);

class HfVitClassifier : public Model {
 public:
  explicit HfVitClassifier(HfVitArchitecture a) : a_(std::move(a)) {
    body = register_module("vit", HfVitBody(a_));
    classifier = register_module("classifier",
                                 torch::nn::Linear(a_.dim, static_cast<int64_t>(a_.labels.size())));
    // transformers' _init_weights: truncated N(0, initializer_range) (at +-2, i.e. 100 standard
    // deviations: a plain normal here) for the matrices, the convolution, the class token and the
    // positions; zero biases; LayerNorm weights 1.
    torch::NoGradGuard no_grad;
    for (auto& item : named_parameters()) {
      torch::Tensor p = item.value();
      const std::string& name = item.key();
      if (absl::StrContains(name, "layernorm")) {
        p.fill_(absl::EndsWith(name, ".weight") ? 1.0 : 0.0);
      } else if (p.dim() >= 2) {
        p.normal_(0.0, a_.initializer_range).clamp_(-2.0, 2.0);
      } else {
        p.zero_();
      }
    }
  }

  torch::Tensor forward(torch::Tensor images) override {
    TORCH_CHECK(images.dim() == 4 && images.size(1) == a_.num_channels &&
                    images.size(2) == a_.image_size && images.size(3) == a_.image_size,
                "hf_vit takes images [batch, ", a_.num_channels, ", ", a_.image_size, ", ",
                a_.image_size, "] (num_channels and image_size of its config), got ",
                images.sizes());
    torch::Tensor x = body->embeddings->forward(images);
    for (const auto& layer : *body->layer) x = layer->as<HfVitLayerImpl>()->forward(x);
    return classifier->forward(body->layernorm->forward(x).select(1, 0));
  }

  std::vector<std::string> class_names() const override { return a_.labels; }
  void set_class_names(const std::vector<std::string>& names) override {
    if (names.size() == a_.labels.size()) a_.labels = names;
  }
  const HfVitArchitecture& architecture() const { return a_; }

  HfVitBody body{nullptr};
  torch::nn::Linear classifier{nullptr};

 private:
  HfVitArchitecture a_;
};

// config.json (model_type vit) as an HfVitArchitecture; what kiln's layers do not compute is
// refused in one line.
absl::StatusOr<HfVitArchitecture> ReadHfVitArchitecture(const HfConfig& c) {
  if (c.model_type() != "vit")
    return c.RefuseModelType("model=hf_vit reads ViT checkpoints (model_type vit)");
  HfVitArchitecture a;
  KILN_ASSIGN_OR_RETURN(a.dim, c.Int("hidden_size"));
  KILN_ASSIGN_OR_RETURN(a.depth, c.Int("num_hidden_layers"));
  KILN_ASSIGN_OR_RETURN(a.heads, c.Int("num_attention_heads"));
  KILN_ASSIGN_OR_RETURN(a.mlp_dim, c.Int("intermediate_size"));
  // ViTConfig's defaults for what older files may leave out.
  struct Optional {
    const char* key;
    int64_t* field;
  };
  for (const Optional& o :
       {Optional{"image_size", &a.image_size}, Optional{"patch_size", &a.patch_size},
        Optional{"num_channels", &a.num_channels}, Optional{"encoder_stride", &a.encoder_stride}}) {
    KILN_ASSIGN_OR_RETURN(std::optional<int64_t> value, c.OptionalInt(o.key));
    if (value) *o.field = *value;
  }
  KILN_ASSIGN_OR_RETURN(std::optional<double> eps, c.OptionalFloat("layer_norm_eps"));
  a.layer_norm_eps = eps.value_or(1e-12);
  KILN_ASSIGN_OR_RETURN(std::optional<double> dropout, c.OptionalFloat("hidden_dropout_prob"));
  a.dropout = dropout.value_or(0.0);
  KILN_ASSIGN_OR_RETURN(std::optional<double> attention,
                        c.OptionalFloat("attention_probs_dropout_prob"));
  a.attention_dropout = attention.value_or(0.0);
  KILN_ASSIGN_OR_RETURN(std::optional<double> init, c.OptionalFloat("initializer_range"));
  a.initializer_range = init.value_or(0.02);
  a.qkv_bias = c.Bool("qkv_bias", true);
  if (a.dim < 1 || a.depth < 1 || a.heads < 1 || a.dim % a.heads != 0 || a.mlp_dim < 1) {
    return c.Refuse("hidden_size",
                    absl::StrCat("sizes must be positive and hidden_size a multiple of "
                                 "num_attention_heads (",
                                 a.heads, ")"));
  }
  if (a.image_size < 1 || a.patch_size < 1 || a.num_channels < 1 ||
      a.image_size % a.patch_size != 0) {
    return c.Refuse("patch_size", absl::StrCat("must divide image_size (", a.image_size,
                                               "), both positive, num_channels too"));
  }
  if (std::string act = c.String("hidden_act", "gelu"); act != "gelu")
    return c.Refuse("hidden_act", "kiln's ViT layers compute gelu (exact, erf)");
  if (c.Bool("use_mask_token", false))
    return c.Refuse("use_mask_token", "kiln's ViT classifies; it masks no patches");
  KILN_ASSIGN_OR_RETURN(a.labels, c.Labels(2));
  return a;
}

struct HfVitOptions {
  std::string pretrained;
  std::optional<int64_t> image_size, patch_size, num_channels, dim, depth, heads, mlp_dim,
      num_labels;
  std::optional<double> dropout;
};

absl::StatusOr<HfVitArchitecture> HfVitArchitectureOf(const HfVitOptions& o,
                                                      const OptionContext& context) {
  struct Size {
    const char* option;
    const std::optional<int64_t>& value;
    int64_t HfVitArchitecture::*field;
    const char* hf_key;
  };
  const std::vector<Size> sizes = {
      {"image_size", o.image_size, &HfVitArchitecture::image_size, "image_size"},
      {"patch_size", o.patch_size, &HfVitArchitecture::patch_size, "patch_size"},
      {"num_channels", o.num_channels, &HfVitArchitecture::num_channels, "num_channels"},
      {"dim", o.dim, &HfVitArchitecture::dim, "hidden_size"},
      {"depth", o.depth, &HfVitArchitecture::depth, "num_hidden_layers"},
      {"heads", o.heads, &HfVitArchitecture::heads, "num_attention_heads"},
      {"mlp_dim", o.mlp_dim, &HfVitArchitecture::mlp_dim, "intermediate_size"}};
  if (!o.pretrained.empty()) {
    KILN_ASSIGN_OR_RETURN(HfConfig hf, HfConfig::Read(o.pretrained));
    KILN_ASSIGN_OR_RETURN(HfVitArchitecture a, ReadHfVitArchitecture(hf));
    std::vector<SizeBesideFolder> beside;
    for (const Size& s : sizes) beside.push_back({s.option, s.value, a.*s.field, s.hf_key});
    KILN_RETURN_IF_ERROR(CheckSizesBesideFolder(beside, o.pretrained, context));
    if (o.num_labels && *o.num_labels != static_cast<int64_t>(a.labels.size()))
      return context.Refuse("num_labels", absl::StrCat(a.labels.size(), " as ", o.pretrained,
                                                       "/config.json's id2label says"));
    if (o.dropout) a.dropout = a.attention_dropout = *o.dropout;  // a training choice
    return a;
  }
  HfVitArchitecture a;
  a.image_size = 32;  // small defaults, as `vit`'s: CIFAR-10-sized
  a.patch_size = 4;
  a.dim = 192;
  a.depth = 12;
  a.heads = 3;
  a.mlp_dim = 768;
  for (const Size& s : sizes) {
    if (s.value) a.*s.field = *s.value;
  }
  if (a.dim % a.heads != 0)
    return context.Refuse("dim", absl::StrCat("a multiple of heads (", a.heads, ")"));
  if (a.image_size % a.patch_size != 0)
    return context.Refuse("patch_size",
                          absl::StrCat("a divisor of image_size (", a.image_size, ")"));
  a.labels.clear();
  for (int64_t i = 0; i < o.num_labels.value_or(10); ++i)
    a.labels.push_back(absl::StrCat("LABEL_", i));
  a.dropout = a.attention_dropout = o.dropout.value_or(0.0);
  return a;
}

std::string DescribeHfVit(const HfVitArchitecture& a) {
  return absl::StrCat("vit, ", a.depth, " layers, dim ", a.dim, ", ", a.heads, " heads, images ",
                      a.num_channels, "x", a.image_size, "x", a.image_size, " in patches of ",
                      a.patch_size, ", ", a.labels.size(), " labels (",
                      absl::StrJoin(a.labels, ", "), ")");
}

KILN_REGISTER_BOUND(
    Model, "hf_vit",
    "Vision Transformer in Hugging Face's layout (ViTForImageClassification): pre-LN encoder, "
    "class token, exact GELU; from a folder (pretrained) or from the sizes",
    OptionBinding<HfVitOptions>()
        .Field("pretrained", &HfVitOptions::pretrained,
               "folder save_pretrained wrote (config.json, model.safetensors or a sharded index) "
               "for a ViTForImageClassification: the sizes, labels and weights come from it; "
               "empty: from the options below")
        .Field("image_size", &HfVitOptions::image_size,
               "height and width of the (square) images (32 when unset)", AtLeast(1))
        .Field("patch_size", &HfVitOptions::patch_size,
               "side of the square patches, a divisor of image_size (4 when unset)", AtLeast(1))
        .Field("num_channels", &HfVitOptions::num_channels, "channels of the images (3 when unset)",
               AtLeast(1))
        .Field("dim", &HfVitOptions::dim, "hidden size (192 when unset)", AtLeast(1))
        .Field("depth", &HfVitOptions::depth, "encoder layers (12 when unset)", AtLeast(1))
        .Field("heads", &HfVitOptions::heads, "attention heads (3 when unset)", AtLeast(1))
        .Field("mlp_dim", &HfVitOptions::mlp_dim, "feed-forward width (768 when unset)", AtLeast(1))
        .Field("num_labels", &HfVitOptions::num_labels,
               "classes of the head (10 when unset; task.num_classes must agree)", AtLeast(1))
        .Field("dropout", &HfVitOptions::dropout,
               "dropout on hidden states and attention weights (the folder's when unset, else 0)",
               InHalfOpenRange(0, 1)),
    [](const HfVitOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Model>> {
      KILN_ASSIGN_OR_RETURN(HfVitArchitecture a, HfVitArchitectureOf(o, context));
      auto build = [&a] { return std::make_shared<HfVitClassifier>(a); };
      if (o.pretrained.empty()) return std::shared_ptr<Model>(build());
      KILN_ASSIGN_OR_RETURN(auto model, BuildFromFolder(o.pretrained, DescribeHfVit(a), build));
      KILN_ASSIGN_OR_RETURN(auto file, ReadHfWeights(o.pretrained));
      KILN_RETURN_IF_ERROR(LoadHfState(file, *model, o.pretrained, DescribeHfVit(a)));
      return std::shared_ptr<Model>(model);
    });

// An hf_vit as a Hugging Face ViTForImageClassification folder: config.json, the tensors under the
// names they already have.
absl::StatusOr<HfFolder> HfVitFolder(torch::nn::Module& module) {
  auto* vit = dynamic_cast<HfVitClassifier*>(&module);
  if (vit == nullptr) return absl::InternalError("format=hf: the module is not kiln's hf_vit");
  const HfVitArchitecture& a = vit->architecture();
  nlohmann::ordered_json c;
  c["architectures"] = {"ViTForImageClassification"};
  c["model_type"] = "vit";
  c["hidden_size"] = a.dim;
  c["num_hidden_layers"] = a.depth;
  c["num_attention_heads"] = a.heads;
  c["intermediate_size"] = a.mlp_dim;
  c["hidden_act"] = "gelu";
  c["hidden_dropout_prob"] = a.dropout;
  c["attention_probs_dropout_prob"] = a.attention_dropout;
  c["initializer_range"] = a.initializer_range;
  c["layer_norm_eps"] = a.layer_norm_eps;
  c["image_size"] = a.image_size;
  c["patch_size"] = a.patch_size;
  c["num_channels"] = a.num_channels;
  c["qkv_bias"] = a.qkv_bias;
  c["encoder_stride"] = a.encoder_stride;
  SetHfLabels(a.labels, c);
  c["dtype"] = "float32";
  HfFolder folder;
  folder.config_json = c.dump(2) + "\n";
  folder.tensors = HfTensors(module, {"vit.", "classifier."});
  return folder;
}

const bool kHfVitExporter = [] {
  RegisterHfExporter("hf_vit", HfVitFolder);
  return true;
}();

}  // namespace
}  // namespace kiln
