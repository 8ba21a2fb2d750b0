// Test plugin: a config resolver and a sweeper, both used from configs by plugin_test.
//   ${sweep_tools.twice:21}  -> 42
//   hydra/sweeper=doubling   -> jobs key=start, key=2*start, ... one at a time, stopping at the
//                               first failed job or after max_jobs (a sweeper that asks for each
//                               job after seeing the previous one's result, as an optimizer does)
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/app/sweeper.h"
#include "lib/registry/plugin.h"

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

class DoublingSweeper : public kiln::app::Sweeper {
 public:
  explicit DoublingSweeper(DoublingOptions o) : o_(std::move(o)) {}

  absl::Status Sweep(kiln::app::SweepSession& session) override {
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

void Register(kiln::Registrar& registrar) {
  registrar.AddResolver("sweep_tools.twice", Twice);
  using O = DoublingOptions;
  registrar.Add<kiln::app::Sweeper>(
      "doubling", "Doubles one key from job to job (test plugin)",
      kiln::OptionBinding<O>()
          .Field("key", &O::key, "the key to sweep", kiln::NonEmpty())
          .Field("start", &O::start, "its first value", kiln::AtLeast(1))
          .Field("max_jobs", &O::max_jobs, "jobs at most", kiln::AtLeast(1)),
      std::function<absl::StatusOr<std::shared_ptr<kiln::app::Sweeper>>(const O&)>(
          [](const O& o) -> absl::StatusOr<std::shared_ptr<kiln::app::Sweeper>> {
            return std::make_shared<DoublingSweeper>(o);
          }));
}

}  // namespace

KILN_PLUGIN("sweep_tools", "1.0.0", Register, KILN_PLUGIN_CONFIG_DIR)
