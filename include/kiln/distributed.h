// <kiln/distributed.h>: the torchrun/SLURM environment (lib/run, read before LibTorch loads) and
// c10d process groups with gradient reduction. Part of kiln's public API (docs/library.md); the
// headers it includes are installed with it.
#pragma once

#include "lib/distributed/data_parallel.h"
#include "lib/distributed/process_group.h"
#include "lib/run/environment.h"

// The environment's names in kiln 0.1.0 and before, kept until the version after 0.1.0.
namespace kiln::distributed {
using run::Environment;
using run::FirstSlurmHost;
using run::GetEnv;
using run::ProcessEnv;
using run::ReadEnvironment;
}  // namespace kiln::distributed
