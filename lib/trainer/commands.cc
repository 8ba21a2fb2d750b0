// The `train`, `tune`, `validate`, `test`, `predict` and `export` commands: build every component
// the config names (so a mistake anywhere is reported before any training), then drive the Trainer.
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lib/app/application.h"
#include "lib/app/report/lr_find_plot.h"
#include "lib/config/json.h"
#include "lib/config/yaml_io.h"
#include "lib/core/files.h"
#include "lib/data/sampler.h"
#include "lib/distributed/environment.h"
#include "lib/distributed/process_group.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/trainer/checkpoint.h"
#include "lib/trainer/checkpoint_average.h"
#include "lib/trainer/lr_finder.h"
#include "lib/trainer/model_start.h"
#include "lib/trainer/predictor.h"
#include "lib/trainer/process_settings.h"
#include "lib/trainer/safetensors.h"
#include "lib/trainer/torchscript.h"
#include "lib/trainer/trainer.h"

namespace kiln {
namespace {

struct Job {
  std::shared_ptr<Task> task;
  std::shared_ptr<data::DataModule> data;
  std::shared_ptr<OptimizerFactory> optimizer;
  std::shared_ptr<Scheduler> scheduler;
  std::vector<std::shared_ptr<Callback>> callbacks;
  std::vector<std::shared_ptr<MetricsLogger>> loggers;
  TrainerOptions options;
  uint64_t seed = 0;
  std::string model_name;
  std::string ckpt_path;
  const CheckpointKeeper* checkpoint_keeper = nullptr;  // one of `callbacks`, or null
  std::string checkpoint_dir;  // the keeper's folder, or default_root_dir/checkpoints
};

bool IsNull(const config::Config& cfg, const std::string& key) {
  return !cfg.Has(key) || cfg.Get<config::NodePtr>(key).value()->is_null();
}

// Every entry of a mapping like `callbacks:` that is not null, instantiated in order.
template <typename T>
absl::StatusOr<std::vector<std::shared_ptr<T>>> InstantiateAll(const config::Config& cfg, const std::string& key) {
  std::vector<std::shared_ptr<T>> out;
  if (IsNull(cfg, key)) return out;
  KILN_ASSIGN_OR_RETURN(config::Config group, cfg.Sub(key));
  if (!group.node()->is_map()) {
    return absl::InvalidArgumentError(absl::StrCat("'", key, "' must be a mapping of name: {_target_: ...}"));
  }
  for (const auto& name : group.Keys()) {
    if (IsNull(group, name)) continue;
    KILN_ASSIGN_OR_RETURN(config::Config item, group.Sub(name));
    KILN_ASSIGN_OR_RETURN(auto component, Registry<T>::Get().Instantiate(item));
    out.push_back(std::move(component));
  }
  return out;
}

// Where the job's checkpoints are: the checkpoint keeper's folder, or default_root_dir/checkpoints.
std::string CheckpointDir(const CheckpointKeeper* keeper, const TrainerOptions& options) {
  return keeper != nullptr ? keeper->checkpoint_dir() : options.default_root_dir + "/checkpoints";
}

absl::StatusOr<Job> BuildJob(const config::Config& cfg, bool fit) {
  Job job;
  KILN_ASSIGN_OR_RETURN(int64_t seed, cfg.GetOr<int64_t>("seed", 0));
  job.seed = static_cast<uint64_t>(seed);
  // The seed is set before anything is built, so weight initialization is reproducible.
  torch::manual_seed(job.seed);
  KILN_ASSIGN_OR_RETURN(config::Config trainer_cfg, cfg.Sub("trainer"));
  KILN_ASSIGN_OR_RETURN(job.options, TrainerOptions::FromConfig(trainer_cfg));
  KILN_ASSIGN_OR_RETURN(config::Config task_cfg, cfg.Sub("task"));
  KILN_ASSIGN_OR_RETURN(job.task, Registry<Task>::Get().Instantiate(task_cfg));
  // `model.init_*` and `model.freeze` say how the model starts; they are not model options, so
  // the model is built from the config without them.
  KILN_ASSIGN_OR_RETURN(ModelStart start, ReadModelStart(cfg));
  KILN_RETURN_IF_ERROR(job.task->Build(start.build_cfg));
  KILN_RETURN_IF_ERROR(ApplyModelStart(start.options, job.task->module(), fit, &job.callbacks));
  job.model_name = cfg.Get<std::string>("model._target_").value_or("");
  KILN_ASSIGN_OR_RETURN(config::Config data_cfg, cfg.Sub("data"));
  KILN_ASSIGN_OR_RETURN(job.data, Registry<data::DataModule>::Get().Instantiate(data_cfg));
  KILN_RETURN_IF_ERROR(job.task->Connect(*job.data));
  if (fit) {
    KILN_ASSIGN_OR_RETURN(config::Config opt_cfg, cfg.Sub("optimizer"));
    KILN_ASSIGN_OR_RETURN(job.optimizer, Registry<OptimizerFactory>::Get().Instantiate(opt_cfg));
    if (!IsNull(cfg, "scheduler")) {
      KILN_ASSIGN_OR_RETURN(config::Config sched_cfg, cfg.Sub("scheduler"));
      KILN_ASSIGN_OR_RETURN(job.scheduler, Registry<Scheduler>::Get().Instantiate(sched_cfg));
    }
  }
  KILN_ASSIGN_OR_RETURN(auto callbacks, InstantiateAll<Callback>(cfg, "callbacks"));
  job.callbacks.insert(job.callbacks.begin(), callbacks.begin(), callbacks.end());
  KILN_ASSIGN_OR_RETURN(job.loggers, InstantiateAll<MetricsLogger>(cfg, "logger"));
  if (!IsNull(cfg, "ckpt_path")) {
    KILN_ASSIGN_OR_RETURN(job.ckpt_path, cfg.Get<std::string>("ckpt_path"));
  }
  job.checkpoint_keeper = FindCheckpointKeeper(job.callbacks);
  job.checkpoint_dir = CheckpointDir(job.checkpoint_keeper, job.options);
  return job;
}

// The checkpoint `command` starts from: ckpt_path, a file, `last`, or `best` (what the checkpoint
// keeper, model_checkpoint, recorded in `checkpoint_dir`).
absl::StatusOr<std::string> EvaluationCheckpoint(const std::string& command, const std::string& ckpt_path,
                                                 const CheckpointKeeper* keeper, const std::string& checkpoint_dir) {
  if (ckpt_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("kiln ", command, " needs a checkpoint: ckpt_path=PATH (or last, best)"));
  }
  if (ckpt_path == "last") return checkpoint_dir + "/last.ckpt";
  if (ckpt_path == "best") {
    std::string path = keeper != nullptr ? keeper->best_model_path() : "";
    if (path.empty()) {
      return absl::NotFoundError(absl::StrCat("ckpt_path=best: no best checkpoint recorded in ", checkpoint_dir,
                                              " (pass ckpt_path=PATH)"));
    }
    return path;
  }
  return ckpt_path;
}

std::string MetricsYaml(const std::map<std::string, double>& metrics) {
  config::NodePtr node = config::Node::Map();
  for (const auto& [k, v] : metrics) node->Set(k, config::Node::Float(v));
  return config::ToYaml(*node);
}

absl::Status WriteResults(const std::string& output_dir, const std::string& name,
                          const std::map<std::string, double>& metrics) {
  return WriteFileAtomically(output_dir + "/" + name, MetricsYaml(metrics));
}

// Evaluates on the test split, adds the task's report (confusion matrix, per-class accuracy) and
// writes test_metrics.yaml; returns the metrics.
absl::StatusOr<std::map<std::string, double>> RunTest(Trainer& trainer, const Job& job, const std::string& output_dir) {
  KILN_ASSIGN_OR_RETURN(auto metrics, trainer.Evaluate(*job.task, *job.data, data::Stage::kTest));
  KILN_ASSIGN_OR_RETURN(auto report, job.task->TestReport(output_dir, job.data->class_names()));
  if (!report.empty()) trainer.LogMetrics(report);
  metrics.insert(report.begin(), report.end());
  KILN_RETURN_IF_ERROR(WriteResults(output_dir, "test_metrics.yaml", metrics));
  return metrics;
}

// Joins the data-parallel group this process belongs to (torchrun, SLURM, or `trainer.devices`),
// then takes rank 0's config and run directory, so every rank trains the same job in one folder.
absl::StatusOr<std::shared_ptr<distributed::ProcessGroup>> JoinProcessGroup(app::JobContext& ctx,
                                                                            const distributed::Environment& env) {
  KILN_ASSIGN_OR_RETURN(config::Config trainer_cfg, ctx.cfg.Sub("trainer"));
  KILN_ASSIGN_OR_RETURN(TrainerOptions options, TrainerOptions::FromConfig(trainer_cfg));
  distributed::ProcessGroupOptions group_options;
  group_options.backend = options.process_group_backend;
  group_options.timeout = std::chrono::milliseconds(static_cast<int64_t>(options.ddp_timeout * 1000));
  KILN_ASSIGN_OR_RETURN(auto group, distributed::ProcessGroup::Create(env, group_options));
  std::string mine = config::ToYaml(*ctx.cfg.node());
  KILN_ASSIGN_OR_RETURN(std::string config0, group->ShareFromRankZero("config", mine));
  KILN_ASSIGN_OR_RETURN(ctx.output_dir, group->ShareFromRankZero("output_dir", ctx.output_dir));
  if (config0 != mine) {
    KILN_ASSIGN_OR_RETURN(config::NodePtr node, config::ParseYaml(config0, "rank 0's config"));
    ctx.cfg = config::Config(node);
  }
  Logger::Instance().Info(absl::StrCat("rank ", env.rank, " of ", env.world_size, " (", env.source, ") joined at ",
                                       env.master_addr, ":", env.master_port));
  return group;
}

FitInputs FitInputsOf(const Job& job, const config::Config& cfg) {
  FitInputs inputs;
  inputs.task = job.task.get();
  inputs.data = job.data.get();
  inputs.optimizer = job.optimizer;
  inputs.scheduler = job.scheduler;
  inputs.ckpt_path = job.ckpt_path;
  inputs.seed = job.seed;
  inputs.config_yaml = config::ToYaml(*cfg.node());
  inputs.model_name = job.model_name;
  return inputs;
}

// Fits the job, then (rank 0) tests the best checkpoint: the rest of `train` once the job is built.
absl::Status FitThenTest(app::JobContext& ctx, Job& job,
                         const std::shared_ptr<distributed::ProcessGroup>& group) {
  bool rank_zero = group == nullptr || group->is_global_zero();
  if (!rank_zero) job.loggers.clear();
  Trainer trainer(job.options, job.callbacks, job.loggers);
  trainer.set_process_group(group);
  KILN_RETURN_IF_ERROR(trainer.Fit(FitInputsOf(job, ctx.cfg)));
  // Rank 0 tests alone, on the whole test split: exact metrics and one confusion matrix.
  if (!rank_zero) return absl::OkStatus();
  trainer.set_process_group(nullptr);
  if (!ctx.cfg.GetOr<bool>("test", true).value_or(true)) return absl::OkStatus();
  // Test the best checkpoint when one was kept, as lightning-hydra-template does.
  std::string best = job.checkpoint_keeper != nullptr ? job.checkpoint_keeper->best_model_path() : "";
  if (!best.empty() && trainer.checkpointing_enabled()) {
    Logger::Instance().Info(absl::StrCat("testing the best checkpoint: ", best));
    KILN_RETURN_IF_ERROR(Trainer::LoadWeights(best, *job.task, job.model_name));
  }
  KILN_RETURN_IF_ERROR(job.data->Setup(data::Stage::kTest));
  if (!job.data->test_dataset()) return absl::OkStatus();
  return RunTest(trainer, job, ctx.output_dir).status();
}

absl::Status TrainCommand(app::JobContext& ctx) {
  KILN_ASSIGN_OR_RETURN(distributed::Environment env, distributed::ReadEnvironment());
  std::shared_ptr<distributed::ProcessGroup> group;
  if (env.distributed()) {
    KILN_ASSIGN_OR_RETURN(group, JoinProcessGroup(ctx, env));
  }
  KILN_ASSIGN_OR_RETURN(Job job, BuildJob(ctx.cfg, /*fit=*/true));
  return FitThenTest(ctx, job, group);
}

// `tune lr_find`: the learning-rate finder on the job `train` would run (lr_finder.h), its curve
// in lr_find.csv and lr_find.png; with tuner.lr_find.apply (--apply) that job is then trained, in
// the same run directory, with the suggestion as optimizer.lr.
absl::Status TuneCommand(app::JobContext& ctx) {
  KILN_ASSIGN_OR_RETURN(LrFindOptions o, LrFindOptions::FromConfig(ctx.cfg));
  KILN_ASSIGN_OR_RETURN(distributed::Environment env, distributed::ReadEnvironment());
  if (env.distributed()) {
    return absl::FailedPreconditionError(absl::StrCat("kiln tune runs in one process, not as rank ",
                                                      env.rank, " of ", env.world_size, " (",
                                                      env.source, ")"));
  }
  KILN_ASSIGN_OR_RETURN(Job job, BuildJob(ctx.cfg, /*fit=*/true));
  if (job.options.devices > 1 || job.options.num_nodes > 1) {
    return absl::InvalidArgumentError(
        "kiln tune lr_find runs in one process: set trainer.devices=1 trainer.num_nodes=1 (then "
        "train "
        "data-parallel with the suggested optimizer.lr)");
  }
  if (!job.ckpt_path.empty()) {
    return absl::InvalidArgumentError(
        "kiln tune lr_find starts from the model's initial weights, not from ckpt_path (to start "
        "from a "
        "checkpoint's weights: model.init_from=FILE)");
  }
  KILN_ASSIGN_OR_RETURN(LrFindResult result,
                        FindLearningRate(job.options, FitInputsOf(job, ctx.cfg), o));
  KILN_RETURN_IF_ERROR(WriteLrFindCsv(ctx.output_dir, result));
  app::report::LrCurve curve{result.lrs, result.losses, result.smoothed, result.suggestion,
                             o.mode == "exponential"};
  std::string title = absl::StrCat("lr_find: ", ctx.cfg.Get<std::string>("name").value_or("kiln"));
  KILN_ASSIGN_OR_RETURN(app::report::PlotFiles plot,
                        app::report::WriteLrFindPlot(ctx.output_dir, curve, title));
  if (!plot.note.empty()) Logger::Instance().Warning(plot.note);
  if (!result.suggestion.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("kiln tune lr_find: no suggestion: the sweep ended after %d steps (%s), "
                        "too few for skip_begin + skip_end + 2 "
                        "= %d points; lower tuner.lr_find.max_lr (the curve is in %s/lr_find.csv)",
                        result.lrs.size(),
                        result.stopped_early.empty() ? "non-finite losses" : result.stopped_early,
                        o.skip_begin + o.skip_end + 2, ctx.output_dir));
  }
  const size_t at = *result.suggestion;
  const double lr = result.lrs[at];
  std::printf(
      "lr_find: suggested lr %s (steepest descent of the smoothed loss, step %zu of %zu); "
      "%s/lr_find.csv%s\n",
      config::PythonFloatRepr(lr).c_str(), at + 1, result.lrs.size(), ctx.output_dir.c_str(),
      plot.png.empty() ? "" : absl::StrCat(", ", plot.png).c_str());
  std::fflush(stdout);
  if (!o.apply) return absl::OkStatus();
  // The job trains with the suggestion as optimizer.lr: its optimizer is built again from the
  // config with that lr, and the config its checkpoints keep says so.
  config::NodePtr root = ctx.cfg.node()->Clone();
  config::NodePtr optimizer = root->Find("optimizer");
  if (optimizer == nullptr || !optimizer->is_map() || optimizer->Find("lr") == nullptr) {
    return absl::InvalidArgumentError(
        "kiln tune lr_find --apply: the optimizer config has no 'lr' to set");
  }
  const std::string was = config::PythonStr(*optimizer->Find("lr"));
  optimizer->Set("lr", config::Node::Float(lr));
  ctx.cfg = config::Config(root);
  KILN_ASSIGN_OR_RETURN(config::Config opt_cfg, ctx.cfg.Sub("optimizer"));
  KILN_ASSIGN_OR_RETURN(job.optimizer, Registry<OptimizerFactory>::Get().Instantiate(opt_cfg));
  Logger::Instance().Info(
      absl::StrCat("lr_find --apply: training with optimizer.lr=", config::PythonFloatRepr(lr),
                   " (the suggestion; the config said ", was, ")"));
  return FitThenTest(ctx, job, nullptr);
}

// The job of a command that starts from a checkpoint (validate, test, predict, export), with the
// checkpoint's weights loaded; returns the checkpoint's path in `path`.
absl::StatusOr<Job> BuildJobFromCheckpoint(const app::JobContext& ctx, std::string* path) {
  KILN_ASSIGN_OR_RETURN(Job job, BuildJob(ctx.cfg, /*fit=*/false));
  KILN_ASSIGN_OR_RETURN(*path, EvaluationCheckpoint(ctx.command, job.ckpt_path, job.checkpoint_keeper, job.checkpoint_dir));
  KILN_RETURN_IF_ERROR(Trainer::LoadWeights(*path, *job.task, job.model_name));
  return job;
}

absl::Status EvaluateCommand(app::JobContext& ctx, data::Stage stage) {
  std::string path;
  KILN_ASSIGN_OR_RETURN(Job job, BuildJobFromCheckpoint(ctx, &path));
  Trainer trainer(job.options, job.callbacks, job.loggers);
  std::map<std::string, double> metrics;
  if (stage == data::Stage::kTest) {
    KILN_ASSIGN_OR_RETURN(metrics, RunTest(trainer, job, ctx.output_dir));
  } else {
    KILN_ASSIGN_OR_RETURN(metrics, trainer.Evaluate(*job.task, *job.data, stage));
    KILN_RETURN_IF_ERROR(WriteResults(ctx.output_dir, "val_metrics.yaml", metrics));
  }
  std::string text = MetricsYaml(metrics);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return absl::OkStatus();
}

// The checkpoint of a command that loads its model through kiln::Predictor (predict), found
// without building the job: `last` and `best` ask the checkpoint keeper among the callbacks.
absl::StatusOr<std::string> CheckpointToLoad(const app::JobContext& ctx, const TrainerOptions& options) {
  std::string ckpt_path;
  if (!IsNull(ctx.cfg, "ckpt_path")) {
    KILN_ASSIGN_OR_RETURN(ckpt_path, ctx.cfg.Get<std::string>("ckpt_path"));
  }
  std::vector<std::shared_ptr<Callback>> callbacks;
  if (ckpt_path == "last" || ckpt_path == "best") {
    KILN_ASSIGN_OR_RETURN(callbacks, InstantiateAll<Callback>(ctx.cfg, "callbacks"));
  }
  const CheckpointKeeper* keeper = FindCheckpointKeeper(callbacks);
  return EvaluationCheckpoint(ctx.command, ckpt_path, keeper, CheckpointDir(keeper, options));
}

// `predict`: kiln::Predictor, built from the job config (the checkpoint's stored config with the
// command line on top) and the checkpoint, answers the data module's prediction split
// (Predictor::PredictSplit); a record per input, written by the prediction writer
// (`+prediction_writer=jsonl`; csv by default). For a task that generates (a language model), the
// text after the task's prompt on stdout and in generated.txt.
absl::Status PredictCommand(app::JobContext& ctx) {
  KILN_ASSIGN_OR_RETURN(config::Config trainer_cfg, ctx.cfg.Sub("trainer"));
  KILN_ASSIGN_OR_RETURN(TrainerOptions options, TrainerOptions::FromConfig(trainer_cfg));
  KILN_ASSIGN_OR_RETURN(std::string path, CheckpointToLoad(ctx, options));
  // Freed memory kept for reuse (process_settings.h; without it each batch's activations are
  // mapped and faulted in again), and trainer.num_threads when it is set; null keeps LibTorch's own
  // thread count, as `kiln predict` always has, so its answers stay bitwise those it wrote before.
  if (options.num_threads > 0) {
    ConfigureProcess(options.num_threads, 1);
  } else {
    KeepFreedMemoryForReuse();
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Predictor> predictor, Predictor::FromConfig(ctx.cfg, path));
  if (predictor->generates()) {
    KILN_ASSIGN_OR_RETURN(std::string generated, predictor->Generate());
    std::string file = ctx.output_dir + "/generated.txt";
    KILN_RETURN_IF_ERROR(WriteFileAtomically(file, generated + "\n"));
    Logger::Instance().Info(absl::StrCat("generated ", generated.size(), " bytes with ", path, ": ", file));
    std::printf("%s\n", generated.c_str());
    return absl::OkStatus();
  }
  std::shared_ptr<PredictionWriter> writer;
  if (IsNull(ctx.cfg, "prediction_writer")) {
    KILN_ASSIGN_OR_RETURN(writer, Registry<PredictionWriter>::Get().Instantiate("csv", Options()));
  } else {
    KILN_ASSIGN_OR_RETURN(config::Config writer_cfg, ctx.cfg.Sub("prediction_writer"));
    KILN_ASSIGN_OR_RETURN(writer, Registry<PredictionWriter>::Get().Instantiate(writer_cfg));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<Prediction> answers, predictor->PredictSplit());
  std::vector<PredictionRecord> records;
  records.reserve(answers.size());
  for (Prediction& answer : answers) records.push_back({std::move(answer.source), std::move(answer.fields)});
  KILN_ASSIGN_OR_RETURN(std::string file, writer->Write(ctx.output_dir, records));
  Logger::Instance().Info(absl::StrCat("predicted ", records.size(), " inputs with ", path, ": ", file));
  std::printf("%s\n", file.c_str());
  return absl::OkStatus();
}

// The options of a command that has its own keys at the top of the config (train.yaml): the
// keys `binding` declares, checked and filled.
template <typename O>
absl::StatusOr<O> CommandOptions(const config::Config& cfg, const OptionBinding<O>& binding, const std::string& command) {
  config::NodePtr mine = config::Node::Map();
  for (const auto& key : cfg.Keys()) {
    if (binding.schema().Find(key) != nullptr) mine->Set(key, cfg.Get<config::NodePtr>(key).value());
  }
  KILN_ASSIGN_OR_RETURN(config::NodePtr filled, binding.schema().Apply(*mine, "", absl::StrCat("command '", command, "'")));
  return binding.Fill(config::Config(filled));
}

// `export`: what it writes (train.yaml documents the keys).
struct ExportOptions {
  std::string format = "safetensors";
  std::optional<std::string> quantize;
  std::optional<int64_t> length;
};

const OptionBinding<ExportOptions>& ExportBinding() {
  using O = ExportOptions;
  static const auto* binding = new OptionBinding<O>(
      OptionBinding<O>()
          .Field("format", &O::format, "safetensors (weights) or torchscript (a traced model.pt)",
                 OneOf({"safetensors", "torchscript"}))
          .Field("quantize", &O::quantize, "torchscript: dynamic_int8 (int8 Linear layers) or null",
                 OneOf({"dynamic_int8"}))
          .Field("length", &O::length, "torchscript: the token length a text model is traced at (null: data.max_length)",
                 GreaterThan(0)));
  return *binding;
}

nlohmann::json ConfigJson(const config::Config& cfg, const std::string& key) {
  if (IsNull(cfg, key)) return nullptr;
  return nlohmann::json::parse(config::NodeToJson(*cfg.Get<config::NodePtr>(key).value()));
}

// `export format=torchscript`: model.pt (traced; quantized with quantize=dynamic_int8) and
// model.json (its input, output and preprocessing) in the run directory.
absl::Status ExportTorchScript(app::JobContext& ctx, Job& job, const ExportOptions& o, const std::string& source) {
  TensorFn forward = job.task->ModelForward();
  if (forward == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("kiln export format=torchscript: task '",
                                                      ctx.cfg.Get<std::string>("task._target_").value_or("?"),
                                                      "' has no single model forward to trace"));
  }
  std::string what = absl::StrCat("model '", job.model_name, "'");
  std::optional<int64_t> length = o.length;
  if (!length.has_value()) {
    KILN_ASSIGN_OR_RETURN(int64_t data_length, ctx.cfg.GetOr<int64_t>("data.max_length", 0));
    if (data_length > 0) length = data_length;
  }
  KILN_ASSIGN_OR_RETURN(torch::Tensor example, TraceExampleBatch(*job.data, length));
  KILN_ASSIGN_OR_RETURN(torch::jit::Module traced, TraceModel(job.task->module(), forward, example.narrow(0, 0, 2), job.model_name));
  KILN_RETURN_IF_ERROR(CheckTraceAgrees(traced, forward, {example.narrow(0, 0, 1), example}, 1e-4, what));
  nlohmann::json quantization = nullptr;
  if (o.quantize.has_value()) {
    torch::NoGradGuard no_grad;
    torch::Tensor before = traced.forward({example}).toTensor();
    KILN_ASSIGN_OR_RETURN(int layers, QuantizeDynamicInt8(traced));
    torch::Tensor after = traced.forward({example}).toTensor();
    double diff = (after - before).abs().max().item<double>();
    quantization = {{"method", *o.quantize}, {"linear_layers", layers}, {"engine", SelectQuantizedEngine()},
                    {"max_output_change_on_example", diff}};
    Logger::Instance().Info(absl::StrFormat("quantize=dynamic_int8: %d Linear layers int8 (%s); outputs on the example batch change by at most %.3g",
                                            layers, SelectQuantizedEngine(), diff));
  }
  std::string file = ctx.output_dir + "/model.pt";
  KILN_RETURN_IF_ERROR(SaveModule(traced, file));
  torch::Tensor output;
  {
    torch::NoGradGuard no_grad;
    output = traced.forward({example.narrow(0, 0, 1)}).toTensor();
  }
  auto dtype = [](const torch::Tensor& t) {
    switch (t.scalar_type()) {
      case torch::kFloat32: return std::string("float32");
      case torch::kInt64: return std::string("int64");
      default: return std::string(c10::toString(t.scalar_type()));
    }
  };
  auto shape = [](const torch::Tensor& t) {
    std::vector<int64_t> s(t.sizes().begin(), t.sizes().end());
    s[0] = -1;  // the batch: any size
    return s;
  };
  nlohmann::json info = {
      {"format", "torchscript"},
      {"file", "model.pt"},
      {"model", job.model_name},
      {"source", source},
      {"kiln_version", KILN_VERSION},
      {"torch_version", TORCH_VERSION},
      {"input", {{"name", "input"}, {"shape", shape(example)}, {"dtype", dtype(example)}}},
      {"output", {{"shape", shape(output)}, {"dtype", dtype(output)}}},
      {"dynamic_axes", {{"input", {0}}, {"output", {0}}}},
      {"class_names", job.data->class_names()},
      {"quantization", quantization},
      {"preprocessing", {{"data", ConfigJson(ctx.cfg, "data")}, {"task", ConfigJson(ctx.cfg, "task")}}},
  };
  if (example.scalar_type() == torch::kInt64) {
    info["input"]["note"] = absl::StrCat("token ids, 0 = padding; exactly ", example.size(1),
                                         " per row (pad with 0 at the end, or cut)");
  }
  KILN_RETURN_IF_ERROR(WriteFileAtomically(ctx.output_dir + "/model.json", info.dump(2) + "\n"));
  KILN_RETURN_IF_ERROR(WriteFileAtomically(ctx.output_dir + "/config.yaml", config::ToYaml(*ctx.cfg.node())));
  Logger::Instance().Info(absl::StrCat("exported ", source, " to ", file, " (TorchScript, input ", c10::str(example.sizes()),
                                       " with any batch size) and ", ctx.output_dir, "/model.json"));
  std::printf("%s\n", file.c_str());
  return absl::OkStatus();
}

// `export`: the checkpoint's weights as safetensors under PyTorch names, with the resolved config;
// or, format=torchscript, the traced model.
absl::Status ExportCommand(app::JobContext& ctx) {
  KILN_ASSIGN_OR_RETURN(ExportOptions o, CommandOptions(ctx.cfg, ExportBinding(), "export"));
  if (o.quantize.has_value() && o.format != "torchscript") {
    return absl::InvalidArgumentError("kiln export: quantize=dynamic_int8 needs format=torchscript");
  }
  std::string path;
  KILN_ASSIGN_OR_RETURN(Job job, BuildJobFromCheckpoint(ctx, &path));
  if (o.format == "torchscript") return ExportTorchScript(ctx, job, o, path);
  std::string weights = ctx.output_dir + "/model.safetensors";
  KILN_RETURN_IF_ERROR(WriteSafetensors(weights, StateDict(job.task->module()),
                                        {{"format", "pt"}, {"kiln_version", KILN_VERSION}, {"model", job.model_name},
                                         {"source", path}}));
  KILN_RETURN_IF_ERROR(WriteFileAtomically(ctx.output_dir + "/config.yaml", config::ToYaml(*ctx.cfg.node())));
  Logger::Instance().Info(absl::StrCat("exported ", path, " to ", weights, " and ", ctx.output_dir, "/config.yaml"));
  std::printf("%s\n", weights.c_str());
  return absl::OkStatus();
}

// `average`: the mean model of `ckpt: [...]` or of the newest `last_n` checkpoints of `run_dir`.
struct AverageOptions {
  std::optional<std::vector<std::string>> ckpt;
  std::optional<int64_t> last_n;
  std::optional<std::string> run_dir;
  std::optional<std::string> out;
};

absl::Status AverageCommand(app::JobContext& ctx) {
  using O = AverageOptions;
  static const auto* binding = new OptionBinding<O>(
      OptionBinding<O>()
          .Field("ckpt", &O::ckpt, "checkpoints to average, in training order")
          .Field("last_n", &O::last_n, "average the newest N checkpoints of run_dir", GreaterThan(1))
          .Field("run_dir", &O::run_dir, "the run whose checkpoints last_n takes")
          .Field("out", &O::out, "the averaged checkpoint (null: averaged.ckpt beside the last one averaged)"));
  KILN_ASSIGN_OR_RETURN(O o, CommandOptions(ctx.cfg, *binding, "average"));
  std::vector<std::string> paths;
  if (o.ckpt.has_value() == o.last_n.has_value()) {
    return absl::InvalidArgumentError("kiln average: give either ckpt=[A,B,...] or last_n=N run_dir=DIR");
  }
  if (o.ckpt.has_value()) {
    paths = *o.ckpt;
  } else {
    if (!o.run_dir.has_value()) return absl::InvalidArgumentError("kiln average: last_n=N needs run_dir=DIR");
    KILN_ASSIGN_OR_RETURN(paths, NewestCheckpoints(*o.run_dir, *o.last_n));
  }
  KILN_ASSIGN_OR_RETURN(AveragedWeights averaged, AverageCheckpoints(paths));
  // Beside the checkpoints, in their run: `kiln test ckpt_path=.../averaged.ckpt` then starts from
  // the config of the run that trained them (stored_config.h), as for any of its checkpoints.
  const std::string& last = paths.back();
  size_t slash = last.find_last_of('/');
  std::string out = o.out.value_or(slash == std::string::npos ? "averaged.ckpt" : last.substr(0, slash) + "/averaged.ckpt");
  KILN_RETURN_IF_ERROR(WriteAveragedCheckpoint(out, averaged, paths));
  Logger::Instance().Info(absl::StrCat("averaged ", paths.size(), " checkpoints (", absl::StrJoin(paths, ", "), ") into ", out));
  std::printf("%s\n", out.c_str());
  return absl::OkStatus();
}

const bool kRegistered = [] {
  app::RegisterCommand("average", AverageCommand);
  app::RegisterCommand("export", ExportCommand);
  app::RegisterCommand("train", TrainCommand);
  app::RegisterCommand("tune", TuneCommand);
  app::RegisterCommand("validate", [](app::JobContext& ctx) { return EvaluateCommand(ctx, data::Stage::kValidate); });
  app::RegisterCommand("test", [](app::JobContext& ctx) { return EvaluateCommand(ctx, data::Stage::kTest); });
  app::RegisterCommand("predict", PredictCommand);
  return true;
}();

}  // namespace
}  // namespace kiln
