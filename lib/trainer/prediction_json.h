// A prediction record's fields as JSON (numbers as numbers), for the jsonl prediction writer and
// `kiln serve`, so both write the same values the same way. Internal: not installed.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "lib/config/node.h"

namespace kiln {

// Adds each field to `object` under its name (null for a value that is not a scalar).
inline void AddPredictionFields(const std::vector<std::pair<std::string, config::NodePtr>>& fields,
                                nlohmann::ordered_json& object) {
  for (const auto& [name, value] : fields) {
    switch (value->kind()) {
      case config::NodeKind::kInt: object[name] = value->as_int(); break;
      case config::NodeKind::kFloat: object[name] = value->as_float(); break;
      case config::NodeKind::kBool: object[name] = value->as_bool(); break;
      case config::NodeKind::kString: object[name] = value->as_string(); break;
      default: object[name] = nullptr;
    }
  }
}

}  // namespace kiln
