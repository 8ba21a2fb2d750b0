// Where this process stands in a distributed run, read from the variables that torchrun and
// SLURM set (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NODELIST, SLURM_JOB_ID). LibTorch-free, so the command line can decide
// whether to start workers before it loads the engine.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::run {

struct Environment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";  // "single", "torchrun", "kiln" (trainer.devices workers), "slurm"

  bool distributed() const { return world_size > 1; }
};

// Reads a variable; empty when unset. Tests pass their own.
using GetEnv = std::function<std::string(const std::string&)>;
std::string ProcessEnv(const std::string& name);

// torchrun's variables win over SLURM's; a SLURM job with one task is a single process. Malformed
// values (RANK=x, RANK >= WORLD_SIZE) are errors that name the variable.
absl::StatusOr<Environment> ReadEnvironment(const GetEnv& get = ProcessEnv);

// The first host of a SLURM node list: "node[07-09,12],gpu1" -> "node07".
absl::StatusOr<std::string> FirstSlurmHost(const std::string& nodelist);

}  // namespace kiln::run
