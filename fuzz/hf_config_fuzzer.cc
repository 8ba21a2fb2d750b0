// libFuzzer target: a Hugging Face folder's config.json (components/models/hf_checkpoint.cc's
// HfConfig and each family's reader of it), as model.pretrained names the folder: model=llama
// (Llama, Mistral, Qwen2, Qwen3, with rope_parameters or rope_scaling, sliding windows and
// layer_types), gpt2, bert (BERT, RoBERTa, XLM-RoBERTa, id2label) and hf_vit. The folder holds no
// weights, so a family that accepts the file builds the model and then refuses the missing
// safetensors: every input ends in a refusal, each one line. Inputs that give a size above 64 are
// passed over: a model that large would not fit a fuzzer's memory (refusing sizes past the
// machine's memory is HfModelsErrors.WhatModelLlamaCannotTakeIsOneLine's). The seeds are the
// configs below, written with KILN_FUZZ_WRITE_SEEDS (fuzz/run_fuzzers.sh).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "components/models/model.h"
#include "fuzz/fuzz_input.h"
#include "lib/config/node.h"
#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"

namespace {

const char* const kConfigs[] = {
    // Llama 3 style: grouped-query attention, llama3 rope scaling in transformers 5's key.
    R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 17,
      "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
      "num_key_value_heads": 1, "intermediate_size": 12, "max_position_embeddings": 32,
      "tie_word_embeddings": true, "attention_bias": true, "mlp_bias": false,
      "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}})",
    // transformers 4's keys: rope_theta and rope_scaling with `type`.
    R"({"model_type": "llama", "vocab_size": 17, "hidden_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2, "intermediate_size": 12, "rope_theta": 10000.0,
      "rope_scaling": {"type": "linear", "factor": 2.0}, "hidden_act": "silu"})",
    // Mistral's window on every layer.
    R"({"model_type": "mistral", "vocab_size": 17, "hidden_size": 8, "num_hidden_layers": 2,
      "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 12,
      "sliding_window": 4})",
    // Qwen3: its own head size, norms of the heads, a window on one layer by layer_types.
    R"({"model_type": "qwen3", "vocab_size": 17, "hidden_size": 8, "num_hidden_layers": 2,
      "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 6, "intermediate_size": 12,
      "attention_bias": true, "use_sliding_window": true, "sliding_window": 3,
      "layer_types": ["full_attention", "sliding_attention"], "tie_word_embeddings": true})",
    R"({"model_type": "gpt2", "vocab_size": 17, "n_positions": 16, "n_embd": 8, "n_layer": 2,
      "n_head": 2, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
      "tie_word_embeddings": false})",
    R"({"architectures": ["RobertaForSequenceClassification"], "model_type": "roberta",
      "vocab_size": 20, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
      "intermediate_size": 16, "max_position_embeddings": 24, "pad_token_id": 1,
      "type_vocab_size": 1, "id2label": {"0": "ham", "1": "spam"}, "hidden_act": "gelu"})",
    R"({"architectures": ["ViTForImageClassification"], "model_type": "vit", "hidden_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
      "image_size": 16, "patch_size": 4, "num_channels": 3, "qkv_bias": false,
      "layer_norm_eps": 1e-6, "id2label": {"0": "a", "1": "b", "2": "c"}})",
};

const char* const kFamilies[] = {"llama", "gpt2", "bert", "hf_vit"};

// Whether some integer in the file (as kiln's reader parses it: sizes are integers, and a float
// where one is wanted is refused) is above a small model's sizes, or some list or map is longer
// (id2label gives a classifier's rows).
bool Large(const kiln::config::Node& n) {
  if (n.kind() == kiln::config::NodeKind::kInt)
    return n.is_big_int() || std::llabs(n.as_int()) > 64;
  if (n.is_list()) {
    if (n.size() > 64) return true;
    for (const auto& item : n.items()) {
      if (item != nullptr && Large(*item)) return true;
    }
  }
  if (n.is_map()) {
    if (n.size() > 64) return true;
    for (const auto& [key, value] : n.entries()) {
      if (value != nullptr && Large(*value)) return true;
    }
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (kiln::fuzz::SeedDir() == nullptr) return 0;
  int n = 0;
  for (const char* config : kConfigs) kiln::fuzz::WriteSeed(std::to_string(n++) + ".json", config);
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln::fuzz::WriteScratchFile("config.json", data, size);
  auto parsed = kiln::config::LoadYamlFile(path);
  // An integer above 64 that is no size (max_position_embeddings of a Llama) is passed over too.
  if (parsed.ok() && *parsed != nullptr && Large(**parsed)) return 0;
  for (const char* family : kFamilies) {
    auto model = kiln::config::Node::Map();
    model->Set("_target_", kiln::config::Node::String(family));
    model->Set("pretrained", kiln::config::Node::String(kiln::fuzz::ScratchDir()));
    auto built =
        kiln::Registry<kiln::Model>::Get().Instantiate(kiln::config::Config(model, "model"));
    // No weights in the folder: never a model; the refusal is one line.
    if (built.ok() || built.status().message().find('\n') != std::string::npos) __builtin_trap();
  }
  return 0;
}
