// libFuzzer target: any text fed to the override parser either parses or is refused with a
// message. Differential round trips, as Hydra would see them:
//  - a parsed value printed back in override syntax parses to the same value;
//  - the value printed as YAML (`--cfg job`) reads back as the same value, and the printer
//    quotes every string that YAML 1.1 or kiln's reader would retype;
//  - a sweep's job lines (printed as Hydra prints them) parse back to the swept values;
//  - the interpolation grammar check accepts or refuses without crashing.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "lib/config/interpolation.h"
#include "lib/config/node.h"
#include "lib/config/override.h"
#include "lib/config/repository.h"
#include "lib/config/sweep.h"
#include "lib/config/yaml_io.h"

namespace {

using namespace kiln::config;

void CheckYamlRoundTrip(const NodePtr& value) {
  NodePtr doc = Node::Map();
  doc->Set("v", value);
  std::string printed = ToYaml(*doc);
  auto again = ParseYaml(printed, "<fuzz>");
  if (!again.ok()) {
    // kiln refuses plain '=' and '<<' as Hydra does; the printer must never write them plain.
    std::abort();
  }
  NodePtr v = (*again)->Find("v");
  if (v == nullptr || !DeepEqual(*v, *value)) std::abort();
}

// Whether a sweep has at most 1000 values, decided without expanding it: a range() may hold up
// to a million, and expanding those on every input made a bounded run take minutes.
bool SmallSweep(const Sweep& sweep) {
  if (sweep.kind != SweepKind::kRange) return true;
  auto number = [](const NodePtr& n, double* out) {
    if (n == nullptr) return false;
    if (n->kind() == NodeKind::kInt)
      *out = static_cast<double>(n->as_int());
    else if (n->kind() == NodeKind::kFloat)
      *out = n->as_float();
    else
      return false;
    return true;
  };
  double start = 0, stop = 0, step = 1;
  if (!number(sweep.range_start, &start) || !number(sweep.range_stop, &stop)) return true;
  if (sweep.range_step != nullptr && !number(sweep.range_step, &step)) return true;
  if (step == 0 || !std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
    return true;
  return (stop - start) / step <= 1000;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  (void)CheckInterpolationSyntax(text);
  auto parsed = ParseOverride(text);
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();
    return 0;
  }
  if (parsed->has_value && !parsed->is_sweep()) {
    std::string printed = NodeToOverrideString(*parsed->value.node);
    auto again = ParseOverrideValue(printed);
    if (!again.ok() || !DeepEqual(*again->node, *parsed->value.node)) std::abort();
    // Strings that are not valid UTF-8 or hold control characters cannot be YAML.
    auto valid_yaml = ParseYaml("x: 1\n" + text + "\n", "<fuzz>");
    (void)valid_yaml;
    bool printable = true;
    for (unsigned char c : text) printable = printable && c >= 0x20 && c < 0x7f;
    if (printable) CheckYamlRoundTrip(parsed->value.node);
  }
  if (parsed->is_discrete_sweep() && parsed->sweep.kind != SweepKind::kGlob &&
      SmallSweep(parsed->sweep)) {
    ConfigRepository repo({});
    auto jobs = PlanSweep({}, {*parsed}, repo);
    if (jobs.ok() && jobs->size() <= 1000) {
      for (const auto& job : *jobs) {
        for (const auto& line : job) {
          auto o = ParseOverride(line);
          if (!o.ok() || o->is_sweep()) std::abort();
        }
      }
    }
  }
  return 0;
}
