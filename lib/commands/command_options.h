// The options of a command that has its own keys at the top of the config (train.yaml documents
// them): `export`'s format, `average`'s checkpoints.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/config/config.h"
#include "lib/registry/options.h"

namespace kiln {

// The keys `binding` declares, taken from the top of the config, checked and filled.
template <typename O>
absl::StatusOr<O> CommandOptions(const config::Config& cfg, const OptionBinding<O>& binding,
                                 const std::string& command) {
  config::NodePtr mine = config::Node::Map();
  for (const auto& key : cfg.Keys()) {
    if (binding.schema().Find(key) != nullptr)
      mine->Set(key, cfg.Get<config::NodePtr>(key).value());
  }
  KILN_ASSIGN_OR_RETURN(config::NodePtr filled,
                        binding.schema().Apply(*mine, "", absl::StrCat("command '", command, "'")));
  return binding.Fill(config::Config(filled));
}

}  // namespace kiln
