// torch's Adam and AdamW with their step on ATen's fused kernels (_fused_adam_ / _fused_adamw_:
// one pass over each group's tensors, as torch.optim's fused=True), and otherwise torch's own
// classes: the same options, parameter groups and per-parameter state (step, exp_avg,
// exp_avg_sq, max_exp_avg_sq), so checkpoints are the same as theirs and load either way.
//
// Why: torch::optim::Adam(W)::step runs five or six tensor ops per parameter; on kiln's models the
// fused step is 4.3x faster (bench/kernels_speed, the GPT's parameters: 0.38 ms against 1.61 ms), a
// few percent of a training step. The arithmetic is the fused kernel's (the same formula, other
// rounding), so a run is bitwise reproducible with itself, not with torch::optim::AdamW's.
// Parameters whose gradient is sparse, or groups that mix dtypes or devices, take torch's step.
//
// Capturable (trainer.cuda_graphs, lib/trainer/capturable_optimizer.h): once MakeCapturable ran,
// each parameter's step count is a float tensor on its device that the step itself increments, and
// each group's lr a float tensor there, so a captured step replays with the current values. The
// host's int64 counts (what checkpoints keep) follow: a step run now counts at once, a replay in
// AfterReplay.
#pragma once

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/trainer/capturable_optimizer.h"

namespace kiln {

template <typename TorchOptimizer, typename TorchOptions, typename ParamState, bool kDecoupled>
class FusedAdamOf : public TorchOptimizer, public CapturableOptimizer {
 public:
  using TorchOptimizer::TorchOptimizer;

  absl::Status MakeCapturable() override {
    if (!Fusable())
      return absl::FailedPreconditionError(
          "its parameter groups mix dtypes or devices, or a gradient is sparse");
    std::map<c10::TensorImpl*, torch::Tensor> steps;
    std::vector<torch::Tensor> lrs;
    for (auto& group : this->param_groups_) {
      torch::Tensor lr;
      for (auto& p : group.params()) {
        if (!lr.defined())
          lr = torch::full({}, group.options().get_lr(), p.options().dtype(torch::kFloat32));
        auto found = this->state_.find(p.unsafeGetTensorImpl());
        int64_t count =
            found == this->state_.end() ? 0 : static_cast<ParamState&>(*found->second).step();
        steps[p.unsafeGetTensorImpl()] =
            torch::full({}, static_cast<double>(count), p.options().dtype(torch::kFloat32));
      }
      lrs.push_back(lr);
    }
    device_steps_ = std::move(steps);
    device_lrs_ = std::move(lrs);
    return absl::OkStatus();
  }
  void SetCapturing(bool capturing) override { capturing_ = capturing; }
  void BeforeReplay() override {
    for (size_t i = 0; i < device_lrs_.size() && i < this->param_groups_.size(); ++i) {
      if (device_lrs_[i].defined()) device_lrs_[i].fill_(this->param_groups_[i].options().get_lr());
    }
  }
  void AfterReplay() override {
    for (auto* key : captured_) {
      auto found = this->state_.find(key);
      if (found != this->state_.end()) {
        auto& state = static_cast<ParamState&>(*found->second);
        state.step(state.step() + 1);
      }
    }
  }

  torch::Tensor step(torch::optim::Optimizer::LossClosure closure = nullptr) override {
    if (!Fusable()) return TorchOptimizer::step(std::move(closure));
    torch::NoGradGuard no_grad;
    torch::Tensor loss;
    if (closure != nullptr) {
      at::AutoGradMode enable_grad(true);
      loss = closure();
    }
    std::vector<c10::TensorImpl*> captured;
    for (auto& group : this->param_groups_) {
      auto& options = static_cast<TorchOptions&>(group.options());
      std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto key = p.unsafeGetTensorImpl();
        auto found = this->state_.find(key);
        if (found == this->state_.end()) {
          auto state = std::make_unique<ParamState>();
          state->step(0);
          state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
          state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
          if (options.amsgrad())
            state->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
          found = this->state_.emplace(key, std::move(state)).first;
        }
        auto& state = static_cast<ParamState&>(*found->second);
        if (options.amsgrad() && !state.max_exp_avg_sq().defined()) {
          state.max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        }
        if (!capturing_) state.step(state.step() + 1);
        params.push_back(p.detach());
        grads.push_back(p.grad());
        exp_avgs.push_back(state.exp_avg());
        exp_avg_sqs.push_back(state.exp_avg_sq());
        if (options.amsgrad()) max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
        // The kernel reads each parameter's step count from a float tensor (torch.optim keeps
        // them so); kiln keeps torch::optim's int64 in the state and hands the kernel its value.
        if (device_steps_.empty()) {
          steps.push_back(torch::full({}, static_cast<double>(state.step()),
                                      p.options().dtype(torch::kFloat32)));
        } else {
          auto device_step = device_steps_.find(key);
          if (device_step == device_steps_.end()) {
            TORCH_CHECK(!capturing_, "a parameter without a step count on the GPU was captured");
            // A parameter first stepped after MakeCapturable: its count before this step (the
            // host's is already advanced; the kernel's comes from the add below).
            device_step = device_steps_
                              .emplace(key, torch::full({}, static_cast<double>(state.step() - 1),
                                                        p.options().dtype(torch::kFloat32)))
                              .first;
          }
          steps.push_back(device_step->second);
          if (capturing_) captured.push_back(key);
        }
      }
      if (params.empty()) continue;
      const auto [beta1, beta2] = options.betas();
      const size_t group_index = &group - this->param_groups_.data();
      if (!device_steps_.empty() && group_index < device_lrs_.size() &&
          device_lrs_[group_index].defined()) {
        // Capturable: the counts advance on the device, and the kernel reads the lr there.
        at::_foreach_add_(steps, 1);
        if (!capturing_) device_lrs_[group_index].fill_(options.lr());
        if constexpr (kDecoupled) {
          at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps,
                            device_lrs_[group_index], beta1, beta2, options.weight_decay(),
                            options.eps(), options.amsgrad(), /*maximize=*/false);
        } else {
          at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps,
                           device_lrs_[group_index], beta1, beta2, options.weight_decay(),
                           options.eps(), options.amsgrad(), /*maximize=*/false);
        }
        continue;
      }
      if constexpr (kDecoupled) {
        at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps,
                          options.lr(), beta1, beta2, options.weight_decay(), options.eps(),
                          options.amsgrad(), /*maximize=*/false);
      } else {
        at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, options.lr(),
                         beta1, beta2, options.weight_decay(), options.eps(), options.amsgrad(),
                         /*maximize=*/false);
      }
    }
    if (capturing_) captured_ = std::move(captured);
    return loss;
  }

 private:
  // Dense gradients, and within each group one dtype and one device (the fused kernels' terms).
  bool Fusable() const {
    for (const auto& group : this->param_groups_) {
      const torch::Tensor* first = nullptr;
      for (const auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        if (p.grad().is_sparse() || !p.is_floating_point()) return false;
        if (first == nullptr) {
          first = &p;
        } else if (p.scalar_type() != first->scalar_type() || p.device() != first->device()) {
          return false;
        }
        if (p.grad().scalar_type() != p.scalar_type()) return false;
      }
    }
    return true;
  }

  std::map<c10::TensorImpl*, torch::Tensor> device_steps_;  // capturable: each parameter's count
  std::vector<torch::Tensor> device_lrs_;                   // and each group's lr, on the GPU
  bool capturing_ = false;
  std::vector<c10::TensorImpl*> captured_;  // the parameters the captured step steps
};

using FusedAdam =
    FusedAdamOf<torch::optim::Adam, torch::optim::AdamOptions, torch::optim::AdamParamState, false>;
using FusedAdamW = FusedAdamOf<torch::optim::AdamW, torch::optim::AdamWOptions,
                               torch::optim::AdamWParamState, true>;

}  // namespace kiln
