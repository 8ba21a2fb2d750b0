// libFuzzer target: any text fed to the override parser either parses or is refused with a
// message; a parsed value printed back in override syntax parses to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "lib/config/node.h"
#include "lib/config/override.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = kiln::config::ParseOverride(text);
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();
    return 0;
  }
  if (parsed->has_value && !parsed->is_sweep()) {
    std::string printed = kiln::config::NodeToOverrideString(*parsed->value.node);
    auto again = kiln::config::ParseOverrideValue(printed);
    if (!again.ok() || !kiln::config::DeepEqual(*again->node, *parsed->value.node)) std::abort();
  }
  return 0;
}
