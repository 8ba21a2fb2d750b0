// Builds a registered component from YAML text, as a config file would (`prefix` names its node
// in messages, e.g. "data" for "option 'data.size' ...").
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"

namespace kiln::testing {

template <typename T>
absl::StatusOr<std::shared_ptr<T>> Instantiate(const std::string& yaml, const std::string& prefix) {
  auto node = config::ParseYaml(yaml, prefix + ".yaml");
  EXPECT_TRUE(node.ok()) << node.status();
  if (!node.ok()) return node.status();
  return Registry<T>::Get().Instantiate(config::Config(*node, prefix));
}

// The same, failing the test when the component cannot be built.
template <typename T>
std::shared_ptr<T> InstantiateOk(const std::string& yaml, const std::string& prefix) {
  auto built = Instantiate<T>(yaml, prefix);
  EXPECT_TRUE(built.ok()) << built.status();
  return built.ok() ? *built : nullptr;
}

}  // namespace kiln::testing
