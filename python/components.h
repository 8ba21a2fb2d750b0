// kiln.instantiate for the component kinds that work outside kiln's loop, each a Python object:
// optimizers (over any tensors, a Python model's parameters too), schedulers, losses, metrics,
// transforms, tokenizers and audio feature extractors.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "lib/config/config.h"

namespace kiln::python {

// What some kinds need besides their config node (Hydra's instantiate(cfg, **kwargs)).
struct InstantiateArgs {
  pybind11::object params;     // optimizer: tensors, or (name, tensor) pairs (named_parameters())
  pybind11::object optimizer;  // scheduler: a kiln.Optimizer
  int64_t total_steps = 0;     // scheduler
  int64_t steps_per_epoch = 0;  // scheduler
  int64_t num_classes = 0;     // metric
};

// The built component for `target` when it is one of these kinds; None when it is none of them.
pybind11::object InstantiateComponent(const config::Config& cfg, const std::string& target,
                                      const InstantiateArgs& args);

// The Python classes of those components (kiln.Optimizer, kiln.Scheduler, ...).
void BindComponents(pybind11::module_& m);

}  // namespace kiln::python
