// `kiln train`: the job the config describes (kiln::Job), fitted, then tested; data-parallel when
// torchrun, SLURM or trainer.devices start several processes.
#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "lib/commands/job.h"
#include "lib/config/yaml_io.h"
#include "lib/distributed/process_group.h"
#include "lib/logging/logger.h"
#include "lib/run/command.h"
#include "lib/run/environment.h"

namespace kiln {
namespace {

// Joins the data-parallel group this process belongs to (torchrun, SLURM, or `trainer.devices`),
// then takes rank 0's config and run directory, so every rank trains the same job in one folder.
absl::StatusOr<std::shared_ptr<distributed::ProcessGroup>> JoinProcessGroup(
    run::JobContext& ctx, const run::Environment& env) {
  KILN_ASSIGN_OR_RETURN(config::Config trainer_cfg, ctx.cfg.Sub("trainer"));
  KILN_ASSIGN_OR_RETURN(TrainerOptions options, TrainerOptions::FromConfig(trainer_cfg));
  distributed::ProcessGroupOptions group_options;
  group_options.backend = options.process_group_backend;
  group_options.cuda =
      options.accelerator != TrainerOptions::Accelerator::kCpu && torch::cuda::is_available();
  group_options.timeout =
      std::chrono::milliseconds(static_cast<int64_t>(options.ddp_timeout * 1000));
  if (group_options.cuda &&
      (options.process_group_backend == "nccl" || options.process_group_backend == "auto")) {
    // NCCL refuses two ranks on one GPU: say so before the rendezvous rather than after. The ranks
    // on this machine are known from LOCAL_WORLD_SIZE (kiln's launcher and torchrun set it);
    // without it NCCL itself judges.
    int64_t gpus = torch::cuda::device_count();
    std::string local = run::ProcessEnv("LOCAL_WORLD_SIZE");
    int64_t local_ranks = local.empty() ? 0 : std::atoll(local.c_str());
    if (local_ranks > gpus) {
      if (options.process_group_backend == "nccl") {
        return absl::FailedPreconditionError(
            absl::StrCat("process_group_backend=nccl needs a GPU per process: ", local_ranks,
                         " processes on this machine, ", gpus, " GPU", gpus == 1 ? "" : "s",
                         " (process_group_backend=gloo shares GPUs)"));
      }
      group_options.backend = "gloo";  // auto: Gloo, whose ranks may share a GPU
    }
  }
  KILN_ASSIGN_OR_RETURN(auto group, distributed::ProcessGroup::Create(env, group_options));
  std::string mine = config::ToYaml(*ctx.cfg.node());
  KILN_ASSIGN_OR_RETURN(std::string config0, group->ShareFromRankZero("config", mine));
  KILN_ASSIGN_OR_RETURN(ctx.output_dir, group->ShareFromRankZero("output_dir", ctx.output_dir));
  if (config0 != mine) {
    KILN_ASSIGN_OR_RETURN(config::NodePtr node, config::ParseYaml(config0, "rank 0's config"));
    ctx.cfg = config::Config(node);
  }
  Logger::Instance().Info(absl::StrCat("rank ", env.rank, " of ", env.world_size, " (", env.source,
                                       ") joined at ", env.master_addr, ":", env.master_port));
  return group;
}

absl::Status TrainCommand(run::JobContext& ctx) {
  KILN_ASSIGN_OR_RETURN(run::Environment env, run::ReadEnvironment());
  std::shared_ptr<distributed::ProcessGroup> group;
  if (env.distributed()) {
    KILN_ASSIGN_OR_RETURN(group, JoinProcessGroup(ctx, env));
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Job> job, Job::FromConfig(ctx.cfg, ctx.output_dir));
  job->set_process_group(group);
  return job->FitThenTest().status();
}

const bool kTrainRegistered = [] {
  run::RegisterCommand("train", TrainCommand);
  return true;
}();

}  // namespace
}  // namespace kiln
