// `hydra/sweeper=basic`, Hydra's BasicSweeper: the cartesian product of hydra.sweeper.params
// and the command line's sweeps, launched in batches of max_batch_size (all at once by default).
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/config/override.h"
#include "lib/config/sweep.h"
#include "lib/registry/registry.h"
#include "lib/sweep/sweeper.h"

namespace kiln::sweep {
namespace {

class BasicSweeper : public Sweeper {
 public:
  BasicSweeper(std::vector<config::Override> params, std::optional<int64_t> max_batch_size)
      : params_(std::move(params)), max_batch_size_(max_batch_size) {}

  absl::Status Sweep(SweepSession& session) override {
    auto jobs = config::PlanSweep(params_, session.arguments(), session.repository());
    if (!jobs.ok()) return jobs.status();
    size_t batch =
        max_batch_size_.has_value() ? static_cast<size_t>(*max_batch_size_) : jobs->size();
    absl::Status failed;
    for (size_t start = 0; start < jobs->size(); start += batch) {
      size_t end = std::min(jobs->size(), start + batch);
      std::vector<std::vector<std::string>> part(jobs->begin() + start, jobs->begin() + end);
      auto result = session.Launch(part);
      if (!result.ok()) return result.status();
      if (!result->status.ok()) {
        if (failed.ok()) failed = result->status;
        if (session.fail_fast()) break;
      }
    }
    return failed;
  }

 private:
  std::vector<config::Override> params_;
  std::optional<int64_t> max_batch_size_;
};

struct BasicSweeperOptions {
  std::optional<int64_t> max_batch_size;  // null: all jobs at once
  config::NodePtr params;                 // null or {key: sweep}
};

KILN_REGISTER_BOUND(Sweeper, "basic",
                    "Hydra's basic sweeper: every combination of the sweeps, in command-line order",
                    OptionBinding<BasicSweeperOptions>()
                        .Field("max_batch_size", &BasicSweeperOptions::max_batch_size,
                               "jobs launched at once (null: all)", AtLeast(1))
                        .Node("params", &BasicSweeperOptions::params, OptionType::kMap,
                              "sweeps added before the command line's, e.g. {lr: '0.1,0.01'}"),
                    [](const BasicSweeperOptions& o) -> absl::StatusOr<std::shared_ptr<Sweeper>> {
                      KILN_ASSIGN_OR_RETURN(auto params, config::ParseSweepParams(o.params));
                      return std::make_shared<BasicSweeper>(std::move(params), o.max_batch_size);
                    });

}  // namespace
}  // namespace kiln::sweep
