// An optimizer whose step can be captured in a CUDA graph (trainer.cuda_graphs): every value the
// step reads that changes between steps (each parameter's step count, each group's learning rate)
// lives in a device tensor, so a replay reads the current one instead of the value baked in at
// capture. The trainer drives it around the captured step; kiln's fused Adam and AdamW
// (components/optim/fused_adam.h) implement it.
#pragma once

#include "absl/status/status.h"

namespace kiln {

class CapturableOptimizer {
 public:
  virtual ~CapturableOptimizer() = default;
  // From now on each step reads its step counts and learning rates from device tensors (made from
  // the host's values now, so a resumed run continues its counts). Refused, changing nothing, when
  // a parameter group cannot be stepped by one fused kernel on the GPU.
  virtual absl::Status MakeCapturable() = 0;
  // Around a capture: the step recorded then runs at each replay, not now, so it leaves the host's
  // step counts alone.
  virtual void SetCapturing(bool capturing) = 0;
  // Before each replay of a captured step: the groups' learning rates, as the scheduler left them,
  // copied to their device tensors (enqueued, no wait).
  virtual void BeforeReplay() = 0;
  // After each replay of a captured step: the host's step counts (what checkpoints keep) advance.
  virtual void AfterReplay() = 0;
};

}  // namespace kiln
