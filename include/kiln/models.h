// <kiln/models.h>: the Model interface every registered model implements (Registry<Model>).
// Part of kiln's public API (docs/library.md); the headers it includes are installed with it.
#pragma once

#include "components/models/model.h"
