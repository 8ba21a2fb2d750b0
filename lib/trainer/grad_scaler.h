// Dynamic loss scaling for trainer.precision=16-mixed, as PyTorch's torch.amp.GradScaler does it:
// the loss is multiplied by the scale before backward, so that small float16 gradients do not
// underflow; before the optimizer step the gradients are unscaled (before clipping) and checked
// for inf/nan in one fused pass; a step with any is skipped and the scale backs off (x0.5), and
// after `growth_interval` clean steps in a row it grows (x2). The state (scale, clean-step count)
// goes in the checkpoint, so a resumed run scales as the uninterrupted one would.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace kiln {

class GradScaler {
 public:
  struct Options {
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
  };
  GradScaler(torch::Device device, Options options);
  explicit GradScaler(torch::Device device) : GradScaler(device, Options()) {}

  // loss * scale.
  torch::Tensor Scale(const torch::Tensor& loss) const { return loss * scale_; }
  // Divides the gradients of `parameters` (those that have one) by the scale in place and returns
  // whether any is inf or nan (the step is then to be skipped). Waits for the device once.
  bool UnscaleAndCheck(const std::vector<torch::Tensor>& parameters);
  // After the step (taken or skipped): backs off or grows the scale from the last check.
  void Update();

  double scale() const { return scale_.item<double>(); }
  int64_t skipped_steps() const { return skipped_; }
  // The checkpoint's "scaler/scale" and "scaler/growth_tracker" (CPU tensors), and back.
  void Save(torch::serialize::OutputArchive& archive) const;
  // False when the archive holds no scaler state (a checkpoint written in another precision): the
  // scale then starts from init_scale.
  bool Load(torch::serialize::InputArchive& archive);

 private:
  Options options_;
  torch::Tensor scale_;           // float32 [1] on the device
  torch::Tensor growth_tracker_;  // int32 [1]: clean steps in a row
  torch::Tensor found_inf_;       // float32 [1]: the last check's verdict
  int64_t skipped_ = 0;
};

}  // namespace kiln
