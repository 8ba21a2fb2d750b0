// kiln's own CPU kernels against what LibTorch 2.x now offers for the same work, forward and
// backward, on the shapes kiln's experiments train with (bench/kernels_speed.sh runs it):
//   attention  kiln::CausalAttention (c_attn's [B, T, 3D] in place) against
//              at::scaled_dot_product_attention(is_causal) on the same q, k, v (mobydick_gpt:
//              B 32, T 128, D 128, 4 heads), float32 and bf16
//   gelu       kiln::GeluTanh against at::gelu(x, "tanh") (the GPT's MLP: [32, 128, 512])
//   silu_mul   kiln::SiluMul against silu(gate) * up (Llama's MLP: [32, 128, 344] each)
//   layernorm  kiln::LayerNormToBf16 against layer_norm then the cast to bf16 (the GPT block's norm
//              under bf16 autocast: [32, 128, 128] float32 rows); rmsnorm: kiln::RmsNormalize
//              against the composite, float32
//   bn_pool    kiln::BatchNormPoolRelu against batch_norm -> max_pool2d -> relu (the CNN's two
//              blocks, bf16 channels-last activations with float32 BatchNorm parameters, training
//              mode; float32 runs the composition on both sides, so it is not timed)
//   adamw      torch::optim::AdamW::step against at::_fused_adamw_ (the GPT's parameters; kiln's
//              adam and adamw now step with the latter)
// Each round times both sides once (REPS calls each, after warm-up), alternating which goes first;
// the figure is the median over ROUNDS of (LibTorch's time / kiln's time): above 1, kiln's is
// faster.
//   kernels_speed [ROUNDS] [REPS] [THREADS]
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "components/models/batch_norm_pool_relu.h"
#include "components/models/causal_attention.h"
#include "components/models/gelu_tanh.h"
#include "components/models/llama_kernels.h"

namespace {

using Clock = std::chrono::steady_clock;

double TimeMs(const std::function<void()>& fn, int reps) {
  auto start = Clock::now();
  for (int i = 0; i < reps; ++i) fn();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count() / reps;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Compare(const std::string& name, const std::function<void()>& kiln,
             const std::function<void()>& aten, int rounds, int reps) {
  for (int i = 0; i < 3; ++i) {
    kiln();
    aten();
  }
  std::vector<double> k, a, ratio;
  for (int r = 0; r < rounds; ++r) {
    double tk, ta;
    if (r % 2 == 0) {
      tk = TimeMs(kiln, reps);
      ta = TimeMs(aten, reps);
    } else {
      ta = TimeMs(aten, reps);
      tk = TimeMs(kiln, reps);
    }
    k.push_back(tk);
    a.push_back(ta);
    ratio.push_back(ta / tk);
  }
  std::printf("%-28s kiln %8.3f ms   libtorch %8.3f ms   libtorch/kiln %5.2fx\n", name.c_str(),
              Median(k), Median(a), Median(ratio));
}

// Forward and backward of f(x) with a fixed upstream gradient.
std::function<void()> ForwardBackward(torch::Tensor x,
                                      std::function<torch::Tensor(const torch::Tensor&)> f) {
  x = x.detach().requires_grad_(true);
  auto grad = torch::randn_like(f(x)).detach();
  return [x, f, grad]() mutable {
    x.mutable_grad() = torch::Tensor();
    f(x).backward(grad);
  };
}

torch::Tensor SdpaCausal(const torch::Tensor& qkv, int64_t heads) {
  const int64_t b = qkv.size(0), t = qkv.size(1), d = qkv.size(2) / 3;
  auto parts = qkv.view({b, t, 3, heads, d / heads}).permute({2, 0, 3, 1, 4});  // [3, B, H, T, hd]
  auto y =
      at::scaled_dot_product_attention(parts[0], parts[1], parts[2], {}, 0.0, /*is_causal=*/true);
  return y.transpose(1, 2).reshape({b, t, d});
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
  at::set_num_threads(threads);
  torch::manual_seed(0);
  std::printf("LibTorch %s, %d threads, %d rounds of %d calls (forward + backward)\n",
              TORCH_VERSION, threads, rounds, reps);

  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const std::string suffix = dtype == torch::kFloat32 ? " f32" : " bf16";
    auto qkv = torch::randn({32, 128, 3 * 128}).to(dtype);
    Compare(
        "attention" + suffix,
        ForwardBackward(qkv, [](const torch::Tensor& x) { return kiln::CausalAttention(x, 4); }),
        ForwardBackward(qkv, [](const torch::Tensor& x) { return SdpaCausal(x, 4); }), rounds,
        reps);
    auto h = torch::randn({32, 128, 512}).to(dtype);
    Compare("gelu" + suffix,
            ForwardBackward(h, [](const torch::Tensor& x) { return kiln::GeluTanh(x); }),
            ForwardBackward(h, [](const torch::Tensor& x) { return torch::gelu(x, "tanh"); }),
            rounds, reps);
    // Llama's SwiGLU gate (mobydick_llama: [32, 128, 344] for gate and up, each its own product's
    // contiguous result, as LlamaMlp computes them).
    auto gate = torch::randn({32, 128, 344}).to(dtype), up = torch::randn({32, 128, 344}).to(dtype);
    auto swiglu = [up](bool fused) {
      torch::Tensor u = up.detach().requires_grad_(true);
      return [u, fused](const torch::Tensor& g) {
        return fused ? kiln::SiluMul(g, u) : torch::silu(g) * u;
      };
    };
    Compare("silu_mul" + suffix, ForwardBackward(gate, swiglu(true)),
            ForwardBackward(gate, swiglu(false)), rounds, reps);
  }

  // The GPT block's LayerNorm under bf16 autocast (float32 rows in, bf16 out: [32, 128, 128]),
  // against ATen's layer_norm then the cast; and the Llama's RMSNorm in float32.
  {
    auto x = torch::randn({32, 128, 128});
    auto w = torch::randn({128}).requires_grad_(true), b = torch::randn({128}).requires_grad_(true);
    Compare("layernorm f32->bf16",
            ForwardBackward(
                x, [&](const torch::Tensor& t) { return kiln::LayerNormToBf16(t, w, b, 1e-5); }),
            ForwardBackward(x,
                            [&](const torch::Tensor& t) {
                              return torch::layer_norm(t, {128}, w, b, 1e-5).to(torch::kBFloat16);
                            }),
            rounds, reps);
    Compare(
        "rmsnorm f32",
        ForwardBackward(x, [&](const torch::Tensor& t) { return kiln::RmsNormalize(t, w, 1e-5); }),
        ForwardBackward(x,
                        [&](const torch::Tensor& t) {
                          return w * (t * torch::rsqrt(t.pow(2).mean(-1, true) + 1e-5));
                        }),
        rounds, reps);
  }

  for (auto [channels, size] : {std::pair<int64_t, int64_t>{32, 28}, {64, 14}}) {
    torch::nn::BatchNorm2d bn_kiln(channels), bn_aten(channels);
    auto x = torch::randn({128, channels, size, size})
                 .to(torch::kBFloat16)
                 .contiguous(torch::MemoryFormat::ChannelsLast);
    const std::string name =
        "bn_pool_relu bf16 " + std::to_string(channels) + "x" + std::to_string(size);
    std::printf("  (%s takes kiln's fused kernel: %s)\n", name.c_str(),
                kiln::BatchNormPoolReluIsFused(x, bn_kiln)
                    ? "yes"
                    : "no, ATen's composition on both sides");
    Compare(name,
            ForwardBackward(x,
                            [bn_kiln](const torch::Tensor& t) mutable {
                              return kiln::BatchNormPoolRelu(t, bn_kiln);
                            }),
            ForwardBackward(x,
                            [bn_aten](const torch::Tensor& t) mutable {
                              // bf16 input, float32 BatchNorm parameters: ATen's mixed-type
                              // batch_norm, as under bf16-mixed autocast.
                              return torch::relu(torch::max_pool2d(bn_aten->forward(t), 2));
                            }),
            rounds, reps);
  }

  // The GPT's parameters (4 blocks of dim 128, MLP 512, vocab 128, 128 positions) with gradients.
  std::vector<std::vector<int64_t>> shapes = {{128, 128}, {128, 128}};
  for (int i = 0; i < 4; ++i) {
    for (auto s : std::vector<std::vector<int64_t>>{{128},
                                                    {128},
                                                    {384, 128},
                                                    {384},
                                                    {128, 128},
                                                    {128},
                                                    {128},
                                                    {128},
                                                    {512, 128},
                                                    {512},
                                                    {128, 512},
                                                    {128}}) {
      shapes.push_back(s);
    }
  }
  auto make_params = [&] {
    std::vector<torch::Tensor> params;
    for (const auto& s : shapes) {
      auto p = torch::randn(s).requires_grad_(true);
      p.mutable_grad() = torch::randn(s);
      params.push_back(p);
    }
    return params;
  };
  auto kiln_params = make_params();
  torch::optim::AdamW optimizer(kiln_params, torch::optim::AdamWOptions(2e-3).weight_decay(0.1));
  auto fused_params = make_params();
  std::vector<torch::Tensor> grads, exp_avgs, exp_avg_sqs, max_sqs, steps;
  for (auto& p : fused_params) {
    grads.push_back(p.grad());
    exp_avgs.push_back(torch::zeros_like(p));
    exp_avg_sqs.push_back(torch::zeros_like(p));
    steps.push_back(torch::zeros({}));
  }
  std::vector<torch::Tensor> data;
  for (auto& p : fused_params) data.push_back(p.detach());
  // kiln steps with the fused kernel since this comparison (components/optim/fused_adam.h): the
  // "kiln" column here is torch::optim::AdamW, what it stepped with before.
  Compare(
      "adamw: optim::AdamW / fused", [&] { optimizer.step(); },
      [&] {
        for (auto& s : steps) s.add_(1);
        at::_fused_adamw_(data, grads, exp_avgs, exp_avg_sqs, max_sqs, steps, 2e-3, 0.9, 0.999, 0.1,
                          1e-8,
                          /*amsgrad=*/false, /*maximize=*/false);
      },
      rounds, reps);
  return 0;
}
