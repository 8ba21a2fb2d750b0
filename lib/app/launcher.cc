#include "lib/app/launcher.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln::app {
namespace {

class BasicLauncher : public Launcher {
 public:
  absl::Status Launch(const std::vector<std::vector<std::string>>& jobs, const JobFn& run) override {
    Logger::Instance().Info(absl::StrCat("Launching ", jobs.size(), " jobs locally"));
    for (size_t i = 0; i < jobs.size(); ++i) {
      Logger::Instance().Info(absl::StrCat("\t#", i, " : ", absl::StrJoin(jobs[i], " ")));
      auto st = run(i, jobs[i]);
      if (!st.ok()) return absl::Status(st.code(), absl::StrCat("job #", i, " failed: ", st.message()));
    }
    return absl::OkStatus();
  }
};

KILN_REGISTER(Launcher, "basic", "Runs the jobs of a multirun one after another in this process",
              OptionSchema(), [](const config::Config&) -> absl::StatusOr<std::shared_ptr<Launcher>> {
                return std::make_shared<BasicLauncher>();
              });

}  // namespace
}  // namespace kiln::app
