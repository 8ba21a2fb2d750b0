// What `kiln list` prints, from the registries: every component of the given kinds with its
// origin, doc and declared options, as text or as the Markdown of docs/components.md.
#pragma once

#include <string>
#include <vector>

namespace kiln {

std::string ComponentsText(const std::vector<std::string>& kinds);
std::string ComponentsMarkdown(const std::vector<std::string>& kinds);

}  // namespace kiln
