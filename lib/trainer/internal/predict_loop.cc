#include "lib/trainer/internal/predict_loop.h"

#include "lib/base/status_macros.h"
#include "lib/trainer/trainer.h"

namespace kiln {

absl::StatusOr<std::vector<torch::Tensor>> PredictLoop::Run() {
  Task& task = *ctx_.trainer.task();
  task.module().eval();
  int64_t batches = ctx_.trainer.options().limit_predict_batches.Of(loader_.num_batches());
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> outputs;
  const Strategy& strategy = ctx_.strategy;
  KILN_RETURN_IF_ERROR(loader_.Run(0, 0, batches, [&](data::Batch& batch) -> absl::StatusOr<bool> {
    batch.input = strategy.InputToDevice(batch.input);
    KILN_ASSIGN_OR_RETURN(torch::Tensor out, task.PredictStep(batch));
    outputs.push_back(out.to(torch::kCPU));
    return true;
  }));
  return outputs;
}

}  // namespace kiln
