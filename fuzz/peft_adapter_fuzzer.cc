// libFuzzer target: a PEFT adapter's adapter_config.json (ReadLoraOptions with model.lora.from, in
// lib/trainer/lora.cc: adapters trained elsewhere): the JSON, its r, lora_alpha, lora_dropout,
// target_modules and exclude_modules (lists of names, PEFT's all-linear, or regular expressions),
// modules_to_save, use_rslora, use_dora, rank_pattern and alpha_pattern, layers_to_transform,
// trainable_token_indices (a list or {MODULE: ids}), and the refused settings; what it accepts then
// selects layers (LoraSelection) from a Llama's names.
#include <algorithm>
#include <cstdint>
#include <vector>

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
    if (!options->has_value() || (*options)->r < 1 ||
        ((*options)->target_modules.empty() && (*options)->target_regex.empty()))
      __builtin_trap();
    // Trainable tokens accepted are ids, each once.
    const std::vector<int64_t>& tokens = (*options)->trainable_token_indices;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 ||
          std::find(tokens.begin(), tokens.begin() + i, tokens[i]) != tokens.begin() + i)
        __builtin_trap();
    }
    auto selection = kiln::LoraSelection::Make(**options, "");
    if (!selection.ok()) __builtin_trap();
    for (const char* name :
         {"model.layers.0.self_attn.q_proj", "model.layers.11.mlp.down_proj", "lm_head", "q"})
      (void)selection->Selects(name);
  }
  return 0;
}
