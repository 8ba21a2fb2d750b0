#include "lib/sweep/trial_channel.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/config/json.h"
#include "lib/config/yaml_io.h"
#include "lib/logging/logger.h"
#include "lib/sweep/optuna/helper.h"

namespace kiln::sweep {

using config::JsonString;
using config::NodeToJson;
namespace {

std::string AnswerPath(const std::string& dir, int64_t k) {
  return absl::StrCat(dir, "/answer.", k);
}

}  // namespace

TrialChannel::TrialChannel(std::string dir, bool pruning, double answer_timeout_s)
    : dir_(std::move(dir)), pruning_(pruning), answer_timeout_s_(answer_timeout_s) {}

absl::StatusOr<bool> TrialChannel::Report(const TrialReport& report) {
  KILN_RETURN_IF_ERROR(MakeDirs(dir_));
  // JSON, which the sweeper reads as YAML (numbers it takes for strings, 1e-05 or NaN, are read
  // back with ReplyNumber).
  std::string line = absl::StrCat("{\"stage\": ", JsonString(report.stage),
                                  ", \"step\": ", report.step, ", \"metrics\": {");
  bool first = true;
  for (const auto& [name, value] : report.metrics) {
    absl::StrAppend(&line, first ? "" : ", ", JsonString(name), ": ",
                    NodeToJson(*config::Node::Float(value)));
    first = false;
  }
  line += "}}\n";
  {
    // One write per line, so the sweeper never reads half of one.
    std::ofstream out(dir_ + "/reports.jsonl", std::ios::app);
    out << line << std::flush;
    if (!out) return absl::InternalError(absl::StrCat("cannot append to ", dir_, "/reports.jsonl"));
  }
  int64_t k = reports_++;
  if (!pruning_ || report.stage != "val") return false;
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(answer_timeout_s_);
  std::string path = AnswerPath(dir_, k);
  while (::access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      Logger::Instance().Warning(absl::StrCat("no answer from the sweeper to report ", k, " in ",
                                              answer_timeout_s_, " s (", dir_,
                                              "); the trial goes on unpruned"));
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::ifstream in(path);
  std::string answer;
  in >> answer;
  return answer == "prune";
}

absl::StatusOr<std::vector<TrialReport>> ReadTrialReports(const std::string& dir) {
  std::vector<TrialReport> reports;
  std::ifstream in(dir + "/reports.jsonl");
  if (!in) return reports;
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  // A line without its newline is still being written.
  text.resize(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    KILN_ASSIGN_OR_RETURN(config::NodePtr node, config::ParseYaml(line, dir + "/reports.jsonl"));
    TrialReport r;
    if (auto stage = node->Find("stage")) r.stage = stage->as_string();
    if (auto step = node->Find("step"); step && step->kind() == config::NodeKind::kInt)
      r.step = step->as_int();
    if (auto metrics = node->Find("metrics"); metrics && metrics->is_map()) {
      for (const auto& [name, value] : metrics->entries()) {
        if (value->is_scalar() && !value->is_null()) r.metrics[name] = ReplyNumber(*value);
      }
    }
    reports.push_back(std::move(r));
  }
  return reports;
}

absl::Status AnswerTrialReport(const std::string& dir, int64_t k, bool prune) {
  return WriteFileAtomically(AnswerPath(dir, k), prune ? "prune\n" : "continue\n");
}

std::string TrialChannelOverride(const std::string& dir, bool pruning) {
  return absl::StrCat("++callbacks.optuna_trial={_target_:optuna_trial,channel:'", dir,
                      "',pruning:", pruning ? "true" : "false", "}");
}

}  // namespace kiln::sweep
