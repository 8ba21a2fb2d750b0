#include "lib/trainer/internal/evaluation_loop.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/trainer/process_settings.h"
#include "lib/trainer/trainer.h"

namespace kiln {

int64_t EvaluationLoop::MaxBatches() const {
  const TrainerOptions& options = ctx_.trainer.options();
  const BatchLimit& limit =
      stage_ == "test" ? options.limit_test_batches : options.limit_val_batches;
  int64_t batches = limit.Of(loader_.num_batches());
  if (options.fast_dev_run > 0) batches = std::min(batches, options.fast_dev_run);
  return batches;
}

absl::StatusOr<std::map<std::string, double>> EvaluationLoop::RunBatches(int64_t max_batches,
                                                                         bool stop_on_signal) {
  Task& task = *ctx_.trainer.task();
  task.module().eval();
  torch::NoGradGuard no_grad;
  MetricLog log;
  const Strategy& strategy = ctx_.strategy;
  int64_t done = 0;
  KILN_RETURN_IF_ERROR(
      loader_.Run(0, 0, max_batches, [&](data::Batch& batch) -> absl::StatusOr<bool> {
        if (stop_on_signal) {
          KILN_RETURN_IF_ERROR(CheckStopSignal(absl::StrCat(
              "while evaluating the ", stage_ == "test" ? "test" : "validation", " split (after ",
              done, " of ", max_batches, " batches); no metrics were written")));
        }
        ++done;
        strategy.BatchToDevice(batch);
        KILN_RETURN_IF_ERROR(ctx_.strategy.BeforeEvaluationForward());
        AutocastScope autocast(strategy);
        KILN_RETURN_IF_ERROR(task.EvaluationStep(batch, stage_, log));
        return true;
      }));
  KILN_RETURN_IF_ERROR(ctx_.strategy.AfterEvaluation());
  auto metrics = log.EpochMeans();
  KILN_RETURN_IF_ERROR(ctx_.strategy.AverageOverRanks(metrics));
  // The task's metric objects: their state summed over ranks, then computed.
  KILN_ASSIGN_OR_RETURN(auto computed, task.EvaluationEnd(stage_, [this](torch::Tensor& t) {
    return ctx_.strategy.SumOverRanks(t);
  }));
  metrics.insert(computed.begin(), computed.end());
  return metrics;
}

absl::Status EvaluationLoop::Validate() {
  PhaseProfiler::Scope timed(ctx_.profiler, PhaseProfiler::kValidation);
  KILN_RETURN_IF_ERROR(
      ctx_.callbacks.ForEach([&](Callback& c) { return c.OnValidationStart(ctx_.trainer); }));
  KILN_ASSIGN_OR_RETURN(auto metrics, RunBatches(MaxBatches()));
  for (const auto& [k, v] : metrics) ctx_.logging.callback_metrics()[k] = v;
  ctx_.Log(metrics);
  return ctx_.callbacks.ForEach(
      [&](Callback& c) { return c.OnValidationEnd(ctx_.trainer, metrics); });
}

absl::StatusOr<std::map<std::string, double>> EvaluationLoop::Evaluate() {
  bool test = stage_ == "test";
  const int64_t batches = MaxBatches();
  Logger::Instance().Info(absl::StrCat(test ? "testing: " : "validating: ", batches, " batches"));
  KILN_ASSIGN_OR_RETURN(auto metrics, RunBatches(batches, /*stop_on_signal=*/true));
  ctx_.Log(metrics);
  if (test)
    KILN_RETURN_IF_ERROR(
        ctx_.callbacks.ForEach([&](Callback& c) { return c.OnTestEnd(ctx_.trainer, metrics); }));
  Logger::Instance().Info(absl::StrCat(test ? "test: " : "validation: ", FormatMetrics(metrics)));
  return metrics;
}

}  // namespace kiln
