// "Config in, trained model out" from C++: kiln::Job composes the config as `kiln train` does
// (the same overrides), trains, and tests.
//   train_job [overrides...]      e.g.  train_job model=mlp trainer.max_epochs=1
#include <kiln/base.h>
#include <kiln/job.h>

#include <cstdio>
#include <vector>

absl::Status Train(const std::vector<std::string>& overrides) {
  KILN_ASSIGN_OR_RETURN(auto job, kiln::Job::Compose({overrides}));
  KILN_RETURN_IF_ERROR(job->Fit());
  KILN_ASSIGN_OR_RETURN(auto metrics, job->Test());
  std::printf("test/acc %.4f in %s\n", metrics.at("test/acc"), job->output_dir().c_str());
  return absl::OkStatus();
}

int main(int argc, char** argv) {
  absl::Status status = Train({argv + 1, argv + argc});
  if (!status.ok()) std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return status.ok() ? 0 : 2;
}
