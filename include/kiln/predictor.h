// <kiln/predictor.h>: kiln::Predictor, a trained model (a run directory, a checkpoint or an export
// folder) answering raw inputs (image or audio bytes, texts, prompts) with its training run's
// evaluation preprocessing. Part of kiln's public API (docs/library.md, docs/deploy.md); the
// headers it includes are installed with it.
#pragma once

#include "lib/inference/predictor.h"
