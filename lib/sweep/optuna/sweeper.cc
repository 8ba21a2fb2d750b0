// `hydra/sweeper=optuna`: hyperparameter search on Optuna, with hydra-optuna-sweeper 1.2's config
// schema (sampler, direction, study_name, storage, n_trials, n_jobs, max_failure_rate, params)
// plus kiln's objective, pruner and python. Optuna owns the study (through the helper process of
// optuna_helper.h); this file turns the search space into Optuna distributions, starts each
// trial as a launcher slot frees, relays the trials' validation reports to the pruner, tells
// Optuna how each trial ended, and writes the results.
#include "lib/sweep/sweeper.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/base/csv.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/config/json.h"
#include "lib/config/merge.h"
#include "lib/config/override.h"
#include "lib/config/sweep.h"
#include "lib/config/yaml_io.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/sweep/launcher.h"
#include "lib/sweep/optuna/helper.h"
#include "lib/sweep/optuna/study.h"
#include "lib/sweep/trial_channel.h"

namespace kiln::sweep {
namespace {

using config::JsonString;
using config::Node;
using config::NodeKind;
using config::NodePtr;
using config::NodeToJson;

struct OptunaOptions {
  NodePtr sampler;
  NodePtr pruner;
  NodePtr direction;  // null: the mode of the callback that monitors the objective, else minimize
  std::optional<std::string> storage;
  std::optional<std::string> study_name;
  int64_t n_trials = 20;
  int64_t n_jobs = 2;
  double max_failure_rate = 0.0;
  NodePtr search_space;
  NodePtr params;
  std::optional<std::string> custom_search_space;
  NodePtr objective;
  std::string objective_value = "best";
  std::optional<std::string> python;  // null: kiln's Python (see DefaultPython)
};

// Optuna's classes by kiln's short names; `_target_` may also name the class itself
// (optuna.samplers.TPESampler), as Hydra's configs do.
const std::vector<std::pair<std::string, std::string>> kSamplers = {
    {"tpe", "TPESampler"},       {"random", "RandomSampler"}, {"cmaes", "CmaEsSampler"},
    {"nsgaii", "NSGAIISampler"}, {"grid", "GridSampler"},     {"qmc", "QMCSampler"}};
const std::vector<std::pair<std::string, std::string>> kPruners = {
    {"median", "MedianPruner"},
    {"percentile", "PercentilePruner"},
    {"hyperband", "HyperbandPruner"},
    {"successive_halving", "SuccessiveHalvingPruner"},
    {"nop", "NopPruner"}};

// {"class": ..., "kwargs": {...}} for the helper, from a sampler or pruner node.
absl::StatusOr<std::string> OptunaClass(
    const NodePtr& node, const std::string& what, const std::string& module,
    const std::vector<std::pair<std::string, std::string>>& known, std::string* short_name) {
  std::vector<std::string> names;
  for (const auto& [name, cls] : known) names.push_back(name);
  std::string target = "nop";
  if (node != nullptr && node->kind() == NodeKind::kString) target = node->as_string();
  if (node != nullptr && node->is_map()) {
    NodePtr t = node->Find("_target_");
    if (t == nullptr || t->kind() != NodeKind::kString) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hydra.sweeper.", what, " needs a _target_ (one of ", absl::StrJoin(names, ", "), ")"));
    }
    target = t->as_string();
  } else if (node != nullptr && !node->is_null() && node->kind() != NodeKind::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat("hydra.sweeper.", what, " must be a mapping with _target_"));
  } else if (node == nullptr || node->is_null()) {
    if (what == "sampler") target = "tpe";
  }
  for (const auto& [name, cls] : known) {
    if (target == name || target == module + "." + cls || target == cls) {
      *short_name = name;
      std::string kwargs = "{";
      if (node != nullptr && node->is_map()) {
        bool first = true;
        for (const auto& [k, v] : node->entries()) {
          if (k == "_target_") continue;
          absl::StrAppend(&kwargs, first ? "" : ", ", JsonString(k), ": ", NodeToJson(*v));
          first = false;
        }
      }
      return absl::StrCat("{\"class\": ", JsonString(cls), ", \"kwargs\": ", kwargs, "}}");
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown hydra.sweeper.", what, " '", target,
                                                 "' (known: ", absl::StrJoin(names, ", "), ", or ",
                                                 module, ".<Class>)"));
}

// One dimension of the search space.
struct Param {
  std::string key;           // as the override writes it: "optimizer.lr", "model", "+x"
  std::string name;          // Optuna's parameter name (the key without + or ++)
  std::string distribution;  // JSON for the helper
  std::vector<std::string> choice_texts;  // a categorical's choices, as override text
  std::string describe;                   // for --dry-run and the log
};

// The shortest text that reads back as the same number (1e-05, not 1.0000000000000001e-05).
std::string Number(const Node& n) {
  if (n.kind() == NodeKind::kInt) return n.int_text();
  for (int digits = 6; digits < 17; ++digits) {
    std::string text = absl::StrFormat("%.*g", digits, n.as_float());
    if (std::strtod(text.c_str(), nullptr) == n.as_float()) return text;
  }
  return absl::StrFormat("%.17g", n.as_float());
}
double AsDouble(const Node& n) { return config::NumberValue(n); }

// Hydra's optuna sweeper's mapping: choice -> categorical; range -> int (or float) with a step;
// interval -> float, int(interval) -> int, tag(log, ...) -> log scale.
absl::StatusOr<Param> MakeParam(const config::Override& o, const Node& cfg) {
  Param p;
  p.key = o.KeyElement();
  p.name = o.key_or_group;
  const config::Sweep& s = o.sweep;
  bool log = std::find(s.tags.begin(), s.tags.end(), "log") != s.tags.end();
  switch (s.kind) {
    case config::SweepKind::kChoice: {
      std::string choices;
      for (const auto& c : s.choices) {
        p.choice_texts.push_back(config::OverrideValueToString(c));
        absl::StrAppend(
            &choices, choices.empty() ? "" : ", ",
            c.node->is_scalar() ? NodeToJson(*c.node) : JsonString(p.choice_texts.back()));
      }
      p.distribution = absl::StrCat("{\"type\": \"categorical\", \"choices\": [", choices, "]}");
      p.describe = absl::StrCat(p.name, " in {", absl::StrJoin(p.choice_texts, ", "), "}");
      return p;
    }
    case config::SweepKind::kRange: {
      const Node &a = *s.range_start, &b = *s.range_stop, &st = *s.range_step;
      bool ints =
          a.kind() == NodeKind::kInt && b.kind() == NodeKind::kInt && st.kind() == NodeKind::kInt;
      double step = AsDouble(st);
      if (step <= 0 || AsDouble(b) <= AsDouble(a)) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", o.input_line, "': the optuna sweeper needs an increasing range"));
      }
      // range() stops before its end, as the basic sweeper runs it.
      int64_t n = static_cast<int64_t>(std::ceil((AsDouble(b) - AsDouble(a)) / step - 1e-9)) - 1;
      if (ints) {
        int64_t high = a.as_int() + n * st.as_int();
        p.distribution = absl::StrCat("{\"type\": \"int\", \"low\": ", a.as_int(),
                                      ", \"high\": ", high, ", \"step\": ", st.as_int(), "}");
        p.describe =
            absl::StrCat(p.name, " in range(", a.as_int(), ", ", high + 1, ", ", st.as_int(), ")");
      } else {
        double high = AsDouble(a) + static_cast<double>(n) * step;
        p.distribution = absl::StrFormat(
            "{\"type\": \"float\", \"low\": %.17g, \"high\": %.17g, \"step\": %.17g}", AsDouble(a),
            high, step);
        p.describe = absl::StrCat(p.name, " in ", o.input_line.substr(o.input_line.find('=') + 1));
      }
      return p;
    }
    case config::SweepKind::kInterval: {
      // The key must hold a number (or not exist yet).
      NodePtr current =
          config::SelectPath(std::make_shared<Node>(cfg), absl::StrSplit(p.name, '.'));
      if (current != nullptr && current->kind() != NodeKind::kInt &&
          current->kind() != NodeKind::kFloat && !current->is_null() &&
          !current->is_interpolation()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", o.input_line, "': interval() needs a numeric key, but ", p.name, " is ",
            current->is_scalar() ? absl::StrCat("'", config::ScalarToYaml(*current), "'")
                                 : "a config group or mapping",
            "; use choice(...) for other values"));
      }
      const Node &a = *s.interval_low, &b = *s.interval_high;
      bool ints = a.kind() == NodeKind::kInt && b.kind() == NodeKind::kInt;
      if (AsDouble(b) <= AsDouble(a) || (log && AsDouble(a) <= 0)) {
        return absl::InvalidArgumentError(absl::StrCat("'", o.input_line,
                                                       "': interval(a, b) needs a < b",
                                                       log ? " and a > 0 on a log scale" : ""));
      }
      p.distribution =
          absl::StrCat("{\"type\": \"", ints ? "int" : "float", "\", \"low\": ", Number(a),
                       ", \"high\": ", Number(b), ", \"log\": ", log ? "true" : "false", "}");
      p.describe = absl::StrCat(p.name, " in ", ints ? "int " : "", log ? "log-" : "", "interval(",
                                Number(a), ", ", Number(b), ")");
      return p;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", o.input_line,
                       "': the optuna sweeper takes choice(), range() and interval() (glob: list "
                       "the options with choice)"));
  }
}

// A trial in flight.
struct Running {
  std::string channel;
  std::vector<std::string> params;  // "key=value", for the log and the summary
  std::chrono::steady_clock::time_point start;
  int64_t answered = 0;  // reports answered so far
  bool pruned = false;
  int64_t pruned_step = -1;
};

class OptunaSweeper : public Sweeper {
 public:
  explicit OptunaSweeper(OptunaOptions o) : o_(std::move(o)) {}

  absl::Status Sweep(SweepSession& session) override {
    KILN_RETURN_IF_ERROR(Plan(session));
    if (session.dry_run()) {
      LogGoal();
      session.Print(absl::StrCat("optuna: ", o_.n_trials, " trials, sampler ", sampler_name_,
                                 ", pruner ", pruner_name_, ", ", Goal(), "\n"));
      for (const auto& p : space_) session.Print(absl::StrCat("  ", p.describe, "\n"));
      for (const auto& f : fixed_) session.Print(absl::StrCat("  ", f, "\n"));
      return absl::OkStatus();
    }
    const std::string& dir = session.sweep_dir();
    KILN_RETURN_IF_ERROR(MakeDirs(dir + "/.optuna"));
    std::string python = o_.python.value_or(DefaultOptunaPython());
    KILN_ASSIGN_OR_RETURN(helper_, OptunaHelper::Start(python, dir + "/.optuna/helper.log"));
    std::string storage =
        o_.storage.value_or(absl::StrCat("sqlite:///", AbsolutePath(dir), "/optuna.db"));
    KILN_ASSIGN_OR_RETURN(NodePtr opened, Call(OpenRequest(storage)));
    LogGoal();  // the sweep's first line, once the study is open (bad input is one line, this one
                // not)
    KILN_RETURN_IF_ERROR(
        WriteStudyRecord(dir, {storage, !o_.storage.has_value(), study_name_, objectives_,
                               directions_, direction_from_, o_.python.value_or("")}));
    Logger::Instance().Info(
        absl::StrCat("optuna ", helper_->version(), ": study '", study_name_, "' in ", storage,
                     " (", static_cast<int64_t>(ReplyNumber(Field(opened, "counted"))), " of ",
                     o_.n_trials, " trials done or running); sampler ", sampler_name_, SeedNote(),
                     ", pruner ", pruner_name_));
    if (NodePtr marked = opened->Find("marked_failed"); marked && marked->size() > 0) {
      std::vector<std::string> numbers;
      for (const auto& n : marked->items()) numbers.push_back(config::ScalarToYaml(*n));
      Logger::Instance().Info(absl::StrCat("marked as FAIL the trials a dead sweep left RUNNING: ",
                                           absl::StrJoin(numbers, ", ")));
    }
    absl::Status status = RunTrials(session);
    absl::Status results = WriteResults(session);
    if (!status.ok()) return status;
    return results.ok() ? failure_ : results;
  }

 private:
  // Everything decided before Python starts: bad input is refused here, and nothing is written.
  absl::Status Plan(SweepSession& session) {
    if (o_.custom_search_space.has_value()) {
      return absl::InvalidArgumentError(
          "hydra.sweeper.custom_search_space names a Python function; kiln's optuna "
          "sweeper takes the search space from hydra.sweeper.params only");
    }
    if (o_.search_space != nullptr && !o_.search_space->is_null()) {
      return absl::InvalidArgumentError(
          "hydra.sweeper.search_space is Hydra's deprecated key; use hydra.sweeper.params");
    }
    if (!session.dry_run() && session.slots() == 0)
      return absl::FailedPreconditionError(kCannotStartOneAtATime);
    KILN_ASSIGN_OR_RETURN(sampler_json_, OptunaClass(o_.sampler, "sampler", "optuna.samplers",
                                                     kSamplers, &sampler_name_));
    KILN_ASSIGN_OR_RETURN(
        pruner_json_, OptunaClass(o_.pruner, "pruner", "optuna.pruners", kPruners, &pruner_name_));
    KILN_RETURN_IF_ERROR(PlanObjectives(session.config()));
    KILN_RETURN_IF_ERROR(CheckStorage());
    study_name_ = o_.study_name.value_or("");
    if (study_name_.empty()) {
      NodePtr job_name =
          config::SelectPath(std::make_shared<Node>(session.config()), {"hydra", "job", "name"});
      study_name_ =
          job_name && job_name->kind() == NodeKind::kString ? job_name->as_string() : "kiln";
    }
    return PlanSearchSpace(session);
  }

  // hydra.sweeper.objective and .direction: as many directions as metrics. A null objective is the
  // model_checkpoint callback's monitor; a null direction follows the mode of the callback that
  // monitors the metric (else minimize, Hydra's default). A direction that contradicts that mode is
  // kept, with a warning.
  absl::Status PlanObjectives(const Node& cfg) {
    std::map<std::string, Monitor> monitored = MonitoredModes(cfg);
    if (o_.objective == nullptr || o_.objective->is_null()) {
      std::string monitor = CheckpointMonitor(cfg);
      if (monitor.empty()) {
        return absl::InvalidArgumentError(
            "hydra.sweeper.objective is not set and the config has no model_checkpoint "
            "callback whose monitor it could be; set hydra.sweeper.objective=val/acc "
            "(for example)");
      }
      objectives_.push_back(monitor);
    } else {
      std::vector<NodePtr> named =
          o_.objective->is_list() ? o_.objective->items() : std::vector<NodePtr>{o_.objective};
      for (const auto& m : named) {
        if (!m->is_scalar())
          return absl::InvalidArgumentError(
              "hydra.sweeper.objective names metrics: a name or a list of names");
        objectives_.push_back(config::ScalarToYaml(*m));
      }
    }
    // `objective: ${optimized_metric}` (the template's way) names a key of the job's config.
    for (auto& m : objectives_) {
      if (absl::StartsWith(m, "${") && absl::EndsWith(m, "}")) {
        NodePtr v = config::SelectPath(std::make_shared<Node>(cfg),
                                       absl::StrSplit(m.substr(2, m.size() - 3), '.'));
        if (v != nullptr && v->kind() == NodeKind::kString) m = v->as_string();
      }
    }
    if (o_.direction == nullptr || o_.direction->is_null()) {
      for (const auto& m : objectives_) {
        auto it = monitored.find(m);
        if (it != monitored.end()) {
          directions_.push_back(it->second.mode == "max" ? "maximize" : "minimize");
          direction_from_.push_back(absl::StrCat("from ", it->second.key, "=", it->second.mode));
        } else {
          directions_.push_back("minimize");
          direction_from_.push_back(
              "hydra.sweeper.direction's default: no callback monitors it with a mode");
        }
      }
    } else {
      std::vector<NodePtr> given =
          o_.direction->is_list() ? o_.direction->items() : std::vector<NodePtr>{o_.direction};
      for (const auto& d : given) {
        directions_.push_back(d->is_scalar() ? config::ScalarToYaml(*d) : "?");
        direction_from_.push_back("hydra.sweeper.direction");
        if (directions_.back() != "minimize" && directions_.back() != "maximize") {
          return absl::InvalidArgumentError(
              absl::StrCat("hydra.sweeper.direction must be minimize or maximize (or a "
                           "list of them), got '",
                           directions_.back(), "'"));
        }
      }
    }
    if (objectives_.size() != directions_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("hydra.sweeper.objective names ", objectives_.size(),
                       " metrics but hydra.sweeper.direction has ", directions_.size()));
    }
    for (size_t i = 0; i < objectives_.size(); ++i) {
      auto it = monitored.find(objectives_[i]);
      if (it == monitored.end() || (it->second.mode == "max") == (directions_[i] == "maximize"))
        continue;
      contradictions_.push_back(absl::StrCat("hydra.sweeper.direction=", directions_[i],
                                             " contradicts ", it->second.key, "=", it->second.mode,
                                             " for ", objectives_[i],
                                             ": the study seeks the values that callback ranks "
                                             "worst (leave hydra.sweeper.direction null to "
                                             "follow the callback)"));
    }
    if (directions_.size() > 1 && pruner_name_ != "nop") {
      return absl::InvalidArgumentError(
          "Optuna prunes single-objective studies only; use hydra.sweeper.pruner=null "
          "with several directions");
    }
    return absl::OkStatus();
  }

  void LogGoal() const {
    Logger::Instance().Info(Goal());
    for (const auto& w : contradictions_) Logger::Instance().Warning(w);
  }

  // "maximizing val/acc (from callbacks.model_checkpoint.mode=max)", for the log and --dry-run.
  std::string Goal() const {
    std::vector<std::string> parts;
    for (size_t i = 0; i < objectives_.size(); ++i) {
      parts.push_back(absl::StrCat(directions_[i] == "maximize" ? "maximizing " : "minimizing ",
                                   objectives_[i], " (", direction_from_[i], ")"));
    }
    return absl::StrJoin(parts, " and ");
  }

  // How the sampler is seeded, for the log: a seed is mixed with each trial's number (the helper's
  // PerTrialSeed), so processes sharing the study draw different parameters.
  std::string SeedNote() const {
    NodePtr seed =
        o_.sampler != nullptr && o_.sampler->is_map() ? o_.sampler->Find("seed") : nullptr;
    if (seed == nullptr || seed->is_null() || !seed->is_scalar()) return " (unseeded)";
    if (sampler_name_ == "qmc") return absl::StrCat(" (seed ", config::ScalarToYaml(*seed), ")");
    return absl::StrCat(" (seed ", config::ScalarToYaml(*seed), " mixed with each trial's number)");
  }

  // A callback that ranks by a metric: its kind, its mode's key ("callbacks.NAME.mode"), the metric
  // and the mode (a missing mode is the callbacks' default, min).
  struct Monitor {
    std::string kind, key, metric, mode;
  };

  // The config's model_checkpoint callbacks that monitor a metric, then its early_stopping ones.
  static std::vector<Monitor> Monitors(const Node& cfg) {
    std::vector<Monitor> out;
    NodePtr callbacks = cfg.Find("callbacks");
    if (callbacks == nullptr || !callbacks->is_map()) return out;
    for (const char* kind : {"model_checkpoint", "early_stopping"}) {
      for (const auto& [name, c] : callbacks->entries()) {
        NodePtr target = c->is_map() ? c->Find("_target_") : nullptr;
        NodePtr monitor = c->is_map() ? c->Find("monitor") : nullptr;
        if (!target || target->kind() != NodeKind::kString || target->as_string() != kind ||
            !monitor || monitor->kind() != NodeKind::kString || monitor->as_string().empty()) {
          continue;
        }
        NodePtr mode = c->Find("mode");
        out.push_back({kind, absl::StrCat("callbacks.", name, ".mode"), monitor->as_string(),
                       mode && mode->kind() == NodeKind::kString ? mode->as_string() : "min"});
      }
    }
    return out;
  }

  // Each monitored metric's first callback (model_checkpoint's before early_stopping's).
  static std::map<std::string, Monitor> MonitoredModes(const Node& cfg) {
    std::map<std::string, Monitor> out;
    for (auto& m : Monitors(cfg)) out.emplace(m.metric, m);
    return out;
  }

  // The monitor of the config's model_checkpoint callback ("" without one).
  static std::string CheckpointMonitor(const Node& cfg) {
    for (const auto& m : Monitors(cfg)) {
      if (m.kind == "model_checkpoint") return m.metric;
    }
    return "";
  }

  // A storage URL must name a database SQLAlchemy knows; the helper finds what else is wrong.
  absl::Status CheckStorage() const {
    if (!o_.storage.has_value()) return absl::OkStatus();
    static const char* kDialects[] = {"sqlite", "postgresql", "mysql", "oracle", "mssql"};
    std::string scheme = o_.storage->substr(0, o_.storage->find("://"));
    std::string dialect = scheme.substr(0, scheme.find('+'));
    bool known = o_.storage->find("://") != std::string::npos &&
                 std::any_of(std::begin(kDialects), std::end(kDialects),
                             [&](const char* d) { return dialect == d; });
    if (known) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("hydra.sweeper.storage '", *o_.storage,
                     "' is not a database URL (sqlite:///PATH, postgresql://..., "
                     "mysql://...; null: a SQLite file in the sweep folder)"));
  }

  // The search space: hydra.sweeper.params, then the command line (a later override of a key
  // replaces an earlier one, as the basic sweeper merges them); plain values fix a key in every
  // trial.
  absl::Status PlanSearchSpace(SweepSession& session) {
    KILN_ASSIGN_OR_RETURN(auto params, config::ParseSweepParams(o_.params));
    for (const auto& o : config::MergeSweepOverrides(params, session.arguments())) {
      if (!o.is_sweep()) {
        fixed_.push_back(o.input_line);
        continue;
      }
      KILN_ASSIGN_OR_RETURN(Param p, MakeParam(o, session.config()));
      space_.push_back(std::move(p));
    }
    if (space_.empty()) {
      return absl::InvalidArgumentError(
          "the optuna sweeper has no search space: give hydra.sweeper.params or sweeps "
          "on the command line, e.g. 'optimizer.lr=tag(log,interval(1e-4,1e-1))'");
    }
    return absl::OkStatus();
  }

  std::string OpenRequest(const std::string& storage) const {
    std::string space = "{";
    for (size_t i = 0; i < space_.size(); ++i) {
      absl::StrAppend(&space, i ? ", " : "", JsonString(space_[i].name), ": ",
                      space_[i].distribution);
    }
    space += "}";
    std::vector<std::string> dirs;
    for (const auto& d : directions_) dirs.push_back(JsonString(d));
    return absl::StrCat("{\"op\": \"open\", \"storage\": ", JsonString(storage),
                        ", \"study_name\": ", JsonString(study_name_), ", \"directions\": [",
                        absl::StrJoin(dirs, ", "), "], \"sampler\": ", sampler_json_,
                        ", \"pruner\": ", pruner_json_, ", \"space\": ", space,
                        ", \"n_trials\": ", o_.n_trials, "}");
  }

  absl::StatusOr<NodePtr> Call(const std::string& request) {
    std::lock_guard<std::mutex> lock(helper_mutex_);
    return helper_->Call(request);
  }

  absl::Status RunTrials(SweepSession& session) {
    int slots = session.slots();
    if (o_.n_jobs > 0) slots = std::min<int>(slots, static_cast<int>(o_.n_jobs));
    if (o_.n_jobs > slots) {
      Logger::Instance().Info(absl::StrCat("hydra.sweeper.n_jobs=", o_.n_jobs,
                                           " but the launcher runs ", slots,
                                           " job(s) at a time (hydra/launcher=local runs more)"));
    }
    std::atomic<bool> relaying{pruner_name_ != "nop"};
    std::thread relay;
    if (relaying) relay = std::thread([&] { Relay(relaying); });
    absl::Status status = Loop(session, slots);
    relaying = false;
    if (relay.joinable()) relay.join();
    return status;
  }

  // Starts trials as slots free until the study is full. After an error (the helper died, a
  // trial lacks the objective) it starts no more, waits for the running ones, and returns it.
  absl::Status Loop(SweepSession& session, int slots) {
    bool full = false;
    absl::Status result;
    while (true) {
      while (!full && result.ok() && static_cast<int>(NumRunning()) < slots) {
        absl::StatusOr<bool> started = StartNextTrial(session);
        if (!started.ok()) result = started.status();
        full = started.ok() && !*started;
      }
      if (NumRunning() == 0) break;
      KILN_ASSIGN_OR_RETURN(JobResult done, session.WaitAny());
      absl::Status told = Finish(done);
      if (result.ok()) result = told;
      // --fail-fast stops at a failed trial; a pruned one ended as the study asked.
      if (!done.status.ok() && done.exit_code != kExitTrialPruned && session.fail_fast())
        full = true;
    }
    return result;
  }

  // Asks Optuna for a trial and starts it; false when the study has its n_trials.
  absl::StatusOr<bool> StartNextTrial(SweepSession& session) {
    auto t0 = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(NodePtr asked, Call("{\"op\": \"ask\"}"));
    ask_tell_seconds_ += Since(t0);
    if (asked->Find("full") != nullptr) return false;
    size_t number = static_cast<size_t>(ReplyNumber(Field(asked, "number")));
    Running trial;
    trial.channel = absl::StrCat(AbsolutePath(session.sweep_dir()), "/.optuna/", number);
    absl::StatusOr<std::vector<std::string>> overrides = TrialOverrides(asked, trial);
    if (!overrides.ok()) {
      (void)Tell(number, "FAIL", {}, "", -1);
      return overrides.status();
    }
    trial.start = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(running_mutex_);
      running_[number] = trial;
    }
    // A launcher that runs jobs in this process runs the trial here, while Relay answers it.
    if (absl::Status st = session.Start(number, *overrides); !st.ok()) {
      {
        std::lock_guard<std::mutex> lock(running_mutex_);
        running_.erase(number);
      }
      (void)Tell(number, "FAIL", {}, "", -1);
      return st;
    }
    return true;
  }

  // A trial's overrides: the fixed ones, its parameters (recorded in `trial`) and its channel.
  absl::StatusOr<std::vector<std::string>> TrialOverrides(const NodePtr& asked,
                                                          Running& trial) const {
    const std::vector<NodePtr>& values = Field(asked, "params").items();
    if (values.size() != space_.size()) {
      return absl::InternalError(absl::StrCat("the Optuna helper asked for ", values.size(),
                                              " parameters, not ", space_.size()));
    }
    std::vector<std::string> overrides = fixed_;
    for (size_t i = 0; i < values.size(); ++i) {
      const Param& param = space_[i];
      NodePtr index = values[i]->Find("index");
      std::string value = Field(values[i], "text").as_string();
      if (index != nullptr && !index->is_null()) {
        if (index->as_int() < 0 ||
            static_cast<size_t>(index->as_int()) >= param.choice_texts.size()) {
          return absl::InternalError(absl::StrCat("the Optuna helper chose choice ",
                                                  index->as_int(), " of ", param.name,
                                                  ", which has ", param.choice_texts.size()));
        }
        value = param.choice_texts[static_cast<size_t>(index->as_int())];
      }
      overrides.push_back(absl::StrCat(param.key, "=", value));
      trial.params.push_back(overrides.back());
    }
    overrides.push_back(TrialChannelOverride(trial.channel, pruner_name_ != "nop"));
    return overrides;
  }

  size_t NumRunning() {
    std::lock_guard<std::mutex> lock(running_mutex_);
    return running_.size();
  }

  static double Since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // Relays the running trials' validation reports to the study's pruner and answers them.
  void Relay(const std::atomic<bool>& relaying) {
    while (relaying) {
      std::map<size_t, Running> snapshot;
      {
        std::lock_guard<std::mutex> lock(running_mutex_);
        snapshot = running_;
      }
      for (auto& [number, trial] : snapshot) {
        auto reports = ReadTrialReports(trial.channel);
        if (!reports.ok()) continue;
        for (int64_t k = trial.answered; k < static_cast<int64_t>(reports->size()); ++k) {
          const TrialReport& r = (*reports)[static_cast<size_t>(k)];
          bool prune = false;
          auto it = r.metrics.find(objectives_[0]);
          if (r.stage == "val" && it != r.metrics.end() && !trial.pruned) {
            auto reported = Call(
                absl::StrCat("{\"op\": \"report\", \"number\": ", number, ", \"step\": ", r.step,
                             ", \"value\": ", NodeToJson(*Node::Float(it->second)), "}"));
            if (reported.ok()) {
              auto answer =
                  Call(absl::StrCat("{\"op\": \"should_prune\", \"number\": ", number, "}"));
              prune = answer.ok() && Field(*answer, "prune").as_bool();
            }
          }
          if (r.stage == "val") (void)AnswerTrialReport(trial.channel, k, prune);
          std::lock_guard<std::mutex> lock(running_mutex_);
          auto live = running_.find(number);
          if (live == running_.end()) break;
          live->second.answered = k + 1;
          if (prune) {
            live->second.pruned = true;
            live->second.pruned_step = r.step;
          }
          trial = live->second;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Tells Optuna how a trial ended: PRUNED (the pruner stopped it), FAIL (its job failed, or its
  // objective is NaN), or COMPLETE with the objective's best or last value.
  absl::Status Finish(const JobResult& done) {
    Running trial;
    {
      std::lock_guard<std::mutex> lock(running_mutex_);
      trial = running_[done.index];
      running_.erase(done.index);
    }
    double seconds = Since(trial.start);
    std::string params = absl::StrJoin(trial.params, " ");
    if (trial.pruned) {
      Logger::Instance().Info(absl::StrFormat("trial %d PRUNED at step %d after %.1f s (%s)",
                                              done.index, trial.pruned_step, seconds, params));
      return Tell(done.index, "PRUNED", {}, done.dir, done.exit_code);
    }
    if (!done.status.ok()) {
      Logger::Instance().Info(absl::StrFormat("trial %d FAIL after %.1f s (%s): %s", done.index,
                                              seconds, params, done.status.message()));
      return Tell(done.index, "FAIL", {}, done.dir, done.exit_code);
    }
    KILN_ASSIGN_OR_RETURN(auto reports, ReadTrialReports(trial.channel));
    std::vector<double> values;
    for (size_t i = 0; i < objectives_.size(); ++i) {
      std::vector<double> series;
      std::set<std::string> logged;
      for (const auto& r : reports) {
        for (const auto& [name, v] : r.metrics) logged.insert(name);
        if (auto it = r.metrics.find(objectives_[i]); it != r.metrics.end())
          series.push_back(it->second);
      }
      if (series.empty()) {
        (void)Tell(done.index, "FAIL", {}, done.dir, done.exit_code);
        return absl::InvalidArgumentError(absl::StrCat(
            "hydra.sweeper.objective: trial ", done.index, " logged no metric '", objectives_[i],
            "'; it logged: ",
            logged.empty()
                ? "nothing (a trial reports through the optuna_trial callback of `kiln train`)"
                : absl::StrJoin(logged, ", ")));
      }
      bool maximize = directions_[i] == "maximize";
      double v = series.back();
      if (o_.objective_value == "best") {
        for (double s : series) {
          if (std::isnan(s)) continue;
          if (std::isnan(v) || (maximize ? s > v : s < v)) v = s;
        }
      }
      values.push_back(v);
    }
    std::vector<std::string> shown;
    for (size_t i = 0; i < values.size(); ++i)
      shown.push_back(absl::StrFormat("%s=%.6g", objectives_[i], values[i]));
    if (std::any_of(values.begin(), values.end(), [](double v) { return !std::isfinite(v); })) {
      Logger::Instance().Info(absl::StrFormat("trial %d FAIL: %s is not a number (%s)", done.index,
                                              absl::StrJoin(shown, " "), params));
      return Tell(done.index, "FAIL", {}, done.dir, done.exit_code);
    }
    Logger::Instance().Info(absl::StrFormat("trial %d COMPLETE %s in %.1f s (%s)", done.index,
                                            absl::StrJoin(shown, " "), seconds, params));
    return Tell(done.index, "COMPLETE", values, done.dir, done.exit_code);
  }

  absl::Status Tell(size_t number, const std::string& state, const std::vector<double>& values,
                    const std::string& dir, int exit_code) {
    std::vector<std::string> v;
    for (double x : values) v.push_back(NodeToJson(*Node::Float(x)));
    auto t0 = std::chrono::steady_clock::now();
    auto told = Call(absl::StrCat(
        "{\"op\": \"tell\", \"number\": ", number, ", \"state\": ", JsonString(state),
        ", \"values\": [", absl::StrJoin(v, ", "), "], \"attrs\": {\"kiln:dir\": ", JsonString(dir),
        ", \"kiln:exit_code\": ", exit_code, "}}"));
    ask_tell_seconds_ += Since(t0);
    ++told_;
    return told.status();
  }

  using Row = StudyTrial;

  // A trial's value of a parameter, as override text ("" when it has none).
  static std::string ParamOf(const Row& row, const Param& p) {
    auto it = row.params.find(p.name);
    return it == row.params.end() ? "" : it->second;
  }

  // optimization_results.yaml (Hydra's format), summary.csv, the table of the best trials and,
  // last, the best trial's folder. The study is the record: trials other processes ran are
  // included.
  absl::Status WriteResults(SweepSession& session) {
    if (helper_ == nullptr) return absl::OkStatus();
    KILN_ASSIGN_OR_RETURN(NodePtr reply, Call("{\"op\": \"trials\"}"));
    if (told_ > 0) {
      Logger::Instance().Info(
          absl::StrFormat("optuna overhead: Python and Optuna started in %.2f s; ask + tell took "
                          "%.1f ms per trial over %d trials",
                          helper_->start_seconds(), 1000 * ask_tell_seconds_ / told_, told_));
    }
    const std::string& dir = session.sweep_dir();
    std::vector<Row> rows = ParseStudyTrials(reply, objectives_.size());
    KILN_RETURN_IF_ERROR(WriteFileAtomically(dir + "/summary.csv", SummaryCsv(rows)));
    std::map<std::string, int> states;
    for (const auto& row : rows) ++states[row.state];
    CheckFailureRate(states, dir);
    std::vector<std::string> counts;
    for (const auto& [state, n] : states) counts.push_back(absl::StrCat(n, " ", state));
    Logger::Instance().Info(absl::StrCat("study '", study_name_, "': ", absl::StrJoin(counts, ", "),
                                         " (", dir, "/summary.csv)"));
    // Complete trials, best first by the first objective.
    std::vector<Row> complete;
    for (auto& row : rows) {
      if (row.state == "COMPLETE" && row.values.size() == objectives_.size())
        complete.push_back(std::move(row));
    }
    bool maximize = directions_[0] == "maximize";
    std::sort(complete.begin(), complete.end(), [&](const Row& a, const Row& b) {
      return maximize ? a.values[0] > b.values[0] : a.values[0] < b.values[0];
    });
    std::set<int64_t> best;
    for (const auto& n : Field(reply, "best").items()) best.insert(n->as_int());
    KILN_RETURN_IF_ERROR(WriteFileAtomically(dir + "/optimization_results.yaml",
                                             config::ToYaml(*OptimizationResults(complete, best))));
    LogBestTrials(complete);
    return absl::OkStatus();
  }

  std::string SummaryCsv(const std::vector<Row>& rows) const {
    std::string csv = "trial,state";
    for (const auto& m : objectives_) absl::StrAppend(&csv, ",", CsvCell(m));
    csv += ",seconds";
    for (const auto& p : space_) absl::StrAppend(&csv, ",", CsvCell(p.name));
    csv += ",dir\n";
    for (const auto& row : rows) {
      absl::StrAppend(&csv, row.number, ",", row.state);
      for (size_t i = 0; i < objectives_.size(); ++i) {
        absl::StrAppend(&csv, ",",
                        i < row.values.size() ? absl::StrFormat("%.10g", row.values[i]) : "");
      }
      absl::StrAppend(&csv, ",", row.seconds ? absl::StrFormat("%.2f", *row.seconds) : "");
      for (const auto& p : space_) absl::StrAppend(&csv, ",", CsvCell(ParamOf(row, p)));
      absl::StrAppend(&csv, ",", CsvCell(row.dir), "\n");
    }
    return csv;
  }

  // More failed trials than max_failure_rate allows make the sweep's exit code 1 (abandoned
  // trials, which a dead sweep left, do not count).
  void CheckFailureRate(const std::map<std::string, int>& states, const std::string& dir) {
    int total = 0, failed = 0;
    for (const auto& [state, n] : states) {
      total += state == "FAIL(abandoned)" ? 0 : n;
      failed += state == "FAIL" ? n : 0;
    }
    if (total > 0 && static_cast<double>(failed) / total > o_.max_failure_rate) {
      failure_ =
          absl::InternalError(absl::StrCat(failed, " of ", total,
                                           " trials failed (more than hydra.sweeper."
                                           "max_failure_rate=",
                                           o_.max_failure_rate, "); see ", dir, "/summary.csv"));
    }
  }

  // Hydra's optimization_results.yaml: best_params and best_value, or the Pareto front's solutions.
  NodePtr OptimizationResults(const std::vector<Row>& complete,
                              const std::set<int64_t>& best) const {
    NodePtr results = Node::Map();
    results->Set("name", Node::String("optuna"));
    auto params_node = [&](const Row& row) {
      NodePtr p = Node::Map();
      for (size_t i = 0; i < space_.size(); ++i) {
        std::string text = ParamOf(row, space_[i]);
        auto parsed = config::ParseOverrideValue(text);
        p->Set(space_[i].name, parsed.ok() ? parsed->node : Node::String(text));
      }
      return p;
    };
    if (objectives_.size() == 1 && !complete.empty()) {
      results->Set("best_params", params_node(complete[0]));
      results->Set("best_value", Node::Float(complete[0].values[0]));
    } else if (objectives_.size() > 1) {
      NodePtr solutions = Node::List();
      for (const auto& row : complete) {
        if (!best.count(row.number)) continue;
        NodePtr s = Node::Map();
        s->Set("params", params_node(row));
        NodePtr v = Node::List();
        for (double x : row.values) v->Append(Node::Float(x));
        s->Set("values", v);
        solutions->Append(s);
      }
      results->Set("solutions", solutions);
    }
    return results;
  }

  // The top five trials, then the best one's run directory (the sweep's last log line).
  void LogBestTrials(const std::vector<Row>& complete) const {
    if (complete.empty()) {
      Logger::Instance().Info("no trial completed, so there is no best trial");
      return;
    }
    Logger::Instance().Info("best trials:");
    std::string header = absl::StrFormat("  %5s  %12s", "trial", objectives_[0]);
    for (const auto& p : space_) absl::StrAppend(&header, "  ", p.name);
    Logger::Instance().Info(header);
    for (size_t r = 0; r < std::min<size_t>(5, complete.size()); ++r) {
      std::string line =
          absl::StrFormat("  %5d  %12.6g", complete[r].number, complete[r].values[0]);
      for (const auto& p : space_) absl::StrAppend(&line, "  ", ParamOf(complete[r], p));
      Logger::Instance().Info(line);
    }
    const Row& top = complete[0];
    Logger::Instance().Info(absl::StrFormat("best trial %d: %s=%.6g, run directory %s", top.number,
                                            objectives_[0], top.values[0],
                                            top.dir.empty() ? "(unknown)" : top.dir));
  }

  OptunaOptions o_;
  std::string sampler_json_, pruner_json_, sampler_name_, pruner_name_, study_name_;
  std::vector<std::string> directions_, objectives_, fixed_;
  std::vector<std::string> direction_from_;  // why each direction, for the log and study.yaml
  std::vector<std::string> contradictions_;  // warnings: a direction against its callback's mode
  std::vector<Param> space_;
  std::unique_ptr<OptunaHelper> helper_;
  std::mutex helper_mutex_, running_mutex_;
  std::map<size_t, Running> running_;
  double ask_tell_seconds_ = 0;
  int told_ = 0;
  absl::Status failure_;  // more trials failed than max_failure_rate allows
};

OptionBinding<OptunaOptions> OptunaBinding() {
  return OptionBinding<OptunaOptions>()
      .Node("sampler", &OptunaOptions::sampler, OptionType::kAny,
            "{_target_: tpe|random|cmaes|nsgaii|grid|qmc (or optuna.samplers.<Class>), seed: ..., "
            "its options}")
      .Node("pruner", &OptunaOptions::pruner, OptionType::kAny,
            "null, or {_target_: median|percentile|hyperband|successive_halving|nop, its options}")
      .Node(
          "direction", &OptunaOptions::direction, OptionType::kAny,
          "minimize or maximize, or a list for several objectives (null: the mode of the "
          "model_checkpoint or early_stopping callback that monitors the objective, else minimize)")
      .Field("storage", &OptunaOptions::storage,
             "a database URL (null: SQLite file optuna.db in the sweep folder)")
      .Field("study_name", &OptunaOptions::study_name, "the study's name (null: hydra.job.name)")
      .Field("n_trials", &OptunaOptions::n_trials,
             "trials in the study, over every process that shares it", AtLeast(1))
      .Field("n_jobs", &OptunaOptions::n_jobs,
             "trials at once (at most the launcher's n_jobs; -1: the launcher's)", AtLeast(-1))
      .Field("max_failure_rate", &OptunaOptions::max_failure_rate,
             "accepted share of failed trials", InRange(0.0, 1.0))
      .Node("search_space", &OptunaOptions::search_space, OptionType::kAny,
            "Hydra's deprecated key (must be null)")
      .Node("params", &OptunaOptions::params, OptionType::kMap,
            "the search space in override syntax, e.g. {lr: 'interval(0, 1)'}")
      .Field("custom_search_space", &OptunaOptions::custom_search_space,
             "Hydra's Python hook (not supported; null)")
      .Node("objective", &OptunaOptions::objective, OptionType::kAny,
            "the metric(s) a trial returns, e.g. val/acc (null: model_checkpoint's monitor)")
      .Field("objective_value", &OptunaOptions::objective_value,
             "a trial's value: its best or its last report", OneOf({"best", "last"}))
      .Field("python", &OptunaOptions::python,
             "the Python that has Optuna (null: $KILN_PYTHON, else the .venv kiln was built with)");
}

const auto MakeOptuna = [](const OptunaOptions& o) -> absl::StatusOr<std::shared_ptr<Sweeper>> {
  return std::make_shared<OptunaSweeper>(o);
};

KILN_REGISTER_BOUND(
    Sweeper, "optuna",
    "Hyperparameter search on Optuna: samplers, pruning, shared and resumable studies",
    OptunaBinding(), MakeOptuna);
// The name lightning-hydra-template's configs give it.
KILN_REGISTER_BOUND(Sweeper, "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",
                    "Hydra's name for the optuna sweeper", OptunaBinding(), MakeOptuna);

}  // namespace
}  // namespace kiln::sweep
