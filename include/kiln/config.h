// <kiln/config.h>: Hydra-compatible composition (Compose, overrides, sweeps), config nodes and
// typed access, YAML in and out. No LibTorch. Part of kiln's public API (docs/library.md); the
// headers it includes are installed with it.
#pragma once

#include "lib/config/compose.h"
#include "lib/config/config.h"
#include "lib/config/node.h"
#include "lib/config/override.h"
#include "lib/config/sweep.h"
#include "lib/config/yaml_io.h"
