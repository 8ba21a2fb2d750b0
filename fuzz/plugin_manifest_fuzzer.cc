// libFuzzer target: the plugin manifest reader (InspectPlugin in lib/registry/plugin_loader.cc): a
// file named as a plugin, whose ELF headers and .kiln_plugin section are read with bounds checks
// and whose manifest is checked, without loading it.
#include "fuzz/fuzz_input.h"
#include "lib/registry/plugin_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = kiln::fuzz::WriteScratchFile("libfuzz_plugin.so", data, size);
  auto manifest = kiln::InspectPlugin(path);
  if (manifest.ok() && manifest->name.size() > size) __builtin_trap();
  return 0;
}
