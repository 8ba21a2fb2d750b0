// kiln::ParallelFor runs on LibTorch's intra-op threads (at::parallel_for compiled without OpenMP
// would run every range on the calling thread), and kiln's kernels that use it give the same bits
// on one thread and on several.
#include "components/common/parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "components/models/batch_norm_pool_relu.h"
#include "components/models/causal_attention.h"
#include "components/models/gelu_tanh.h"
#include "components/models/llama_kernels.h"

namespace kiln {
namespace parallel_test {

// Sets LibTorch's thread count for the scope, then puts the previous one back.
class ThreadsGuard {
 public:
  explicit ThreadsGuard(int threads) : previous_(at::get_num_threads()) {
    at::set_num_threads(threads);
  }
  ~ThreadsGuard() { at::set_num_threads(previous_); }

 private:
  int previous_;
};

struct Calls {
  std::vector<int> visits;  // per index
  std::set<std::thread::id> threads;
  int chunks = 0;
};

Calls Record(int64_t n, int64_t grain) {
  Calls calls;
  calls.visits.assign(n, 0);
  std::mutex mutex;
  ParallelFor(0, n, grain, [&](int64_t begin, int64_t end) {
    std::lock_guard<std::mutex> lock(mutex);
    calls.threads.insert(std::this_thread::get_id());
    ++calls.chunks;
    for (int64_t i = begin; i < end; ++i) ++calls.visits[i];
  });
  return calls;
}

TEST(ParallelFor, RunsOnLibTorchsThreadsAndCoversTheRangeOnce) {
  {
    ThreadsGuard threads(2);
    Calls calls = Record(1000, 1);
    EXPECT_EQ(calls.visits, std::vector<int>(1000, 1));
    EXPECT_EQ(calls.threads.size(), 2u) << "ParallelFor ran on one thread with 2 set";
    EXPECT_EQ(calls.chunks, 2);
    // A range no longer than the grain is one chunk, on the calling thread.
    Calls small = Record(64, 64);
    EXPECT_EQ(small.visits, std::vector<int>(64, 1));
    EXPECT_EQ(small.chunks, 1);
    EXPECT_EQ(*small.threads.begin(), std::this_thread::get_id());
  }
  ThreadsGuard threads(1);
  Calls calls = Record(1000, 1);
  EXPECT_EQ(calls.visits, std::vector<int>(1000, 1));
  EXPECT_EQ(calls.chunks, 1);
  EXPECT_EQ(*calls.threads.begin(), std::this_thread::get_id());
}

TEST(ParallelFor, NestedCallsRunInTheirChunkAndErrorsReachTheCaller) {
  ThreadsGuard threads(2);
  std::mutex mutex;
  std::set<std::thread::id> outer, inner_mismatch;
  int inner_chunks = 0;
  ParallelFor(0, 2, 1, [&](int64_t, int64_t) {
    const std::thread::id me = std::this_thread::get_id();
    ParallelFor(0, 100, 1, [&](int64_t, int64_t) {
      std::lock_guard<std::mutex> lock(mutex);
      ++inner_chunks;
      if (std::this_thread::get_id() != me) inner_mismatch.insert(std::this_thread::get_id());
    });
    std::lock_guard<std::mutex> lock(mutex);
    outer.insert(me);
  });
  EXPECT_EQ(outer.size(), 2u);
  EXPECT_EQ(inner_chunks, 2);  // one per outer chunk, serial inside it
  EXPECT_TRUE(inner_mismatch.empty());

  EXPECT_THROW(ParallelFor(0, 1000, 1,
                           [](int64_t begin, int64_t) {
                             if (begin > 0) throw std::runtime_error("chunk failed");
                           }),
               std::runtime_error);
}

struct Outputs {
  torch::Tensor y, dx;
};

// f(x) and the gradient of sum(g * f(x)) with LibTorch on `threads` threads.
template <typename F>
Outputs Evaluate(const F& f, const torch::Tensor& x, const torch::Tensor& g, int threads) {
  ThreadsGuard guard(threads);
  torch::Tensor leaf = x.detach().clone().requires_grad_();
  torch::Tensor y = f(leaf);
  y.backward(g.to(y.scalar_type()));
  return {y.detach(), leaf.grad()};
}

template <typename F>
void ExpectSameBitsOnOneAndTwoThreads(const F& f, const torch::Tensor& x) {
  torch::Tensor g = torch::randn(f(x.detach()).sizes());
  Outputs one = Evaluate(f, x, g, 1), two = Evaluate(f, x, g, 2);
  EXPECT_TRUE(torch::equal(one.y, two.y));
  EXPECT_TRUE(torch::equal(one.dx, two.dx));
}

TEST(ParallelFor, KernelsGiveTheSameBitsOnOneAndTwoThreads) {
  torch::manual_seed(5);
  for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16}) {
    SCOPED_TRACE(dtype == torch::kFloat32 ? "float32" : "bfloat16");
    ExpectSameBitsOnOneAndTwoThreads([](const torch::Tensor& x) { return GeluTanh(x); },
                                     torch::randn({3, 5000}).to(dtype));
    ExpectSameBitsOnOneAndTwoThreads(
        [](const torch::Tensor& qkv) { return CausalAttention(qkv, 4); },
        torch::randn({4, 70, 3 * 32}).to(dtype));
    ExpectSameBitsOnOneAndTwoThreads(  // grouped-query: 4 query heads over 2
        [](const torch::Tensor& qkv) { return CausalAttention(qkv, 4, 2); },
        torch::randn({4, 70, 8 * 16}).to(dtype));
  }
  // The Llama's float32 kernels; RMSNorm's weight gradient too (partial sums over blocks of rows).
  ExpectSameBitsOnOneAndTwoThreads(
      [](const torch::Tensor& x) {
        torch::Tensor cos = torch::linspace(0, 1, 70 * 16).view({70, 16});
        return Rotate(x, cos, cos.flip(1));
      },
      torch::randn({4, 70, 3, 16}));
  torch::Tensor rows = torch::randn({1000, 40}), weight = torch::randn({40}),
                dy = torch::randn({1000, 40});
  ExpectSameBitsOnOneAndTwoThreads(
      [&](const torch::Tensor& x) { return RmsNormalize(x, weight, 1e-6); }, rows);
  std::vector<torch::Tensor> weight_grads;
  for (int threads : {1, 2}) {
    ThreadsGuard guard(threads);
    torch::Tensor w = weight.clone().requires_grad_();
    (RmsNormalize(rows, w, 1e-6) * dy).sum().backward();
    weight_grads.push_back(w.grad());
  }
  EXPECT_TRUE(torch::equal(weight_grads[0], weight_grads[1]));
  // The GPT block's LayerNorm written as bf16, at a width with a tail (37: four lanes of 8 and 5
  // more): the value, dx, and the weight's and bias's gradients.
  torch::Tensor ln_rows = torch::randn({1000, 37}), ln_weight = torch::randn({37}),
                ln_bias = torch::randn({37}), ln_dy = torch::randn({1000, 37}).to(torch::kBFloat16);
  ExpectSameBitsOnOneAndTwoThreads(
      [&](const torch::Tensor& x) { return LayerNormToBf16(x, ln_weight, ln_bias, 1e-5); },
      ln_rows);
  std::vector<std::vector<torch::Tensor>> ln_grads;
  for (int threads : {1, 2}) {
    ThreadsGuard guard(threads);
    torch::Tensor w = ln_weight.clone().requires_grad_(), b = ln_bias.clone().requires_grad_();
    LayerNormToBf16(ln_rows, w, b, 1e-5).backward(ln_dy);
    ln_grads.push_back({w.grad(), b.grad()});
  }
  EXPECT_TRUE(torch::equal(ln_grads[0][0], ln_grads[1][0]));
  EXPECT_TRUE(torch::equal(ln_grads[0][1], ln_grads[1][1]));
}

// Apart, so that a CPU without AVX-512 BF16 skips this one alone and still runs the others.
TEST(ParallelFor, FusedBatchNormPoolReluGivesTheSameBitsOnOneAndTwoThreads) {
  torch::manual_seed(5);
  torch::Tensor x =
      torch::randn({8, 32, 28, 28}).contiguous(at::MemoryFormat::ChannelsLast).to(torch::kBFloat16);
  torch::nn::BatchNorm2d bn(32);
  if (!BatchNormPoolReluIsFused(x, bn)) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
  auto block = [&](const torch::Tensor& input) {
    torch::nn::BatchNorm2d copy(std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(bn->clone()));
    return BatchNormPoolRelu(input, copy);
  };
  ExpectSameBitsOnOneAndTwoThreads(block, x);
}

}  // namespace parallel_test
}  // namespace kiln
