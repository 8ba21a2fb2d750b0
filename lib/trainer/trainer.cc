#include "lib/trainer/trainer.h"

#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/trainer/connectors/checkpoint_connector.h"
#include "lib/trainer/connectors/loop_state.h"
#include "lib/trainer/internal/evaluation_loop.h"
#include "lib/trainer/internal/fit_loop.h"
#include "lib/trainer/internal/predict_loop.h"
#include "lib/trainer/process_settings.h"
#include "lib/weights/sharded_checkpoint.h"

namespace kiln {

// The loops' side of the Trainer: the connectors and the fit's state.
struct TrainerParts {
  TrainerParts(std::vector<std::shared_ptr<Callback>> callbacks,
               std::vector<std::shared_ptr<MetricsLogger>> loggers, PhaseProfiler& profiler)
      : callbacks(std::move(callbacks), profiler), logging(std::move(loggers), profiler) {}

  CallbackConnector callbacks;
  LoggerConnector logging;
  FitState state;
};

Trainer::Trainer(TrainerOptions options, std::vector<std::shared_ptr<Callback>> callbacks,
                 std::vector<std::shared_ptr<MetricsLogger>> loggers)
    : options_(std::move(options)),
      parts_(std::make_unique<TrainerParts>(std::move(callbacks), std::move(loggers), profiler_)) {
  parts_->state.checkpoint_dir = options_.default_root_dir + "/checkpoints";
}

Trainer::~Trainer() = default;

LoopContext Trainer::Context() {
  return {*this, options_, strategy_, profiler_, parts_->callbacks, parts_->logging, parts_->state};
}

int64_t Trainer::global_step() const { return parts_->state.progress.global_step; }
int64_t Trainer::current_epoch() const { return parts_->state.progress.epoch; }
int64_t Trainer::micro_batches() const { return parts_->state.progress.micro_batches; }
int64_t Trainer::samples_seen() const { return parts_->state.progress.samples; }
double Trainer::elapsed_seconds() const { return parts_->state.progress.elapsed_seconds(); }
int64_t Trainer::train_batches_per_epoch() const { return parts_->state.progress.train_batches; }
int64_t Trainer::batch_in_epoch() const { return parts_->state.progress.batch_in_epoch; }
const std::map<std::string, double>& Trainer::callback_metrics() const {
  return parts_->logging.callback_metrics();
}
torch::optim::Optimizer* Trainer::optimizer() const { return parts_->state.optimizer.get(); }
Task* Trainer::task() const { return parts_->state.inputs.task; }
bool Trainer::checkpointing_enabled() const {
  return parts_->state.checkpointing && options_.fast_dev_run == 0;
}
void Trainer::set_checkpointing_enabled(bool enabled) { parts_->state.checkpointing = enabled; }
void Trainer::set_checkpoint_dir(std::string dir) { parts_->state.checkpoint_dir = std::move(dir); }
const std::string& Trainer::checkpoint_dir() const { return parts_->state.checkpoint_dir; }
void Trainer::LogMetrics(const std::map<std::string, double>& metrics) { Context().Log(metrics); }
void Trainer::PauseScheduler(bool paused) { parts_->state.scheduler_paused = paused; }
bool Trainer::scheduler_paused() const { return parts_->state.scheduler_paused; }

int Trainer::global_rank() const { return strategy_.global_rank(); }
int Trainer::world_size() const { return strategy_.world_size(); }

void Trainer::RequestStopNow(const std::string& reason) {
  if (parts_->state.progress.epoch < options_.min_epochs) {
    // Said once: a Timer with interval=step asks at every step.
    if (!parts_->state.stop.deferred_said) {
      Logger::Instance().Info(
          absl::StrCat("not stopping before min_epochs=", options_.min_epochs, " (", reason, ")"));
      parts_->state.stop.deferred_said = true;
    }
    return;
  }
  parts_->state.stop.now = true;
  RequestStop(reason);
}

void Trainer::RequestStop(const std::string& reason) {
  parts_->state.stop.requested = true;
  parts_->state.stop.reason = reason;
}

absl::Status Trainer::SaveShardedCheckpoint(const std::string& path) {
  // Every rank writes its piece into PATH.partial; rank 0 then describes them and puts the folder
  // in place of the previous one (which stays whole until then).
  const std::string staging = path + ".partial", previous = path + ".previous";
  absl::Status made = absl::OkStatus();
  if (is_global_zero()) {
    std::error_code ignored;
    std::filesystem::remove_all(staging, ignored);
    made = MakeDirs(staging);
  }
  KILN_ASSIGN_OR_RETURN(bool failed, strategy_.AnyRank(!made.ok()));
  if (failed)
    return CheckpointWriteFailed(
        path, made.ok() ? absl::InternalError("rank 0 could not make " + staging) : made);
  FitParts parts = Context().Parts();
  ShardedCheckpointMeta meta;
  meta.world_size = strategy_.piece_count();
  meta.run = strategy_.sharded_run();
  meta.step = parts_->state.progress.global_step;
  meta.shapes = strategy_.sharded_shapes();
  // The optimizer's parameters by name, in its groups' order: how the pieces of its state are
  // matched up across ranks.
  std::map<const void*, std::string> names;
  for (const auto& p : parts_->state.inputs.task->module().named_parameters())
    names[p.value().unsafeGetTensorImpl()] = p.key();
  std::vector<std::string> optimizer_params;
  if (parts.optimizer != nullptr) {
    for (const auto& group : parts.optimizer->param_groups()) {
      for (const auto& p : group.params())
        optimizer_params.push_back(names[p.unsafeGetTensorImpl()]);
    }
  }
  absl::Status saved = absl::OkStatus();
  if (strategy_.writes_piece()) {  // HYBRID_SHARD: the other nodes hold the same pieces
    saved = SaveFitCheckpoint(
        absl::StrCat(staging, "/", ShardFileName(strategy_.piece_index(), meta.world_size)), parts,
        parts_->state.progress.Position(parts_->state.inputs.seed, world_size()),
        [&](torch::serialize::OutputArchive& archive) {
          WriteShardKeys(archive, meta, strategy_.piece_index(), optimizer_params);
        });
  }
  KILN_ASSIGN_OR_RETURN(failed, strategy_.AnyRank(!saved.ok()));
  absl::Status placed = absl::OkStatus();
  if (!failed && is_global_zero()) {
    placed = WriteShardedCheckpointMeta(staging, meta);
    std::error_code error;
    if (placed.ok()) {
      std::filesystem::remove_all(previous, error);
      if (std::filesystem::exists(path)) std::filesystem::rename(path, previous, error);
      if (!error) std::filesystem::rename(staging, path, error);
      if (error) {
        placed = absl::InternalError(
            absl::StrCat("cannot put ", staging, " in place: ", error.message()));
      } else {
        std::filesystem::remove_all(previous, error);
      }
    }
  }
  KILN_ASSIGN_OR_RETURN(bool misplaced, strategy_.AnyRank(!placed.ok()));
  if (failed || misplaced) {
    absl::Status why = !saved.ok() ? saved
                       : !placed.ok()
                           ? placed
                           : absl::InternalError("another rank could not write its piece");
    return CheckpointWriteFailed(path, why);
  }
  return absl::OkStatus();
}

absl::Status Trainer::SaveCheckpoint(const std::string& path) {
  if (strategy_.sharded()) return SaveShardedCheckpoint(path);
  if (!is_global_zero())
    return absl::OkStatus();  // the ranks hold the same state; rank 0 writes it
  absl::Status saved =
      SaveFitCheckpoint(path, Context().Parts(),
                        parts_->state.progress.Position(parts_->state.inputs.seed, world_size()));
  return saved.ok() ? saved : CheckpointWriteFailed(path, saved);
}

absl::Status Trainer::CheckpointWriteFailed(const std::string& path, const absl::Status& error) {
  std::string kept = IsRegularFile(path) ? absl::StrCat("the previous ", path, " is intact")
                                         : absl::StrCat("nothing was written under ", path);
  if (options_.on_save_error == TrainerOptions::SaveError::kContinue) {
    Logger::Instance().Warning(
        absl::StrCat("checkpoint not saved: ", error.message(), "; ", kept,
                     "; training goes on without checkpoints (trainer.on_save_error=continue)"));
    parts_->state.checkpointing = false;
    return absl::OkStatus();
  }
  return absl::Status(error.code(),
                      absl::StrCat("checkpoint not saved: ", error.message(), "; ", kept,
                                   "; training stopped (trainer.on_save_error=continue trains on "
                                   "without checkpoints)"));
}

absl::Status Trainer::AddParamGroups(const std::vector<std::string>& names, double lr_factor) {
  torch::optim::Optimizer* optimizer = parts_->state.optimizer.get();
  const FitInputs& inputs = parts_->state.inputs;
  if (optimizer == nullptr || inputs.optimizer == nullptr) {
    return absl::FailedPreconditionError(
        "parameter groups can only be added while fitting, after the optimizer is built");
  }
  std::set<std::string> wanted(names.begin(), names.end());
  NamedParameters params;
  std::vector<std::string> model_names;
  for (const auto& p : inputs.task->module().named_parameters()) {
    if (wanted.count(p.key()) > 0) params.emplace_back(p.key(), p.value());
    model_names.push_back(p.key());
  }
  if (params.empty()) return absl::OkStatus();
  // The groups param_groups and lr_decay make for these parameters among the whole model's.
  KILN_ASSIGN_OR_RETURN(auto fresh, inputs.optimizer->Create(params, model_names));
  for (auto& group : fresh->param_groups()) {
    std::unique_ptr<torch::optim::OptimizerOptions> options = group.options().clone();
    double base_lr = options->get_lr() * lr_factor;
    options->set_lr(base_lr);
    optimizer->add_param_group(
        torch::optim::OptimizerParamGroup(group.params(), std::move(options)));
    if (inputs.scheduler) inputs.scheduler->OnParamGroupAdded(base_lr);
    Logger::Instance().Info(
        absl::StrCat("optimizer: added a group of ", group.params().size(), " parameters at lr ",
                     optimizer->param_groups().back().options().get_lr(), " (base ", base_lr, ")"));
  }
  return strategy_.TrainedParametersChanged(inputs.task->module());
}

absl::Status Trainer::ForEachTrainingBatch(const std::function<absl::Status(data::Batch&)>& fn) {
  if (parts_->state.train_loader == nullptr)
    return absl::FailedPreconditionError("no training data outside fit");
  return parts_->state.train_loader->Run(parts_->state.progress.epoch, 0,
                                         parts_->state.progress.train_batches,
                                         [&](data::Batch& batch) -> absl::StatusOr<bool> {
                                           strategy_.BatchToDevice(batch);
                                           KILN_RETURN_IF_ERROR(fn(batch));
                                           return true;
                                         });
}

absl::Status Trainer::LoadWeights(const std::string& path, Task& task,
                                  const std::string& model_name) {
  return LoadCheckpointWeights(path, task, model_name);
}

absl::Status Trainer::Fit(const FitInputs& inputs) {
  absl::Status status = FitLoop(Context()).Run(inputs);
  parts_->state.train_loader = nullptr;  // the fit loop's, gone with it
  return status;
}

absl::StatusOr<std::map<std::string, double>> Trainer::Evaluate(Task& task, data::DataModule& dm,
                                                                data::Stage stage) {
  StopSignals stop_signals;  // SIGINT/SIGTERM end it between batches, nothing written
  parts_->state.inputs.task = &task;
  parts_->state.progress.start = std::chrono::steady_clock::now();
  strategy_.ConfigureProcess();
  KILN_RETURN_IF_ERROR(strategy_.SelectDevice());
  KILN_RETURN_IF_ERROR(strategy_.PlaceModule(task.module()));
  bool test = stage == data::Stage::kTest;
  KILN_ASSIGN_OR_RETURN(auto ds, SetUpSplit(
                                     dm, stage, strategy_.device(),
                                     [test](data::DataModule& d) {
                                       return test ? d.test_dataset() : d.val_dataset();
                                     },
                                     test ? "test split" : "validation split"));
  std::unique_ptr<data::DataLoader> loader = InOrderLoader(std::move(ds), dm);
  return EvaluationLoop(Context(), *loader, test ? "test" : "val").Evaluate();
}

absl::StatusOr<std::vector<torch::Tensor>> Trainer::Predict(Task& task, data::DataModule& dm) {
  parts_->state.inputs.task = &task;
  KILN_RETURN_IF_ERROR(strategy_.SelectDevice());
  KILN_RETURN_IF_ERROR(strategy_.PlaceModule(task.module()));
  task.module().eval();
  KILN_ASSIGN_OR_RETURN(
      auto ds, SetUpSplit(
                   dm, data::Stage::kPredict, strategy_.device(),
                   [](data::DataModule& d) { return d.predict_dataset(); }, "prediction inputs"));
  std::unique_ptr<data::DataLoader> loader = InOrderLoader(std::move(ds), dm);
  return PredictLoop(Context(), *loader).Run();
}

}  // namespace kiln
