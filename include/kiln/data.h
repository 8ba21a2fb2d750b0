// <kiln/data.h>: datasets, samplers, the data loader, transforms, padding and the DataModule
// interface. Part of kiln's public API (docs/library.md); the headers it includes are installed
// with it.
#pragma once

#include "lib/data/datamodule.h"
#include "lib/data/dataset.h"
#include "lib/data/loader.h"
#include "lib/data/padding.h"
#include "lib/data/sampler.h"
#include "lib/data/transform.h"
