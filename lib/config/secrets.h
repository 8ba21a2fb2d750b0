// Options that carry a secret (kiln serve's bearer token now, a tracker's credentials next). A
// component declares one where it declares its options (OptionBinding::Secret()), and the key is
// registered here; wherever kiln stores or prints a config (`.hydra/`, `--cfg`, `--info`, `--help`,
// `kiln compose`) its value is `***`. The job itself still gets the value.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "lib/config/node.h"

namespace kiln::config {

inline constexpr char kRedacted[] = "***";

// `dotted_key` from the job config's top ("serve.token"). Thread-safe; registering twice is one.
void RegisterSecretKey(const std::string& dotted_key);
bool IsSecretKey(absl::string_view dotted_key);
std::vector<std::string> SecretKeys();

// A copy of a job config with each secret key's value replaced by "***" (a null or absent one
// stays as it is), its source too where it was an override.
NodePtr RedactSecrets(const Node& job);
// A copy of the `hydra` node with secrets taken out of the overrides it records
// (overrides.task, job.override_dirname).
NodePtr RedactHydraSecrets(const Node& hydra);
// An override with a secret's value replaced: "serve.token=abc" -> "serve.token=***"; any other
// override as it is.
std::string RedactOverride(absl::string_view override_text);

}  // namespace kiln::config
