#include "lib/app/internal/cli.h"

#include <algorithm>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/config/suggest.h"

namespace kiln::app {

const std::vector<std::pair<std::string, std::string>>& KnownCommands() {
  static const auto* commands = new std::vector<std::pair<std::string, std::string>>{
      {"train", "fit the task's model (Trainer.fit)"},
      {"validate", "evaluate a checkpoint on the validation set"},
      {"test", "evaluate a checkpoint on the test set"},
      {"predict", "run a checkpoint on new inputs and write predictions"},
      {"export", "write a checkpoint's weights as safetensors with the resolved config"},
      {"serve",
       "answer predictions over HTTP with dynamic batching: kiln serve ckpt_path=PATH "
       "serve.port=N"},
      {"tune", "find a learning rate before training: kiln tune lr_find [--apply] [overrides...]"},
      {"average", "average the weights of checkpoints: ckpt=[A,B,...] or last_n=N run_dir=DIR"},
      {"shard",
       "write the data module's splits as WebDataset tar shards: shard.out=DIR "
       "shard.max_size=256MB"},
      {"mlflow-sync",
       "send to MLflow what a run logged while its server was away: kiln mlflow-sync "
       "run_dir=RUN"},
      {"mlflow-register",
       "register what kiln export wrote in MLflow's model registry: kiln mlflow-register "
       "run_dir=RUN model_dir=DIR name=NAME"},
      {"compose", "compose the config, record it in a run directory and print it"},
      {"list", "list registered components and their options: kiln list [KIND] [--markdown]"},
      {"report", "write an HTML page of runs and sweeps: kiln report PATH... [-o report.html]"},
      {"dashboard", "serve that page live while runs write: kiln dashboard PATH [--port N]"},
  };
  return *commands;
}

std::vector<std::string> KnownSubcommands(const std::string& command) {
  if (command == "tune") return {"lr_find"};
  return {};
}

std::string DefaultConfigName(const std::string& command) {
  if (command == "average" || command == "serve" || command == "tune") return command;
  if (command == "mlflow-sync") return "mlflow_sync";
  if (command == "mlflow-register") return "mlflow_register";
  return "train";
}

std::string Usage() {
  std::string out =
      "usage: kiln COMMAND [--config-path DIR] [--config-name NAME] [--config-dir DIR]\n"
      "                    [--cfg job|hydra|all] [--resolve] [--package PKG]\n"
      "                    [--info [defaults|defaults-tree|config|searchpath|provenance]]\n"
      "                    [-m|--multirun] [--dry-run] [--fail-fast] [--plugin PATH]... [--help] "
      "[overrides...]\n\ncommands:\n";
  for (const auto& [name, doc] : KnownCommands())
    absl::StrAppend(&out, "  ", name, std::string(name.size() < 10 ? 10 - name.size() : 1, ' '),
                    doc, "\n");
  out +=
      "\n`kiln COMMAND --help` lists the config groups and the composed config.\n"
      "Plugins: --plugin PATH, a `plugins: [...]` list in the primary config, or "
      "KILN_PLUGIN_PATH.\n";
  return out;
}

absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  auto fail = [](const std::string& message) { return absl::InvalidArgumentError(message); };
  static const std::vector<std::string> kFlags = {
      "--config-path", "--config-name", "--config-dir", "--cfg",     "--resolve",
      "--package",     "--info",        "--multirun",   "--dry-run", "--plugin",
      "--markdown",    "--fail-fast",   "--help",       "--apply"};
  bool apply = false;  // `kiln tune lr_find --apply`
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    // Flags take their value as the next argument or after '='.
    auto value_of = [&](const std::string& flag) -> absl::StatusOr<std::string> {
      if (a.size() > flag.size() && a[flag.size()] == '=') return a.substr(flag.size() + 1);
      if (i + 1 >= args.size() || args[i + 1].rfind("-", 0) == 0) {
        return fail(absl::StrCat(flag, " needs a value"));
      }
      return args[++i];
    };
    auto is_flag = [&](const std::string& flag) {
      return a == flag || (a.rfind(flag + "=", 0) == 0);
    };
    if (is_flag("--config-path") || (a == "-cp")) {
      auto v = a == "-cp" ? value_of("-cp") : value_of("--config-path");
      if (!v.ok()) return v.status();
      cl.config_path = *v;
    } else if (is_flag("--config-name") || a == "-cn") {
      auto v = a == "-cn" ? value_of("-cn") : value_of("--config-name");
      if (!v.ok()) return v.status();
      cl.config_name = *v;
    } else if (is_flag("--config-dir") || a == "-cd") {
      auto v = a == "-cd" ? value_of("-cd") : value_of("--config-dir");
      if (!v.ok()) return v.status();
      cl.config_dirs.push_back(*v);
    } else if (is_flag("--cfg") || a == "-c") {
      auto v = a == "-c" ? value_of("-c") : value_of("--cfg");
      if (!v.ok()) return v.status();
      if (*v != "job" && *v != "hydra" && *v != "all") {
        return fail(absl::StrCat("--cfg takes job, hydra or all, not '", *v, "'"));
      }
      cl.cfg = *v;
    } else if (is_flag("--package") || a == "-p") {
      auto v = a == "-p" ? value_of("-p") : value_of("--package");
      if (!v.ok()) return v.status();
      cl.package = *v;
    } else if (a == "--info" || a == "-i") {
      static const std::vector<std::string> kSections = {"defaults",   "defaults-tree", "config",
                                                         "searchpath", "provenance",    "all"};
      cl.info = "";
      if (i + 1 < args.size()) {
        for (const auto& s : kSections) {
          if (args[i + 1] == s) cl.info = args[++i];
        }
      }
    } else if (a.rfind("--info=", 0) == 0) {
      cl.info = a.substr(7);
    } else if (is_flag("--plugin")) {
      auto v = value_of("--plugin");
      if (!v.ok()) return v.status();
      cl.plugins.push_back(*v);
    } else if (a == "--fail-fast") {
      cl.fail_fast = true;
    } else if (a.rfind("--multirun-job=", 0) == 0) {
      int job = -1;
      if (!absl::SimpleAtoi(a.substr(15), &job) || job < 0) {
        return fail(absl::StrCat("--multirun-job takes a job number, not '", a.substr(15), "'"));
      }
      cl.multirun_job = job;
    } else if (a.rfind("--sweep-dir=", 0) == 0) {
      cl.sweep_dir = a.substr(12);
    } else if (a.rfind("--worker-of=", 0) == 0) {
      cl.worker_of = a.substr(12);
    } else if (a == "--apply") {
      apply = true;
    } else if (a == "--markdown") {
      cl.markdown = true;
    } else if (a == "--resolve") {
      cl.resolve = true;
    } else if (a == "-m" || a == "--multirun") {
      cl.multirun = true;
    } else if (a == "--dry-run") {
      cl.dry_run = true;
    } else if (a == "-h" || a == "--help") {
      cl.help = true;
    } else if (a.rfind("--", 0) == 0 && a.find('=') == std::string::npos) {
      return fail(absl::StrCat("unknown flag '", a, "'", config::DidYouMean(a, kFlags),
                               "; overrides look like key=value"));
    } else if (cl.command.empty() && a.find('=') == std::string::npos && a[0] != '~' &&
               a[0] != '+' && a[0] != '-') {
      cl.command = a;
    } else if (cl.subcommand.empty() && !KnownSubcommands(cl.command).empty() &&
               a.find('=') == std::string::npos && a[0] != '~' && a[0] != '+' && a[0] != '-') {
      cl.subcommand = a;
    } else {
      cl.overrides.push_back(a);
    }
  }
  if (!cl.command.empty()) {
    bool known = false;
    std::vector<std::string> names;
    for (const auto& [name, doc] : KnownCommands()) {
      names.push_back(name);
      known |= name == cl.command;
    }
    if (!known) {
      return fail(absl::StrCat("unknown command '", cl.command, "'",
                               config::DidYouMean(cl.command, names),
                               "; commands: ", absl::StrJoin(names, ", ")));
    }
  }
  if (std::vector<std::string> subcommands = KnownSubcommands(cl.command); !subcommands.empty()) {
    std::string usage = absl::StrCat("kiln ", cl.command, " ", absl::StrJoin(subcommands, "|"),
                                     " [--apply] [overrides...]");
    if (cl.subcommand.empty() && !cl.help)
      return fail(absl::StrCat("kiln ", cl.command, " needs a subcommand: ", usage));
    if (!cl.subcommand.empty() &&
        std::find(subcommands.begin(), subcommands.end(), cl.subcommand) == subcommands.end()) {
      return fail(absl::StrCat("unknown ", cl.command, " subcommand '", cl.subcommand, "'",
                               config::DidYouMean(cl.subcommand, subcommands), "; ", usage));
    }
    // --apply is the Hydra key tuner.SUBCOMMAND.apply (configs/tune.yaml), so sweeps and stored
    // configs carry it like any override.
    if (apply && !cl.subcommand.empty())
      cl.overrides.push_back(absl::StrCat("tuner.", cl.subcommand, ".apply=true"));
  } else if (apply) {
    return fail(absl::StrCat("--apply is a flag of kiln tune, not of kiln ",
                             cl.command.empty() ? "" : cl.command));
  }
  if (cl.info.has_value() && cl.info == "all") cl.info = "";
  return cl;
}

}  // namespace kiln::app
