#include "lib/trainer/connectors/loop_state.h"

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/data/sampler.h"
#include "lib/logging/logger.h"

namespace kiln {

LoopPosition FitProgress::Position(uint64_t seed, int world_size) const {
  LoopPosition loop;
  loop.global_step = global_step;
  loop.epoch = epoch;
  loop.batch_in_epoch = batch_in_epoch;
  loop.micro_batches = micro_batches;
  loop.samples = samples;
  loop.elapsed_seconds = elapsed_seconds();
  loop.seed = static_cast<int64_t>(seed);
  loop.world_size = world_size;
  loop.batch_size = batch_size;
  return loop;
}

void FitProgress::Restore(const LoopPosition& loop) {
  global_step = loop.global_step;
  epoch = loop.epoch;
  batch_in_epoch = loop.batch_in_epoch;
  micro_batches = loop.micro_batches;
  samples = loop.samples;
  elapsed_before = loop.elapsed_seconds;
}

CallbackConnector::CallbackConnector(std::vector<std::shared_ptr<Callback>> callbacks,
                                     PhaseProfiler& profiler)
    : profiler_(profiler) {
  for (auto& c : callbacks) {
    if (!c->runs_last()) callbacks_.push_back(c);
  }
  for (auto& c : callbacks) {
    if (c->runs_last()) callbacks_.push_back(c);
  }
}

absl::Status CallbackConnector::ForEach(const std::function<absl::Status(Callback&)>& fn) {
  PhaseProfiler::Scope timed(profiler_, PhaseProfiler::kCallbacks);
  for (auto& c : callbacks_) KILN_RETURN_IF_ERROR(fn(*c));
  return absl::OkStatus();
}

void CallbackConnector::OnException(Trainer& trainer, const absl::Status& status) {
  for (auto& c : callbacks_) c->OnException(trainer, status);
}

LoggerConnector::LoggerConnector(std::vector<std::shared_ptr<MetricsLogger>> loggers,
                                 PhaseProfiler& profiler)
    : loggers_(std::move(loggers)), profiler_(profiler) {}

void LoggerConnector::Log(const std::map<std::string, double>& metrics, int64_t step,
                          bool global_zero) {
  if (!global_zero) return;
  PhaseProfiler::Scope timed(profiler_, PhaseProfiler::kLogging);
  ForEach([&](MetricsLogger& logger) { return logger.LogMetrics(metrics, step); });
}

void LoggerConnector::ForEach(const std::function<absl::Status(MetricsLogger&)>& fn) {
  for (auto it = loggers_.begin(); it != loggers_.end();) {
    absl::Status st = fn(**it);
    if (st.ok()) {
      ++it;
      continue;
    }
    Logger::Instance().Warning(
        absl::StrCat("metrics logger failed: ", st.message(),
                     "; this logger is off for the rest of the run, which goes on"));
    it = loggers_.erase(it);
  }
}

absl::StatusOr<std::shared_ptr<const data::Dataset>> SetUpSplit(
    data::DataModule& data, data::Stage stage, torch::Device device,
    const std::function<std::shared_ptr<const data::Dataset>(data::DataModule&)>& which,
    const std::string& missing) {
  data.set_device(device);
  KILN_RETURN_IF_ERROR(data.PrepareData());
  KILN_RETURN_IF_ERROR(data.Setup(stage));
  std::shared_ptr<const data::Dataset> dataset = which(data);
  if (!dataset)
    return absl::FailedPreconditionError(absl::StrCat("the data module has no ", missing));
  return dataset;
}

std::unique_ptr<data::DataLoader> InOrderLoader(std::shared_ptr<const data::Dataset> dataset,
                                                const data::DataModule& data) {
  auto sampler = data::SamplerFor(*dataset, /*shuffle=*/false, 0);
  return std::make_unique<data::DataLoader>(std::move(dataset), std::move(sampler),
                                            data.loader_options());
}

void LoopContext::Log(const std::map<std::string, double>& metrics) const {
  logging.Log(metrics, state.progress.global_step, strategy.global_rank() == 0);
}

FitParts LoopContext::Parts() const {
  FitParts parts;
  parts.task = state.inputs.task;
  parts.optimizer = state.optimizer.get();
  parts.scheduler = state.inputs.scheduler.get();
  parts.scaler = strategy.scaler();
  parts.callbacks = &callbacks.callbacks();
  parts.model_name = state.inputs.model_name;
  parts.config_yaml = state.inputs.config_yaml;
  parts.frozen_digest = state.inputs.frozen_digest;
  return parts;
}

bool LoopContext::OutOfTime() const {
  return options.max_time.has_value() && state.progress.elapsed_seconds() >= *options.max_time;
}

}  // namespace kiln
