#include "lib/sweep/optuna/study.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/config/json.h"
#include "lib/config/yaml_io.h"
#include "lib/sweep/optuna/helper.h"

namespace kiln::sweep {
namespace {

using config::Node;
using config::NodeKind;
using config::NodePtr;

NodePtr Strings(const std::vector<std::string>& items) {
  NodePtr list = Node::List();
  for (const auto& s : items) list->Append(Node::String(s));
  return list;
}

std::vector<std::string> StringsOf(const NodePtr& node) {
  std::vector<std::string> out;
  if (node == nullptr || !node->is_list()) return out;
  for (const auto& item : node->items()) {
    out.push_back(item->kind() == NodeKind::kString ? item->as_string()
                  : item->is_scalar()               ? config::ScalarToYaml(*item)
                                                    : "");
  }
  return out;
}

std::string StringOf(const NodePtr& map, const std::string& key) {
  NodePtr v = map->Find(key);
  if (v == nullptr || !v->is_scalar() || v->is_null()) return "";
  return v->kind() == NodeKind::kString ? v->as_string() : config::ScalarToYaml(*v);
}

// The URL the study has now: a null storage follows the sweep folder if it moved.
std::string StorageUrl(const std::string& sweep_dir, const StudyRecord& record) {
  if (!record.in_sweep_dir) return record.storage;
  return absl::StrCat("sqlite:///", AbsolutePath(sweep_dir), "/optuna.db");
}

struct Cached {
  int64_t mtime_ns = 0, size = -1;
  std::vector<StudyTrial> trials;
};

}  // namespace

std::string DefaultOptunaPython() {
  const char* env = std::getenv("KILN_PYTHON");
  if (env != nullptr && *env != '\0') return env;
  if (::access(KILN_DEFAULT_PYTHON, X_OK) == 0) return KILN_DEFAULT_PYTHON;
  return "python3";
}

absl::Status WriteStudyRecord(const std::string& sweep_dir, const StudyRecord& record) {
  NodePtr n = Node::Map();
  n->Set("storage", Node::String(record.storage));
  n->Set("in_sweep_dir", Node::Bool(record.in_sweep_dir));
  n->Set("study_name", Node::String(record.study_name));
  n->Set("objectives", Strings(record.objectives));
  n->Set("directions", Strings(record.directions));
  n->Set("direction_from", Strings(record.direction_from));
  n->Set("python", Node::String(record.python));
  return WriteFileAtomically(
      sweep_dir + "/study.yaml",
      absl::StrCat("# The Optuna study of this sweep (kiln report reads its trials from it)\n",
                   config::ToYaml(*n)));
}

absl::StatusOr<StudyRecord> ReadStudyRecord(const std::string& sweep_dir) {
  std::string path = sweep_dir + "/study.yaml";
  if (!IsRegularFile(path)) return absl::NotFoundError(absl::StrCat(path, ": not there"));
  KILN_ASSIGN_OR_RETURN(NodePtr n, config::LoadYamlFile(path));
  if (!n->is_map()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a mapping"));
  StudyRecord r;
  r.storage = StringOf(n, "storage");
  NodePtr local = n->Find("in_sweep_dir");
  r.in_sweep_dir = local != nullptr && local->kind() == NodeKind::kBool && local->as_bool();
  r.study_name = StringOf(n, "study_name");
  r.objectives = StringsOf(n->Find("objectives"));
  r.directions = StringsOf(n->Find("directions"));
  r.direction_from = StringsOf(n->Find("direction_from"));
  r.python = StringOf(n, "python");
  if ((r.storage.empty() && !r.in_sweep_dir) || r.study_name.empty() || r.objectives.empty() ||
      r.directions.size() != r.objectives.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": needs storage, study_name, and as many directions as objectives"));
  }
  return r;
}

std::vector<StudyTrial> ParseStudyTrials(const NodePtr& reply, size_t objectives) {
  std::vector<StudyTrial> out;
  for (const auto& t : Field(reply, "trials").items()) {
    StudyTrial trial;
    trial.number = static_cast<int64_t>(ReplyNumber(Field(t, "number")));
    trial.state = Field(t, "state").is_scalar() ? config::ScalarToYaml(Field(t, "state")) : "";
    if (Field(t, "abandoned").kind() == NodeKind::kBool && Field(t, "abandoned").as_bool()) {
      trial.state = "FAIL(abandoned)";
    }
    const Node& values = Field(t, "values");
    for (size_t i = 0; i < objectives && values.is_list() && i < values.size(); ++i) {
      trial.values.push_back(ReplyNumber(*values.items()[i]));
    }
    if (!Field(t, "duration").is_null()) trial.seconds = ReplyNumber(Field(t, "duration"));
    const Node& params = Field(t, "params");
    if (params.is_map()) {
      for (const auto& [name, v] : params.entries()) {
        trial.params[name] = v->is_scalar() ? config::ScalarToYaml(*v) : config::NodeToJson(*v);
      }
    }
    trial.dir = Field(t, "dir").kind() == NodeKind::kString ? Field(t, "dir").as_string() : "";
    out.push_back(std::move(trial));
  }
  return out;
}

absl::StatusOr<std::vector<StudyTrial>> ReadStudyTrials(const std::string& sweep_dir,
                                                        const StudyRecord& record) {
  static std::mutex mutex;
  static std::map<std::string, Cached> cache;
  std::string url = StorageUrl(sweep_dir, record);
  std::string key = absl::StrCat(url, "\n", record.study_name);
  Cached now;
  if (absl::StartsWith(url, "sqlite:///")) {
    struct stat st;
    if (::stat(url.c_str() + 10, &st) == 0) {
      now.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
      now.size = st.st_size;
    }
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (now.size >= 0 && it != cache.end() && it->second.mtime_ns == now.mtime_ns &&
        it->second.size == now.size) {
      return it->second.trials;
    }
  }
  std::string python = record.python.empty() ? DefaultOptunaPython() : record.python;
  KILN_ASSIGN_OR_RETURN(auto helper, OptunaHelper::Start(python, "/dev/null"));
  KILN_RETURN_IF_ERROR(
      helper
          ->Call(absl::StrCat("{\"op\": \"load\", \"storage\": ", config::JsonString(url),
                              ", \"study_name\": ", config::JsonString(record.study_name), "}"))
          .status());
  KILN_ASSIGN_OR_RETURN(NodePtr reply, helper->Call("{\"op\": \"trials\"}"));
  now.trials = ParseStudyTrials(reply, record.objectives.size());
  if (now.size >= 0) {
    std::lock_guard<std::mutex> lock(mutex);
    cache[key] = now;
  }
  return now.trials;
}

}  // namespace kiln::sweep
