// OmegaConf's merge and update rules: maps merge key by key, lists and scalars are replaced,
// a `???` never overwrites a value. Struct mode refuses keys the target does not have.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lib/config/node.h"
#include "lib/config/override.h"

namespace kiln::config {

// Merges map `src` into map `dest`. In struct mode a key missing from `dest` is an error that
// names it (with `path` as the prefix of dest's keys).
absl::Status MergeInto(Node& dest, const Node& src, bool struct_mode = false,
                       const std::string& path = "");

// A deep copy of `content` placed under a dotted package ("a.b" -> {a: {b: content}}).
NodePtr WrapInPackage(const NodePtr& content, const std::string& package);

// Applies one `key=value`, `+key=value`, `++key=value` or `~key[=value]` override to the
// composed config (struct mode for plain `key=value`).
absl::Status ApplyConfigOverride(Node& cfg, const Override& o);

// Python's == on config values: 1 == 1.0, true == 1, containers element-wise.
bool PythonEqual(const Node& a, const Node& b);

// The node at a dotted path ("a.b.0"), or nullptr.
NodePtr SelectPath(const NodePtr& root, const std::vector<std::string>& path);

}  // namespace kiln::config
