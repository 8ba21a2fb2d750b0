#include "lib/trainer/internal/training_epoch_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/core/files.h"
#include "lib/core/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/trainer/internal/evaluation_loop.h"
#include "lib/trainer/process_settings.h"
#include "lib/trainer/trainer.h"

namespace kiln {

absl::StatusOr<bool> TrainingEpochLoop::Run() {
  Trainer& t = ctx_.trainer;
  const TrainerOptions& options = ctx_.options;
  Task& task = *ctx_.state.inputs.task;
  task.module().train();
  if (options.cuda_graphs && graph_ == nullptr) {
    KILN_ASSIGN_OR_RETURN(graph_, CudaGraphStep::Create(ctx_));
  }
  if (ctx_.state.progress.batch_in_epoch == 0) ctx_.logging.train_log().ResetEpoch();
  KILN_RETURN_IF_ERROR(ctx_.callbacks.ForEach([&](Callback& c) { return c.OnTrainEpochStart(t); }));
  auto epoch_start = std::chrono::steady_clock::now();
  int64_t samples_at_start = ctx_.state.progress.samples;
  int64_t val_every = 0;  // mid-epoch validation every N batches
  if (!options.val_check_interval.fraction) {
    val_every = static_cast<int64_t>(options.val_check_interval.value);
  } else if (options.val_check_interval.value < 1.0) {
    val_every =
        std::max<int64_t>(1, options.val_check_interval.Of(ctx_.state.progress.train_batches));
  }
  bool stop_mid_epoch = false;
  // The simple profiler's "data": the wait for each batch, from the end of the previous one.
  auto batch_done = std::chrono::steady_clock::now();
  auto status = loader_.Run(
      ctx_.state.progress.epoch, ctx_.state.progress.batch_in_epoch,
      ctx_.state.progress.train_batches, [&](data::Batch& batch) -> absl::StatusOr<bool> {
        ctx_.profiler.Add(
            PhaseProfiler::kData,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - batch_done).count());
        bool last = batch.index + 1 == ctx_.state.progress.train_batches;
        const int64_t run_batch = ctx_.state.progress.micro_batches;
        if (ctx_.state.operator_trace) ctx_.state.operator_trace->BeforeBatch(run_batch);
        KILN_RETURN_IF_ERROR(Advance(batch, last));
        if (ctx_.state.operator_trace) ctx_.state.operator_trace->AfterBatch(run_batch);
        ctx_.state.progress.batch_in_epoch = batch.index + 1;
        bool at_step_boundary =
            ctx_.state.progress.batch_in_epoch % options.accumulate_grad_batches == 0 || last;
        if (validation_ && val_every > 0 && !last &&
            ctx_.state.progress.batch_in_epoch % val_every == 0) {
          KILN_RETURN_IF_ERROR(validation_->Validate());
          task.module().train();
        }
        if (at_step_boundary) {
          KILN_ASSIGN_OR_RETURN(bool stop, StopAfterThisStep());
          if (stop) {
            stop_mid_epoch = true;
            return false;
          }
        }
        batch_done = std::chrono::steady_clock::now();
        return true;
      });
  KILN_RETURN_IF_ERROR(status);
  if (stop_mid_epoch && ctx_.state.progress.batch_in_epoch < ctx_.state.progress.train_batches) {
    if (ctx_.state.stop.signal == 0 && t.checkpointing_enabled()) {
      // max_steps or max_time ended training mid-epoch: keep a resumable checkpoint.
      KILN_RETURN_IF_ERROR(MakeDirs(ctx_.state.checkpoint_dir));
      KILN_RETURN_IF_ERROR(t.SaveCheckpoint(ctx_.state.checkpoint_dir + "/last.ckpt"));
    }
    return true;
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
  KILN_RETURN_IF_ERROR(EndEpoch(seconds, samples_at_start));
  return false;
}

absl::Status TrainingEpochLoop::EndEpoch(double seconds, int64_t samples_at_start) {
  Trainer& t = ctx_.trainer;
  const TrainerOptions& options = ctx_.options;
  auto means = ctx_.logging.train_log().EpochMeans();
  KILN_RETURN_IF_ERROR(ctx_.strategy.AverageOverRanks(means));
  // The task's training metrics over the epoch's accumulated state, exact over all ranks; they
  // replace the means of their per-batch values.
  KILN_ASSIGN_OR_RETURN(auto computed,
                        ctx_.state.inputs.task->TrainingEpochEnd([this](torch::Tensor& tensor) {
                          return ctx_.strategy.SumOverRanks(tensor);
                        }));
  for (const auto& [k, v] : computed) means[k] = v;
  for (const auto& [k, v] : means) ctx_.logging.callback_metrics()[k] = v;
  bool validate =
      validation_ && (ctx_.state.progress.epoch + 1) % options.check_val_every_n_epoch == 0;
  if (validate) KILN_RETURN_IF_ERROR(validation_->Validate());
  Scheduler* scheduler = ctx_.state.inputs.scheduler.get();
  if (scheduler && !ctx_.state.scheduler_paused &&
      scheduler->interval() == Scheduler::Interval::kEpoch) {
    double metric = std::nan("");
    auto it = ctx_.logging.callback_metrics().find(scheduler->monitor());
    if (it != ctx_.logging.callback_metrics().end()) metric = it->second;
    scheduler->Step(metric);
  }
  std::map<std::string, double> epoch_metrics;
  for (const auto& [k, v] : means) epoch_metrics[k + "_epoch"] = v;
  epoch_metrics["epoch"] = static_cast<double>(ctx_.state.progress.epoch);
  ctx_.Log(epoch_metrics);
  Logger::Instance().Info(
      absl::StrFormat("epoch %d: %s  (%.1f s, %.0f samples/s)", ctx_.state.progress.epoch,
                      FormatMetrics(ctx_.logging.callback_metrics()), seconds,
                      static_cast<double>(ctx_.state.progress.samples - samples_at_start) /
                          std::max(seconds, 1e-9)));
  if (GradScaler* scaler = ctx_.strategy.scaler();
      scaler != nullptr && scaler->skipped_steps() > skipped_steps_logged_) {
    Logger::Instance().Info(absl::StrFormat(
        "16-mixed: %d optimizer steps skipped this epoch (inf/nan gradients); loss scale now %g",
        scaler->skipped_steps() - skipped_steps_logged_, scaler->scale()));
    skipped_steps_logged_ = scaler->skipped_steps();
  }
  // Checkpoints written at the end of the epoch resume at the next one.
  ++ctx_.state.progress.epoch;
  ctx_.state.progress.batch_in_epoch = 0;
  KILN_RETURN_IF_ERROR(ctx_.callbacks.ForEach([&](Callback& c) { return c.OnTrainEpochEnd(t); }));
  if (ctx_.state.stop.requested && ctx_.state.progress.epoch < options.min_epochs) {
    Logger::Instance().Info(absl::StrCat("not stopping before min_epochs=", options.min_epochs));
    ctx_.state.stop.requested = false;
    ctx_.state.stop.reason.clear();
  }
  return absl::OkStatus();
}

absl::Status TrainingEpochLoop::Advance(data::Batch& batch, bool last_in_epoch) {
  Trainer& t = ctx_.trainer;
  const TrainerOptions& options = ctx_.options;
  Strategy& strategy = ctx_.strategy;
  Task& task = *ctx_.state.inputs.task;
  batch.input = strategy.InputToDevice(batch.input);
  batch.target = strategy.ToDevice(batch.target);
  KILN_RETURN_IF_ERROR(
      ctx_.callbacks.ForEach([&](Callback& c) { return c.OnTrainBatchStart(t, batch); }));
  KILN_RETURN_IF_ERROR(strategy.BeforeTrainingForward());
  const bool boundary = (batch.index + 1) % options.accumulate_grad_batches == 0 || last_in_epoch;
  // The forward, the loss and the backward are queued before the host reads anything: the loss is
  // read once, after the backward (a GPU runs the whole step's work meanwhile), and a non-finite
  // one drops the gradients it left (skip) or stops before the optimizer step.
  absl::StatusOr<Task::TrainingOutputs> outputs;
  if (graph_ != nullptr) {
    PhaseProfiler::Scope timed(ctx_.profiler, PhaseProfiler::kForward);
    outputs = graph_->ForwardBackward(batch);
    if (absl::IsUnimplemented(outputs.status())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trainer.cuda_graphs=true: the task cannot be captured: ", outputs.status().message(),
          " (set trainer.cuda_graphs=false)"));
    }
  } else {
    {
      PhaseProfiler::Scope timed(ctx_.profiler, PhaseProfiler::kForward);
      AutocastScope autocast(strategy);
      outputs = task.TrainingLoss(batch);
    }
    // A task whose step reads values on the host (no TrainingLoss) takes the whole step at once.
    if (absl::IsUnimplemented(outputs.status())) return AdvanceWholeStep(batch, boundary);
    if (outputs.ok()) KILN_RETURN_IF_ERROR(Backward(outputs->loss, boundary));
  }
  if (!outputs.ok()) return outputs.status();
  double loss_value = outputs->loss.item<double>();
  KILN_ASSIGN_OR_RETURN(bool skip, CountAndCheckLoss(batch, loss_value));
  auto log_step = [&] { return task.LogTrainingStep(batch, *outputs, ctx_.logging.train_log()); };
  if (skip) {
    if (graph_ != nullptr) {
      graph_->SkipOptimizerStep();
    } else {
      ctx_.state.optimizer->zero_grad();
    }
    return log_step();
  }
  if (graph_ != nullptr) {
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
  } else {
    // Lightning's order: what the training step logs is there before on_before_optimizer_step.
    KILN_RETURN_IF_ERROR(log_step());
    if (boundary) KILN_RETURN_IF_ERROR(OptimizerStep());
  }
  return EndBatch(batch, loss_value);
}

absl::Status TrainingEpochLoop::AdvanceWholeStep(data::Batch& batch, bool boundary) {
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

absl::Status TrainingEpochLoop::Backward(const torch::Tensor& loss, bool boundary) {
  PhaseProfiler::Scope timed(ctx_.profiler, PhaseProfiler::kBackward);
  // Each micro-batch's share of an accumulated step.
  return ctx_.strategy.Backward(loss / static_cast<double>(ctx_.options.accumulate_grad_batches),
                                boundary);
}

absl::Status TrainingEpochLoop::EndBatch(const data::Batch& batch, double loss_value) {
  Trainer& t = ctx_.trainer;
  // This batch is done before the callbacks see it: a checkpoint they save (model_checkpoint's
  // every_n_train_steps) resumes after it, not with it again.
  ctx_.state.progress.batch_in_epoch = batch.index + 1;
  return ctx_.callbacks.ForEach(
      [&](Callback& c) { return c.OnTrainBatchEnd(t, batch, loss_value); });
}

absl::StatusOr<bool> TrainingEpochLoop::CountAndCheckLoss(const data::Batch& batch,
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

absl::Status TrainingEpochLoop::OptimizerStep() {
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
  if (options.gradient_clip_val.has_value() && !skip) {
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

void TrainingEpochLoop::AfterOptimizerStep() {
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

absl::StatusOr<bool> TrainingEpochLoop::StopAfterThisStep() {
  Trainer& t = ctx_.trainer;
  bool step_limit =
      ctx_.options.max_steps > 0 && ctx_.state.progress.global_step >= ctx_.options.max_steps;
  int signal = StopSignals::Received();
  bool local = ctx_.OutOfTime() || ctx_.state.stop.now;
  if (ctx_.strategy.distributed()) {
    // A signal may reach one rank first, and clocks differ: all ranks stop at the same step or
    // none.
    torch::Tensor flags =
        torch::tensor({static_cast<double>(signal), local ? 1.0 : 0.0}, torch::kFloat64);
    KILN_RETURN_IF_ERROR(ctx_.strategy.MaxOverRanks(flags));
    signal = static_cast<int>(flags[0].item<double>());
    if (flags[1].item<double>() > 0 && !local) t.RequestStop("another rank reached its time limit");
    local = flags[1].item<double>() > 0;
    if (local) ctx_.state.stop.now = true;
  }
  ctx_.state.stop.signal = signal;
  return signal != 0 || step_limit || local;
}

}  // namespace kiln
