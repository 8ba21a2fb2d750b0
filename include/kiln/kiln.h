// <kiln/kiln.h>: the whole public API at once (every <kiln/...> header).
// Part of kiln's public API (docs/library.md); the headers it includes are installed with it.
#pragma once

#include <kiln/base.h>
#include <kiln/config.h>
#include <kiln/data.h>
#include <kiln/distributed.h>
#include <kiln/job.h>
#include <kiln/logging.h>
#include <kiln/models.h>
#include <kiln/plugin.h>
#include <kiln/predictor.h>
#include <kiln/registry.h>
#include <kiln/tasks.h>
#include <kiln/trainer.h>
