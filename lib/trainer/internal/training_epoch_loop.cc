#include "lib/trainer/internal/training_epoch_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
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
  if (step_ == nullptr) {
    KILN_ASSIGN_OR_RETURN(step_, AutomaticOptimization::Choose(ctx_));
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
  Strategy& strategy = ctx_.strategy;
  strategy.BatchToDevice(batch);
  KILN_RETURN_IF_ERROR(
      ctx_.callbacks.ForEach([&](Callback& c) { return c.OnTrainBatchStart(t, batch); }));
  KILN_RETURN_IF_ERROR(strategy.BeforeTrainingForward());
  const bool boundary =
      (batch.index + 1) % ctx_.options.accumulate_grad_batches == 0 || last_in_epoch;
  return step_->Advance(batch, boundary);
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
