#include "lib/trainer/trainer.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "lib/core/files.h"
#include "lib/core/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/trainer/process_settings.h"
#include "lib/trainer/checkpoint_connector.h"
#include "lib/trainer/evaluation_loop.h"
#include "lib/trainer/fit_loop.h"
#include "lib/trainer/predict_loop.h"

namespace kiln {

Trainer::Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks,
                 std::vector<std::shared_ptr<MetricsLogger>> loggers)
    : options_(std::move(options)), loggers_(std::move(loggers)) {
  // Callback order: as listed, except those that must run last (checkpointing).
  for (auto& c : callbacks) {
    if (!c->runs_last()) callbacks_.push_back(c);
  }
  for (auto& c : callbacks) {
    if (c->runs_last()) callbacks_.push_back(c);
  }
  checkpoint_dir_ = options_.default_root_dir + "/checkpoints";
}

int Trainer::global_rank() const { return strategy_.global_rank(); }
int Trainer::world_size() const { return strategy_.world_size(); }

double Trainer::elapsed_seconds() const {
  return elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool Trainer::OutOfTime() const { return options_.max_time.has_value() && elapsed_seconds() >= *options_.max_time; }

void Trainer::RequestStopNow(const std::string& reason) {
  if (epoch_ < options_.min_epochs) return;
  stop_now_ = true;
  RequestStop(reason);
}

void Trainer::RequestStop(const std::string& reason) {
  stop_requested_ = true;
  stop_reason_ = reason;
}

absl::Status Trainer::ForEachCallback(const std::function<absl::Status(Callback&)>& fn) {
  PhaseProfiler::Scope timed(profiler_, PhaseProfiler::kCallbacks);
  for (auto& c : callbacks_) KILN_RETURN_IF_ERROR(fn(*c));
  return absl::OkStatus();
}

void Trainer::LogToLoggers(const std::map<std::string, double>& metrics) {
  if (!is_global_zero()) return;
  PhaseProfiler::Scope timed(profiler_, PhaseProfiler::kLogging);
  ForEachLogger([&](MetricsLogger& logger) { return logger.LogMetrics(metrics, global_step_); });
}

void Trainer::ForEachLogger(const std::function<absl::Status(MetricsLogger&)>& fn) {
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

FitParts Trainer::Parts() const {
  FitParts parts;
  parts.task = inputs_.task;
  parts.optimizer = optimizer_.get();
  parts.scheduler = inputs_.scheduler.get();
  parts.scaler = strategy_.scaler();
  parts.callbacks = &callbacks_;
  parts.model_name = inputs_.model_name;
  parts.config_yaml = inputs_.config_yaml;
  return parts;
}

absl::Status Trainer::SaveCheckpoint(const std::string& path) {
  if (!is_global_zero()) return absl::OkStatus();  // the ranks hold the same state; rank 0 writes it
  LoopPosition loop;
  loop.global_step = global_step_;
  loop.epoch = epoch_;
  loop.batch_in_epoch = batch_in_epoch_;
  loop.micro_batches = micro_batches_;
  loop.samples = samples_;
  loop.elapsed_seconds = elapsed_seconds();
  loop.seed = static_cast<int64_t>(inputs_.seed);
  loop.world_size = world_size();
  loop.batch_size = batch_size_;
  absl::Status saved = SaveFitCheckpoint(path, Parts(), loop);
  return saved.ok() ? saved : CheckpointWriteFailed(path, saved);
}

absl::Status Trainer::CheckpointWriteFailed(const std::string& path, const absl::Status& error) {
  std::string kept = IsRegularFile(path) ? absl::StrCat("the previous ", path, " is intact")
                                         : absl::StrCat("nothing was written under ", path);
  if (options_.on_save_error == TrainerOptions::SaveError::kContinue) {
    Logger::Instance().Warning(
        absl::StrCat("checkpoint not saved: ", error.message(), "; ", kept,
                     "; training goes on without checkpoints (trainer.on_save_error=continue)"));
    checkpointing_ = false;
    return absl::OkStatus();
  }
  return absl::Status(error.code(),
                      absl::StrCat("checkpoint not saved: ", error.message(), "; ", kept,
                                   "; training stopped (trainer.on_save_error=continue trains on "
                                   "without checkpoints)"));
}

absl::Status Trainer::AddParamGroups(const std::vector<std::string>& names, double lr_factor) {
  if (optimizer_ == nullptr || inputs_.optimizer == nullptr) {
    return absl::FailedPreconditionError("parameter groups can only be added while fitting, after the optimizer is built");
  }
  std::set<std::string> wanted(names.begin(), names.end());
  NamedParameters params;
  std::vector<std::string> model_names;
  for (const auto& p : inputs_.task->module().named_parameters()) {
    if (wanted.count(p.key()) > 0) params.emplace_back(p.key(), p.value());
    model_names.push_back(p.key());
  }
  if (params.empty()) return absl::OkStatus();
  // The groups param_groups and lr_decay make for these parameters among the whole model's.
  KILN_ASSIGN_OR_RETURN(auto fresh, inputs_.optimizer->Create(params, model_names));
  for (auto& group : fresh->param_groups()) {
    std::unique_ptr<torch::optim::OptimizerOptions> options = group.options().clone();
    double base_lr = options->get_lr() * lr_factor;
    options->set_lr(base_lr);
    optimizer_->add_param_group(torch::optim::OptimizerParamGroup(group.params(), std::move(options)));
    if (inputs_.scheduler) inputs_.scheduler->OnParamGroupAdded(base_lr);
    Logger::Instance().Info(absl::StrCat("optimizer: added a group of ", group.params().size(), " parameters at lr ",
                                         optimizer_->param_groups().back().options().get_lr(), " (base ", base_lr, ")"));
  }
  return absl::OkStatus();
}

absl::Status Trainer::ForEachTrainingBatch(const std::function<absl::Status(data::Batch&)>& fn) {
  if (train_loader_ == nullptr) return absl::FailedPreconditionError("no training data outside fit");
  return train_loader_->Run(epoch_, 0, train_batches_, [&](data::Batch& batch) -> absl::StatusOr<bool> {
    batch.input = strategy_.InputToDevice(batch.input);
    batch.target = strategy_.ToDevice(batch.target);
    KILN_RETURN_IF_ERROR(fn(batch));
    return true;
  });
}

absl::Status Trainer::LoadWeights(const std::string& path, Task& task, const std::string& model_name) {
  return LoadCheckpointWeights(path, task, model_name);
}

absl::Status Trainer::ResumeFrom(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(LoopPosition loop, RestoreFitCheckpoint(
                                               path, Parts(),
                                               [this](torch::nn::Module& module) {
                                                 // The fit loop has placed this module already: the
                                                 // same module cannot be refused now.
                                                 strategy_.PlaceModule(module).IgnoreError();
                                               },
                                               [this] {
                                                 return ForEachCallback([this](Callback& c) {
                                                   return c.OnLoadCheckpoint(*this);
                                                 });
                                               },
                                               batch_size_));
  global_step_ = loop.global_step;
  epoch_ = loop.epoch;
  batch_in_epoch_ = loop.batch_in_epoch;
  micro_batches_ = loop.micro_batches;
  samples_ = loop.samples;
  elapsed_before_ = loop.elapsed_seconds;
  KILN_RETURN_IF_ERROR(AdaptPosition(loop.world_size, loop.batch_size, path));
  Logger::Instance().Info(absl::StrCat("resumed from ", path, " at epoch ", epoch_, ", batch ", batch_in_epoch_,
                                       ", step ", global_step_));
  return absl::OkStatus();
}

absl::Status Trainer::AdaptPosition(int64_t saved_world_size, int64_t saved_batch_size, const std::string& path) {
  int64_t per_step = world_size() * batch_size_;
  if (saved_world_size * saved_batch_size == per_step || batch_in_epoch_ == 0) return absl::OkStatus();
  // Batch b of every rank covers positions [b*W*B, (b+1)*W*B) of the epoch's order whatever the
  // world size W and batch size B, so a position carries over when the new W*B divides it.
  int64_t samples = batch_in_epoch_ * saved_world_size * saved_batch_size;
  if (samples % per_step != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " stopped mid-epoch after ", samples, " samples (", saved_world_size, " ranks x batch ",
        saved_batch_size, "); ", world_size(), " ranks x batch ", batch_size_,
        " cannot continue from there: choose sizes whose product divides ", samples,
        ", or resume from an end-of-epoch checkpoint"));
  }
  batch_in_epoch_ = samples / per_step;
  return absl::OkStatus();
}

absl::Status Trainer::Fit(const FitInputs& inputs) {
  absl::Status status = FitLoop(*this).Run(inputs);
  train_loader_ = nullptr;  // the fit loop's, gone with it
  return status;
}

absl::StatusOr<std::map<std::string, double>> Trainer::Evaluate(Task& task, data::DataModule& dm, data::Stage stage) {
  StopSignals stop_signals;  // SIGINT/SIGTERM end it between batches, nothing written
  inputs_.task = &task;
  start_ = std::chrono::steady_clock::now();
  strategy_.ConfigureProcess();
  KILN_RETURN_IF_ERROR(strategy_.SelectDevice());
  KILN_RETURN_IF_ERROR(strategy_.PlaceModule(task.module()));
  KILN_RETURN_IF_ERROR(dm.PrepareData());
  KILN_RETURN_IF_ERROR(dm.Setup(stage));
  bool test = stage == data::Stage::kTest;
  auto ds = test ? dm.test_dataset() : dm.val_dataset();
  if (!ds) return absl::FailedPreconditionError(absl::StrCat("the data module has no ", test ? "test" : "validation", " split"));
  data::DataLoader loader(ds, data::SamplerFor(*ds, /*shuffle=*/false, 0), dm.loader_options());
  return EvaluationLoop(*this, loader, test ? "test" : "val").Evaluate();
}

absl::StatusOr<std::vector<torch::Tensor>> Trainer::Predict(Task& task, data::DataModule& dm) {
  inputs_.task = &task;
  KILN_RETURN_IF_ERROR(strategy_.SelectDevice());
  KILN_RETURN_IF_ERROR(strategy_.PlaceModule(task.module()));
  task.module().eval();
  KILN_RETURN_IF_ERROR(dm.PrepareData());
  KILN_RETURN_IF_ERROR(dm.Setup(data::Stage::kPredict));
  auto ds = dm.predict_dataset();
  if (!ds) return absl::FailedPreconditionError("the data module has no prediction inputs");
  data::DataLoader loader(ds, data::SamplerFor(*ds, /*shuffle=*/false, 0), dm.loader_options());
  return PredictLoop(*this, loader).Run();
}

}  // namespace kiln
