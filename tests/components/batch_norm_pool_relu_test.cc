// The CNN block's fused BatchNorm -> max-pool 2x2 -> ReLU (bf16, channels-last, training) against
// ATen's composition: in float32 on the same bf16 values (the reference), and in bf16; and the
// fallback to that composition, bitwise, everywhere the kernel does not apply.
#include "components/models/batch_norm_pool_relu.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

namespace kiln {
namespace batch_norm_pool_relu_test {

torch::nn::BatchNorm2d MakeNorm(int64_t c, c10::optional<double> momentum) {
  torch::nn::BatchNorm2d bn(torch::nn::BatchNorm2dOptions(c).momentum(momentum));
  torch::NoGradGuard no_grad;
  // Some negative scales: their channels' maxima come from the inputs' minima.
  bn->weight.uniform_(-1.5, 1.5);
  bn->bias.uniform_(-0.5, 0.5);
  bn->running_mean.uniform_(-1, 1);
  bn->running_var.uniform_(0.5, 2);
  bn->num_batches_tracked.fill_(3);
  return bn;
}

torch::nn::BatchNorm2d Copy(const torch::nn::BatchNorm2d& bn) {
  return torch::nn::BatchNorm2d(std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(bn->clone()));
}

torch::Tensor Composed(const torch::Tensor& x, torch::nn::BatchNorm2d& bn) {
  return torch::max_pool2d(bn->forward(x), {2, 2}, {2, 2}, {0, 0}).relu_();
}

struct Result {
  torch::Tensor y, dx, dweight, dbias;
};

// Forward, then backward of sum(g * y); x becomes a leaf of its own.
Result RunBlock(const torch::Tensor& x, torch::nn::BatchNorm2d& bn, const torch::Tensor& g,
                bool fused) {
  torch::Tensor leaf = x.detach().clone().requires_grad_();
  torch::Tensor y = fused ? BatchNormPoolRelu(leaf, bn) : Composed(leaf, bn);
  y.backward(g.to(y.scalar_type()));
  return {y.detach(), leaf.grad(), bn->weight.grad().clone(), bn->bias.grad().clone()};
}

double MaxAbs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

// Largest |a - b| / (|b| + floor): the error in units of b's magnitude, `floor` keeping values
// near 0 from dominating.
double RelativeError(const torch::Tensor& a, const torch::Tensor& b, double floor) {
  torch::Tensor af = a.to(torch::kFloat64), bf = b.to(torch::kFloat64);
  return ((af - bf).abs() / (bf.abs() + floor)).max().item<double>();
}

double RelativeNormError(const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor af = a.to(torch::kFloat64), bf = b.to(torch::kFloat64);
  return ((af - bf).norm() / bf.norm()).item<double>();
}

struct Case {
  int64_t n, c, h, w;
  double offset;                   // added to the inputs: a mean far from 0
  c10::optional<double> momentum;  // none: BatchNorm's cumulative average
};

// The fused kernel computes in float32 and rounds its outputs once to bf16 (8 significant bits: at
// most 2^-8 relative), so against float32 ATen on the same bf16 inputs, outputs and input
// gradients are within 2^-8 relative (measured: 0.92-0.99 of it) plus float32 noise from the
// statistics (1e-5, with a floor of 1e-4 of the largest value for values near 0); the parameter
// gradients and running statistics, float32 sums in both, agree to 1e-4 and 1e-5 relative. ATen's
// own bf16 composition rounds the BatchNorm output before pooling, so values one bf16 step apart
// tie and the first wins: its outputs are within one bf16 step of the kernel's, but a tie sends a
// gradient to another input, so its gradients are compared as norms (measured: up to 2.6% for
// dx, 0.04% for the parameters; bounds 5% and 2%).
TEST(BatchNormPoolRelu, FusedBf16MatchesFloat32ReferenceAndAtenBf16) {
  for (const Case& k : {Case{4, 16, 12, 10, 0.0, 0.1}, Case{2, 8, 6, 6, 20.0, c10::nullopt},
                        Case{3, 64, 28, 28, -3.0, 0.3}}) {
    SCOPED_TRACE(testing::Message() << k.n << "x" << k.c << "x" << k.h << "x" << k.w);
    torch::manual_seed(11);
    torch::Tensor x16 = (torch::randn({k.n, k.c, k.h, k.w}) * 2 + k.offset)
                            .contiguous(at::MemoryFormat::ChannelsLast)
                            .to(torch::kBFloat16);
    torch::Tensor x32 = x16.to(torch::kFloat32);
    torch::nn::BatchNorm2d fused_bn = MakeNorm(k.c, k.momentum);
    torch::nn::BatchNorm2d aten_bn = Copy(fused_bn), reference_bn = Copy(fused_bn);
    if (!BatchNormPoolReluIsFused(x16, fused_bn)) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
    torch::Tensor g = torch::randn({k.n, k.c, k.h / 2, k.w / 2}).to(torch::kBFloat16);

    Result fused = RunBlock(x16, fused_bn, g, true);
    Result aten = RunBlock(x16, aten_bn, g, false);
    Result reference = RunBlock(x32, reference_bn, g, false);
    ASSERT_EQ(fused.y.scalar_type(), torch::kBFloat16);
    ASSERT_EQ(fused.y.sizes(), reference.y.sizes());
    EXPECT_TRUE(fused.y.is_contiguous(at::MemoryFormat::ChannelsLast));
    ASSERT_EQ(fused.dx.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(fused.dweight.scalar_type(), torch::kFloat32);

    const double y_floor = 1e-4 * MaxAbs(reference.y), dx_floor = 1e-4 * MaxAbs(reference.dx);
    const double y_err = RelativeError(fused.y, reference.y, y_floor);
    const double dx_err = RelativeError(fused.dx, reference.dx, dx_floor);
    EXPECT_LE(y_err, 1.0 / 256 + 1e-5);
    EXPECT_LE(dx_err, 1.0 / 256 + 1e-5);
    EXPECT_LE(RelativeError(fused.dweight, reference.dweight, 1e-4 * MaxAbs(reference.dweight)),
              1e-4);
    EXPECT_LE(RelativeError(fused.dbias, reference.dbias, 1e-4 * MaxAbs(reference.dbias)), 1e-4);

    EXPECT_LE(RelativeError(fused.y, aten.y, y_floor), 1.0 / 128);
    const double aten_dx = RelativeNormError(fused.dx, aten.dx);
    const double aten_dw = RelativeNormError(fused.dweight, aten.dweight);
    const double aten_db = RelativeNormError(fused.dbias, aten.dbias);
    EXPECT_LE(aten_dx, 0.05);
    EXPECT_LE(aten_dw, 0.02);
    EXPECT_LE(aten_db, 0.02);

    for (auto* other : {&aten_bn, &reference_bn}) {
      EXPECT_TRUE(torch::allclose(fused_bn->running_mean, (*other)->running_mean, 1e-5, 1e-6));
      EXPECT_TRUE(torch::allclose(fused_bn->running_var, (*other)->running_var, 1e-5, 1e-6));
      EXPECT_TRUE(torch::equal(fused_bn->num_batches_tracked, (*other)->num_batches_tracked));
    }
    std::printf(
        "%ldx%ldx%ldx%ld: vs float32 y %.5f dx %.5f (bf16 steps of 2^-8: %.3f); vs ATen bf16 "
        "dx %.4f dweight %.4f dbias %.4f (norms); running var %.2e\n",
        static_cast<long>(k.n), static_cast<long>(k.c), static_cast<long>(k.h),
        static_cast<long>(k.w), y_err, dx_err, std::max(y_err, dx_err) * 256, aten_dx, aten_dw,
        aten_db, RelativeError(fused_bn->running_var, reference_bn->running_var, 1e-6));
  }
}

// Where the kernel does not apply (float32, eval mode, NCHW, odd sizes, channels not a multiple
// of 8), BatchNormPoolRelu is ATen's composition: outputs, gradients and running statistics
// bitwise.
TEST(BatchNormPoolRelu, FallsBackBitwiseWhereTheKernelDoesNotApply) {
  struct Fallback {
    const char* why;
    torch::Dtype dtype;
    bool channels_last, train;
    int64_t c, h, w;
  };
  for (const Fallback& f : {Fallback{"float32", torch::kFloat32, true, true, 16, 8, 8},
                            Fallback{"eval", torch::kBFloat16, true, false, 16, 8, 8},
                            Fallback{"NCHW", torch::kBFloat16, false, true, 16, 8, 8},
                            Fallback{"odd width", torch::kBFloat16, true, true, 16, 8, 7},
                            Fallback{"12 channels", torch::kBFloat16, true, true, 12, 8, 8}}) {
    SCOPED_TRACE(f.why);
    torch::manual_seed(4);
    torch::Tensor x = torch::randn({3, f.c, f.h, f.w}).to(f.dtype);
    if (f.channels_last) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    torch::nn::BatchNorm2d a = MakeNorm(f.c, 0.1);
    a->train(f.train);
    torch::nn::BatchNorm2d b = Copy(a);
    EXPECT_FALSE(BatchNormPoolReluIsFused(x, a));
    torch::Tensor g = torch::randn({3, f.c, f.h / 2, f.w / 2});
    Result ra = RunBlock(x, a, g, true), rb = RunBlock(x, b, g, false);
    EXPECT_TRUE(torch::equal(ra.y, rb.y));
    EXPECT_TRUE(torch::equal(ra.dx, rb.dx));
    EXPECT_TRUE(torch::equal(ra.dweight, rb.dweight));
    EXPECT_TRUE(torch::equal(ra.dbias, rb.dbias));
    EXPECT_TRUE(torch::equal(a->running_mean, b->running_mean));
    EXPECT_TRUE(torch::equal(a->running_var, b->running_var));
  }
}

}  // namespace batch_norm_pool_relu_test
}  // namespace kiln
