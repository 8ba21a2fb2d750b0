// One micro-batch of training under automatic optimization (Lightning's loops/optimization/
// automatic.py): the forward, the loss, the backward and, at an accumulation boundary, the
// optimizer step. Three protocols, chosen once per fit from what the task declares and the
// trainer's options:
//   - split: the task's TrainingLoss (device work alone), the backward, then the loss read once
//     on the host and LogTrainingStep (Task::splits_training_step);
//   - whole: the task's TrainingStep, whose loss is read before the backward (a step that reads
//     values on the host, as speech recognition's CTC lengths);
//   - captured: the split step replayed from CUDA graphs (trainer.cuda_graphs).
// Every protocol counts the batch, stops or skips on a non-finite loss, and ends with the
// callbacks' OnTrainBatchEnd. A new way of stepping (a sharded optimizer, sparse embedding
// updates) is another subclass here, not another branch in the epoch loop.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "absl/status/statusor.h"
#include "lib/data/loader.h"
#include "lib/trainer/connectors/loop_state.h"

namespace kiln {

class AutomaticOptimization {
 public:
  // The protocol for this fit: captured with trainer.cuda_graphs (refused in one line where the
  // fit cannot be captured), else split or whole as the task declares.
  static absl::StatusOr<std::unique_ptr<AutomaticOptimization>> Choose(LoopContext ctx);
  virtual ~AutomaticOptimization() = default;

  // One micro-batch already on the device, after OnTrainBatchStart. `boundary`: the last
  // micro-batch of an optimizer step (its gradients are reduced over ranks and stepped).
  virtual absl::Status Advance(data::Batch& batch, bool boundary) = 0;

 protected:
  explicit AutomaticOptimization(LoopContext ctx) : ctx_(ctx) {}

  // The backward of one micro-batch's loss (its share of the step: / accumulate_grad_batches);
  // `boundary` reduces the gradients over ranks.
  absl::Status Backward(const torch::Tensor& loss, bool boundary);
  // The loss read on the host: counts the batch, and for a non-finite loss stops (an error) or
  // says to skip the step (true). Every rank decides alike.
  absl::StatusOr<bool> CountAndCheckLoss(const data::Batch& batch, double& loss_value);
  // Unscale (16-mixed), the callbacks' OnBeforeOptimizerStep, clipping, the optimizer's step,
  // zero_grad, then AfterOptimizerStep.
  absl::Status OptimizerStep();
  // After each optimizer step: the step count, a per-step scheduler step, the step's log.
  void AfterOptimizerStep();
  // The batch counted as done, then the callbacks' OnTrainBatchEnd.
  absl::Status EndBatch(const data::Batch& batch, double loss_value);

  LoopContext ctx_;
};

}  // namespace kiln
