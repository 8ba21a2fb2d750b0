// Test plugin: a config resolver and a sweeper, both used from configs by plugin_test.
//   ${sweep_tools.twice:21}  -> 42
//   hydra/sweeper=doubling   -> jobs key=start, key=2*start, ... one at a time, stopping at the
//                               first failed job or after max_jobs (a sweeper that asks for each
//                               job after seeing the previous one's result, as an optimizer does)
//   hydra/launcher=quadratic -> runs each job of an Optuna sweep as a trial whose val/loss is
//                               (x - 0.3)^2 + (y + 1)^2 + 1/step at steps 1..steps, reported
//                               through the trial channel (so pruning works), up to `slots` trials
//                               at once on threads; `nan=true` in a job reports NaN, `fail=true`
//                               fails it
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "lib/base/exit_code.h"
#include "lib/config/override.h"
#include "lib/registry/plugin.h"
#include "lib/sweep/launcher.h"
#include "lib/sweep/sweep_ledger.h"
#include "lib/sweep/sweeper.h"
#include "lib/sweep/trial_channel.h"

namespace {

using kiln::config::Node;
using kiln::config::NodeKind;
using kiln::config::NodePtr;

absl::StatusOr<NodePtr> Twice(const kiln::config::ResolverCall& call) {
  if (call.args.size() != 1 || call.args[0]->kind() != NodeKind::kInt) {
    return absl::InvalidArgumentError("sweep_tools.twice takes one integer");
  }
  return Node::Int(2 * call.args[0]->as_int());
}

struct DoublingOptions {
  std::string key = "x";
  int64_t start = 1;
  int64_t max_jobs = 3;
};

class DoublingSweeper : public kiln::sweep::Sweeper {
 public:
  explicit DoublingSweeper(DoublingOptions o) : o_(std::move(o)) {}

  absl::Status Sweep(kiln::sweep::SweepSession& session) override {
    int64_t value = o_.start;
    for (int64_t n = 0; n < o_.max_jobs; ++n, value *= 2) {
      auto batch = session.Launch({{absl::StrCat(o_.key, "=", value)}});
      if (!batch.ok()) return batch.status();
      if (!batch->status.ok()) return batch->status;
    }
    return absl::OkStatus();
  }

 private:
  DoublingOptions o_;
};

struct QuadraticOptions {
  int64_t steps = 5;
  double step_seconds = 0;
  int64_t slots = 1;
};

class QuadraticLauncher : public kiln::sweep::Launcher {
 public:
  explicit QuadraticLauncher(QuadraticOptions o) : o_(o) {}
  ~QuadraticLauncher() override {
    for (auto& t : threads_) t.join();
  }

  int slots() const override { return static_cast<int>(o_.slots); }

  absl::Status Launch(const std::vector<kiln::sweep::SweepJob>& jobs,
                      const kiln::sweep::LaunchContext& context) override {
    for (const auto& job : jobs) KILN_RETURN_IF_ERROR(Run(job, context));
    return absl::OkStatus();
  }

  absl::Status Start(const kiln::sweep::SweepJob& job,
                     const kiln::sweep::LaunchContext& context) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++running_;
    threads_.emplace_back([this, job, context] {
      absl::Status status = Run(job, context);
      std::lock_guard<std::mutex> lock(mutex_);
      int code = kiln::RequestedExitCode(status);
      finished_.push_back({job.index, status, status.ok() ? 0 : (code >= 0 ? code : 1)});
      done_.notify_all();
    });
    return absl::OkStatus();
  }

  absl::StatusOr<kiln::sweep::FinishedJob> WaitAny(const kiln::sweep::LaunchContext&) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (running_ == 0) return absl::FailedPreconditionError("no job is running");
    done_.wait(lock, [this] { return !finished_.empty(); });
    --running_;
    kiln::sweep::FinishedJob job = finished_.front();
    finished_.pop_front();
    return job;
  }

 private:
  absl::Status Run(const kiln::sweep::SweepJob& job, const kiln::sweep::LaunchContext& context) {
    double x = 0, y = 0;
    bool nan = false, fail = false;
    std::string channel;
    bool pruning = false;
    for (const auto& text : job.overrides) {
      auto o = kiln::config::ParseOverride(text);
      if (!o.ok() || !o->has_value || o->is_sweep()) continue;
      const kiln::config::Node& v = *o->value.node;
      auto number = [&] {
        return v.kind() == NodeKind::kInt ? static_cast<double>(v.as_int()) : v.as_float();
      };
      if (o->key_or_group == "x") x = number();
      if (o->key_or_group == "y") y = number();
      if (o->key_or_group == "nan") nan = v.as_bool();
      if (o->key_or_group == "fail") fail = v.as_bool();
      if (o->key_or_group == "callbacks.optuna_trial") {
        channel = v.Find("channel")->as_string();
        pruning = v.Find("pruning")->as_bool();
      }
    }
    std::string dir = absl::StrCat(context.sweep_dir, "/", job.index);
    auto record = [&](const absl::Status& status) {
      kiln::sweep::LedgerEntry entry;
      entry.job = static_cast<int64_t>(job.index);
      entry.status = status.ok() ? "ok" : "failed";
      entry.overrides = job.overrides;
      entry.message = std::string(status.message());
      entry.dir = dir;
      (void)kiln::sweep::AppendLedger(context.sweep_dir, entry);
      return status;
    };
    if (fail) return record(absl::InternalError("this trial fails (fail=true)"));
    kiln::sweep::TrialChannel trial(channel, pruning);
    double f = (x - 0.3) * (x - 0.3) + (y + 1) * (y + 1);
    for (int64_t step = 1; step <= o_.steps; ++step) {
      std::this_thread::sleep_for(std::chrono::duration<double>(o_.step_seconds));
      double value = nan ? std::nan("") : f + 1.0 / static_cast<double>(step);
      auto prune = trial.Report({"val", step, {{"val/loss", value}, {"val/x", x}}});
      if (!prune.ok()) return record(prune.status());
      if (*prune)
        return record(
            kiln::WithExitCode(absl::AbortedError("pruned"), kiln::sweep::kExitTrialPruned));
    }
    KILN_RETURN_IF_ERROR(
        trial.Report({"test", o_.steps, {{"test/loss", nan ? std::nan("") : f}}}).status());
    return record(absl::OkStatus());
  }

  QuadraticOptions o_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<std::thread> threads_;
  std::deque<kiln::sweep::FinishedJob> finished_;
  int running_ = 0;
};

void Register(kiln::Registrar& registrar) {
  registrar.AddResolver("sweep_tools.twice", Twice);
  using O = DoublingOptions;
  registrar.Add<kiln::sweep::Sweeper>(
      "doubling", "Doubles one key from job to job (test plugin)",
      kiln::OptionBinding<O>()
          .Field("key", &O::key, "the key to sweep", kiln::NonEmpty())
          .Field("start", &O::start, "its first value", kiln::AtLeast(1))
          .Field("max_jobs", &O::max_jobs, "jobs at most", kiln::AtLeast(1)),
      [](const O& o) -> absl::StatusOr<std::shared_ptr<kiln::sweep::Sweeper>> {
        return std::make_shared<DoublingSweeper>(o);
      });
  using Q = QuadraticOptions;
  registrar.Add<kiln::sweep::Launcher>(
      "quadratic", "Runs Optuna trials of a known quadratic objective (test plugin)",
      kiln::OptionBinding<Q>()
          .Field("steps", &Q::steps, "validations per trial", kiln::AtLeast(1))
          .Field("step_seconds", &Q::step_seconds, "sleep before each validation", kiln::AtLeast(0))
          .Field("slots", &Q::slots, "trials at once", kiln::AtLeast(1)),
      [](const Q& o) -> absl::StatusOr<std::shared_ptr<kiln::sweep::Launcher>> {
        return std::make_shared<QuadraticLauncher>(o);
      });
}

}  // namespace

KILN_PLUGIN("sweep_tools", "1.0.0", Register, KILN_PLUGIN_CONFIG_DIR)
