// The Llama family of decoder language models (Touvron et al. 2023), in Hugging Face's layout and
// parameter names (LlamaForCausalLM: model.embed_tokens, model.layers.N.{self_attn,mlp,
// input_layernorm,post_attention_layernorm}, model.norm, lm_head): rotary position embeddings
// (with Llama 3's and linear rope scaling), RMSNorm, SwiGLU, grouped-query attention, a tied or
// untied output layer. The same component reads Mistral (sliding-window attention), Qwen2 (bias
// on q, k and v) and Qwen3 (an RMSNorm on each query and key head) folders, whose layers are
// otherwise Llama's. Input [B, T] ids -> [B, T, vocab].
//
// `model.pretrained=DIR` builds it from a folder that save_pretrained wrote: the sizes from its
// config.json, the weights from its safetensors. Without it the sizes are options and the
// weights are drawn as transformers draws them (N(0, initializer_range), RMSNorm weights 1).

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "components/models/autocast_linear.h"
#include "components/models/causal_attention.h"
#include "components/models/checkpointing.h"
#include "components/models/gelu_tanh.h"
#include "components/models/generation.h"
#include "components/models/hf_checkpoint.h"
#include "components/models/llama_kernels.h"
#include "components/models/lora_embedding.h"
#include "components/models/model.h"
#include "lib/base/status_macros.h"
#include "lib/distributed/sharding_units.h"
#include "lib/registry/registry.h"
#include "lib/weights/hf_export.h"
#include "lib/weights/safetensors.h"
#include "nlohmann/json.hpp"

namespace kiln {
namespace {

// How the rotary frequencies are stretched for contexts longer than pretraining's (config.json's
// rope_parameters, or rope_scaling in files older than transformers 5).
struct RopeScaling {
  std::string type = "default";  // default, linear, llama3
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_max_positions = 0;
};

// Everything that shapes a Llama-family model, as config.json says it.
struct LlamaArchitecture {
  std::string model_type = "llama";  // llama, mistral, qwen2, qwen3: what export writes back
  int64_t vocab_size = 0, dim = 256, depth = 4, heads = 4, kv_heads = 4, head_dim = 64,
          mlp_dim = 688, max_positions = 2048;
  double rope_theta = 10000, rms_norm_eps = 1e-6, attention_dropout = 0, initializer_range = 0.02;
  bool tie_weights = false, qkv_bias = false, o_bias = false, mlp_bias = false;
  bool qk_norm = false;  // Qwen3: each query and key head RMS-normalized before the rotation
  RopeScaling rope;
  std::vector<int64_t> windows;  // per layer: 0 attends to the whole past, W to the last W keys
  std::optional<int64_t> bos_token_id, eos_token_id;
};

// Hugging Face's RMSNorm (components/models/llama_kernels.h).
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps) : eps_(eps) {
    weight = register_parameter("weight", torch::ones({dim}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return RmsNormalize(x, weight, eps_); }
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

// Generation computes the projections of a layer's q, k and v (and of its gate and up) in one
// product when their weights together have at most this many elements (4 MB in float32): below
// it a token's products are short enough that their call overhead counts.
constexpr int64_t kFuseAtMost = int64_t{1} << 20;

// The rotary inverse frequencies [head_dim / 2], in float32 by transformers' own formulas.
torch::Tensor InverseFrequencies(const LlamaArchitecture& a) {
  torch::Tensor exponents =
      torch::arange(0, a.head_dim, 2, torch::kInt64).to(torch::kFloat32) / a.head_dim;
  torch::Tensor inv = torch::pow(a.rope_theta, exponents).reciprocal();
  const RopeScaling& s = a.rope;
  if (s.type == "linear") return inv / s.factor;
  if (s.type != "llama3") return inv;
  const double old_context = static_cast<double>(s.original_max_positions);
  const double low_wavelen = old_context / s.low_freq_factor;
  const double high_wavelen = old_context / s.high_freq_factor;
  torch::Tensor wavelen = inv.reciprocal() * (2 * M_PI);
  torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv / s.factor, inv);
  torch::Tensor smooth = (wavelen.reciprocal() * old_context - s.low_freq_factor) /
                         (s.high_freq_factor - s.low_freq_factor);
  torch::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  torch::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
  return torch::where(medium, smoothed, scaled);
}

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  explicit LlamaAttentionImpl(const LlamaArchitecture& a)
      : heads_(a.heads),
        kv_heads_(a.kv_heads),
        head_dim_(a.head_dim),
        dropout_(a.attention_dropout) {
    auto linear = [](int64_t in, int64_t out, bool bias) {
      return AutocastLinear(torch::nn::LinearOptions(in, out).bias(bias));
    };
    q_proj = register_module("q_proj", linear(a.dim, a.heads * a.head_dim, a.qkv_bias));
    k_proj = register_module("k_proj", linear(a.dim, a.kv_heads * a.head_dim, a.qkv_bias));
    v_proj = register_module("v_proj", linear(a.dim, a.kv_heads * a.head_dim, a.qkv_bias));
    o_proj = register_module("o_proj", linear(a.heads * a.head_dim, a.dim, a.o_bias));
    if (a.qk_norm) {
      q_norm = register_module("q_norm", RmsNorm(a.head_dim, a.rms_norm_eps));
      k_norm = register_module("k_norm", RmsNorm(a.head_dim, a.rms_norm_eps));
    }
  }

  // x [B, T, D]; cos and sin [T, head_dim] (or [B, 1, T, head_dim]) in x's dtype; window 0 or
  // the keys each query sees; `packed` undefined (causal) or the keys each query may see, bool
  // [B, 1, T, T] (packed rows).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        int64_t window, const torch::Tensor& packed) {
    const int64_t length = x.size(1);
    const bool windowed = window > 0 && length > window;
    // On the CPU, kiln's causal kernel: in bf16 (bf16-mixed or bf16-true) 1.5x the step of SDPA's
    // CPU flash attention (bench/lora_speed.sh); in float32 its forward and backward take 0.57x
    // of SDPA's time in a training step's profile, copies included (docs/precision.md).
    if (x.is_cpu() && !packed.defined() && !windowed && !(is_training() && dropout_ > 0) &&
        cos.dim() == 2 && !torch::jit::tracer::isTracing()) {
      torch::Tensor y = FusedCausal(x, cos, sin);
      if (y.defined()) return o_proj->forward(y);
    }
    auto [q, k, v] = Project(x, cos, sin);
    torch::Tensor allowed = packed;
    if (windowed) {  // Mistral: query i sees keys i - window < j <= i
      torch::Tensor i = torch::arange(length, x.options().dtype(torch::kInt64)).unsqueeze(1);
      torch::Tensor j = i.view({1, length});
      torch::Tensor near = (j <= i).logical_and(j > i - window);
      allowed = allowed.defined() ? allowed.logical_and(near) : near;
    }
    if (!allowed.defined()) return Attend(x, q, k, v, KvCache::Mask{std::nullopt, /*causal=*/true});
    KvCache::Mask mask;
    mask.bias = torch::zeros(allowed.sizes(), q.options())
                    .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
    return Attend(x, q, k, v, mask);
  }
  // Generation: x [B, t, D] after the cache's positions; cos and sin [B, 1, t, head_dim]; `mask`
  // the cache's for this layer.
  torch::Tensor forward_cached(const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, KvCache& cache, size_t layer,
                               const KvCache::Mask& mask) {
    torch::Tensor qkv = fused_.Forward({q_proj.get(), k_proj.get(), v_proj.get()}, x, kFuseAtMost);
    if (!qkv.defined()) {
      auto [q, k, v] = Project(x, cos, sin);
      auto [keys, values] = cache.Append(layer, k, v);
      return Attend(x, q, keys, values, mask);
    }
    // [B, t, heads + 2 kv_heads, hd]: the queries' and keys' heads rotated in one go.
    const int64_t batch = x.size(0), length = x.size(1);
    qkv = qkv.view({batch, length, heads_ + 2 * kv_heads_, head_dim_});
    torch::Tensor qk = qkv.narrow(2, 0, heads_ + kv_heads_);
    if (q_norm) {
      qk = torch::cat({q_norm->forward(qkv.narrow(2, 0, heads_)),
                       k_norm->forward(qkv.narrow(2, heads_, kv_heads_))},
                      2);
    }
    torch::Tensor c = cos.transpose(1, 2), s = sin.transpose(1, 2);  // [B, t, 1, hd]
    torch::Tensor rotated = Rotate(qk, c, s);
    auto [keys, values] =
        cache.Append(layer, rotated.narrow(2, heads_, kv_heads_).transpose(1, 2),
                     qkv.narrow(2, heads_ + kv_heads_, kv_heads_).transpose(1, 2));
    torch::Tensor q = rotated.narrow(2, 0, heads_).transpose(1, 2);
    return Attend(x, q, keys, values, mask);
  }
  AutocastLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};  // Qwen3's, over each head's hd values

 private:
  // q [B, heads, T, hd], k and v [B, kv_heads, T, hd], q and k rotated.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> Project(const torch::Tensor& x,
                                                                  const torch::Tensor& cos,
                                                                  const torch::Tensor& sin) {
    // The batch as -1, so that a trace (kiln export format=torchscript) takes any batch size.
    const int64_t length = x.size(1);
    auto heads = [&](const torch::Tensor& t, int64_t n) {
      return t.view({-1, length, n, head_dim_});
    };
    // Rotate's cos and sin: [T, hd] or [B, T, 1, hd].
    torch::Tensor c = cos.dim() == 4 ? cos.transpose(1, 2) : cos;
    torch::Tensor s = sin.dim() == 4 ? sin.transpose(1, 2) : sin;
    auto rotated = [&](const torch::Tensor& t, int64_t n, RmsNorm& norm) {
      torch::Tensor h = heads(t, n);
      return Rotate(norm ? norm->forward(h) : h, c, s).transpose(1, 2);
    };
    torch::Tensor q = rotated(q_proj->forward(x), heads_, q_norm);
    torch::Tensor k = rotated(k_proj->forward(x), kv_heads_, k_norm);
    torch::Tensor v = heads(v_proj->forward(x), kv_heads_).transpose(1, 2);
    return {q, k, v};
  }
  // Causal attention over the whole row on the CPU through kiln's kernel (causal_attention.h,
  // as the GPT's blocks run it): q and k rotated, then q, k and v side by side [B, T, (heads + 2
  // kv_heads) hd], all in the projections' dtype (bf16 under autocast, as SDPA's autocast casts
  // them); the kernel reads each key/value head for its query heads in place. Returns [B, T,
  // heads * hd], or undefined where the kernel cannot take them.
  torch::Tensor FusedCausal(const torch::Tensor& x, const torch::Tensor& cos,
                            const torch::Tensor& sin) {
    torch::Tensor v = v_proj->forward(x);
    torch::Tensor q = q_proj->forward(x), k = k_proj->forward(x);
    if (q_norm) {  // [B, T, n hd] normalized head by head, as one [B, T, n, hd] pass each
      q = q_norm->forward(q.view({x.size(0), x.size(1), heads_, head_dim_})).flatten(2);
      k = k_norm->forward(k.view({x.size(0), x.size(1), kv_heads_, head_dim_})).flatten(2);
    }
    torch::Tensor qkv = RotateQkv(q, k, v, cos, sin, heads_, kv_heads_);
    if (!CausalAttentionSupports(qkv, heads_, kv_heads_)) return {};
    return CausalAttention(qkv, heads_, kv_heads_);
  }
  // The queries' attention over keys and values, through o_proj. Each key/value head serves
  // heads / kv_heads query heads in turn (SDPA's grouped-query attention).
  torch::Tensor Attend(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& k,
                       const torch::Tensor& v, const KvCache::Mask& mask) {
    torch::Tensor y = at::scaled_dot_product_attention(
        q, k, v, mask.bias, is_training() ? dropout_ : 0.0, mask.causal, 1.0 / std::sqrt(head_dim_),
        /*enable_gqa=*/kv_heads_ != heads_);
    return o_proj->forward(y.transpose(1, 2).reshape({-1, x.size(1), heads_ * head_dim_}));
  }

  int64_t heads_, kv_heads_, head_dim_;
  double dropout_;
  FusedLinears fused_;  // q, k and v in generation
};
TORCH_MODULE(LlamaAttention);

// SwiGLU: down(silu(gate(x)) * up(x)).
class LlamaMlpImpl : public torch::nn::Module {
 public:
  explicit LlamaMlpImpl(const LlamaArchitecture& a) {
    auto options = [&](int64_t in, int64_t out) {
      return torch::nn::LinearOptions(in, out).bias(a.mlp_bias);
    };
    gate_proj = register_module("gate_proj", AutocastLinear(options(a.dim, a.mlp_dim)));
    up_proj = register_module("up_proj", AutocastLinear(options(a.dim, a.mlp_dim)));
    down_proj = register_module("down_proj", AutocastLinear(options(a.mlp_dim, a.dim)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return down_proj->forward(SiluMul(gate_proj->forward(x), up_proj->forward(x)));
  }
  // Generation: gate and up from one product where they are small.
  torch::Tensor forward_cached(const torch::Tensor& x) {
    torch::Tensor gate_up = fused_.Forward({gate_proj.get(), up_proj.get()}, x, kFuseAtMost);
    if (!gate_up.defined()) return forward(x);
    auto halves = gate_up.chunk(2, -1);
    return down_proj->forward(torch::silu(halves[0]) * halves[1]);
  }
  AutocastLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  FusedLinears fused_;
};
TORCH_MODULE(LlamaMlp);

class LlamaLayerImpl : public torch::nn::Module {
 public:
  LlamaLayerImpl(const LlamaArchitecture& a, int64_t window) : window_(window) {
    self_attn = register_module("self_attn", LlamaAttention(a));
    mlp = register_module("mlp", LlamaMlp(a));
    input_layernorm = register_module("input_layernorm", RmsNorm(a.dim, a.rms_norm_eps));
    post_attention_layernorm =
        register_module("post_attention_layernorm", RmsNorm(a.dim, a.rms_norm_eps));
  }
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& packed) {
    x = ResidualAdd(x, self_attn->forward(input_layernorm->forward(x), cos, sin, window_, packed));
    return ResidualAdd(x, mlp->forward(post_attention_layernorm->forward(x)));
  }
  torch::Tensor forward_cached(torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin,
                               KvCache& cache, size_t index, const KvCache::Mask& mask) {
    x = x + self_attn->forward_cached(input_layernorm->forward(x), cos, sin, cache, index, mask);
    return x + mlp->forward_cached(post_attention_layernorm->forward(x));
  }
  int64_t window() const { return window_; }
  LlamaAttention self_attn{nullptr};
  LlamaMlp mlp{nullptr};
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};

 private:
  int64_t window_;
};
TORCH_MODULE(LlamaLayer);

// LlamaModel: embeddings, layers, final norm; forward(ids [B, T]) -> hidden states [B, T, D].
class LlamaBodyImpl : public torch::nn::Module, public distributed::ShardingUnits {
 public:
  explicit LlamaBodyImpl(const LlamaArchitecture& a) : inv_freq_(InverseFrequencies(a)) {
    embed_tokens = register_module("embed_tokens", LoraEmbedding(a.vocab_size, a.dim));
    embed_tokens->token_table = true;
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < a.depth; ++i) {
      layers_.push_back(LlamaLayer(a, a.windows.empty() ? 0 : a.windows[i]));
      layers->push_back(layers_.back());
      distributed::KeepOwnPieces(*layers_.back());  // fsdp: this worker's rows of the layer
    }
    norm = register_module("norm", RmsNorm(a.dim, a.rms_norm_eps));
  }
  // `segments` [B, T]: packed rows (CausalLm::forward_packed); undefined: one sequence a row.
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& segments = {}) {
    torch::Tensor x = embed_tokens->forward(ids);
    // Positions 0..T-1: cos and sin [T, head_dim]; packed rows' own: [B, 1, T, head_dim]. (Plain
    // variables, not a structured binding: the checkpointing lambda captures them, which clang 14
    // refuses for bindings.)
    torch::Tensor cos, sin, packed;
    if (segments.defined()) {
      PackedRows rows = Unpack(segments);
      std::tie(cos, sin) = Rotations(rows.positions, x.scalar_type());
      cos = cos.unsqueeze(1);
      sin = sin.unsqueeze(1);
      packed = rows.allowed;
    } else {
      std::tie(cos, sin) = Rotations(
          torch::arange(ids.size(1), torch::TensorOptions().device(ids.device())), x.scalar_type());
    }
    const bool recompute = activation_checkpointing && is_training();
    for (LlamaLayer& layer : layers_) {
      x = distributed::RunUnit(
          *layer,
          [&](const torch::Tensor& in) {
            if (!recompute) return layer->forward(in, cos, sin, packed);
            return Checkpointed(
                [layer, cos, sin, packed](const torch::Tensor& again) mutable {
                  return layer->forward(again, cos, sin, packed);
                },
                in);
          },
          x);
    }
    return norm->forward(x);
  }
  // trainer.strategy=fsdp shards it layer by layer.
  std::vector<std::shared_ptr<torch::nn::Module>> sharding_units() const override {
    std::vector<std::shared_ptr<torch::nn::Module>> units;
    for (const auto& layer : layers_) units.push_back(layer.ptr());
    return units;
  }
  torch::Tensor forward_cached(const torch::Tensor& ids, const torch::Tensor& positions,
                               KvCache& cache) {
    torch::Tensor x = embed_tokens->forward(ids);
    auto [cos, sin] = Rotations(positions, x.scalar_type());  // [B, t, hd]
    cos = cos.unsqueeze(1);
    sin = sin.unsqueeze(1);
    std::map<int64_t, KvCache::Mask> masks;  // one per window size
    for (size_t i = 0; i < layers_.size(); ++i) {
      const int64_t window = layers_[i]->window();
      if (masks.count(window) == 0) masks[window] = cache.AttentionMask(x.scalar_type(), window);
      x = layers_[i]->forward_cached(x, cos, sin, cache, i, masks[window]);
    }
    return norm->forward(x);
  }
  LoraEmbedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RmsNorm norm{nullptr};
  // Each layer's activations recomputed in the backward (components/models/checkpointing.h).
  bool activation_checkpointing = false;

 private:
  // cos and sin of the rotary angles of `positions` (any shape): [..., head_dim], the angles in
  // float32 as transformers computes them, the results cast to `dtype`.
  std::pair<torch::Tensor, torch::Tensor> Rotations(const torch::Tensor& positions,
                                                    torch::ScalarType dtype) const {
    torch::Tensor inv = inv_freq_.to(positions.device());
    torch::Tensor angles = positions.to(torch::kFloat32).unsqueeze(-1) * inv;
    angles = torch::cat({angles, angles}, -1);
    return {angles.cos().to(dtype), angles.sin().to(dtype)};
  }

  torch::Tensor inv_freq_;  // not a buffer: Hugging Face's files do not hold it
  std::vector<LlamaLayer> layers_;
};
TORCH_MODULE(LlamaBody);

class Llama : public CausalLm {
 public:
  explicit Llama(const LlamaArchitecture& a) : a_(a) {
    model = register_module("model", LlamaBody(a));
    if (!a.tie_weights) {
      lm_head = register_module(
          "lm_head", AutocastLinear(torch::nn::LinearOptions(a.dim, a.vocab_size).bias(false)));
      lm_head->token_head = true;
    } else {
      // A LoRA update merged into the tied table leaves the head the base's (MergeLora).
      model->embed_tokens->untie_head = [this](const torch::Tensor& base) {
        lm_head = register_module(
            "lm_head", AutocastLinear(torch::nn::LinearOptions(a_.dim, a_.vocab_size).bias(false)));
        lm_head->weight.set_data(base);
        lm_head->weight.set_requires_grad(false);
        a_.tie_weights = false;
      };
    }
    // transformers' _init_weights: N(0, initializer_range) for every matrix, zero biases; the
    // RMSNorm weights stay 1. A layer built in pieces (fsdp) draws as the whole model does.
    torch::NoGradGuard no_grad;
    for (auto& item : named_parameters()) {
      const bool norm = item.key().find("norm") != std::string::npos;
      distributed::InitWhole(item.value(), [&](torch::Tensor& whole) {
        if (whole.dim() == 2) {
          whole.normal_(0.0, a.initializer_range);
        } else if (!norm) {
          whole.zero_();
        }
      });
    }
  }
  torch::Tensor forward(torch::Tensor input) override { return Head(model->forward(input)); }
  torch::Tensor forward_packed(const torch::Tensor& ids, const torch::Tensor& segments) override {
    return Head(model->forward(ids, segments));
  }
  torch::Tensor forward_cached(const torch::Tensor& ids, const torch::Tensor& positions,
                               KvCache& cache) override {
    return Head(model->forward_cached(ids, positions, cache));
  }
  TokenIds token_ids() const override { return {a_.vocab_size, "vocab_size"}; }
  int64_t max_positions() const override { return a_.max_positions; }
  const LlamaArchitecture& architecture() const { return a_; }

  LlamaBody model{nullptr};
  AutocastLinear lm_head{nullptr};

 private:
  torch::Tensor Head(const torch::Tensor& x) {
    return a_.tie_weights ? torch::linear(x, model->embed_tokens->table()) : lm_head->forward(x);
  }
  LlamaArchitecture a_;
};

// config.json (llama, mistral, qwen2 or qwen3) as a LlamaArchitecture; what kiln's layers do not
// compute (another activation, a rope scaling other than linear and llama3, a partial rotary
// factor, tensor-parallel pretraining slices) is refused in one line.
absl::StatusOr<LlamaArchitecture> ReadArchitecture(const HfConfig& c) {
  LlamaArchitecture a;
  a.model_type = c.model_type();
  if (a.model_type != "llama" && a.model_type != "mistral" && a.model_type != "qwen2" &&
      a.model_type != "qwen3") {
    return c.RefuseModelType(
        "model=llama reads Llama, Mistral, Qwen2 and Qwen3 checkpoints (model_type llama, "
        "mistral, qwen2 or qwen3)");
  }
  KILN_ASSIGN_OR_RETURN(a.vocab_size, c.Int("vocab_size"));
  KILN_ASSIGN_OR_RETURN(a.dim, c.Int("hidden_size"));
  KILN_ASSIGN_OR_RETURN(a.depth, c.Int("num_hidden_layers"));
  KILN_ASSIGN_OR_RETURN(a.heads, c.Int("num_attention_heads"));
  KILN_ASSIGN_OR_RETURN(a.mlp_dim, c.Int("intermediate_size"));
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> kv, c.OptionalInt("num_key_value_heads"));
  a.kv_heads = kv.value_or(a.heads);
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, c.OptionalInt("head_dim"));
  a.head_dim = head_dim.value_or(a.heads > 0 ? a.dim / a.heads : 0);
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> positions, c.OptionalInt("max_position_embeddings"));
  a.max_positions = positions.value_or(2048);
  KILN_ASSIGN_OR_RETURN(std::optional<double> eps, c.OptionalFloat("rms_norm_eps"));
  a.rms_norm_eps = eps.value_or(1e-6);
  KILN_ASSIGN_OR_RETURN(std::optional<double> dropout, c.OptionalFloat("attention_dropout"));
  a.attention_dropout = dropout.value_or(0.0);
  KILN_ASSIGN_OR_RETURN(std::optional<double> init, c.OptionalFloat("initializer_range"));
  a.initializer_range = init.value_or(0.02);
  a.tie_weights = c.Bool("tie_word_embeddings", false);
  KILN_ASSIGN_OR_RETURN(a.bos_token_id, c.OptionalInt("bos_token_id"));
  KILN_ASSIGN_OR_RETURN(a.eos_token_id, c.OptionalInt("eos_token_id"));
  if (a.model_type == "qwen2") {
    a.qkv_bias = true;  // Qwen2's q, k and v have biases, its o_proj none; config.json says neither
  } else if (a.model_type == "llama") {
    a.qkv_bias = a.o_bias = c.Bool("attention_bias", false);
    a.mlp_bias = c.Bool("mlp_bias", false);
  } else if (a.model_type == "qwen3") {
    a.qkv_bias = a.o_bias = c.Bool("attention_bias", false);
    a.qk_norm = true;
  }
  if (a.vocab_size < 1 || a.dim < 1 || a.depth < 1 || a.heads < 1 || a.kv_heads < 1 ||
      a.head_dim < 1 || a.head_dim % 2 != 0 || a.mlp_dim < 1 || a.heads % a.kv_heads != 0) {
    return c.Refuse("num_key_value_heads",
                    "sizes must be positive, num_attention_heads a multiple of "
                    "num_key_value_heads, and the head size even");
  }
  if (std::string act = c.String("hidden_act", "silu"); act != "silu")
    return c.Refuse("hidden_act", "kiln's Llama layers compute SwiGLU with silu");
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> tp, c.OptionalInt("pretraining_tp"));
  if (tp.value_or(1) != 1)
    return c.Refuse("pretraining_tp", "kiln computes each projection whole (pretraining_tp 1)");

  // Rope: transformers 5 writes rope_parameters (theta inside); older files rope_theta and
  // rope_scaling (with `type` or `rope_type`).
  KILN_ASSIGN_OR_RETURN(std::optional<HfConfig> rope, c.Object("rope_parameters"));
  std::optional<HfConfig> scaling;
  if (rope) {
    scaling = rope;
  } else {
    KILN_ASSIGN_OR_RETURN(scaling, c.Object("rope_scaling"));
  }
  const HfConfig& theta_from = rope ? *rope : c;
  KILN_ASSIGN_OR_RETURN(std::optional<double> theta, theta_from.OptionalFloat("rope_theta"));
  a.rope_theta = theta.value_or(10000.0);
  if (scaling) {
    const std::string type_key = scaling->String("rope_type", "").empty() ? "type" : "rope_type";
    a.rope.type = scaling->String(type_key, "default");
    if (a.rope.type != "default" && a.rope.type != "linear" && a.rope.type != "llama3")
      return scaling->Refuse(type_key, "kiln computes rope types default, linear and llama3");
    KILN_ASSIGN_OR_RETURN(std::optional<double> partial,
                          scaling->OptionalFloat("partial_rotary_factor"));
    if (partial.value_or(1.0) != 1.0)
      return scaling->Refuse("partial_rotary_factor", "kiln rotates the whole head");
    if (a.rope.type != "default") {
      KILN_ASSIGN_OR_RETURN(a.rope.factor, scaling->Float("factor"));
    }
    if (a.rope.type == "llama3") {
      KILN_ASSIGN_OR_RETURN(a.rope.low_freq_factor, scaling->Float("low_freq_factor"));
      KILN_ASSIGN_OR_RETURN(a.rope.high_freq_factor, scaling->Float("high_freq_factor"));
      KILN_ASSIGN_OR_RETURN(a.rope.original_max_positions,
                            scaling->Int("original_max_position_embeddings"));
      if (a.rope.high_freq_factor <= a.rope.low_freq_factor || a.rope.low_freq_factor <= 0)
        return scaling->Refuse("high_freq_factor", "must exceed low_freq_factor, both positive");
    }
    if (a.rope.factor <= 0) return scaling->Refuse("factor", "must be positive");
  }

  // Sliding windows: Mistral's on every layer; Qwen2's and Qwen3's on the layers layer_types marks
  // (when use_sliding_window is true).
  KILN_ASSIGN_OR_RETURN(std::optional<int64_t> window, c.OptionalInt("sliding_window"));
  if (window && *window < 1) return c.Refuse("sliding_window", "must be positive or null");
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> types, c.Strings("layer_types"));
  if (!types.empty() && static_cast<int64_t>(types.size()) != a.depth)
    return c.Refuse("layer_types", absl::StrCat("must name each of the ", a.depth, " layers"));
  a.windows.assign(a.depth, 0);
  for (int64_t i = 0; i < a.depth; ++i) {
    bool sliding = a.model_type == "mistral";
    if (!types.empty()) {
      if (types[i] != "full_attention" && types[i] != "sliding_attention")
        return c.Refuse("layer_types", "kiln's layers are full_attention or sliding_attention");
      sliding = types[i] == "sliding_attention";
    }
    const bool qwen = a.model_type == "qwen2" || a.model_type == "qwen3";
    if (qwen && !c.Bool("use_sliding_window", false)) sliding = false;
    if (sliding && window) a.windows[i] = *window;
  }
  return a;
}

// The Llama options: with `pretrained` the folder gives every size (an option also written must
// say the same); without it the options do, with these defaults.
struct LlamaOptions {
  std::string pretrained;
  std::optional<int64_t> vocab_size, dim, depth, heads, kv_heads, head_dim, mlp_dim, max_positions;
  std::optional<double> rope_theta, rms_norm_eps, dropout;
  std::optional<bool> tie_weights, qk_norm;
  bool activation_checkpointing = false;
};

// The architecture the options describe: config.json's, checked against any size also given, or
// the options' own.
absl::StatusOr<LlamaArchitecture> Architecture(const LlamaOptions& o,
                                               const OptionContext& context) {
  struct Size {
    const char* option;
    const std::optional<int64_t>& value;
    int64_t LlamaArchitecture::*field;
    const char* hf_key;
  };
  const std::vector<Size> sizes = {
      {"vocab_size", o.vocab_size, &LlamaArchitecture::vocab_size, "vocab_size"},
      {"dim", o.dim, &LlamaArchitecture::dim, "hidden_size"},
      {"depth", o.depth, &LlamaArchitecture::depth, "num_hidden_layers"},
      {"heads", o.heads, &LlamaArchitecture::heads, "num_attention_heads"},
      {"kv_heads", o.kv_heads, &LlamaArchitecture::kv_heads, "num_key_value_heads"},
      {"head_dim", o.head_dim, &LlamaArchitecture::head_dim, "head_dim"},
      {"mlp_dim", o.mlp_dim, &LlamaArchitecture::mlp_dim, "intermediate_size"},
      {"max_positions", o.max_positions, &LlamaArchitecture::max_positions,
       "max_position_embeddings"}};
  if (!o.pretrained.empty()) {
    KILN_ASSIGN_OR_RETURN(HfConfig hf, HfConfig::Read(o.pretrained));
    KILN_ASSIGN_OR_RETURN(LlamaArchitecture a, ReadArchitecture(hf));
    std::vector<SizeBesideFolder> beside;
    for (const Size& s : sizes) beside.push_back({s.option, s.value, a.*s.field, s.hf_key});
    KILN_RETURN_IF_ERROR(CheckSizesBesideFolder(beside, o.pretrained, context));
    if (o.tie_weights && *o.tie_weights != a.tie_weights)
      return context.Refuse("tie_weights",
                            absl::StrCat(a.tie_weights ? "true" : "false", " as ", o.pretrained,
                                         "/config.json's tie_word_embeddings says"));
    if (o.qk_norm && *o.qk_norm != a.qk_norm)
      return context.Refuse("qk_norm",
                            absl::StrCat(a.qk_norm ? "true" : "false", " as ", o.pretrained,
                                         "/config.json's model_type ", a.model_type, " says"));
    if (o.rope_theta && *o.rope_theta != a.rope_theta)
      return context.Refuse("rope_theta",
                            absl::StrCat(a.rope_theta, " as ", o.pretrained, "/config.json says"));
    if (o.rms_norm_eps && *o.rms_norm_eps != a.rms_norm_eps)
      return context.Refuse(
          "rms_norm_eps", absl::StrCat(a.rms_norm_eps, " as ", o.pretrained, "/config.json says"));
    if (o.dropout) a.attention_dropout = *o.dropout;  // a training choice, not the checkpoint's
    return a;
  }
  LlamaArchitecture a;
  if (!o.vocab_size)
    return context.Refuse("vocab_size",
                          "set (the tokenizer's vocab_size) unless model.pretrained "
                          "names a Hugging Face folder");
  for (const Size& s : sizes) {
    if (s.value) a.*s.field = *s.value;
  }
  if (!o.head_dim) {
    if (a.dim % a.heads != 0)
      return context.Refuse(
          "dim", absl::StrCat("a multiple of heads (", a.heads, ") unless head_dim is set"));
    a.head_dim = a.dim / a.heads;
  }
  if (!o.kv_heads) a.kv_heads = a.heads;
  a.rope_theta = o.rope_theta.value_or(a.rope_theta);
  a.rms_norm_eps = o.rms_norm_eps.value_or(a.rms_norm_eps);
  a.attention_dropout = o.dropout.value_or(0.0);
  a.tie_weights = o.tie_weights.value_or(false);
  a.qk_norm = o.qk_norm.value_or(false);
  if (a.qk_norm) a.model_type = "qwen3";  // the family whose layers these are, for export
  a.windows.assign(a.depth, 0);
  if (a.heads % a.kv_heads != 0)
    return context.Refuse("kv_heads", absl::StrCat("a divisor of heads (", a.heads, ")"));
  if (a.head_dim % 2 != 0 || a.head_dim < 2)
    return context.Refuse("head_dim", "even (rotary embeddings turn pairs); dim / heads if unset");
  return a;
}

std::string Describe(const LlamaArchitecture& a) {
  return absl::StrCat(a.model_type, ", ", a.depth, " layers, dim ", a.dim, ", ", a.heads,
                      " heads (", a.kv_heads, " key/value), vocab ", a.vocab_size, ", rope ",
                      a.rope.type);
}

KILN_REGISTER_BOUND(
    Model, "llama",
    "Llama-family decoder LM (Llama, Mistral, Qwen2, Qwen3): RoPE, RMSNorm, SwiGLU, grouped-query "
    "attention; Hugging Face's names; from a folder (pretrained) or from the sizes; "
    "trainer.strategy=fsdp shards it layer by layer",
    OptionBinding<LlamaOptions>()
        .Field("pretrained", &LlamaOptions::pretrained,
               "folder save_pretrained wrote (config.json, model.safetensors or a sharded index): "
               "the sizes and weights come from it; empty: from the options below")
        .Field("vocab_size", &LlamaOptions::vocab_size,
               "token ids are below it (the tokenizer's vocab_size)", AtLeast(1))
        .Field("dim", &LlamaOptions::dim, "hidden size (256 when unset)", AtLeast(1))
        .Field("depth", &LlamaOptions::depth, "decoder layers (4 when unset)", AtLeast(1))
        .Field("heads", &LlamaOptions::heads, "query heads (4 when unset)", AtLeast(1))
        .Field("kv_heads", &LlamaOptions::kv_heads,
               "key/value heads, a divisor of heads (grouped-query attention; heads when unset)",
               AtLeast(1))
        .Field("head_dim", &LlamaOptions::head_dim, "size of each head (dim / heads when unset)",
               AtLeast(2))
        .Field("mlp_dim", &LlamaOptions::mlp_dim, "SwiGLU hidden width (688 when unset)",
               AtLeast(1))
        .Field("max_positions", &LlamaOptions::max_positions, "longest context (2048 when unset)",
               AtLeast(1))
        .Field("rope_theta", &LlamaOptions::rope_theta, "rotary base (10000 when unset)",
               GreaterThan(0))
        .Field("rms_norm_eps", &LlamaOptions::rms_norm_eps, "RMSNorm epsilon (1e-6 when unset)",
               GreaterThan(0))
        .Field("dropout", &LlamaOptions::dropout,
               "dropout on the attention weights (the folder's attention_dropout when unset)",
               InHalfOpenRange(0, 1))
        .Field("tie_weights", &LlamaOptions::tie_weights,
               "the output layer reuses the token embedding (false when unset)")
        .Field("qk_norm", &LlamaOptions::qk_norm,
               "an RMSNorm over each query and key head before the rotation, as Qwen3's "
               "(false when unset; exported as Qwen3)")
        .Field("activation_checkpointing", &LlamaOptions::activation_checkpointing,
               "recompute each layer's activations in the backward: less memory, one more "
               "forward"),
    [](const LlamaOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Model>> {
      KILN_ASSIGN_OR_RETURN(LlamaArchitecture a, Architecture(o, context));
      auto build = [&a] { return std::make_shared<Llama>(a); };
      std::shared_ptr<Llama> model;
      if (o.pretrained.empty()) {
        model = build();
      } else {
        KILN_ASSIGN_OR_RETURN(model, BuildFromFolder(o.pretrained, Describe(a), build));
      }
      model->model->activation_checkpointing = o.activation_checkpointing;
      if (!o.pretrained.empty()) {
        KILN_ASSIGN_OR_RETURN(auto file, ReadHfWeights(o.pretrained));
        if (a.tie_weights) file.erase("lm_head.weight");  // saved beside a tied head by some
        KILN_RETURN_IF_ERROR(LoadHfState(file, *model, o.pretrained, Describe(a)));
      }
      return std::shared_ptr<Model>(model);
    });

// A Llama-family model as a Hugging Face folder: config.json for its model_type, the tensors
// under the names they already have.
absl::StatusOr<HfFolder> LlamaFolder(torch::nn::Module& module) {
  auto* llama = dynamic_cast<Llama*>(&module);
  if (llama == nullptr) return absl::InternalError("format=hf: the module is not kiln's llama");
  const LlamaArchitecture& a = llama->architecture();
  static const std::map<std::string, std::string> kArchitectures = {
      {"llama", "LlamaForCausalLM"},
      {"mistral", "MistralForCausalLM"},
      {"qwen2", "Qwen2ForCausalLM"},
      {"qwen3", "Qwen3ForCausalLM"}};
  nlohmann::ordered_json c;
  c["architectures"] = {kArchitectures.at(a.model_type)};
  c["model_type"] = a.model_type;
  c["vocab_size"] = a.vocab_size;
  c["hidden_size"] = a.dim;
  c["num_hidden_layers"] = a.depth;
  c["num_attention_heads"] = a.heads;
  c["num_key_value_heads"] = a.kv_heads;
  c["head_dim"] = a.head_dim;
  c["intermediate_size"] = a.mlp_dim;
  c["max_position_embeddings"] = a.max_positions;
  c["hidden_act"] = "silu";
  c["rms_norm_eps"] = a.rms_norm_eps;
  c["attention_dropout"] = a.attention_dropout;
  c["initializer_range"] = a.initializer_range;
  c["tie_word_embeddings"] = a.tie_weights;
  nlohmann::ordered_json rope = {{"rope_theta", a.rope_theta}, {"rope_type", a.rope.type}};
  if (a.rope.type != "default") rope["factor"] = a.rope.factor;
  if (a.rope.type == "llama3") {
    rope["low_freq_factor"] = a.rope.low_freq_factor;
    rope["high_freq_factor"] = a.rope.high_freq_factor;
    rope["original_max_position_embeddings"] = a.rope.original_max_positions;
  }
  c["rope_parameters"] = rope;
  if (a.model_type == "llama" || a.model_type == "qwen3") c["attention_bias"] = a.qkv_bias;
  if (a.model_type == "llama") c["mlp_bias"] = a.mlp_bias;
  int64_t window = 0;
  std::vector<std::string> types;
  for (int64_t w : a.windows) {
    window = std::max(window, w);
    types.push_back(w > 0 ? "sliding_attention" : "full_attention");
  }
  if (a.model_type == "mistral")
    c["sliding_window"] = window > 0 ? nlohmann::json(window) : nullptr;
  if (a.model_type == "qwen2" || a.model_type == "qwen3") {
    c["use_sliding_window"] = window > 0;
    c["sliding_window"] = window > 0 ? nlohmann::json(window) : nullptr;
    c["layer_types"] = types;
  }
  c["bos_token_id"] = a.bos_token_id ? nlohmann::json(*a.bos_token_id) : nullptr;
  c["eos_token_id"] = a.eos_token_id ? nlohmann::json(*a.eos_token_id) : nullptr;
  c["dtype"] = "float32";
  HfFolder folder;
  folder.config_json = c.dump(2) + "\n";
  folder.tensors = HfTensors(module, {"model.", "lm_head."});
  return folder;
}

const bool kLlamaExporter = [] {
  RegisterHfExporter("llama", LlamaFolder);
  return true;
}();

}  // namespace
}  // namespace kiln
