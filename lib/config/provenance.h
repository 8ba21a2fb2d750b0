// Where each final value of a composed config was set: which file and line, or which
// command-line override. Printed by `kiln <command> --info provenance`.
#pragma once

#include <string>

#include "lib/config/node.h"

namespace kiln::config {

// One line per leaf value: "trainer.max_epochs: 3    configs/trainer/default.yaml:2".
std::string FormatProvenance(const Node& config);

}  // namespace kiln::config
