// Reading and writing config YAML with the typing rules Hydra users know (PyYAML's YAML 1.1
// resolvers as OmegaConf configures them: `yes` is a bool, `1e3` a float, `007` an octal int).
#pragma once

#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/config/node.h"

namespace kiln::config {

// Types an unquoted YAML scalar: null, bool, int, float, or string.
NodePtr ResolvePlainScalar(absl::string_view text);

// Parses YAML text. `file` names it in errors and sources ("file:line:column: message").
absl::StatusOr<NodePtr> ParseYaml(absl::string_view text, const std::string& file);
absl::StatusOr<NodePtr> LoadYamlFile(const std::string& path);

// Block-style YAML the way OmegaConf.to_yaml writes it: insertion order, `- item` lists at the
// parent's indentation, strings quoted only when they would read back as another type.
std::string ToYaml(const Node& node);
// A scalar as it would appear in YAML (quoted when needed); containers in flow style.
std::string ScalarToYaml(const Node& node);

// The paths of the scalars written quoted in YAML text ("a.b", "a.list[0]"; a quoted mapping
// key as "a.b:key"), so two printings of one config can be compared for their quoting.
absl::StatusOr<std::set<std::string>> QuotedScalarPaths(absl::string_view text);

// `s` without leading and trailing whitespace as Python's str.strip() sees it (Unicode spaces
// such as U+00A0 and U+205F included), as Hydra reads its header lines.
absl::string_view PythonStrip(absl::string_view s);

}  // namespace kiln::config
