#include "lib/trainer/training_epoch_loop.h"

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
#include "lib/trainer/evaluation_loop.h"
#include "lib/trainer/process_settings.h"
#include "lib/trainer/trainer.h"

namespace kiln {

absl::StatusOr<bool> TrainingEpochLoop::Run() {
  Trainer& t = trainer_;
  const TrainerOptions& options = t.options_;
  Task& task = *t.inputs_.task;
  task.module().train();
  if (t.batch_in_epoch_ == 0) t.train_log_.ResetEpoch();
  KILN_RETURN_IF_ERROR(t.ForEachCallback([&](Callback& c) { return c.OnTrainEpochStart(t); }));
  auto epoch_start = std::chrono::steady_clock::now();
  int64_t samples_at_start = t.samples_;
  int64_t val_every = 0;  // mid-epoch validation every N batches
  if (!options.val_check_interval.fraction) {
    val_every = static_cast<int64_t>(options.val_check_interval.value);
  } else if (options.val_check_interval.value < 1.0) {
    val_every = std::max<int64_t>(1, options.val_check_interval.Of(t.train_batches_));
  }
  bool stop_mid_epoch = false;
  // The simple profiler's "data": the wait for each batch, from the end of the previous one.
  auto batch_done = std::chrono::steady_clock::now();
  auto status = loader_.Run(t.epoch_, t.batch_in_epoch_, t.train_batches_,
                            [&](data::Batch& batch) -> absl::StatusOr<bool> {
    t.profiler_.Add(PhaseProfiler::kData,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - batch_done).count());
    bool last = batch.index + 1 == t.train_batches_;
    const int64_t run_batch = t.micro_batches_;
    if (t.operator_trace_) t.operator_trace_->BeforeBatch(run_batch);
    KILN_RETURN_IF_ERROR(Advance(batch, last));
    if (t.operator_trace_) t.operator_trace_->AfterBatch(run_batch);
    t.batch_in_epoch_ = batch.index + 1;
    bool at_step_boundary = t.batch_in_epoch_ % options.accumulate_grad_batches == 0 || last;
    if (validation_ && val_every > 0 && !last && t.batch_in_epoch_ % val_every == 0) {
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
  if (stop_mid_epoch && t.batch_in_epoch_ < t.train_batches_) {
    if (t.stop_signal_ == 0 && t.checkpointing_enabled()) {
      // max_steps or max_time ended training mid-epoch: keep a resumable checkpoint.
      KILN_RETURN_IF_ERROR(MakeDirs(t.checkpoint_dir_));
      KILN_RETURN_IF_ERROR(t.SaveCheckpoint(t.checkpoint_dir_ + "/last.ckpt"));
    }
    return true;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
  KILN_RETURN_IF_ERROR(EndEpoch(seconds, samples_at_start));
  return false;
}

absl::Status TrainingEpochLoop::EndEpoch(double seconds, int64_t samples_at_start) {
  Trainer& t = trainer_;
  const TrainerOptions& options = t.options_;
  auto means = t.train_log_.EpochMeans();
  KILN_RETURN_IF_ERROR(t.strategy_.AverageOverRanks(means));
  // The task's training metrics over the epoch's accumulated state, exact over all ranks; they
  // replace the means of their per-batch values.
  KILN_ASSIGN_OR_RETURN(auto computed, t.inputs_.task->TrainingEpochEnd([&t](torch::Tensor& tensor) {
                          return t.strategy_.SumOverRanks(tensor);
                        }));
  for (const auto& [k, v] : computed) means[k] = v;
  for (const auto& [k, v] : means) t.callback_metrics_[k] = v;
  bool validate = validation_ && (t.epoch_ + 1) % options.check_val_every_n_epoch == 0;
  if (validate) KILN_RETURN_IF_ERROR(validation_->Validate());
  Scheduler* scheduler = t.inputs_.scheduler.get();
  if (scheduler && !t.scheduler_paused_ && scheduler->interval() == Scheduler::Interval::kEpoch) {
    double metric = std::nan("");
    auto it = t.callback_metrics_.find(scheduler->monitor());
    if (it != t.callback_metrics_.end()) metric = it->second;
    scheduler->Step(metric);
  }
  std::map<std::string, double> epoch_metrics;
  for (const auto& [k, v] : means) epoch_metrics[k + "_epoch"] = v;
  epoch_metrics["epoch"] = static_cast<double>(t.epoch_);
  t.LogToLoggers(epoch_metrics);
  Logger::Instance().Info(absl::StrFormat("epoch %d: %s  (%.1f s, %.0f samples/s)", t.epoch_,
                                          FormatMetrics(t.callback_metrics_), seconds,
                                          static_cast<double>(t.samples_ - samples_at_start) / std::max(seconds, 1e-9)));
  if (GradScaler* scaler = t.strategy_.scaler(); scaler != nullptr && scaler->skipped_steps() > skipped_steps_logged_) {
    Logger::Instance().Info(absl::StrFormat("16-mixed: %d optimizer steps skipped this epoch (inf/nan gradients); loss scale now %g",
                                            scaler->skipped_steps() - skipped_steps_logged_, scaler->scale()));
    skipped_steps_logged_ = scaler->skipped_steps();
  }
  // Checkpoints written at the end of the epoch resume at the next one.
  ++t.epoch_;
  t.batch_in_epoch_ = 0;
  KILN_RETURN_IF_ERROR(t.ForEachCallback([&](Callback& c) { return c.OnTrainEpochEnd(t); }));
  if (t.stop_requested_ && t.epoch_ < options.min_epochs) {
    Logger::Instance().Info(absl::StrCat("not stopping before min_epochs=", options.min_epochs));
    t.stop_requested_ = false;
    t.stop_reason_.clear();
  }
  return absl::OkStatus();
}

absl::Status TrainingEpochLoop::Advance(data::Batch& batch, bool last_in_epoch) {
  Trainer& t = trainer_;
  const TrainerOptions& options = t.options_;
  Strategy& strategy = t.strategy_;
  Task& task = *t.inputs_.task;
  batch.input = strategy.InputToDevice(batch.input);
  batch.target = strategy.ToDevice(batch.target);
  KILN_RETURN_IF_ERROR(t.ForEachCallback([&](Callback& c) { return c.OnTrainBatchStart(t, batch); }));
  KILN_RETURN_IF_ERROR(strategy.BeforeTrainingForward());
  absl::StatusOr<torch::Tensor> loss;
  {
    PhaseProfiler::Scope timed(t.profiler_, PhaseProfiler::kForward);
    AutocastScope autocast(strategy);
    loss = task.TrainingStep(batch, t.train_log_);
  }
  if (!loss.ok()) return loss.status();
  double loss_value = loss->item<double>();
  // Every rank skips or stops on a non-finite loss together, or their collectives would pair up wrongly.
  KILN_ASSIGN_OR_RETURN(bool nonfinite, strategy.AnyRank(!std::isfinite(loss_value)));
  if (nonfinite && std::isfinite(loss_value)) loss_value = std::nan("");
  ++t.micro_batches_;
  t.samples_ += batch.size() * t.world_size();
  if (!std::isfinite(loss_value)) {
    std::string where = absl::StrCat("epoch ", t.epoch_, ", batch ", batch.index, ", step ", t.global_step_);
    if (options.on_nonfinite_loss == TrainerOptions::NonFiniteLoss::kStop) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the loss is ", loss_value, " at ", where,
          "; stopped without writing a checkpoint (lower the learning rate, or set trainer.on_nonfinite_loss=skip)"));
    }
    Logger::Instance().Warning(absl::StrCat("skipping a step with loss ", loss_value, " at ", where));
    t.optimizer_->zero_grad();
    return absl::OkStatus();
  }
  bool boundary = (batch.index + 1) % options.accumulate_grad_batches == 0 || last_in_epoch;
  torch::Tensor scaled = *loss / static_cast<double>(options.accumulate_grad_batches);
  {
    PhaseProfiler::Scope timed(t.profiler_, PhaseProfiler::kBackward);
    KILN_RETURN_IF_ERROR(strategy.Backward(scaled, boundary));
  }
  if (boundary) KILN_RETURN_IF_ERROR(OptimizerStep());
  // This batch is done before the callbacks see it: a checkpoint they save (model_checkpoint's
  // every_n_train_steps) resumes after it, not with it again.
  t.batch_in_epoch_ = batch.index + 1;
  return t.ForEachCallback([&](Callback& c) { return c.OnTrainBatchEnd(t, batch, loss_value); });
}

absl::Status TrainingEpochLoop::OptimizerStep() {
  Trainer& t = trainer_;
  PhaseProfiler::Scope timed(t.profiler_, PhaseProfiler::kOptimizer);
  const TrainerOptions& options = t.options_;
  // 16-mixed: the gradients unscaled first (callbacks and clipping see their true values), and a
  // step whose gradients hold inf or nan skipped, as torch.amp.GradScaler.step; the scale follows.
  GradScaler* scaler = t.strategy_.scaler();
  const bool skip = scaler != nullptr && scaler->UnscaleAndCheck(t.inputs_.task->module().parameters());
  KILN_RETURN_IF_ERROR(t.ForEachCallback([&](Callback& c) { return c.OnBeforeOptimizerStep(t); }));
  if (options.gradient_clip_val.has_value() && !skip) {
    auto parameters = t.inputs_.task->module().parameters();
    if (options.gradient_clip_algorithm == TrainerOptions::ClipAlgorithm::kNorm) {
      torch::nn::utils::clip_grad_norm_(parameters, *options.gradient_clip_val);
    } else {
      torch::nn::utils::clip_grad_value_(parameters, *options.gradient_clip_val);
    }
  }
  if (!skip) t.optimizer_->step();
  if (scaler != nullptr) scaler->Update();
  t.optimizer_->zero_grad();
  ++t.global_step_;
  Scheduler* scheduler = t.inputs_.scheduler.get();
  if (scheduler && !t.scheduler_paused_ && scheduler->interval() == Scheduler::Interval::kStep) scheduler->Step(std::nan(""));
  if (t.global_step_ % options.log_every_n_steps == 0) {
    std::map<std::string, double> metrics = t.train_log_.last();
    metrics["lr"] = t.optimizer_->param_groups()[0].options().get_lr();
    metrics["epoch"] = static_cast<double>(t.epoch_);
    t.LogToLoggers(metrics);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> TrainingEpochLoop::StopAfterThisStep() {
  Trainer& t = trainer_;
  bool step_limit = t.options_.max_steps > 0 && t.global_step_ >= t.options_.max_steps;
  int signal = StopSignals::Received();
  bool local = t.OutOfTime() || t.stop_now_;
  if (t.strategy_.distributed()) {
    // A signal may reach one rank first, and clocks differ: all ranks stop at the same step or none.
    torch::Tensor flags = torch::tensor({static_cast<double>(signal), local ? 1.0 : 0.0}, torch::kFloat64);
    KILN_RETURN_IF_ERROR(t.strategy_.MaxOverRanks(flags));
    signal = static_cast<int>(flags[0].item<double>());
    if (flags[1].item<double>() > 0 && !local) t.RequestStop("another rank reached its time limit");
    local = flags[1].item<double>() > 0;
    if (local) t.stop_now_ = true;
  }
  t.stop_signal_ = signal;
  return signal != 0 || step_limit || local;
}

}  // namespace kiln
