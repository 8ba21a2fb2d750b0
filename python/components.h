// kiln.instantiate for the component kinds beyond models and data modules, each a Python object:
// optimizers (over any tensors, a Python model's parameters too), schedulers, losses, metrics,
// transforms, tokenizers and audio feature extractors work on their own; callbacks and loggers are
// handed to a job (kiln.fit, kiln.Trainer).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>

#include "lib/config/config.h"
#include "lib/trainer/callback.h"

namespace kiln::python {

// What some kinds need besides their config node (Hydra's instantiate(cfg, **kwargs)).
struct InstantiateArgs {
  pybind11::object params;      // optimizer: tensors, or (name, tensor) pairs (named_parameters())
  pybind11::object optimizer;   // scheduler: a kiln.Optimizer
  int64_t total_steps = 0;      // scheduler
  int64_t steps_per_epoch = 0;  // scheduler
  int64_t num_classes = 0;      // metric
};

// The built component for `target` when it is one of these kinds; None when it is none of them.
pybind11::object InstantiateComponent(const config::Config& cfg, const std::string& target,
                                      const InstantiateArgs& args);

// The Python classes of those components (kiln.Optimizer, kiln.Scheduler, ...).
void BindComponents(pybind11::module_& m);

// A callback or a logger that kiln.instantiate built, for a job to run (kiln.fit(callbacks=,
// loggers=)); nullptr when `object` is not one.
std::shared_ptr<Callback> NativeCallback(const pybind11::handle& object);
std::shared_ptr<MetricsLogger> NativeLogger(const pybind11::handle& object);

}  // namespace kiln::python
