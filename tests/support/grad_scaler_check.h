// 16-mixed's loss scaling on one device, shared by precision_test (the CPU, and a GPU where there
// is one) and cuda_test (`ctest -L cuda`): gradients come back unscaled exactly; a planted inf (and
// a NaN) is found, the step is to be skipped and the scale backs off by half; growth_interval clean
// steps in a row double it; the state survives a checkpoint.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "lib/trainer/grad_scaler.h"
#include "tests/support/process.h"

namespace kiln::testing {

inline void CheckGradScaler(const torch::Device& device) {
  SCOPED_TRACE(device.str());
  GradScaler::Options options;
  options.growth_interval = 3;
  GradScaler scaler(device, options);
  EXPECT_EQ(scaler.scale(), 65536.0);
  auto w = torch::tensor({1.5f, -2.0f, 0.25f},
                         torch::TensorOptions().device(device).requires_grad(true));
  auto h = torch::tensor(
      {3.0f}, torch::TensorOptions().device(device).dtype(torch::kHalf).requires_grad(true));
  scaler
      .Scale((w * torch::tensor({1.0f, 2.0f, 3.0f}, device)).sum() +
             h.sum().to(torch::kFloat32) * 0.25)
      .backward();
  EXPECT_TRUE(torch::equal(w.grad().cpu(), torch::tensor({65536.0f, 131072.0f, 196608.0f})));
  EXPECT_FALSE(scaler.UnscaleAndCheck({w, h}));
  EXPECT_TRUE(torch::equal(w.grad().cpu(), torch::tensor({1.0f, 2.0f, 3.0f})));
  // A float16 gradient (16384 scaled: 65536 would overflow float16) is unscaled in float16.
  EXPECT_TRUE(torch::equal(h.grad().cpu(), torch::tensor({0.25f}, torch::kHalf)));
  scaler.Update();
  EXPECT_EQ(scaler.scale(), 65536.0);
  // A planted overflow: skipped, and the scale halves.
  w.grad().fill_(1.0);
  w.grad()[1] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(scaler.UnscaleAndCheck({w, h}));
  scaler.Update();
  EXPECT_EQ(scaler.scale(), 32768.0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // NaN too.
  w.grad().fill_(std::nan(""));
  EXPECT_TRUE(scaler.UnscaleAndCheck({w}));
  scaler.Update();
  EXPECT_EQ(scaler.scale(), 16384.0);
  // Three clean steps in a row: doubled.
  for (int i = 0; i < 3; ++i) {
    w.grad().fill_(1.0);
    EXPECT_FALSE(scaler.UnscaleAndCheck({w}));
    scaler.Update();
  }
  EXPECT_EQ(scaler.scale(), 32768.0);
  // Two more clean steps, then a checkpoint: a fresh scaler loads scale and streak, so one more
  // clean step doubles it as in the uninterrupted run.
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(scaler.UnscaleAndCheck({w}));
    scaler.Update();
  }
  testing::TempDir dir;
  torch::serialize::OutputArchive out;
  scaler.Save(out);
  out.save_to(dir.path() + "/scaler.pt");
  torch::serialize::InputArchive in;
  in.load_from(dir.path() + "/scaler.pt");
  GradScaler restored(device, options);
  ASSERT_TRUE(restored.Load(in));
  EXPECT_EQ(restored.scale(), 32768.0);
  EXPECT_FALSE(restored.UnscaleAndCheck({w}));
  restored.Update();
  EXPECT_EQ(restored.scale(), 65536.0);
  torch::serialize::InputArchive none;
  torch::serialize::OutputArchive empty;
  empty.write("other", torch::zeros({1}));
  empty.save_to(dir.path() + "/other.pt");
  none.load_from(dir.path() + "/other.pt");
  EXPECT_FALSE(GradScaler(device).Load(none));
}

}  // namespace kiln::testing
