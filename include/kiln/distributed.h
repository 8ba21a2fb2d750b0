// <kiln/distributed.h>: the torchrun/SLURM environment and c10d process groups with gradient
// reduction. Part of kiln's public API (docs/library.md); the headers it includes are installed
// with it.
#pragma once

#include "lib/distributed/data_parallel.h"
#include "lib/distributed/environment.h"
#include "lib/distributed/process_group.h"
