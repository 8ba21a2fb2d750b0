#include "lib/app/application.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "lib/app/internal/cli.h"
#include "lib/base/directory_lock.h"
#include "lib/base/error_text.h"
#include "lib/base/exit_code.h"
#include "lib/base/files.h"
#include "lib/base/version.h"
#include "lib/config/defaults_list.h"
#include "lib/config/interpolation.h"
#include "lib/config/merge.h"
#include "lib/config/provenance.h"
#include "lib/config/repository.h"
#include "lib/config/secrets.h"
#include "lib/config/suggest.h"
#include "lib/config/yaml_io.h"
#include "lib/logging/logger.h"
#include "lib/registry/component_listing.h"
#include "lib/registry/internal/module_loader.h"
#include "lib/registry/plugin_loader.h"
#include "lib/registry/registry.h"
#include "lib/report/report_command.h"
#include "lib/run/environment.h"
#include "lib/run/internal/local_workers.h"
#include "lib/run/internal/spawn.h"
#include "lib/run/run_dir.h"
#include "lib/run/stored_config.h"
#include "lib/sweep/launcher.h"
#include "lib/sweep/sweep_ledger.h"
#include "lib/sweep/sweep_session.h"
#include "lib/sweep/sweeper.h"

namespace kiln::app {
namespace {

using config::Node;
using config::NodePtr;

// `compose`: a job that only composes, records and prints its config.
absl::Status ComposeCommand(run::JobContext& job);
const bool kComposeRegistered = [] {
  run::RegisterCommand("compose", ComposeCommand);
  return true;
}();

absl::Status ComposeCommand(run::JobContext& job) {
  std::string yaml = config::ToYaml(*config::RedactSecrets(*job.cfg.node()));
  std::fwrite(yaml.data(), 1, yaml.size(), stdout);
  std::fflush(stdout);
  Logger::Instance().Info(
      absl::StrCat("config recorded in ", job.output_dir, "/.hydra/config.yaml"));
  return absl::OkStatus();
}

void Print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// One of kiln's own libraries, next to libkiln_core in the build tree and in an installed prefix.
std::string BuiltinLibraryPath(const std::string& name) {
  return absl::StrCat(run::ExecutableDir(), "/../lib/lib", name, ".so");
}

// kiln's LibTorch layers; for `kiln serve` also libkiln_serve (cpp-httplib, which links OpenSSL
// and brotli: loaded for that command only, as libkiln_dashboard), which registers the command.
absl::Status LoadBuiltinLibraries(const std::string& command) {
  for (const char* name : {"kiln_engine", "kiln_components", "kiln_tasks"}) {
    std::string path = BuiltinLibraryPath(name);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (std::string(KILN_TORCH_VERSION_STRING).empty()) continue;  // a build without LibTorch
      // Built with LibTorch, so the library belongs beside kiln: without it no model, data or
      // task is registered, and the first name would be "unknown" for a reason it does not say.
      return absl::FailedPreconditionError(absl::StrCat(
          path, " is missing: this kiln was built with LibTorch ", KILN_TORCH_VERSION_STRING,
          ", and its models, data and tasks are in that library (build it: cmake --build "
          "BUILD_DIR, "
          "or ninja -C BUILD_DIR kiln)"));
    }
    if (auto status = LoadComponentLibrary(path, "built-in"); !status.ok()) return status;
  }
  if (command != "serve") return absl::OkStatus();
  std::string path = BuiltinLibraryPath("kiln_serve");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(
        "this kiln was built without cpp-httplib or LibTorch, which kiln serve needs (apt-get "
        "install "
        "libcpp-httplib-dev, then cmake again)");
  }
  return LoadComponentLibrary(path, "built-in");
}

// `kiln dashboard`: libkiln_dashboard (cpp-httplib with OpenSSL and brotli) is loaded for this
// command only, so no other start of kiln pays for loading them.
int RunDashboard(const std::vector<std::string>& args) {
  std::string path = BuiltinLibraryPath("kiln_dashboard");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    std::fprintf(
        stderr,
        "kiln: error: this kiln was built without cpp-httplib, which kiln dashboard serves "
        "pages with (apt-get install libcpp-httplib-dev, then cmake again)\n");
    return kExitUsage;
  }
  auto handle = OpenLibraryAs(path, "built-in", RTLD_LOCAL);
  using Main = int (*)(const std::vector<std::string>*);
  Main main =
      handle.ok() ? reinterpret_cast<Main>(::dlsym(*handle, "kiln_dashboard_main")) : nullptr;
  if (main == nullptr) {
    run::ReportError(handle.ok()
                         ? absl::InternalError(absl::StrCat(path, " has no kiln_dashboard_main"))
                         : handle.status());
    return kExitFailure;
  }
  return main(&args);
}

// Where `plugins: [name]` finds installed plugins: <prefix>/lib/kiln/plugins.
std::string InstalledPluginDir() { return run::ExecutableDir() + "/../lib/kiln/plugins"; }

// A `plugins:` value: a path or a list of them.
absl::Status AppendPluginNames(const Node& value, const std::string& where,
                               std::vector<std::string>* out) {
  if (value.is_null()) return absl::OkStatus();
  if (value.kind() == config::NodeKind::kString) {
    out->push_back(value.as_string());
    return absl::OkStatus();
  }
  if (value.is_list()) {
    for (const auto& item : value.items()) {
      if (item->kind() != config::NodeKind::kString) {
        return absl::InvalidArgumentError(
            absl::StrCat("'plugins' (", where, ") must list plugin paths or names"));
      }
      out->push_back(item->as_string());
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'plugins' (", where, ") must be a list of plugin paths or names"));
}

class Application {
 public:
  explicit Application(CommandLine cl) : cl_(std::move(cl)) {}

  absl::Status Run() {
    if (cl_.command == "list") {
      if (auto st = FindPlugins(nullptr); !st.ok()) return st;
      return List();
    }
    options_.config_name = cl_.config_name.value_or(DefaultConfigName(cl_.command));
    options_.job_name = cl_.command;
    options_.version = run::Version();
    options_.multirun = cl_.multirun;
    std::string main_path =
        cl_.config_path.has_value() ? AbsolutePath(*cl_.config_path) : run::DefaultConfigPath();
    if (!IsDirectory(main_path)) {
      return absl::NotFoundError(absl::StrCat("config path '", cl_.config_path.value_or(main_path),
                                              "' is not a directory (--config-path)"));
    }
    options_.search_path.push_back({"main", main_path});
    for (const auto& dir : cl_.config_dirs) {
      if (!IsDirectory(dir)) {
        return absl::NotFoundError(
            absl::StrCat("config dir '", dir, "' is not a directory (--config-dir)"));
      }
      options_.search_path.push_back({"command-line", AbsolutePath(dir)});
    }
    options_.overrides = cl_.overrides;
    repo_ = std::make_unique<config::ConfigRepository>(options_.search_path);
    // Plugins' config folders join the search path before composition; the libraries
    // themselves load only when a command builds components.
    if (auto st = FindPlugins(repo_.get()); !st.ok()) return st;
    if (!plugins_.empty()) {
      // A config may use a plugin's resolver: the plugins load when one is first looked up.
      config::ResolverRegistry::Default().set_load_more([this] { return LoadLibraries(); });
      for (const auto& plugin : plugins_) {
        if (!plugin.config_dir.empty())
          options_.search_path.push_back({"plugin " + plugin.name, plugin.config_dir});
      }
      repo_ = std::make_unique<config::ConfigRepository>(options_.search_path);
    }

    if (cl_.worker_of.has_value()) return RunWorker(*cl_.worker_of);
    if (cl_.multirun_job.has_value()) {  // one job of a sweep, started by the `local` launcher
      if (!cl_.sweep_dir.has_value())
        return absl::InvalidArgumentError("--multirun-job needs --sweep-dir");
      options_.multirun = true;
      auto composed = config::Compose(options_, *repo_);
      if (!composed.ok()) return composed.status();
      config::SetPath(*composed->hydra, "sweep.dir", Node::String(*cl_.sweep_dir));
      if (auto st = UseStoredConfig(*composed); !st.ok()) return st;
      return RunJob(*composed, *cl_.multirun_job, *cl_.sweep_dir, cl_.overrides);
    }
    auto composed = ComposeInMode();
    if (!composed.ok()) {
      // `kiln predict run_dir=RUN data.predict=FILE`: the key may be the run's own and absent
      // from the defaults (another dataset's config); the overrides then go on the stored
      // config only, and where there is no run to start from the defaults' error stands.
      if (!run::StartsFromATrainedModel(cl_.command)) return composed.status();
      config::ComposeOptions lenient = options_;
      lenient.defer_missing_keys = true;
      auto retry = config::Compose(lenient, *repo_);
      if (!retry.ok()) return composed.status();
      auto run = run::StartFromStoredConfig(*retry);
      if (!run.ok()) return run.status();
      if (run->empty()) return composed.status();
      composed = std::move(retry);
    } else if (!options_.multirun) {
      if (auto st = UseStoredConfig(*composed); !st.ok()) return st;
    }
    if (cl_.help) return Help(*composed);
    if (cl_.info.has_value()) return Info(*composed);
    if (cl_.cfg.has_value()) return PrintConfig(*composed);
    if (options_.multirun) return Multirun(*composed);
    if (cl_.dry_run) {
      auto hydra = config::ResolveHydra(*composed);
      if (!hydra.ok()) return hydra.status();
      NodePtr dir = config::SelectPath(*hydra, {"run", "dir"});
      Print(absl::StrCat(absl::StrJoin(cl_.overrides, " "), "\n"));
      Logger::Instance().Info(absl::StrCat("dry run: would run '", cl_.command, "' in ",
                                           dir ? config::PythonStr(*dir) : "?"));
      return absl::OkStatus();
    }
    return RunJob(*composed, -1, "", {});
  }

 private:
  // test, validate, predict, export: the job config of the run that trained the checkpoint
  // (stored_config.h), the command line on top.
  absl::Status UseStoredConfig(config::ComposeResult& composed) {
    if (!run::StartsFromATrainedModel(cl_.command)) return absl::OkStatus();
    return run::StartFromStoredConfig(composed).status();
  }

  // Runs one job; a job of a sweep records its outcome in the sweep's ledger.
  absl::Status RunJob(config::ComposeResult& composed, int job_num, const std::string& sweep_dir,
                      const std::vector<std::string>& job_overrides) {
    auto start = std::chrono::steady_clock::now();
    absl::Status status = RunJobInDir(composed, job_num, sweep_dir);
    if (job_num >= 0) {
      sweep::LedgerEntry entry;
      entry.job = job_num;
      entry.status = status.ok() ? "ok" : "failed";
      entry.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      entry.overrides = job_overrides;
      entry.message = std::string(status.message());
      entry.dir = last_output_dir_;
      if (auto st = sweep::AppendLedger(sweep_dir, entry); !st.ok() && status.ok()) return st;
    }
    return status;
  }

  // Plans the job's folder and resolves its config (a config that does not resolve is refused
  // before anything is written), then runs it as this process's place in the job says.
  absl::Status RunJobInDir(config::ComposeResult& composed, int job_num,
                           const std::string& sweep_dir) {
    last_output_dir_.clear();
    auto run = run::PlanRunDir(composed, job_num, sweep_dir);
    if (!run.ok()) return run.status();
    last_output_dir_ = run->output_dir;
    auto resolved = config::ResolveJob(composed);
    if (!resolved.ok()) return resolved.status();
    auto env = run::ReadEnvironment();
    if (!env.ok()) return env.status();
    if (env->rank != 0) return RunAsLaterRank(composed, *resolved, *run);
    if (!env->distributed()) {
      if (auto st = UseListedGpus(*resolved); !st.ok()) return st;
    }
    if (cl_.command == "train" && !env->distributed()) {
      auto spread = ReadSpread(config::Config(*resolved));
      if (!spread.ok()) return spread.status();
      if (spread->devices > 1 || spread->nodes > 1) {
        return RunWorkersOfThisNode(composed, **resolved, *run, job_num, *spread);
      }
    }
    return RunInThisProcess(composed, *resolved, *run, job_num);
  }

  // A rank > 0 under torchrun or SLURM: rank 0 owns the run directory and the log, and hands this
  // rank its config and folder when training starts.
  absl::Status RunAsLaterRank(config::ComposeResult& composed, const NodePtr& resolved,
                              const run::RunDir& run) {
    Logger::Instance().set_level(LogLevel::kWarning);
    if (auto st = LoadLibraries(); !st.ok()) return st;
    return RunCommand(config::Config(resolved), &composed, run.output_dir);
  }

  // trainer.devices=[1, 3] (Lightning's list of GPU ids): those GPUs become the visible ones
  // (CUDA_VISIBLE_DEVICES, before anything here starts CUDA), for this process and the workers it
  // starts, so that local rank i trains on the i-th. Ids count within an existing
  // CUDA_VISIBLE_DEVICES, as CUDA's own ids do.
  static absl::Status UseListedGpus(const NodePtr& resolved) {
    NodePtr devices = config::SelectPath(resolved, {"trainer", "devices"});
    if (devices == nullptr || !devices->is_list()) return absl::OkStatus();
    if (NodePtr accelerator = config::SelectPath(resolved, {"trainer", "accelerator"});
        accelerator != nullptr && accelerator->kind() == config::NodeKind::kString &&
        accelerator->as_string() == "cpu") {
      return absl::InvalidArgumentError(
          absl::StrCat("trainer.devices lists GPU ids, but trainer.accelerator=cpu: give a count "
                       "(trainer.devices=",
                       devices->size(), ")"));
    }
    std::vector<std::string> visible;
    if (const char* set = std::getenv("CUDA_VISIBLE_DEVICES"); set != nullptr && *set != '\0') {
      visible = absl::StrSplit(set, ',');
    }
    std::vector<std::string> ids;
    for (const NodePtr& item : devices->items()) {
      std::string text = config::ToYaml(*item);
      text = text.substr(0, text.find('\n'));
      if (item->kind() != config::NodeKind::kInt || item->as_int() < 0) {
        return absl::InvalidArgumentError(absl::StrCat("trainer.devices lists GPU ids, and '", text,
                                                       "' is not one (an int >= 0)"));
      }
      std::string id = std::to_string(item->as_int());
      if (!visible.empty()) {
        if (item->as_int() >= static_cast<int64_t>(visible.size())) {
          return absl::InvalidArgumentError(
              absl::StrCat("trainer.devices lists GPU ", id, ", but CUDA_VISIBLE_DEVICES=",
                           absl::StrJoin(visible, ","), " makes ", visible.size(), " visible"));
        }
        id = visible[item->as_int()];
      }
      if (std::find(ids.begin(), ids.end(), id) != ids.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("trainer.devices lists GPU ", item->as_int(), " twice"));
      }
      ids.push_back(id);
    }
    if (ids.empty())
      return absl::InvalidArgumentError(
          "trainer.devices is an empty list: give a count or GPU ids");
    ::setenv("CUDA_VISIBLE_DEVICES", absl::StrJoin(ids, ",").c_str(), 1);
    return absl::OkStatus();
  }

  struct Spread {
    int devices = 1, nodes = 1;  // trainer.devices (a list: its length), trainer.num_nodes
  };
  static absl::StatusOr<Spread> ReadSpread(const config::Config& cfg) {
    NodePtr listed = config::SelectPath(cfg.node(), {"trainer", "devices"});
    auto devices = listed != nullptr && listed->is_list()
                       ? absl::StatusOr<int64_t>(static_cast<int64_t>(listed->size()))
                       : cfg.GetOr<int64_t>("trainer.devices", 1);
    if (!devices.ok()) return devices.status();
    auto nodes = cfg.GetOr<int64_t>("trainer.num_nodes", 1);
    if (!nodes.ok()) return nodes.status();
    return Spread{static_cast<int>(*devices), static_cast<int>(*nodes)};
  }

  // `kiln train trainer.devices=N` (or num_nodes > 1) started by hand: this process starts the
  // node's workers and waits for them.
  absl::Status RunWorkersOfThisNode(config::ComposeResult& composed, const Node& resolved,
                                    const run::RunDir& run, int job_num, const Spread& spread) {
    // Node 0 owns the run directory; another node's workers join it when training starts, and
    // meanwhile read their config (and write their logs) in a folder of this node's own.
    // A missing NODE_RANK is refused here, before anything is written.
    auto node_rank = run::NodeRank(spread.nodes);
    if (!node_rank.ok()) return node_rank.status();
    if (*node_rank > 0) {
      char scratch[] = "/tmp/kiln-node-XXXXXX";
      if (::mkdtemp(scratch) == nullptr)
        return absl::InternalError("cannot create a folder in /tmp");
      run::RunDir local = run;
      local.output_dir = scratch;
      local.log_file.clear();
      if (auto st = MakeDirs(local.output_dir + "/.hydra"); !st.ok()) return st;
      return RunWorkers(resolved, local, spread.devices, spread.nodes);
    }
    // This process holds the run's lock for its workers, which it outlives.
    auto lock = LockRunDir(run, job_num);
    if (!lock.ok()) return lock.status();
    if (auto st = run::WriteRunDir(composed, run); !st.ok()) return st;
    return RunWorkers(resolved, run, spread.devices, spread.nodes);
  }

  // The common case: the run directory locked (train, tune) and written, the log opened, and the
  // command run here.
  absl::Status RunInThisProcess(config::ComposeResult& composed, const NodePtr& resolved,
                                const run::RunDir& run, int job_num) {
    auto lock = LockRunDir(run, job_num);
    if (!lock.ok()) return lock.status();
    if (auto st = run::WriteRunDir(composed, run); !st.ok()) return st;
    if (NodePtr chdir = config::SelectPath(composed.hydra, {"job", "chdir"});
        chdir && chdir->kind() == config::NodeKind::kBool && chdir->as_bool()) {
      Logger::Instance().Warning(
          "hydra.job.chdir=true is ignored: kiln never changes the working directory");
    }
    if (!run.log_file.empty()) {
      if (auto st = Logger::Instance().OpenFile(run.log_file); !st.ok()) return st;
    }
    if (cl_.command != "compose") {
      if (auto st = LoadLibraries(); !st.ok()) return st;
    }
    absl::Status status = RunCommand(config::Config(resolved), &composed, run.output_dir);
    Logger::Instance().CloseFile();
    return status;
  }

  // `train` and `tune` write checkpoints and metrics into the run directory, so one process at a
  // time may (a second run into it, or a second resume of its checkpoint, is refused naming the
  // first one's pid). The commands that only read a run (validate, test, predict, export) take no
  // lock. Taken before the `.hydra` files are written, so a refused run overwrites nothing.
  absl::StatusOr<DirectoryLock> LockRunDir(const run::RunDir& run, int job_num) {
    if (cl_.command != "train" && cl_.command != "tune") return DirectoryLock();
    if (auto st = MakeDirs(run.output_dir); !st.ok()) return st;
    return DirectoryLock::Acquire(run.output_dir, job_num >= 0
                                                      ? "sweep job directory (hydra.sweep.subdir)"
                                                      : "run directory (hydra.run.dir)");
  }

  // The parent of `trainer.devices=N` workers: hands them the resolved config through the run
  // directory and waits.
  absl::Status RunWorkers(const Node& resolved, const run::RunDir& run, int devices, int nodes) {
    std::string handed = run.output_dir + "/.hydra/resolved.yaml";
    if (auto st = WriteFileAtomically(handed, config::ToYaml(resolved)); !st.ok()) return st;
    run::LocalWorkersOptions options;
    options.devices = devices;
    options.num_nodes = nodes;
    options.output_dir = run.output_dir;
    options.log_file = run.log_file;
    // The parent's own command line, so the workers find the same plugins; they compose nothing.
    options.argv = SelfCommandLine();
    options.argv.push_back(absl::StrCat("--worker-of=", AbsolutePath(run.output_dir)));
    options.argv.insert(options.argv.end(), cl_.overrides.begin(), cl_.overrides.end());
    return run::RunLocalWorkers(options);
  }

  // One worker of RunWorkers: the job config it was handed, in the parent's run directory.
  absl::Status RunWorker(const std::string& dir) {
    auto env = run::ReadEnvironment();
    if (!env.ok()) return env.status();
    auto resolved = config::LoadYamlFile(dir + "/.hydra/resolved.yaml");
    if (!resolved.ok()) return resolved.status();
    if (env->rank == 0) {
      if (std::string log = run::ProcessEnv("KILN_WORKER_LOG"); !log.empty()) {
        if (auto st = Logger::Instance().OpenFile(log); !st.ok()) return st;
      }
    } else {
      Logger::Instance().set_level(LogLevel::kWarning);
    }
    if (auto st = LoadLibraries(); !st.ok()) return st;
    absl::Status status = RunCommand(config::Config(*resolved), nullptr, dir);
    Logger::Instance().CloseFile();
    return status;
  }

  absl::Status RunCommand(config::Config cfg, const config::ComposeResult* composed,
                          const std::string& output_dir) {
    run::JobContext job;
    job.command = cl_.command;
    job.subcommand = cl_.subcommand;
    job.cfg = std::move(cfg);
    job.composed = composed;
    job.output_dir = output_dir;
    absl::Status status;
    const run::CommandFn* found = run::FindCommand(cl_.command);
    if (found != nullptr) {
      // Components call LibTorch, which throws (a model that does not fit the data's shape, ...):
      // one line with the message, never a stack trace.
      try {
        status = (*found)(job);
      } catch (const std::exception& e) {
        std::string what = e.what();
        // LibTorch's allocator out of memory (a limit, or the machine's): say so in words.
        const size_t oom = what.find("can't allocate memory: you tried to allocate ");
        if (IsOutOfMemory(e)) {
          const std::string which =
              oom == std::string::npos
                  ? "an allocation failed"
                  : absl::StrCat("an allocation of ",
                                 what.substr(oom + 45, what.find(' ', oom + 45) - oom - 45),
                                 " bytes failed");
          status = absl::ResourceExhaustedError(absl::StrCat(
              "kiln ", cl_.command, " ran out of memory (", which,
              "); a smaller batch, trainer.precision=bf16-mixed, "
              "model.activation_checkpointing=true, trainer.strategy=fsdp with several "
              "workers, or several workers for a model with embedding tables (sharded across "
              "them) need less"));
        } else {
          status =
              absl::InternalError(absl::StrCat("kiln ", cl_.command, " failed: ", ErrorLine(what)));
        }
      }
    } else {
      Logger::Instance().Warning(
          absl::StrCat("kiln ", cl_.command,
                       ": this build has no training engine yet; the job's config was composed "
                       "and recorded in ",
                       output_dir, "/.hydra/config.yaml"));
      Print(config::ToYaml(*config::RedactSecrets(*job.cfg.node())));
    }
    return status;
  }

  // A multirun: the sweeper (hydra.sweeper) decides the jobs, the launcher (hydra.launcher)
  // runs them; the sweep machinery (sweep_session.h) keeps the folder, ledger and summary.
  absl::Status Multirun(config::ComposeResult& first) {
    // A plugin may provide the sweeper or the launcher.
    if (!plugins_.empty()) {
      if (auto st = LoadLibraries(); !st.ok()) return st;
    }
    auto sweeper_cfg = config::Config(first.hydra, "hydra").Sub("sweeper");
    if (!sweeper_cfg.ok()) return sweeper_cfg.status();
    auto sweeper = Registry<sweep::Sweeper>::Get().Instantiate(*sweeper_cfg);
    if (!sweeper.ok()) return sweeper.status();
    sweep::SweepSetup setup;
    setup.arguments = first.overrides;
    setup.config = first.root;
    setup.repo = repo_.get();
    setup.dry_run = cl_.dry_run;
    setup.fail_fast = cl_.fail_fast;
    setup.print = Print;
    if (!cl_.dry_run) {
      config::Interpolator interpolator(first.root);
      auto dir = interpolator.Select("hydra.sweep.dir", {"hydra"}, /*resolve=*/true);
      if (!dir.ok()) return dir.status();
      if (*dir == nullptr || (*dir)->kind() != config::NodeKind::kString) {
        return absl::InvalidArgumentError("hydra.sweep.dir must be a string");
      }
      setup.sweep_dir = (*dir)->as_string();
      setup.multirun_yaml = config::ToYaml(*first.root);
      auto launcher_cfg = config::Config(first.hydra, "hydra").Sub("launcher");
      if (!launcher_cfg.ok()) return launcher_cfg.status();
      auto launcher = Registry<sweep::Launcher>::Get().Instantiate(*launcher_cfg);
      if (!launcher.ok()) return launcher.status();
      setup.launcher = *launcher;
      std::string sweep_dir = setup.sweep_dir;
      setup.context.run = [this, sweep_dir](const sweep::SweepJob& job) -> absl::Status {
        config::ComposeOptions job_options = options_;
        job_options.overrides = job.overrides;
        auto composed = config::Compose(job_options, *repo_);
        if (!composed.ok()) return composed.status();
        if (auto st = UseStoredConfig(*composed); !st.ok()) return st;
        return RunJob(*composed, static_cast<int>(job.index), sweep_dir, job.overrides);
      };
      setup.context.command = [this, sweep_dir](const sweep::SweepJob& job) {
        std::vector<std::string> argv = SelfCommandLine();
        argv.push_back(absl::StrCat("--multirun-job=", job.index));
        argv.push_back(absl::StrCat("--sweep-dir=", AbsolutePath(sweep_dir)));
        argv.insert(argv.end(), job.overrides.begin(), job.overrides.end());
        return argv;
      };
    }
    return sweep::RunSweep(**sweeper, std::move(setup));
  }

  // The command line that runs this command again in another process (a sweep's job, a
  // data-parallel worker): the same config folders and plugins; the caller adds the rest.
  std::vector<std::string> SelfCommandLine() const {
    std::vector<std::string> argv = {run::ExecutablePath(), cl_.command};
    if (!cl_.subcommand.empty()) argv.push_back(cl_.subcommand);
    argv.insert(argv.end(), {"--config-path", options_.search_path[0].path, "--config-name",
                             options_.config_name});
    for (const auto& dir : cl_.config_dirs)
      argv.insert(argv.end(), {"--config-dir", AbsolutePath(dir)});
    for (const auto& plugin : cl_.plugins)
      argv.insert(argv.end(), {"--plugin", AbsolutePath(plugin)});
    return argv;
  }

  absl::StatusOr<NodePtr> SelectPackage(const NodePtr& node) {
    if (!cl_.package.has_value() || cl_.package->empty() || *cl_.package == "_global_") return node;
    NodePtr found = config::SelectPath(node, config::SplitKey(*cl_.package));
    if (found == nullptr) {
      std::vector<std::string> keys;
      if (node->is_map()) {
        for (const auto& [k, v] : node->entries()) keys.push_back(k);
      }
      return absl::NotFoundError(absl::StrCat("--package '", *cl_.package, "' is not in the config",
                                              config::DidYouMean(*cl_.package, keys)));
    }
    return found;
  }

  absl::Status PrintConfig(config::ComposeResult& composed) {
    NodePtr node;
    if (*cl_.cfg == "job") {
      node = composed.job;
    } else if (*cl_.cfg == "hydra") {
      node = Node::Map();
      node->Set("hydra", composed.hydra);
    } else {
      node = composed.root;
    }
    if (cl_.resolve) {
      config::Interpolator interpolator(*cl_.cfg == "job" ? composed.job : composed.root);
      interpolator.set_hydra_root(composed.root);
      auto resolved = interpolator.ResolveAll();
      if (!resolved.ok()) return resolved.status();
      node = *resolved;
    }
    // A secret option's value (serve.token) is ***, in the job and in the overrides hydra records.
    node = config::RedactSecrets(*node);
    if (NodePtr hydra = node->is_map() ? node->Find("hydra") : nullptr)
      node->Set("hydra", config::RedactHydraSecrets(*hydra));
    auto selected = SelectPackage(node);
    if (!selected.ok()) return selected.status();
    if (cl_.package.has_value() && !cl_.package->empty())
      Print(absl::StrCat("# @package ", *cl_.package, "\n"));
    Print(config::ToYaml(**selected));
    return absl::OkStatus();
  }

  absl::Status Info(config::ComposeResult& composed) {
    const std::string& section = *cl_.info;
    auto want = [&](const char* name) { return section.empty() || section == name; };
    std::string out;
    if (want("searchpath")) {
      absl::StrAppend(&out, "Config search path\n******************\n", repo_->DescribeSearchPath(),
                      "\n");
    }
    if (want("defaults-tree")) {
      absl::StrAppend(&out, "Defaults Tree\n*************\n",
                      config::FormatDefaultsTree(*composed.defaults->tree), "\n");
    }
    if (want("defaults")) {
      absl::StrAppend(&out, "Defaults List\n*************\n");
      size_t w1 = 11, w2 = 7;
      for (const auto& d : composed.defaults->defaults) {
        w1 = std::max(w1, d.config_path.size());
        w2 = std::max(w2, d.package.size());
      }
      auto row = [&](const std::string& a, const std::string& b, const std::string& c) {
        return absl::StrCat("| ", a, std::string(w1 - a.size(), ' '), " | ", b,
                            std::string(w2 - b.size(), ' '), " | ", c, "\n");
      };
      absl::StrAppend(&out, row("Config path", "Package", "Parent"));
      for (const auto& d : composed.defaults->defaults) {
        absl::StrAppend(&out, row(d.config_path, d.package, d.parent.value_or("")));
      }
      absl::StrAppend(&out, "\n");
    }
    if (want("config")) {
      absl::StrAppend(&out, "Config\n******\n",
                      config::ToYaml(*config::RedactSecrets(*composed.job)), "\n");
    }
    if (want("provenance")) {
      absl::StrAppend(
          &out, "Provenance (where each value was set)\n*************************************\n",
          config::FormatProvenance(*config::RedactSecrets(*composed.job)));
    }
    if (out.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--info takes defaults, defaults-tree, config, searchpath or provenance, not '", section,
          "'"));
    }
    Print(out);
    return absl::OkStatus();
  }

  void AppendGroups(const std::string& parent, std::string* out) {
    for (const auto& group : repo_->Groups(parent)) {
      auto options = repo_->GroupOptions(group);
      if (!options.empty()) absl::StrAppend(out, group, ": ", absl::StrJoin(options, ", "), "\n");
      AppendGroups(group, out);
    }
  }

  absl::Status Help(config::ComposeResult& composed) {
    std::string header = "kiln: config-driven training on LibTorch";
    if (NodePtr h = config::SelectPath(composed.hydra, {"help", "header"});
        h && h->kind() == config::NodeKind::kString) {
      header = h->as_string();
    }
    std::string out = absl::StrCat(
        header, "\n\nkiln ", cl_.command, cl_.subcommand.empty() ? "" : " " + cl_.subcommand,
        " [--config-name NAME] [-m] [--cfg job|hydra|all] [--info] [overrides...]\n\n");
    absl::StrAppend(&out,
                    "== Configuration groups ==\nCompose your configuration from these groups "
                    "(group=option)\n\n");
    AppendGroups("", &out);
    absl::StrAppend(&out, "\n== Config ==\nOverride anything in the config (foo.bar=value)\n\n",
                    config::ToYaml(*config::RedactSecrets(*composed.job)), "\n");
    if (NodePtr f = config::SelectPath(composed.hydra, {"help", "footer"});
        f && f->kind() == config::NodeKind::kString) {
      absl::StrAppend(&out, f->as_string(), "\n");
    }
    absl::StrAppend(&out, "\n", Usage());
    Print(out);
    return absl::OkStatus();
  }

  // The plugins this run uses, inspected (not loaded): KILN_PLUGIN_PATH, then `plugins:` in the
  // primary config and on the command line (as Hydra reads hydra.searchpath: the primary
  // config and overrides only, since the rest of the config may live in a plugin), then --plugin.
  absl::Status FindPlugins(config::ConfigRepository* repo) {
    std::vector<std::string> paths;
    if (const char* env = std::getenv("KILN_PLUGIN_PATH"); env != nullptr && *env != '\0') {
      auto on_path = PluginsOnPath(env);
      if (!on_path.ok()) return on_path.status();
      paths = *std::move(on_path);
    }
    std::vector<std::string> named;
    if (repo != nullptr && !options_.config_name.empty()) {
      auto primary = repo->Load(options_.config_name);
      if (primary.ok() && *primary != nullptr && (*primary)->content != nullptr) {
        if (NodePtr value = (*primary)->content->Find("plugins")) {
          if (auto st = AppendPluginNames(*value, (*primary)->file, &named); !st.ok()) return st;
        }
      }
      for (const auto& text : cl_.overrides) {
        auto o = config::ParseOverride(text);
        if (!o.ok() || o->key_or_group != "plugins" || o->package.has_value()) continue;
        named.clear();  // the command line replaces the primary config's list
        if (o->has_value && !o->is_sweep() && o->value.node != nullptr) {
          if (auto st = AppendPluginNames(*o->value.node, "override " + text, &named); !st.ok())
            return st;
        }
      }
    }
    named.insert(named.end(), cl_.plugins.begin(), cl_.plugins.end());
    for (const auto& name : named) {
      auto path = ResolvePluginReference(name, InstalledPluginDir());
      if (!path.ok()) return path.status();
      paths.push_back(*path);
    }
    for (const auto& path : paths) {
      auto manifest = InspectPlugin(path);
      if (!manifest.ok()) return manifest.status();
      bool seen = false;
      for (const auto& p : plugins_) seen |= p.path == manifest->path;
      if (!seen) plugins_.push_back(*std::move(manifest));
    }
    return absl::OkStatus();
  }

  // kiln's LibTorch layers, then the plugins (which link against them).
  absl::Status LoadLibraries() {
    if (auto st = LoadBuiltinLibraries(cl_.command); !st.ok()) return st;
    for (const auto& plugin : plugins_) {
      if (auto loaded = LoadPlugin(plugin); !loaded.ok()) return loaded.status();
    }
    return absl::OkStatus();
  }

  absl::Status List() {
    if (auto st = LoadLibraries(); !st.ok()) return st;
    RegistryHub& hub = RegistryHub::Instance();
    std::vector<std::string> kinds = hub.Kinds();
    if (cl_.overrides.size() > 1) return absl::InvalidArgumentError("usage: kiln list [KIND]");
    if (!cl_.overrides.empty()) {
      const std::string& kind = cl_.overrides[0];
      if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
        return absl::NotFoundError(absl::StrCat("unknown component kind '", kind, "'",
                                                config::DidYouMean(kind, kinds),
                                                "; kinds: ", absl::StrJoin(kinds, ", ")));
      }
      kinds = {kind};
    }
    Print(cl_.markdown ? ComponentsMarkdown(kinds) : ComponentsText(kinds));
    return absl::OkStatus();
  }

  // Hydra's choice of mode: --multirun (-m), or `hydra.mode: MULTIRUN` set by the config (an
  // hparams_search file, say). Like Hydra's get_mode, the config's mode is read from a
  // composition that accepts sweeps; the run is composed again in RUN mode otherwise.
  absl::StatusOr<config::ComposeResult> ComposeInMode() {
    if (!options_.multirun) {
      config::ComposeOptions probe = options_;
      probe.multirun = true;
      auto multirun = config::Compose(probe, *repo_);
      if (multirun.ok() && multirun->configured_mode == "MULTIRUN") {
        options_.multirun = true;
        return multirun;
      }
    }
    return config::Compose(options_, *repo_);
  }

  CommandLine cl_;
  std::string last_output_dir_;  // of the job run last
  std::vector<PluginManifest> plugins_;
  config::ComposeOptions options_;
  std::unique_ptr<config::ConfigRepository> repo_;
};

}  // namespace

int RunApplication(const std::vector<std::string>& args) {
  // Past a file size limit (ulimit -f, prlimit --fsize) a write then fails with EFBIG, which kiln
  // reports as it does a full disk, instead of SIGXFSZ killing the process in the middle of it.
  ::signal(SIGXFSZ, SIG_IGN);
  if (!run::StopWithParent()) {
    std::fprintf(stderr,
                 "kiln: error: the process that started this one has ended; not starting\n");
    return kExitFailure;
  }
  // `report` and `dashboard` read what runs wrote: they compose no config and load no engine.
  if (!args.empty() && args[0] == "report")
    return report::RunReportCommand({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "dashboard") return RunDashboard({args.begin() + 1, args.end()});
  auto cl = ParseCommandLine(args);
  if (!cl.ok()) {
    run::ReportError(cl.status());
    std::fprintf(stderr, "Run 'kiln --help' for usage.\n");
    return kExitUsage;
  }
  if (cl->command.empty()) {
    if (cl->help) {
      Print(Usage());
      return kExitOk;
    }
    std::fprintf(stderr, "%s", Usage().c_str());
    return kExitUsage;
  }
  Application app(*std::move(cl));
  absl::Status status = app.Run();
  if (!status.ok()) {
    run::ReportError(status);
    return run::ExitCodeFor(status);
  }
  return kExitOk;
}

}  // namespace kiln::app
