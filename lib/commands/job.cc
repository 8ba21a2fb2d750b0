#include "lib/commands/job.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "lib/base/directory_lock.h"
#include "lib/base/files.h"
#include "lib/base/freed_memory.h"
#include "lib/base/stop_signals.h"
#include "lib/config/compose.h"
#include "lib/config/secrets.h"
#include "lib/config/yaml_io.h"
#include "lib/distributed/process_group.h"
#include "lib/distributed/sharded_tables.h"
#include "lib/distributed/sharding_units.h"
#include "lib/logging/logger.h"
#include "lib/run/command.h"
#include "lib/run/environment.h"
#include "lib/run/run_dir.h"
#include "lib/run/stored_config.h"
#include "lib/trainer/lora.h"
#include "lib/trainer/model_start.h"
#include "lib/weights/checkpoint.h"

namespace kiln {

std::string MetricsYaml(const std::map<std::string, double>& metrics) {
  config::NodePtr node = config::Node::Map();
  for (const auto& [k, v] : metrics) node->Set(k, config::Node::Float(v));
  return config::ToYaml(*node);
}

bool IsNull(const config::Config& cfg, const std::string& key) {
  return !cfg.Has(key) || cfg.Get<config::NodePtr>(key).value()->is_null();
}

std::string CheckpointDir(CheckpointKeeper* keeper, const TrainerOptions& options) {
  std::string run_dir = options.default_root_dir + "/checkpoints";
  if (keeper == nullptr) return run_dir;
  keeper->UseRunCheckpointDir(run_dir);
  return keeper->checkpoint_dir();
}

absl::StatusOr<std::string> EvaluationCheckpoint(const std::string& command,
                                                 const std::string& ckpt_path,
                                                 const CheckpointKeeper* keeper,
                                                 const std::string& checkpoint_dir) {
  if (ckpt_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kiln ", command, " needs a checkpoint: ckpt_path=PATH (or last, best)"));
  }
  if (ckpt_path == "last") return checkpoint_dir + "/last.ckpt";
  if (ckpt_path == "best") {
    std::string path = keeper != nullptr ? keeper->best_model_path() : "";
    if (path.empty()) {
      return absl::NotFoundError(absl::StrCat("ckpt_path=best: no best checkpoint recorded in ",
                                              checkpoint_dir, " (pass ckpt_path=PATH)"));
    }
    return path;
  }
  return ckpt_path;
}

namespace {

// A job that trains holds its run directory's lock for as long as it lives, as `kiln train` does
// (docs/reliability.md): a second one into the same folder is refused naming this process.
absl::StatusOr<DirectoryLock> LockToTrain(const std::string& output_dir, Job::Purpose purpose) {
  if (purpose != Job::Purpose::kFit) return DirectoryLock();
  KILN_RETURN_IF_ERROR(MakeDirs(output_dir));
  return DirectoryLock::Acquire(output_dir, "run directory (hydra.run.dir)");
}

// Where this worker's pieces of sharded tables go (distributed::BuildTables), from the
// environment's ranks and trainer.table_sharding; none alone, for evaluation, or under fsdp.
absl::Status PlaceTables(const config::Config& cfg, bool fit) {
  distributed::SetTablePlacement(std::nullopt);
  if (!fit) return absl::OkStatus();
  KILN_ASSIGN_OR_RETURN(run::Environment env, run::ReadEnvironment());
  KILN_ASSIGN_OR_RETURN(std::string strategy, cfg.GetOr<std::string>("trainer.strategy", "auto"));
  KILN_ASSIGN_OR_RETURN(std::string how, cfg.GetOr<std::string>("trainer.table_sharding", "auto"));
  if (!env.distributed() || strategy == "fsdp") return absl::OkStatus();
  distributed::TablePlacement placement;
  placement.rank = env.rank;
  placement.world_size = env.world_size;
  placement.kind = distributed::TableShardingKindNamed(how);
  distributed::SetTablePlacement(placement);
  return absl::OkStatus();
}

bool NotNull(const config::Config& cfg, const std::string& key) {
  if (!cfg.Has(key) || IsNull(cfg, key)) return false;
  auto text = cfg.Get<std::string>(key);
  return !text.ok() || !text->empty();
}

// Under trainer.strategy=fsdp on several workers a model is built in pieces (KeepOwnPieces,
// sharding_units.h): each worker keeps its rows of each block as it builds it, so a model larger
// than one worker never exists whole. Not for a model that then loads whole weights
// (model.init_from, model.pretrained) or gains adapters (model.lora), nor for NO_SHARD or a
// HYBRID_SHARD over several nodes (the node's pieces are cut after the build, as before). True when
// the model is built in pieces.
absl::StatusOr<bool> PlaceBlocks(const config::Config& cfg, bool fit) {
  distributed::SetBuildPlacement(std::nullopt);
  if (!fit) return false;
  KILN_ASSIGN_OR_RETURN(run::Environment env, run::ReadEnvironment());
  KILN_ASSIGN_OR_RETURN(config::Config trainer_cfg, cfg.Sub("trainer"));
  KILN_ASSIGN_OR_RETURN(TrainerOptions trainer, TrainerOptions::FromConfig(trainer_cfg));
  using Sharding = TrainerOptions::Sharding;
  if (!env.distributed() || trainer.strategy != TrainerOptions::StrategyKind::kFsdp ||
      trainer.fsdp_sharding_strategy == Sharding::kNoShard ||
      (trainer.fsdp_sharding_strategy == Sharding::kHybridShard && trainer.num_nodes > 1)) {
    return false;
  }
  for (const char* whole : {"model.init_from", "model.pretrained", "model.lora"}) {
    if (NotNull(cfg, whole)) {
      Logger::Instance().Info(
          absl::StrCat("fsdp: the model is built whole on each worker, then cut (", whole,
                       " loads into whole weights)"));
      return false;
    }
  }
  distributed::SetBuildPlacement(distributed::BuildPlacement{env.rank, env.world_size});
  return true;
}

// A checkpoint loads into the pieces a worker holds (sharded tables, blocks built in pieces): a
// whole one cut, a sharded one read as the pieces only.
void ReadCheckpointsIntoPieces() {
  SetPieceRowsOf([](const torch::Tensor& param) -> std::optional<PieceRows> {
    if (std::optional<distributed::TableRows> rows = distributed::PieceRowsOf(param))
      return PieceRows{rows->first, rows->count, rows->rows};
    if (std::optional<distributed::BuiltPiece> piece = distributed::BuiltPieceOf(param))
      return PieceRows{piece->first, piece->count, piece->shape.empty() ? 1 : piece->shape[0]};
    return std::nullopt;
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Job>> Job::FromConfig(const config::Config& cfg,
                                                     const std::string& output_dir,
                                                     Purpose purpose) {
  const bool fit = purpose == Purpose::kFit;
  std::unique_ptr<Job> job(new Job());
  job->cfg_ = cfg;
  job->output_dir_ = output_dir;
  KILN_ASSIGN_OR_RETURN(int64_t seed, cfg.GetOr<int64_t>("seed", 0));
  job->seed_ = static_cast<uint64_t>(seed);
  // The seed is set before anything is built, so weight initialization is reproducible.
  torch::manual_seed(job->seed_);
  // A worker of a multi-worker fit builds only its pieces of a model's sparse tables.
  KILN_RETURN_IF_ERROR(PlaceTables(cfg, fit));
  // A worker of a multi-worker fsdp fit builds only its pieces of a model's blocks.
  KILN_ASSIGN_OR_RETURN(const bool in_pieces, PlaceBlocks(cfg, fit));
  ReadCheckpointsIntoPieces();
  // `model.init_*` and `model.freeze` say how the model starts; they are not model options, so
  // the model is built from the config without them, then started.
  auto built = BuildModelParts(cfg);
  distributed::SetBuildPlacement(std::nullopt);
  if (in_pieces) ReturnFreedMemory();  // what the blocks' whole values took
  KILN_ASSIGN_OR_RETURN(ModelParts parts, std::move(built));
  job->options_ = std::move(parts.options);
  job->task_ = std::move(parts.task);
  job->data_ = std::move(parts.data);
  job->model_name_ = std::move(parts.model_name);
  KILN_RETURN_IF_ERROR(ApplyModelStart(parts.start, job->task_->module(), fit, &job->callbacks_));
  if (fit) {
    KILN_ASSIGN_OR_RETURN(config::Config opt_cfg, cfg.Sub("optimizer"));
    KILN_ASSIGN_OR_RETURN(job->optimizer_, Registry<OptimizerFactory>::Get().Instantiate(opt_cfg));
    if (!IsNull(cfg, "scheduler")) {
      KILN_ASSIGN_OR_RETURN(config::Config sched_cfg, cfg.Sub("scheduler"));
      KILN_ASSIGN_OR_RETURN(job->scheduler_, Registry<Scheduler>::Get().Instantiate(sched_cfg));
    }
  }
  KILN_ASSIGN_OR_RETURN(auto callbacks, InstantiateAll<Callback>(cfg, "callbacks"));
  job->callbacks_.insert(job->callbacks_.begin(), callbacks.begin(), callbacks.end());
  KILN_ASSIGN_OR_RETURN(job->loggers_, InstantiateAll<MetricsLogger>(cfg, "logger"));
  if (!IsNull(cfg, "ckpt_path")) {
    KILN_ASSIGN_OR_RETURN(job->ckpt_path_, cfg.Get<std::string>("ckpt_path"));
  }
  CheckpointKeeper* keeper = FindCheckpointKeeper(job->callbacks_);
  job->checkpoint_dir_ = CheckpointDir(keeper, job->options_);
  job->checkpoint_keeper_ = keeper;
  if (!fit && cfg.Has("run_dir") && !IsNull(cfg, "run_dir")) {
    KILN_ASSIGN_OR_RETURN(job->evaluated_run_, cfg.Get<std::string>("run_dir"));
  }
  return job;
}

absl::StatusOr<ComposedJob> ComposeJob(const JobRequest& request, bool from_run) {
  config::ComposeOptions options;
  options.search_path.push_back(
      {"main", request.config_dir.empty() ? run::DefaultConfigPath() : request.config_dir});
  options.config_name = request.config_name;
  options.overrides = request.overrides;
  options.job_name = request.config_name;
  options.version = run::Version();
  ComposedJob job;
  KILN_ASSIGN_OR_RETURN(config::ComposeResult composed, config::Compose(options));
  if (from_run) KILN_RETURN_IF_ERROR(run::StartFromStoredConfig(composed).status());
  job.composed = std::make_shared<config::ComposeResult>(std::move(composed));
  KILN_ASSIGN_OR_RETURN(run::RunDir run, run::PlanRunDir(*job.composed, /*job_num=*/-1, ""));
  job.output_dir = run.output_dir;
  job.log_file = run.log_file;
  KILN_ASSIGN_OR_RETURN(config::NodePtr resolved, config::ResolveJob(*job.composed));
  job.cfg = config::Config(resolved);
  return job;
}

absl::Status WriteRunFolder(const ComposedJob& job) {
  run::RunDir run;
  run.output_dir = job.output_dir;
  return run::WriteRunDir(*job.composed, run);
}

absl::StatusOr<std::unique_ptr<Job>> Job::Compose(const JobRequest& request, Purpose purpose) {
  // A config that does not compose or resolve is refused before anything is written.
  KILN_ASSIGN_OR_RETURN(ComposedJob composed, ComposeJob(request, purpose == Purpose::kEvaluate));
  // The lock first: a refused job overwrites none of the .hydra files.
  KILN_ASSIGN_OR_RETURN(DirectoryLock lock, LockToTrain(composed.output_dir, purpose));
  KILN_RETURN_IF_ERROR(WriteRunFolder(composed));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Job> job,
                        FromConfig(composed.cfg, composed.output_dir, purpose));
  job->log_file_ = composed.log_file;
  job->run_lock_ = std::move(lock);
  return job;
}

absl::StatusOr<std::unique_ptr<Job>> Job::FromConfigInRunFolder(const config::Config& cfg,
                                                                const std::string& output_dir,
                                                                Purpose purpose) {
  KILN_ASSIGN_OR_RETURN(DirectoryLock lock, LockToTrain(output_dir, purpose));
  KILN_RETURN_IF_ERROR(MakeDirs(output_dir + "/.hydra"));
  KILN_RETURN_IF_ERROR(WriteFileAtomically(output_dir + "/.hydra/config.yaml",
                                           config::ToYaml(*config::RedactSecrets(*cfg.node()))));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Job> job, FromConfig(cfg, output_dir, purpose));
  job->run_lock_ = std::move(lock);
  return job;
}

Job::LogFileScope::LogFileScope(Job& job) : job_(job) {
  if (job_.log_file_.empty()) return;
  entered_ = true;
  if (job_.log_file_users_++ == 0) status_ = Logger::Instance().OpenFile(job_.log_file_);
}

Job::LogFileScope::~LogFileScope() {
  if (entered_ && --job_.log_file_users_ == 0) Logger::Instance().CloseFile();
}

Job::~Job() {
  absl::Status outcome = outcome_;
  if (outcome.ok() && std::uncaught_exceptions() > 0)
    outcome = absl::InternalError("the job ended with an exception");
  if (outcome.ok() && StopSignals::Received() != 0)
    outcome =
        WithExitCode(absl::AbortedError("stopped by a signal"), 128 + StopSignals::Received());
  for (const auto& logger : loggers_) logger->OnJobEnd(outcome);
}

void Job::Record(const absl::Status& status) {
  if (outcome_.ok() && !status.ok()) outcome_ = status;
}

void Job::set_process_group(std::shared_ptr<distributed::ProcessGroup> group) {
  group_ = std::move(group);
  // Only rank 0 logs (its loggers see the whole job's metrics).
  if (group_ != nullptr && !group_->is_global_zero()) loggers_.clear();
  if (trainer_ != nullptr) trainer_->set_process_group(group_);
}

absl::Status Job::AddCallback(std::shared_ptr<Callback> callback) {
  if (trainer_ != nullptr) {
    return absl::FailedPreconditionError(
        "a callback must be added before the job first fits, tests or validates");
  }
  callbacks_.push_back(std::move(callback));
  return absl::OkStatus();
}

absl::Status Job::AddLogger(std::shared_ptr<MetricsLogger> logger) {
  if (trainer_ != nullptr) {
    return absl::FailedPreconditionError(
        "a logger must be added before the job first fits, tests or validates");
  }
  if (group_ == nullptr || group_->is_global_zero()) loggers_.push_back(std::move(logger));
  return absl::OkStatus();
}

Trainer& Job::trainer() {
  if (trainer_ == nullptr) {
    trainer_ = std::make_unique<Trainer>(options_, callbacks_, loggers_);
    trainer_->set_process_group(group_);
  }
  return *trainer_;
}

FitInputs Job::fit_inputs() const {
  FitInputs inputs;
  inputs.task = task_.get();
  inputs.data = data_.get();
  inputs.optimizer = optimizer_;
  inputs.scheduler = scheduler_;
  inputs.ckpt_path = ckpt_path_;
  inputs.seed = seed_;
  inputs.config_yaml =
      config::ToYaml(*config::RedactSecrets(*cfg_.node()));  // kept in checkpoints: no secrets
  inputs.model_name = model_name_;
  auto from_file = [&](const char* key) {
    auto path = cfg_.Get<std::string>(key);
    return path.ok() && !path->empty();
  };
  if (task_ != nullptr && HasLora(task_->module()) &&
      (from_file("model.pretrained") || from_file("model.init_from")))
    inputs.frozen_digest = FrozenDigest(task_->module());
  return inputs;
}

absl::Status Job::RebuildOptimizer(const config::Config& cfg) {
  KILN_ASSIGN_OR_RETURN(config::Config opt_cfg, cfg.Sub("optimizer"));
  KILN_ASSIGN_OR_RETURN(optimizer_, Registry<OptimizerFactory>::Get().Instantiate(opt_cfg));
  cfg_ = cfg;
  return absl::OkStatus();
}

absl::Status Job::Fit() {
  LogFileScope log(*this);
  KILN_RETURN_IF_ERROR(log.status());
  if (optimizer_ == nullptr) {
    return absl::FailedPreconditionError(
        "this job was built for evaluation (Job::Purpose::kEvaluate): it has no "
        "optimizer to fit with");
  }
  absl::Status fitted = trainer().Fit(fit_inputs());
  Record(fitted);
  return fitted;
}

absl::StatusOr<std::map<std::string, double>> Job::Test() {
  auto metrics = TestOnce();
  Record(metrics.status());
  return metrics;
}

absl::StatusOr<std::map<std::string, double>> Job::TestOnce() {
  LogFileScope log(*this);
  KILN_RETURN_IF_ERROR(log.status());
  KILN_ASSIGN_OR_RETURN(auto metrics, trainer().Evaluate(*task_, *data_, data::Stage::kTest));
  KILN_ASSIGN_OR_RETURN(auto report, task_->TestReport(output_dir_, data_->class_names()));
  if (!report.empty()) trainer().LogMetrics(report);
  metrics.insert(report.begin(), report.end());
  KILN_RETURN_IF_ERROR(
      WriteFileAtomically(output_dir_ + "/test_metrics.yaml", MetricsYaml(metrics)));
  return metrics;
}

absl::StatusOr<std::map<std::string, double>> Job::Validate() {
  LogFileScope log(*this);
  KILN_RETURN_IF_ERROR(log.status());
  auto metrics = trainer().Evaluate(*task_, *data_, data::Stage::kValidate);
  if (metrics.ok()) {
    absl::Status written =
        WriteFileAtomically(output_dir_ + "/val_metrics.yaml", MetricsYaml(*metrics));
    if (!written.ok()) metrics = written;
  }
  Record(metrics.status());
  return metrics;
}

absl::StatusOr<std::map<std::string, double>> Job::FitThenTest() {
  auto metrics = FitThenTestOnce();
  Record(metrics.status());
  return metrics;
}

absl::StatusOr<std::map<std::string, double>> Job::FitThenTestOnce() {
  LogFileScope log(*this);
  KILN_RETURN_IF_ERROR(log.status());
  const bool test = cfg_.GetOr<bool>("test", true).value_or(true);
  // Without a test nothing reads the model whole after fit: sharded tables stay in pieces.
  trainer().set_whole_model_after_fit(test);
  KILN_RETURN_IF_ERROR(Fit());
  // Rank 0 tests alone, on the whole test split: exact metrics and one confusion matrix.
  if (group_ != nullptr && !group_->is_global_zero()) return std::map<std::string, double>{};
  trainer().set_process_group(nullptr);
  if (!test) return std::map<std::string, double>{};
  // Test the best checkpoint when one was kept, as lightning-hydra-template does.
  std::string best = checkpoint_keeper_ != nullptr ? checkpoint_keeper_->best_model_path() : "";
  if (!best.empty() && trainer().checkpointing_enabled()) {
    Logger::Instance().Info(absl::StrCat("testing the best checkpoint: ", best));
    KILN_RETURN_IF_ERROR(Trainer::LoadWeights(best, *task_, model_name_));
  }
  KILN_RETURN_IF_ERROR(data_->Setup(data::Stage::kTest));
  if (!data_->test_dataset()) return std::map<std::string, double>{};
  return Test();
}

absl::StatusOr<std::string> Job::LoadCheckpoint(const std::string& which,
                                                const std::string& command) {
  std::string path;
  if (!evaluated_run_.empty() && (which == "best" || which == "last")) {
    KILN_ASSIGN_OR_RETURN(path, run::RunCheckpoint(evaluated_run_, which));
  } else {
    KILN_ASSIGN_OR_RETURN(
        path, EvaluationCheckpoint(command, which, checkpoint_keeper_, checkpoint_dir_));
  }
  KILN_RETURN_IF_ERROR(Trainer::LoadWeights(path, *task_, model_name_));
  return path;
}

}  // namespace kiln
