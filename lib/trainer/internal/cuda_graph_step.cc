#include "lib/trainer/internal/cuda_graph_step.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/error_text.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/trainer/capturable_optimizer.h"
#include "lib/trainer/internal/cuda_module.h"
#include "lib/trainer/strategy.h"
#include "lib/trainer/trainer.h"

namespace kiln {

void ClipGradientsOnDevice(const std::vector<torch::Tensor>& parameters, double clip_val,
                           bool by_norm) {
  // A sparse gradient (an embedding table's touched rows) is clipped through its values, once
  // coalesced (each row's gradient one value, as the dense gradient's row would be).
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (!p.grad().defined()) continue;
    if (p.grad().is_sparse()) p.mutable_grad() = p.grad().coalesce();
    grads.push_back(p.grad().is_sparse() ? p.grad()._values() : p.grad());
  }
  if (grads.empty()) return;
  torch::NoGradGuard no_grad;
  if (!by_norm) {
    for (auto& g : grads) g.clamp_(-clip_val, clip_val);
    return;
  }
  // torch.nn.utils.clip_grad_norm_ (its foreach path): the norm of the per-tensor norms, and every
  // gradient scaled by min(1, max_norm / (norm + 1e-6)), all on the device.
  std::vector<torch::Tensor> norms = at::_foreach_norm(grads, 2);
  torch::Tensor total = torch::linalg_vector_norm(torch::stack(norms), 2);
  torch::Tensor coef = torch::clamp_max(clip_val / (total + 1e-6), 1.0);
  for (auto& g : grads) g.mul_(coef.to(g.scalar_type()));
}

namespace {
CudaGraphStep::ImplMaker cuda_graph_impl_maker =
    nullptr;  // constant-initialized: set from static initializers
}  // namespace

void CudaGraphStep::SetImplMaker(ImplMaker maker) { cuda_graph_impl_maker = maker; }

absl::StatusOr<std::unique_ptr<CudaGraphStep>> CudaGraphStep::CreateOnGpu(const LoopContext& ctx) {
  auto refuse = [](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("trainer.cuda_graphs=true ", why));
  };
  if (ctx.strategy.distributed())
    return refuse("trains on one GPU: set trainer.devices=1 or trainer.cuda_graphs=false");
  if (ctx.options.accumulate_grad_batches > 1) {
    return refuse("captures one optimizer step per batch: set trainer.accumulate_grad_batches=1");
  }
  if (ctx.strategy.scaler() != nullptr) {
    return refuse(
        "does not capture 16-mixed (its loss scaling skips steps on the host): use bf16-mixed or "
        "32");
  }
  auto* capturable = dynamic_cast<CapturableOptimizer*>(ctx.state.optimizer.get());
  if (capturable == nullptr) {
    return refuse(
        "needs an optimizer whose step runs on the device alone (adam, adamw); this one reads host "
        "values");
  }
  if (cuda_graph_impl_maker == nullptr) {
    return refuse(
        absl::StrCat("needs kiln's CUDA module, which is not loaded: ", CudaModuleNote()));
  }
  return std::unique_ptr<CudaGraphStep>(new CudaGraphStep(cuda_graph_impl_maker(ctx, capturable)));
}

absl::StatusOr<Task::TrainingOutputs> CudaGraphStep::ForwardBackward(const data::Batch& batch) {
  try {
    return impl_->ForwardBackward(batch);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("trainer.cuda_graphs: ", ErrorLine(e.what())));
  }
}

absl::Status CudaGraphStep::OptimizerStep() {
  try {
    return impl_->OptimizerStep();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("trainer.cuda_graphs: ", ErrorLine(e.what())));
  }
}

void CudaGraphStep::SkipOptimizerStep() { impl_->SkipOptimizerStep(); }

absl::StatusOr<std::unique_ptr<CudaGraphStep>> CudaGraphStep::Create(const LoopContext& ctx) {
  if (!ctx.strategy.device().is_cuda()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trainer.cuda_graphs=true needs a GPU, but the trainer runs on ",
        ctx.strategy.device().str(), " (trainer.accelerator=cuda, or trainer.cuda_graphs=false)"));
  }
  return CreateOnGpu(ctx);
}

CudaGraphStep::CudaGraphStep(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaGraphStep::~CudaGraphStep() = default;

}  // namespace kiln
