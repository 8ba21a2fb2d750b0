// trainer.cuda_graphs: the training step as two CUDA graphs, captured after warm-up and replayed
// for every later batch of the same shapes. One graph holds the forward, the loss and the backward
// (Task::TrainingLoss, so the task's step reads nothing on the host); the other the gradient
// clipping and the optimizer step (a CapturableOptimizer: its step counts and lr on the device).
// Between them the host reads the loss, as in eager mode: a non-finite loss stops or skips the
// step before the optimizer runs, and on_before_optimizer_step callbacks see the gradients. So
// a replay launches two graphs where eager mode launches every kernel of the step.
//
// The first kWarmupSteps steps run eagerly on the capture's side stream (cuDNN and cuBLAS set up
// their workspaces; cudnn_benchmark picks its algorithms). A batch of other shapes than the
// captured ones (an epoch's smaller last batch) runs eagerly; a second such shape is refused in
// one line, since the shapes then vary. A change of the trained parameters (backbone_finetuning
// unfreezing) drops the graphs, and the step is captured again after warm-up.
//
// The graphs themselves are CUDA code: they live in libkiln_cuda (cuda_graph_step_gpu.cc), which
// sets the maker of its Impl as it loads (lib/trainer/internal/cuda_module.h).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/data/loader.h"
#include "lib/trainer/connectors/loop_state.h"
#include "lib/trainer/task.h"

namespace kiln {

class CapturableOptimizer;

class CudaGraphStep {
 public:
  static constexpr int kWarmupSteps = 3;

  // Refuses, in one line naming what to change, a fit that cannot be captured: not on a GPU (or a
  // kiln built without CUDA), several processes, gradient accumulation, 16-mixed (its step skips on
  // the host), an optimizer whose step reads host values (only adam and adamw capture).
  static absl::StatusOr<std::unique_ptr<CudaGraphStep>> Create(const LoopContext& ctx);
  ~CudaGraphStep();

  // The forward, loss and backward of `batch` (on the device already): replayed, captured now
  // (after warm-up) or run eagerly. The outputs are valid until the next call.
  absl::StatusOr<Task::TrainingOutputs> ForwardBackward(const data::Batch& batch);
  // The clipping and optimizer step of the gradients ForwardBackward left (replayed when it was).
  absl::Status OptimizerStep();
  // The step is skipped (a non-finite loss): the gradients are dropped.
  void SkipOptimizerStep();

  // What libkiln_cuda implements: the three calls above.
  struct Impl {
    virtual ~Impl() = default;
    virtual absl::StatusOr<Task::TrainingOutputs> ForwardBackward(const data::Batch& batch) = 0;
    virtual absl::Status OptimizerStep() = 0;
    virtual void SkipOptimizerStep() = 0;
  };
  using ImplMaker = std::unique_ptr<Impl> (*)(const LoopContext& ctx,
                                              CapturableOptimizer* optimizer);
  // libkiln_cuda's, set as it loads; null without it.
  static void SetImplMaker(ImplMaker maker);

 private:
  // Create's checks past the device's (the CUDA module, the fit's terms).
  static absl::StatusOr<std::unique_ptr<CudaGraphStep>> CreateOnGpu(const LoopContext& ctx);
  explicit CudaGraphStep(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// libkiln_cuda's Impl maker (cuda_graph_step_gpu.cc).
std::unique_ptr<CudaGraphStep::Impl> MakeCudaGraphStepImpl(const LoopContext& ctx,
                                                           CapturableOptimizer* optimizer);

// Gradient clipping by norm or value with device work alone (no host read: capturable), the
// arithmetic of torch.nn.utils.clip_grad_norm_ / clip_grad_value_. The trainer's one clipping,
// eager and captured.
void ClipGradientsOnDevice(const std::vector<torch::Tensor>& parameters, double clip_val,
                           bool by_norm);

}  // namespace kiln
