#include "components/models/text_transformer.h"

#include <torch/csrc/jit/frontend/tracer.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "components/models/causal_attention.h"
#include "components/models/checkpointing.h"
#include "components/models/gelu_tanh.h"
#include "components/models/llama_kernels.h"
#include "lib/base/torch_compat.h"

namespace kiln {

SelfAttentionImpl::SelfAttentionImpl(int64_t dim, int64_t heads, double dropout)
    : heads_(heads), dropout_(dropout) {
  c_attn = register_module("c_attn", AutocastLinear(dim, 3 * dim));
  c_proj = register_module("c_proj", AutocastLinear(dim, dim));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x, const AttentionMask& mask) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads_;
  const bool attention_dropout = dropout_ > 0 && is_training();
  torch::Tensor qkv = c_attn->forward(x);
  // Under LibTorch's tracer (TorchScript export): ATen calls only, and no batch size in a shape.
  const bool tracing = torch::jit::tracer::isTracing();
  if (mask.causal && !mask.bias.defined() && !attention_dropout && !tracing &&
      CausalAttentionSupports(qkv, heads_)) {
    return c_proj->forward(CausalAttention(qkv, heads_));
  }
  if (qkv.is_cuda() && !tracing) {
    return c_proj->forward(FusedAttention(qkv, heads_, mask, attention_dropout ? dropout_ : 0.0));
  }
  torch::Tensor bias = mask.bias;
  if (mask.causal) {
    torch::Tensor causal = CausalBias(t, x.options());
    bias = bias.defined() ? bias + causal : causal;
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  if (tracing) {
    // [B, T, 3, H, hd] -> q, k, v as [B, H, T, hd]; the bias broadcasts over batch and heads.
    torch::Tensor q4 = qkv.view({-1, t, 3, heads_, hd}).permute({2, 0, 3, 1, 4});
    torch::Tensor scores = torch::matmul(q4[0], q4[1].transpose(-2, -1)).mul(scale);
    if (bias.defined()) scores = scores + bias;
    torch::Tensor y =
        torch::matmul(torch::softmax(scores, -1), q4[2]).transpose(1, 2).reshape({-1, t, d});
    return c_proj->forward(y);
  }
  // [B, T, 3, H, hd] -> q, k, v as [B*H, T, hd] (one copy, as matmul would make).
  qkv = qkv.view({b, t, 3, heads_, hd}).permute({2, 0, 3, 1, 4}).reshape({3, b * heads_, t, hd});
  torch::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
  // The scale and the bias ride in the GEMM: scores = bias + scale * q k^T in one pass over
  // [B*H, T, T] instead of three (matmul, multiply, add) and their backward.
  torch::Tensor scores;
  if (bias.defined()) {
    const int64_t rows = bias.size(-2);
    torch::Tensor b3 = bias.expand({b, heads_, rows, t}).reshape({b * heads_, rows, t});
    scores = torch::baddbmm(b3, q, k.transpose(1, 2), /*beta=*/1.0, /*alpha=*/scale);
  } else {
    scores = torch::bmm(q, k.transpose(1, 2)).mul_(scale);
  }
  torch::Tensor weights = torch::softmax(scores, -1);
  if (attention_dropout) weights = torch::dropout(weights, dropout_, true);
  torch::Tensor y =
      torch::bmm(weights, v).view({b, heads_, t, hd}).transpose(1, 2).reshape({b, t, d});
  return c_proj->forward(y);
}

torch::Tensor SelfAttentionImpl::forward_cached(const torch::Tensor& x, KvCache& cache,
                                                size_t layer, const KvCache::Mask& mask) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads_;
  // [B, t, 3, H, hd] -> q, k, v as [B, H, t, hd].
  torch::Tensor q4 = c_attn->forward(x).view({b, t, 3, heads_, hd}).permute({2, 0, 3, 1, 4});
  auto [keys, values] = cache.Append(layer, q4[1], q4[2]);
  torch::Tensor y =
      at::scaled_dot_product_attention(q4[0], keys, values, mask.bias, 0.0, mask.causal);
  return c_proj->forward(y.transpose(1, 2).reshape({b, t, d}));
}

torch::Tensor FusedAttention(const torch::Tensor& qkv, int64_t heads, const AttentionMask& mask,
                             double dropout) {
  const int64_t b = qkv.size(0), t = qkv.size(1), d = qkv.size(2) / 3, hd = d / heads;
  // [B, T, 3, H, hd] -> q, k, v as [B, H, T, hd] views (the head dimension stays contiguous).
  torch::Tensor q4 = qkv.view({b, t, 3, heads, hd}).permute({2, 0, 3, 1, 4});
  std::optional<torch::Tensor> attn_mask;
  bool is_causal = mask.causal;
  if (mask.bias.defined()) {
    // An additive mask in the query's dtype (bf16 under autocast), the causal part folded in.
    torch::Tensor bias = mask.causal ? mask.bias + CausalBias(t, mask.bias.options()) : mask.bias;
    attn_mask = bias.to(q4.scalar_type());
    is_causal = false;
  }
  return at::scaled_dot_product_attention(q4[0], q4[1], q4[2], attn_mask, dropout, is_causal)
      .transpose(1, 2)
      .reshape({b, t, d});
}

TransformerBlockImpl::TransformerBlockImpl(int64_t dim, int64_t heads, int64_t mlp_dim,
                                           double dropout)
    : dropout_(dropout) {
  ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  attn = register_module("attn", SelfAttention(dim, heads, dropout));
  ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  mlp = torch::nn::Sequential();
  mlp->push_back("c_fc", AutocastLinear(dim, mlp_dim));
  mlp->push_back("gelu", GeluTanhLayer());
  mlp->push_back("c_proj", AutocastLinear(mlp_dim, dim));
  mlp = register_module("mlp", mlp);
}

namespace {

// A block's LayerNorm: under CPU autocast in bf16 its float32 result would only be cast to bf16 for
// the product that reads it, so one loop writes bf16 (LayerNormToBf16); otherwise the module.
torch::Tensor BlockNorm(torch::nn::LayerNorm& ln, const torch::Tensor& x) {
  if (x.device().is_cpu() && at::autocast::is_autocast_enabled(at::kCPU) &&
      at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16) {
    return LayerNormToBf16(x, ln->weight, ln->bias, ln->options.eps());
  }
  return ln->forward(x);
}

}  // namespace

torch::Tensor TransformerBlockImpl::forward(torch::Tensor x, const AttentionMask& mask) {
  torch::Tensor a = attn->forward(BlockNorm(ln_1, x), mask);
  if (dropout_ > 0) a = torch::dropout(a, dropout_, is_training());
  x = ResidualAdd(x, a);
  torch::Tensor m = mlp->forward(BlockNorm(ln_2, x));
  if (dropout_ > 0) m = torch::dropout(m, dropout_, is_training());
  return ResidualAdd(x, m);
}

torch::Tensor TransformerBlockImpl::forward_cached(torch::Tensor x, KvCache& cache, size_t layer,
                                                   const KvCache::Mask& mask) {
  x = x + attn->forward_cached(ln_1->forward(x), cache, layer, mask);
  return x + mlp->forward(ln_2->forward(x));
}

TextTransformerImpl::TextTransformerImpl(const TextTransformerOptions& o) : o_(o) {
  wte = register_module("wte", LoraEmbedding(o.vocab_size, o.dim));
  wte->token_table = true;
  wpe = register_module("wpe", LoraEmbedding(o.positions, o.dim));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.depth; ++i) {
    blocks_.push_back(TransformerBlock(o.dim, o.heads, o.mlp_dim, o.dropout));
    h->push_back(blocks_.back());
    distributed::KeepOwnPieces(*blocks_.back());  // fsdp: this worker's rows of the block
  }
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dim})));
}

torch::Tensor TextTransformerImpl::forward(const torch::Tensor& tokens, const AttentionMask& mask,
                                           const torch::Tensor& positions) {
  const int64_t t = tokens.size(1);
  TORCH_CHECK(t <= o_.positions, "a sequence of ", t, " tokens is longer than the model's ",
              o_.positions, " positions");
  torch::Tensor x =
      wte->forward(tokens) +
      wpe->forward(
          positions.defined()
              ? positions
              : torch::arange(t,
                              torch::TensorOptions().dtype(torch::kInt64).device(tokens.device())));
  if (o_.dropout > 0) x = torch::dropout(x, o_.dropout, is_training());
  for (auto& block : blocks_) {
    const bool recompute = activation_checkpointing && is_training();
    x = distributed::RunUnit(
        *block,
        [&](const torch::Tensor& in) {
          if (!recompute) return block->forward(in, mask);
          return Checkpointed(
              [block, mask](const torch::Tensor& again) mutable {
                return block->forward(again, mask);
              },
              in);
        },
        x);
  }
  return ln_f->forward(x);
}

std::vector<std::shared_ptr<torch::nn::Module>> TextTransformerImpl::sharding_units() const {
  std::vector<std::shared_ptr<torch::nn::Module>> units;
  for (const auto& block : blocks_) units.push_back(block.ptr());
  return units;
}

torch::Tensor TextTransformerImpl::forward_cached(const torch::Tensor& tokens,
                                                  const torch::Tensor& positions, KvCache& cache) {
  torch::Tensor x = wte->forward(tokens) + wpe->forward(positions);
  KvCache::Mask mask = cache.AttentionMask(x.scalar_type());
  for (size_t i = 0; i < blocks_.size(); ++i) x = blocks_[i]->forward_cached(x, cache, i, mask);
  return ln_f->forward(x);
}

absl::Status CheckTextTransformerOptions(const TextTransformerOptions& o,
                                         const OptionContext& context) {
  if (o.dim % o.heads != 0)
    return context.Refuse("dim", absl::StrCat("divisible by heads (", o.heads, ")"));
  return absl::OkStatus();
}

torch::Tensor CausalBias(int64_t length, const torch::TensorOptions& options) {
  return torch::full({length, length}, -std::numeric_limits<float>::infinity(), options).triu(1);
}

torch::Tensor PaddingBias(const torch::Tensor& tokens, const torch::TensorOptions& options) {
  // zeros_like, not zeros(sizes): a trace keeps the batch size dynamic.
  torch::Tensor bias = torch::zeros_like(
      tokens, options.has_dtype() ? options : options.dtype(torch::get_default_dtype()));
  bias.masked_fill_(tokens.eq(0), -std::numeric_limits<float>::infinity());
  return bias.unsqueeze(1).unsqueeze(1);
}

void InitTransformerWeights(torch::nn::Module& module, int64_t depth) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    const bool is_norm = name.find("ln_") != std::string::npos ||
                         name.find(".ln") != std::string::npos || name.rfind("ln", 0) == 0;
    // A block built in pieces (fsdp) draws as the whole model does (InitWhole).
    distributed::InitWhole(p, [&](torch::Tensor& whole) {
      if (is_norm) {
        if (name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0)
          whole.fill_(1.0);
        else
          whole.zero_();
      } else if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
        whole.zero_();
      } else {
        double std = 0.02;
        if (name.find("c_proj.weight") != std::string::npos)
          std /= std::sqrt(2.0 * static_cast<double>(depth));
        whole.normal_(0.0, std);
      }
    });
  }
}

}  // namespace kiln
