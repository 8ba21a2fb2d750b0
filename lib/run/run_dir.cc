#include "lib/run/run_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/files.h"
#include "lib/config/interpolation.h"
#include "lib/config/merge.h"
#include "lib/config/secrets.h"
#include "lib/config/yaml_io.h"

namespace kiln::run {

using config::Node;
using config::NodePtr;

namespace {

absl::StatusOr<std::string> ResolveHydraString(const config::ComposeResult& composed,
                                               const std::string& key) {
  config::Interpolator interpolator(composed.root);
  auto value = interpolator.Select("hydra." + key, {"hydra"}, /*resolve=*/true);
  if (!value.ok()) return value.status();
  if (*value == nullptr || !(*value)->is_scalar() || (*value)->is_null() ||
      (*value)->is_missing()) {
    return absl::InvalidArgumentError(
        absl::StrCat("hydra.", key, " must be a path, got ",
                     *value == nullptr ? "nothing" : config::ScalarToYaml(**value)));
  }
  return config::PythonStr(**value);
}

}  // namespace

absl::StatusOr<RunDir> PlanRunDir(config::ComposeResult& composed, int job_num,
                                  const std::string& sweep_dir) {
  Node& hydra = *composed.hydra;
  if (job_num >= 0) {
    config::SetPath(hydra, "job.num", Node::Int(job_num));
    config::SetPath(hydra, "job.id", Node::String(absl::StrCat("job_id_for_", job_num)));
  } else {
    config::SetPath(hydra, "job.num", Node::Int(0));
    config::SetPath(hydra, "job.id", Node::String(absl::StrCat(::getpid())));
  }
  std::string output_dir;
  if (job_num >= 0) {
    auto subdir = ResolveHydraString(composed, "sweep.subdir");
    if (!subdir.ok()) return subdir.status();
    output_dir = absl::StrCat(sweep_dir, "/", *subdir);
  } else {
    auto dir = ResolveHydraString(composed, "run.dir");
    if (!dir.ok()) return dir.status();
    output_dir = *dir;
  }
  config::SetPath(hydra, "runtime.output_dir", Node::String(output_dir));
  RunDir run;
  run.output_dir = output_dir;
  config::Interpolator interpolator(composed.root);
  auto logging = interpolator.Select("hydra.job_logging", {"hydra"}, /*resolve=*/true);
  if (!logging.ok()) return logging.status();
  if (*logging != nullptr && (*logging)->is_map()) {
    NodePtr to_file = (*logging)->Find("to_file");
    NodePtr name = (*logging)->Find("file_name");
    if (to_file && to_file->kind() == config::NodeKind::kBool && to_file->as_bool() && name &&
        name->kind() == config::NodeKind::kString) {
      run.log_file = absl::StrCat(output_dir, "/", name->as_string());
    }
  }
  return run;
}

absl::Status WriteRunDir(const config::ComposeResult& composed, const RunDir& run) {
  if (auto st = MakeDirs(run.output_dir); !st.ok()) return st;
  std::string subdir = ".hydra";
  if (NodePtr n = composed.hydra->Find("output_subdir")) {
    subdir = n->kind() == config::NodeKind::kString ? n->as_string() : "";
  }
  if (subdir.empty()) return absl::OkStatus();
  std::string meta = absl::StrCat(run.output_dir, "/", subdir);
  if (auto st = MakeDirs(meta); !st.ok()) return st;
  // A secret option's value (serve.token) is *** in all three files.
  NodePtr hydra_file = Node::Map();
  hydra_file->Set("hydra", config::RedactHydraSecrets(*composed.hydra));
  NodePtr overrides = Node::List();
  for (const auto& o : composed.overrides) {
    if (o.key_or_group.rfind("hydra", 0) != 0)
      overrides->Append(Node::String(config::RedactOverride(o.input_line)));
  }
  for (const auto& [name, node] :
       {std::pair<const char*, NodePtr>{"config.yaml", config::RedactSecrets(*composed.job)},
        {"hydra.yaml", hydra_file},
        {"overrides.yaml", overrides}}) {
    if (auto st = WriteFileAtomically(absl::StrCat(meta, "/", name), config::ToYaml(*node));
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::run
