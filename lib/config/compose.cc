#include "lib/config/compose.h"

#include <unistd.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/config/defaults_list.h"
#include "lib/config/interpolation.h"
#include "lib/config/merge.h"
#include "lib/config/repository.h"
#include "lib/config/secrets.h"
#include "lib/config/suggest.h"

namespace kiln::config {
namespace {

bool IsHydraOverride(const Override& o) {
  return o.key_or_group == "hydra" || o.key_or_group.rfind("hydra.", 0) == 0 ||
         o.key_or_group.rfind("hydra/", 0) == 0;
}

void SetIfMissing(Node& hydra, const std::string& key, NodePtr value) {
  std::vector<std::string> path = absl::StrSplit(key, '.');
  NodePtr root(&hydra, [](Node*) {});
  NodePtr existing = SelectPath(root, path);
  if (existing == nullptr || existing->is_missing()) SetPath(hydra, key, std::move(value));
}

NodePtr StringList(const std::vector<std::string>& items) {
  NodePtr list = Node::List();
  for (const auto& s : items) list->Append(Node::String(s));
  return list;
}

std::string OverrideDirname(const std::vector<Override>& task, const Node& hydra) {
  std::string kv_sep = "=", item_sep = ",";
  std::vector<std::string> exclude;
  NodePtr root(const_cast<Node*>(&hydra), [](Node*) {});
  if (NodePtr cfg = SelectPath(root, {"job", "config", "override_dirname"})) {
    if (NodePtr n = cfg->Find("kv_sep"); n && n->kind() == NodeKind::kString)
      kv_sep = n->as_string();
    if (NodePtr n = cfg->Find("item_sep"); n && n->kind() == NodeKind::kString)
      item_sep = n->as_string();
    if (NodePtr n = cfg->Find("exclude_keys"); n && n->is_list()) {
      for (const auto& k : n->items()) {
        if (k->kind() == NodeKind::kString) exclude.push_back(k->as_string());
      }
    }
  }
  std::vector<std::string> lines;
  for (const auto& o : task) {
    if (o.is_sweep()) continue;  // a sweep has no single value; each job gets its own
    if (std::find(exclude.begin(), exclude.end(), o.key_or_group) != exclude.end()) continue;
    std::string value = !o.has_value                  ? ""
                        : IsSecretKey(o.key_or_group) ? kRedacted
                                                      : OverrideValueToString(o.value);
    lines.push_back(o.KeyElement() + kv_sep + value);
  }
  std::sort(lines.begin(), lines.end());
  return absl::StrJoin(lines, item_sep);
}

}  // namespace

void SetPath(Node& root, const std::string& dotted_key, NodePtr value) {
  std::vector<std::string> path = absl::StrSplit(dotted_key, '.');
  Node* current = &root;
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    NodePtr next = current->Find(path[i]);
    if (next == nullptr || !next->is_map()) {
      next = Node::Map();
      current->Set(path[i], next);
    }
    current = next.get();
  }
  current->Set(path.back(), std::move(value));
}

absl::StatusOr<std::vector<Override>> ParseOverrides(const std::vector<std::string>& overrides) {
  std::vector<Override> parsed;
  for (const auto& text : overrides) {
    auto o = ParseOverride(text);
    if (!o.ok()) return o.status();
    parsed.push_back(*std::move(o));
  }
  return parsed;
}

absl::StatusOr<ComposeResult> Compose(const ComposeOptions& options) {
  ConfigRepository repo(options.search_path);
  return Compose(options, repo);
}

absl::StatusOr<ComposeResult> Compose(const ComposeOptions& options, ConfigRepository& repo) {
  auto parsed = ParseOverrides(options.overrides);
  if (!parsed.ok()) return parsed.status();
  if (!options.multirun) {
    for (const auto& o : *parsed) {
      if (o.is_sweep()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Ambiguous value for argument '", o.input_line,
            "': to use it as a list use key=[value1,value2], to use it as a string quote it "
            "(key='value1,value2'), to sweep over it add --multirun (-m)"));
      }
    }
  }
  auto defaults = CreateDefaultsList(repo, options.config_name, *parsed, /*with_hydra=*/true,
                                     /*skip_missing=*/false);
  if (!defaults.ok()) return defaults.status();

  NodePtr root = Node::Map();
  for (const auto& item : defaults->defaults) {
    auto loaded = repo.Load(item.config_path);
    if (!loaded.ok()) return loaded.status();
    if (*loaded == nullptr) {
      return absl::NotFoundError(absl::StrCat("Could not load '", item.config_path, "'"));
    }
    NodePtr wrapped = WrapInPackage((*loaded)->content, item.package);
    if (wrapped->is_list()) {
      return absl::InvalidArgumentError(
          item.primary ? absl::StrCat("primary config '", item.config_path,
                                      "' must be a mapping, not a list")
                       : absl::StrCat("In '", item.config_path,
                                      "': a list cannot be merged into the config's top level (",
                                      (*loaded)->file, " is a list and its package is _global_)"));
    }
    auto st = MergeInto(*root, *wrapped);
    if (!st.ok())
      return absl::Status(st.code(), absl::StrCat("In '", item.config_path, "': ", st.message()));
  }
  for (const auto& o : defaults->config_overrides) {
    if (options.defer_missing_keys && o.type == OverrideType::kChange) {
      std::vector<std::string> path = absl::StrSplit(o.key_or_group, '.');
      if (SelectPath(root, path) == nullptr) continue;
    }
    auto st = ApplyConfigOverride(*root, o);
    if (!st.ok()) {
      // `name=option` for a group that does not exist reads like a typo of a group name.
      if (o.key_or_group.find('.') == std::string::npos && !root->Contains(o.key_or_group)) {
        auto groups = repo.Groups("");
        groups.erase(std::remove(groups.begin(), groups.end(), "hydra"), groups.end());
        if (!groups.empty()) {
          std::string hint = DidYouMean(o.key_or_group, groups);
          return absl::Status(
              st.code(),
              absl::StrCat(st.message(), hint.empty() ? "" : " Or a config group?" + hint,
                           " (config groups: ", absl::StrJoin(groups, ", "), ")"));
        }
      }
      return st;
    }
  }

  NodePtr hydra = root->Find("hydra");
  if (hydra == nullptr || !hydra->is_map()) {
    hydra = Node::Map();
    root->Set("hydra", hydra);
  }
  std::vector<Override> task, hydra_overrides;
  for (const auto& o : *parsed) (IsHydraOverride(o) ? hydra_overrides : task).push_back(o);
  std::vector<std::string> task_text, hydra_text;
  for (const auto& o : task) task_text.push_back(o.input_line);
  for (const auto& o : hydra_overrides) hydra_text.push_back(o.input_line);
  SetPath(*hydra, "overrides.task", StringList(task_text));
  SetPath(*hydra, "overrides.hydra", StringList(hydra_text));
  NodePtr configured_mode = hydra->Find("mode");
  std::string mode_set = configured_mode != nullptr && configured_mode->kind() == NodeKind::kString
                             ? configured_mode->as_string()
                             : "";
  SetPath(*hydra, "mode", Node::String(options.multirun ? "MULTIRUN" : "RUN"));
  SetIfMissing(*hydra, "job.name", Node::String(options.job_name));
  SetPath(*hydra, "job.config_name",
          options.config_name.empty() ? Node::Null() : Node::String(options.config_name));
  SetPath(*hydra, "job.override_dirname", Node::String(OverrideDirname(task, *hydra)));
  char cwd[4096];
  SetPath(*hydra, "runtime.cwd", Node::String(getcwd(cwd, sizeof(cwd)) ? cwd : "."));
  SetPath(*hydra, "runtime.version", Node::String(options.version));
  NodePtr sources = Node::List();
  for (const auto& e : repo.search_path()) {
    NodePtr s = Node::Map();
    bool builtin = e.provider == "kiln";
    s->Set("path", Node::String(builtin ? "kiln.hydra" : e.path));
    s->Set("schema", Node::String(builtin ? "pkg" : "file"));
    s->Set("provider", Node::String(e.provider));
    sources->Append(s);
  }
  SetPath(*hydra, "runtime.config_sources", sources);
  NodePtr choices = Node::Map();
  for (const auto& [key, value] : defaults->choices) {
    choices->Set(key, value.has_value() ? Node::String(*value) : Node::Null());
  }
  SetPath(*hydra, "runtime.choices", choices);

  if (!options.multirun) {
    // Where this run would write, so `${hydra:runtime.output_dir}` resolves before the run starts.
    NodePtr output_dir = SelectPath(hydra, {"runtime", "output_dir"});
    if (output_dir == nullptr || output_dir->is_missing()) {
      Interpolator interpolator(root);
      auto run_dir = interpolator.Select("hydra.run.dir", {"hydra"}, /*resolve=*/true);
      if (run_dir.ok() && *run_dir != nullptr && (*run_dir)->kind() == NodeKind::kString) {
        SetPath(*hydra, "runtime.output_dir", *run_dir);
      }
    }
  }

  ComposeResult result;
  result.root = root;
  result.hydra = hydra;
  result.job = Node::Map();
  for (const auto& [k, v] : root->entries()) {
    if (k != "hydra") result.job->Set(k, v);
  }
  result.defaults = std::make_shared<const DefaultsList>(*std::move(defaults));
  result.overrides = *std::move(parsed);
  result.configured_mode = mode_set;
  return result;
}

absl::StatusOr<NodePtr> ResolveJob(const ComposeResult& result) {
  Interpolator interpolator(result.job);
  interpolator.set_hydra_root(result.root);
  return interpolator.ResolveAll();
}

absl::StatusOr<NodePtr> ResolveHydra(const ComposeResult& result) {
  Interpolator interpolator(result.root);
  return interpolator.Resolve(result.hydra, {"hydra"});
}

}  // namespace kiln::config
