// libFuzzer target: the input is a primary config file. Composition and resolution either
// succeed or return an error; what kiln prints as YAML reads back as the same tree.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "lib/config/compose.h"
#include "lib/config/yaml_io.h"

namespace {

const std::string& ConfigDir() {
  static const std::string dir = [] {
    char pattern[] = "/tmp/kiln_compose_fuzz_XXXXXX";
    std::string d = mkdtemp(pattern);
    std::system(("mkdir -p " + d + "/model " + d + "/optimizer").c_str());
    std::ofstream(d + "/model/cnn.yaml") << "name: cnn\nchannels: [32, 64]\nwidth: ${..width}\n";
    std::ofstream(d + "/model/mlp.yaml")
        << "# @package _global_\ndefaults:\n  - /optimizer: sgd\nmlp: 1\n";
    std::ofstream(d + "/optimizer/sgd.yaml") << "lr: 0.1\n";
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = ConfigDir();
  {
    std::ofstream out(dir + "/train.yaml", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  kiln::config::ComposeOptions options;
  options.search_path = {{"main", dir}};
  options.config_name = "train";
  auto composed = kiln::config::Compose(options);
  if (!composed.ok()) return 0;
  std::string yaml = kiln::config::ToYaml(*composed->job);
  auto reparsed = kiln::config::ParseYaml(yaml, "<emitted>");
  if (!reparsed.ok() || !kiln::config::DeepEqual(**reparsed, *composed->job)) std::abort();
  auto resolved = kiln::config::ResolveJob(*composed);
  (void)resolved;
  return 0;
}
