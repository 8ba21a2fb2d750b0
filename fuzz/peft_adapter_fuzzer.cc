// libFuzzer target: a PEFT adapter's adapter_config.json (ReadLoraOptions with model.lora.from, in
// lib/trainer/lora.cc: adapters trained elsewhere): the JSON, its r, lora_alpha, lora_dropout,
// target_modules (a list of names, PEFT's all-linear, or a refused regular expression),
// modules_to_save, use_rslora, use_dora, rank_pattern and alpha_pattern, and the refused settings.
#include "fuzz/fuzz_input.h"
#include "lib/config/node.h"
#include "lib/trainer/lora.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::WriteScratchFile("adapter_config.json", data, size);
  static const kiln::config::NodePtr job = [] {
    auto lora = kiln::config::Node::Map();
    lora->Set("from", kiln::config::Node::String(kiln::fuzz::ScratchDir()));
    auto model = kiln::config::Node::Map();
    model->Set("lora", lora);
    auto root = kiln::config::Node::Map();
    root->Set("model", model);
    return root;
  }();
  auto options = kiln::ReadLoraOptions(kiln::config::Config(job));
  if (options.ok()) {
    // What the reader accepts is usable: an adapter of positive rank on named layers.
    if (!options->has_value() || (*options)->r < 1 || (*options)->target_modules.empty())
      __builtin_trap();
  }
  return 0;
}
