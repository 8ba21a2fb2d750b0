#include "lib/trainer/internal/training_step.h"

#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/trainer/internal/cuda_graph_step.h"
#include "lib/trainer/trainer.h"

namespace kiln {

namespace {

// TrainingLoss, the backward, then the host: the loss read once (a GPU runs the whole step's work
// meanwhile), and a non-finite one drops the gradients it left (skip) or stops before the
// optimizer step.
class SplitStep : public AutomaticOptimization {
 public:
  using AutomaticOptimization::AutomaticOptimization;

  absl::Status Advance(data::Batch& batch, bool boundary) override {
    Task& task = *ctx_.state.inputs.task;
    absl::StatusOr<Task::TrainingOutputs> outputs;
    {
      PhaseProfiler::Scope timed(ctx_.profiler, PhaseProfiler::kForward);
      AutocastScope autocast(ctx_.strategy);
      outputs = task.TrainingLoss(batch);
    }
    if (!outputs.ok()) return outputs.status();
    KILN_RETURN_IF_ERROR(Backward(outputs->loss, boundary));
    double loss_value = outputs->loss.item<double>();
    KILN_ASSIGN_OR_RETURN(bool skip, CountAndCheckLoss(batch, loss_value));
    if (skip) ctx_.state.optimizer->zero_grad();
    // Lightning's order: what the training step logs is there before on_before_optimizer_step.
    KILN_RETURN_IF_ERROR(task.LogTrainingStep(batch, *outputs, ctx_.logging.train_log()));
    if (skip) return absl::OkStatus();
    if (boundary) KILN_RETURN_IF_ERROR(OptimizerStep());
    return EndBatch(batch, loss_value);
  }
};

// The task's TrainingStep, its loss read before the backward.
class WholeStep : public AutomaticOptimization {
 public:
  using AutomaticOptimization::AutomaticOptimization;

  absl::Status Advance(data::Batch& batch, bool boundary) override {
    absl::StatusOr<torch::Tensor> loss;
    {
      PhaseProfiler::Scope timed(ctx_.profiler, PhaseProfiler::kForward);
      AutocastScope autocast(ctx_.strategy);
      loss = ctx_.state.inputs.task->TrainingStep(batch, ctx_.logging.train_log());
    }
    if (!loss.ok()) return loss.status();
    double loss_value = loss->item<double>();
    KILN_ASSIGN_OR_RETURN(bool skip, CountAndCheckLoss(batch, loss_value));
    if (skip) {
      ctx_.state.optimizer->zero_grad();
      return absl::OkStatus();
    }
    KILN_RETURN_IF_ERROR(Backward(*loss, boundary));
    if (boundary) KILN_RETURN_IF_ERROR(OptimizerStep());
    return EndBatch(batch, loss_value);
  }
};

// The split step replayed from CUDA graphs (internal/cuda_graph_step.h): one optimizer step per
// batch, the host reading the loss between the two graphs.
class CapturedStep : public AutomaticOptimization {
 public:
  CapturedStep(LoopContext ctx, std::unique_ptr<CudaGraphStep> graph)
      : AutomaticOptimization(ctx), graph_(std::move(graph)) {}

  absl::Status Advance(data::Batch& batch, bool /*boundary*/) override {
    Trainer& t = ctx_.trainer;
    Task& task = *ctx_.state.inputs.task;
    absl::StatusOr<Task::TrainingOutputs> outputs;
    {
      PhaseProfiler::Scope timed(ctx_.profiler, PhaseProfiler::kForward);
      outputs = graph_->ForwardBackward(batch);
    }
    if (!outputs.ok()) return outputs.status();
    double loss_value = outputs->loss.item<double>();
    KILN_ASSIGN_OR_RETURN(bool skip, CountAndCheckLoss(batch, loss_value));
    auto log_step = [&] { return task.LogTrainingStep(batch, *outputs, ctx_.logging.train_log()); };
    if (skip) {
      graph_->SkipOptimizerStep();
      return log_step();
    }
    {
      PhaseProfiler::Scope timed(ctx_.profiler, PhaseProfiler::kOptimizer);
      KILN_RETURN_IF_ERROR(
          ctx_.callbacks.ForEach([&](Callback& c) { return c.OnBeforeOptimizerStep(t); }));
      KILN_RETURN_IF_ERROR(graph_->OptimizerStep());
    }
    // The optimizer's graph is launched before the task's metrics are logged: they read the step's
    // outputs, which the optimizer step leaves alone, so the host's work on them overlaps the
    // GPU's.
    KILN_RETURN_IF_ERROR(log_step());
    AfterOptimizerStep();
    return EndBatch(batch, loss_value);
  }

 private:
  std::unique_ptr<CudaGraphStep> graph_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AutomaticOptimization>> AutomaticOptimization::Choose(
    LoopContext ctx) {
  const bool split = ctx.state.inputs.task->splits_training_step();
  if (ctx.options.cuda_graphs) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<CudaGraphStep> graph, CudaGraphStep::Create(ctx));
    if (!split) {
      return absl::FailedPreconditionError(
          "trainer.cuda_graphs=true: the task cannot be captured: its training step reads values "
          "on the host (set trainer.cuda_graphs=false)");
    }
    return std::unique_ptr<AutomaticOptimization>(new CapturedStep(ctx, std::move(graph)));
  }
  if (split) return std::unique_ptr<AutomaticOptimization>(new SplitStep(ctx));
  return std::unique_ptr<AutomaticOptimization>(new WholeStep(ctx));
}

absl::Status AutomaticOptimization::Backward(const torch::Tensor& loss, bool boundary) {
  PhaseProfiler::Scope timed(ctx_.profiler, PhaseProfiler::kBackward);
  // Each micro-batch's share of an accumulated step.
  return ctx_.strategy.Backward(loss / static_cast<double>(ctx_.options.accumulate_grad_batches),
                                boundary);
}

absl::Status AutomaticOptimization::EndBatch(const data::Batch& batch, double loss_value) {
  Trainer& t = ctx_.trainer;
  // This batch is done before the callbacks see it: a checkpoint they save (model_checkpoint's
  // every_n_train_steps) resumes after it, not with it again.
  ctx_.state.progress.batch_in_epoch = batch.index + 1;
  return ctx_.callbacks.ForEach(
      [&](Callback& c) { return c.OnTrainBatchEnd(t, batch, loss_value); });
}

absl::StatusOr<bool> AutomaticOptimization::CountAndCheckLoss(const data::Batch& batch,
                                                              double& loss_value) {
  const TrainerOptions& options = ctx_.options;
  // Every rank skips or stops on a non-finite loss together, or their collectives would pair up
  // wrongly.
  KILN_ASSIGN_OR_RETURN(bool nonfinite, ctx_.strategy.AnyRank(!std::isfinite(loss_value)));
  if (nonfinite && std::isfinite(loss_value)) loss_value = std::nan("");
  ++ctx_.state.progress.micro_batches;
  ctx_.state.progress.samples += batch.size() * ctx_.trainer.world_size();
  if (std::isfinite(loss_value)) return false;
  std::string where = absl::StrCat("epoch ", ctx_.state.progress.epoch, ", batch ", batch.index,
                                   ", step ", ctx_.state.progress.global_step);
  if (options.on_nonfinite_loss == TrainerOptions::NonFiniteLoss::kStop) {
    return absl::FailedPreconditionError(
        absl::StrCat("the loss is ", loss_value, " at ", where,
                     "; stopped without writing a checkpoint (lower the learning rate, or set "
                     "trainer.on_nonfinite_loss=skip)"));
  }
  Logger::Instance().Warning(absl::StrCat("skipping a step with loss ", loss_value, " at ", where));
  return true;
}

absl::Status AutomaticOptimization::OptimizerStep() {
  Trainer& t = ctx_.trainer;
  PhaseProfiler::Scope timed(ctx_.profiler, PhaseProfiler::kOptimizer);
  const TrainerOptions& options = ctx_.options;
  // 16-mixed: the gradients unscaled first (callbacks and clipping see their true values), and a
  // step whose gradients hold inf or nan skipped, as torch.amp.GradScaler.step; the scale follows.
  GradScaler* scaler = ctx_.strategy.scaler();
  const bool skip =
      scaler != nullptr && scaler->UnscaleAndCheck(ctx_.state.inputs.task->module().parameters());
  KILN_RETURN_IF_ERROR(
      ctx_.callbacks.ForEach([&](Callback& c) { return c.OnBeforeOptimizerStep(t); }));
  const bool norm_clip = options.gradient_clip_algorithm == TrainerOptions::ClipAlgorithm::kNorm;
  if (options.gradient_clip_val.has_value() && !skip && norm_clip && ctx_.strategy.sharded()) {
    // fsdp: the norm of the whole gradient, over every rank's pieces.
    KILN_RETURN_IF_ERROR(ctx_.strategy.ClipShardedGradNorm(*options.gradient_clip_val));
  } else if (options.gradient_clip_val.has_value() && !skip) {
    // On the device, as the graphs clip: torch's C++ clip_grad_norm_ would read the norm on the
    // host.
    ClipGradientsOnDevice(ctx_.state.inputs.task->module().parameters(), *options.gradient_clip_val,
                          options.gradient_clip_algorithm == TrainerOptions::ClipAlgorithm::kNorm);
  }
  if (!skip) ctx_.state.optimizer->step();
  if (scaler != nullptr) scaler->Update();
  ctx_.state.optimizer->zero_grad();
  AfterOptimizerStep();
  return absl::OkStatus();
}

void AutomaticOptimization::AfterOptimizerStep() {
  const TrainerOptions& options = ctx_.options;
  ++ctx_.state.progress.global_step;
  Scheduler* scheduler = ctx_.state.inputs.scheduler.get();
  if (scheduler && !ctx_.state.scheduler_paused &&
      scheduler->interval() == Scheduler::Interval::kStep)
    scheduler->Step(std::nan(""));
  if (ctx_.state.progress.global_step % options.log_every_n_steps == 0) {
    std::map<std::string, double> metrics = ctx_.logging.train_log().last();
    metrics["lr"] = ctx_.state.optimizer->param_groups()[0].options().get_lr();
    metrics["epoch"] = static_cast<double>(ctx_.state.progress.epoch);
    ctx_.Log(metrics);
  }
}

}  // namespace kiln
