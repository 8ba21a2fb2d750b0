// <kiln/job.h>: kiln::Job, "config in, trained model out" as one call: compose a config as `kiln
// train` does (or take a composed one), build every component it names, then Fit, Test, Validate.
// Part of kiln's public API (docs/library.md); the headers it includes are installed with it.
#pragma once

#include "lib/commands/job.h"
