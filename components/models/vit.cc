// A Vision Transformer (Dosovitskiy et al.) with torchvision's parameter names: patch embedding
// (conv_proj), class token, learned positions, pre-LayerNorm encoder blocks (self-attention and
// a GELU MLP, each residual), a final LayerNorm and a linear head on the class token.
#include "absl/strings/str_cat.h"
#include "components/models/model.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

struct VitOptions {
  int64_t image_size = 32, patch_size = 4, in_channels = 3, dim = 192, depth = 12, heads = 3,
          mlp_dim = 768;
  int64_t num_classes = 10;
  double dropout = 0.0;
};

// torchvision's MLPBlock: Linear (mlp.0), GELU, Dropout, Linear (mlp.3), Dropout.
class EncoderBlockImpl : public torch::nn::Module {
 public:
  explicit EncoderBlockImpl(const VitOptions& o) : dropout_(o.dropout) {
    ln_1 = register_module("ln_1",
                           torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dim}).eps(1e-6)));
    self_attention = register_module(
        "self_attention",
        torch::nn::MultiheadAttention(
            torch::nn::MultiheadAttentionOptions(o.dim, o.heads).dropout(o.dropout)));
    ln_2 = register_module("ln_2",
                           torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dim}).eps(1e-6)));
    mlp = register_module(
        "mlp",
        torch::nn::Sequential(torch::nn::Linear(o.dim, o.mlp_dim), torch::nn::GELU(),
                              torch::nn::Dropout(o.dropout), torch::nn::Linear(o.mlp_dim, o.dim),
                              torch::nn::Dropout(o.dropout)));
  }

  // x: [tokens, batch, dim] (LibTorch's attention takes the sequence first).
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor y = ln_1->forward(x);
    y = std::get<0>(
        self_attention->forward(y, y, y, /*key_padding_mask=*/{}, /*need_weights=*/false));
    x = x + torch::dropout(y, dropout_, is_training());
    return x + mlp->forward(ln_2->forward(x));
  }

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  torch::nn::MultiheadAttention self_attention{nullptr};
  torch::nn::Sequential mlp{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(EncoderBlock);

class EncoderImpl : public torch::nn::Module {
 public:
  explicit EncoderImpl(const VitOptions& o) : dropout_(o.dropout) {
    int64_t tokens = (o.image_size / o.patch_size) * (o.image_size / o.patch_size) + 1;
    pos_embedding = register_parameter("pos_embedding", torch::randn({1, tokens, o.dim}) * 0.02);
    layers = register_module("layers", torch::nn::Sequential());
    for (int64_t i = 0; i < o.depth; ++i) {
      blocks_.push_back(EncoderBlock(o));
      layers->push_back(absl::StrCat("encoder_layer_", i), blocks_.back());
    }
    ln =
        register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dim}).eps(1e-6)));
  }

  // x: [batch, tokens, dim].
  torch::Tensor forward(torch::Tensor x) {
    x = torch::dropout(x + pos_embedding, dropout_, is_training()).transpose(0, 1);
    for (auto& block : blocks_) x = block->forward(x);
    return ln->forward(x.transpose(0, 1));
  }

  torch::Tensor pos_embedding;
  torch::nn::Sequential layers{nullptr};
  torch::nn::LayerNorm ln{nullptr};

 private:
  std::vector<EncoderBlock> blocks_;
  double dropout_;
};
TORCH_MODULE(Encoder);

class VisionTransformer : public Model {
 public:
  explicit VisionTransformer(const VitOptions& o) : options_(o) {
    conv_proj_ = register_module(
        "conv_proj",
        torch::nn::Conv2d(
            torch::nn::Conv2dOptions(o.in_channels, o.dim, o.patch_size).stride(o.patch_size)));
    class_token_ = register_parameter("class_token", torch::zeros({1, 1, o.dim}));
    encoder_ = register_module("encoder", Encoder(o));
    auto heads = register_module("heads", std::make_shared<torch::nn::Module>());
    head_ = heads->register_module("head", torch::nn::Linear(o.dim, o.num_classes));
    // As torchvision: a zero head, so training starts from uniform predictions.
    torch::NoGradGuard no_grad;
    head_->weight.zero_();
    head_->bias.zero_();
  }

  torch::Tensor forward(torch::Tensor x) override {
    TORCH_CHECK(
        x.dim() == 4 && x.size(2) == options_.image_size && x.size(3) == options_.image_size,
        "vit expects images [batch, ", options_.in_channels, ", ", options_.image_size, ", ",
        options_.image_size, "], got ", x.sizes(), " (set model.image_size)");
    torch::Tensor patches = conv_proj_->forward(x).flatten(2).transpose(1, 2);  // [B, N, dim]
    torch::Tensor tokens = torch::cat({class_token_.expand({x.size(0), -1, -1}), patches}, 1);
    return head_->forward(encoder_->forward(tokens).select(1, 0));
  }

 private:
  VitOptions options_;
  torch::nn::Conv2d conv_proj_{nullptr};
  torch::Tensor class_token_;
  Encoder encoder_{nullptr};
  torch::nn::Linear head_{nullptr};
};

KILN_REGISTER_BOUND(
    Model, "vit",
    "Vision Transformer: patch embedding, class token, pre-LN encoder (torchvision names)",
    OptionBinding<VitOptions>()
        .Field("image_size", &VitOptions::image_size,
               "height and width of the (square) input images", AtLeast(1))
        .Field("patch_size", &VitOptions::patch_size,
               "side of the square patches; must divide image_size", AtLeast(1))
        .Field("in_channels", &VitOptions::in_channels, "channels of the input images", AtLeast(1))
        .Field("dim", &VitOptions::dim, "token width (hidden_dim)", AtLeast(1))
        .Field("depth", &VitOptions::depth, "encoder blocks", AtLeast(1))
        .Field("heads", &VitOptions::heads, "attention heads; must divide dim", AtLeast(1))
        .Field("mlp_dim", &VitOptions::mlp_dim, "hidden width of each block's MLP", AtLeast(1))
        .Field("dropout", &VitOptions::dropout, "dropout on embeddings, attention and MLP outputs",
               InHalfOpenRange(0, 1))
        .Required("num_classes", &VitOptions::num_classes, "number of outputs", AtLeast(1)),
    [](const VitOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Model>> {
      if (o.image_size % o.patch_size != 0) {
        return context.Refuse("patch_size",
                              absl::StrCat("a divisor of image_size (", o.image_size, ")"));
      }
      if (o.dim % o.heads != 0)
        return context.Refuse("heads", absl::StrCat("a divisor of dim (", o.dim, ")"));
      return std::make_shared<VisionTransformer>(o);
    });

}  // namespace
}  // namespace kiln
