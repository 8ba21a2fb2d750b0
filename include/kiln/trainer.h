// <kiln/trainer.h>: the Trainer and what plugs into it: Task, Metric (and the MetricCollection a
// task keeps), Loss, Callback, MetricsLogger, optimizers and schedulers, prediction writers,
// checkpoints, safetensors. Part of kiln's public API (docs/library.md); the headers it includes
// are installed with it.
#pragma once

#include "lib/trainer/callback.h"
#include "lib/trainer/loss.h"
#include "lib/trainer/metric.h"
#include "lib/trainer/metric_collection.h"
#include "lib/trainer/metric_log.h"
#include "lib/trainer/optimization.h"
#include "lib/trainer/prediction_writer.h"
#include "lib/trainer/task.h"
#include "lib/trainer/trainer.h"
#include "lib/weights/checkpoint.h"
#include "lib/weights/safetensors.h"
