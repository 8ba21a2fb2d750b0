// JSON text of config values: for the Optuna helper's line protocol, the trial channel and the
// report page's data. NaN and infinities are written as Python's json module writes them (NaN,
// Infinity), which the Optuna helper reads; a float always shows it is one ("1.0").
#pragma once

#include <string>

#include "lib/config/node.h"

namespace kiln::config {

// A JSON string literal: quotes, backslashes and control characters escaped.
std::string JsonString(const std::string& s);
// A config node (null, bool, numbers, strings, lists, maps) as JSON.
std::string NodeToJson(const Node& node);

}  // namespace kiln::config
