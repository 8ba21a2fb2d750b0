#include "lib/run/stored_config.h"

#include <fstream>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/config/defaults_list.h"
#include "lib/config/merge.h"
#include "lib/config/yaml_io.h"
#include "lib/logging/logger.h"

namespace kiln::run {
namespace {

using config::Node;
using config::NodePtr;
using config::Override;

std::string Parent(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string StoredConfigFile(const std::string& run_dir) { return run_dir + "/.hydra/config.yaml"; }

// The value the command line gave `key` (the last override of it), if it is a plain string.
const Override* CommandLineOverride(const config::ComposeResult& composed, const std::string& key) {
  const Override* found = nullptr;
  for (const Override& o : composed.defaults->config_overrides) {
    if (o.key_or_group == key && !o.is_delete()) found = &o;
  }
  return found;
}

std::string StringValue(const config::ComposeResult& composed, const std::string& key) {
  NodePtr node = composed.job->Find(key);
  if (node == nullptr || node->kind() != config::NodeKind::kString) return "";
  const std::string& value = node->as_string();
  return value.find("${") == std::string::npos ? value : "";
}

// RUN/.hydra/hydra.yaml, or null when the run has none (or it does not parse): read once, for
// the command that ran there and the run's group choices.
NodePtr RunHydraConfig(const std::string& run_dir) {
  auto hydra = config::LoadYamlFile(run_dir + "/.hydra/hydra.yaml");
  return hydra.ok() && *hydra != nullptr && (*hydra)->is_map() ? *hydra : nullptr;
}

// Whether the run's stored config is that of a training run: the command it recorded
// (hydra.job.name) is `train`, or it recorded none. The folder of another command's checkpoint
// (`kiln average ... out=DIR/a.ckpt` run in DIR) holds that command's config.
bool TrainedThere(const NodePtr& hydra) {
  NodePtr name = hydra == nullptr ? nullptr : config::SelectPath(hydra, {"hydra", "job", "name"});
  return name == nullptr || name->kind() != config::NodeKind::kString ||
         name->as_string() == "train";
}

// The run a checkpoint file belongs to: the folder holding it, or that folder's parent
// (RUN/checkpoints/last.ckpt), whichever has a stored config.
std::string RunOfCheckpoint(const std::string& ckpt) {
  std::string dir = Parent(ckpt);
  for (const std::string& candidate : {dir, Parent(dir)}) {
    if (IsRegularFile(StoredConfigFile(candidate))) return candidate;
  }
  return "";
}

bool IsHydraKey(const std::string& key) {
  return key == "hydra" || key.rfind("hydra.", 0) == 0 || key.rfind("hydra/", 0) == 0;
}

void ErasePath(Node& root, const std::string& dotted) {
  std::vector<std::string> path = absl::StrSplit(dotted, '.');
  Node* node = &root;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    NodePtr next = node->Find(path[i]);
    if (next == nullptr || !next->is_map()) return;
    node = next.get();
  }
  node->Erase(path.back());
}

// Puts the freshly composed node of each group the command line chose into `job` (or takes the
// node away when the group was deleted).
// A group the command line sets to the option the run chose (`experiment=spam_bow` repeated from
// the training command) is in the stored config already, with the run's changes to it.
bool RunChoseTheSame(const config::ComposeResult& composed, const NodePtr& run_choices,
                     const Override& o) {
  if (run_choices == nullptr) return false;
  NodePtr chosen = run_choices->Find(o.GroupKey());
  if (chosen == nullptr) return false;
  for (const auto& [key, option] : composed.defaults->choices) {
    if (key != o.GroupKey()) continue;
    if (!option.has_value()) return chosen->is_null();
    return chosen->kind() == config::NodeKind::kString && chosen->as_string() == *option;
  }
  return false;
}

// The run's choice of option for every config group (hydra.runtime.choices), or null.
NodePtr RunChoices(const NodePtr& hydra) {
  NodePtr choices =
      hydra == nullptr ? nullptr : config::SelectPath(hydra, {"hydra", "runtime", "choices"});
  return choices != nullptr && choices->is_map() ? choices : nullptr;
}

// Applies the command line's group overrides to `job`; returns the groups it changed.
absl::StatusOr<std::set<std::string>> ApplyGroupOverrides(const config::ComposeResult& composed,
                                                          const NodePtr& run_choices,
                                                          const std::string& run_dir, Node& job) {
  std::set<std::string> config_lines, changed;
  for (const Override& o : composed.defaults->config_overrides) config_lines.insert(o.input_line);
  for (const Override& o : composed.overrides) {
    if (config_lines.count(o.input_line) > 0 || IsHydraKey(o.key_or_group)) continue;
    if (RunChoseTheSame(composed, run_choices, o)) continue;
    changed.insert(o.GroupKey());
    std::vector<std::string> packages;
    for (const auto& item : composed.defaults->defaults) {
      if (item.override_key.has_value() && *item.override_key == o.GroupKey())
        packages.push_back(item.package);
    }
    if (packages.empty()) {
      for (const auto& item : composed.defaults->defaults) {
        if (item.config_path.rfind(o.key_or_group + "/", 0) == 0) packages.push_back(item.package);
      }
    }
    if (packages.empty()) {  // the group was deleted or set to null: its default package goes
      packages.push_back(o.package.value_or(absl::StrReplaceAll(o.key_or_group, {{"/", "."}})));
    }
    for (const std::string& package : packages) {
      if (package.empty() || package == "_global_") {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", o.input_line,
            "' changes the whole config, so it cannot apply on top of the config stored in ",
            run_dir,
            " (the run chose another); start from the defaults instead (stored_config=false) and "
            "pass ",
            "the run's overrides again"));
      }
      NodePtr fresh = config::SelectPath(composed.job, absl::StrSplit(package, '.'));
      if (fresh != nullptr) {
        config::SetPath(job, package, fresh->Clone());
      } else {
        ErasePath(job, package);
      }
    }
  }
  return changed;
}

// hydra.runtime.choices as the job is made: the run's choices, but the command's own for the
// groups the command line changed and for hydra's groups.
NodePtr Choices(const config::ComposeResult& composed, const NodePtr& run_choices,
                const std::set<std::string>& changed) {
  NodePtr choices = run_choices->Clone();
  for (const auto& [key, option] : composed.defaults->choices) {
    if (changed.count(key) == 0 && !IsHydraKey(key)) continue;
    choices->Set(key, option.has_value() ? Node::String(*option) : Node::Null());
  }
  return choices;
}

}  // namespace

absl::StatusOr<std::string> RunCheckpoint(const std::string& run_dir, const std::string& which) {
  const std::string dir = run_dir + "/checkpoints";
  if (which == "last") return dir + "/last.ckpt";
  if (which != "best") return which;
  std::string recorded;
  if (std::ifstream in(dir + "/best_model_path.txt"); in) {
    std::getline(in, recorded);
    recorded = std::string(absl::StripAsciiWhitespace(recorded));
  }
  if (recorded.empty()) {
    return absl::NotFoundError(
        absl::StrCat("ckpt_path=best: ", run_dir, " recorded no best checkpoint (", dir,
                     "/best_model_path.txt; a run without a monitored "
                     "model_checkpoint keeps none): pass ckpt_path=FILE or last"));
  }
  // Recorded as the run saw it (a path relative to where it was started, perhaps): the same
  // name in RUN/checkpoints is that file wherever RUN is now.
  std::string here = dir + "/" + recorded.substr(recorded.find_last_of('/') + 1);
  return IsRegularFile(here) ? here : recorded;
}

bool StartsFromATrainedModel(const std::string& command) {
  return command == "test" || command == "validate" || command == "predict" ||
         command == "export" || command == "serve";
}

absl::StatusOr<std::string> StartFromStoredConfig(config::ComposeResult& composed) {
  NodePtr off = composed.job->Find("stored_config");
  if (off != nullptr && off->kind() == config::NodeKind::kBool && !off->as_bool())
    return std::string();
  const Override* run_override = CommandLineOverride(composed, "run_dir");
  const Override* ckpt_override = CommandLineOverride(composed, "ckpt_path");
  std::string run_dir = run_override ? StringValue(composed, "run_dir") : "";
  std::string ckpt = ckpt_override ? StringValue(composed, "ckpt_path") : "";
  if (run_override != nullptr) {
    if (run_dir.empty())
      return absl::InvalidArgumentError("run_dir must name a run directory (run_dir=PATH)");
    while (run_dir.size() > 1 && run_dir.back() == '/') run_dir.pop_back();
    if (!IsRegularFile(StoredConfigFile(run_dir))) {
      return absl::NotFoundError(absl::StrCat("run_dir=", run_dir, ": not a kiln run directory (",
                                              StoredConfigFile(run_dir), " does not exist)"));
    }
    const std::string which = ckpt.empty() ? "last" : ckpt;
    KILN_ASSIGN_OR_RETURN(ckpt, RunCheckpoint(run_dir, which));
    if (which == "best")
      Logger::Instance().Info(
          absl::StrCat("ckpt_path=best: ", run_dir, "'s best checkpoint, ", ckpt));
  } else if (!ckpt.empty() && ckpt != "last" && ckpt != "best" && IsRegularFile(ckpt)) {
    run_dir = RunOfCheckpoint(ckpt);
  }
  if (run_dir.empty()) return std::string();
  NodePtr run_hydra = RunHydraConfig(run_dir);
  if (run_override == nullptr && !TrainedThere(run_hydra))
    return std::string();  // as outside any run

  std::string file = StoredConfigFile(run_dir);
  KILN_ASSIGN_OR_RETURN(NodePtr stored, config::LoadYamlFile(file));
  if (stored == nullptr || !stored->is_map()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": the run's stored config is not a mapping"));
  }
  NodePtr job = stored->Clone();
  job->Erase("hydra");
  // What the command itself is configured by (`serve:` of configs/serve.yaml), and top-level
  // settings that the defaults have and the run's config lacks (keys added to train.yaml since
  // the run was trained, such as export's `format`), come from the command's composition.
  for (const auto& [key, value] : composed.job->entries()) {
    if (key == "hydra" || job->Find(key) != nullptr) continue;
    if (key == "serve" || value->is_scalar() || value->is_null()) job->Set(key, value->Clone());
  }
  NodePtr run_choices = RunChoices(run_hydra);
  KILN_ASSIGN_OR_RETURN(std::set<std::string> changed,
                        ApplyGroupOverrides(composed, run_choices, run_dir, *job));
  for (const Override& o : composed.defaults->config_overrides) {
    if (o.key_or_group == "run_dir" || o.key_or_group == "ckpt_path" ||
        o.key_or_group == "stored_config" || IsHydraKey(o.key_or_group)) {
      continue;
    }
    // The run itself may have been trained with the same `+key=value`: on top of its config,
    // adding a key that is there already sets it.
    Override on_top = o;
    if (on_top.is_add()) on_top.type = config::OverrideType::kForceAdd;
    absl::Status st = config::ApplyConfigOverride(*job, on_top);
    if (!st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat(st.message(), " (on top of the config stored in ", file, ")"));
    }
  }
  job->Set("ckpt_path", Node::String(ckpt));
  job->Set("run_dir", Node::String(run_dir));
  composed.job = job;
  if (run_choices != nullptr)
    config::SetPath(*composed.hydra, "runtime.choices", Choices(composed, run_choices, changed));
  NodePtr root = Node::Map();
  for (const auto& [key, value] : job->entries()) root->Set(key, value);
  root->Set("hydra", composed.hydra);
  composed.root = root;
  Logger::Instance().Info(
      absl::StrCat("the job config is ", file, " with the command line's overrides"));
  return run_dir;
}

}  // namespace kiln::run
