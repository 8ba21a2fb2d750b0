// kiln's side of bench/generation_speed.sh: greedy generation (components/models/generation.h) of
// NEW tokens after BATCH prompts of 16 ids (the same ids as generation_reference.py draws, read
// from IDS_FILE) from a Hugging Face folder read by model=llama, in float32 or bf16, on THREADS
// threads. Prints one JSON line: tokens/s (the fastest of CALLS calls, default 5, after a warm-up)
// and the ids' checksum.
//   generation_speed DIR IDS_FILE NEW PRECISION THREADS
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "components/models/generation.h"
#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"
#include "lib/weights/safetensors.h"

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc != 6) {
    std::fprintf(stderr, "usage: generation_speed DIR IDS_FILE NEW PRECISION THREADS\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t new_tokens = std::stoll(argv[3]);
  const bool bf16 = std::string(argv[4]) == "bf16";
  torch::set_num_threads(std::stoi(argv[5]));
  auto node = config::ParseYaml("_target_: llama\npretrained: '" + dir + "'\n", "model.yaml");
  auto model = Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
  auto ids = ReadSafetensors(argv[2]);
  if (!model.ok() || !ids.ok()) {
    std::fprintf(
        stderr, "generation_speed: %s\n",
        std::string(model.ok() ? ids.status().message() : model.status().message()).c_str());
    return 1;
  }
  auto* lm = dynamic_cast<CausalLm*>(model->get());
  lm->eval();
  if (bf16) lm->to(torch::kBFloat16);
  const torch::Tensor& prompt_ids = ids->at("ids");
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t r = 0; r < prompt_ids.size(0); ++r) {
    torch::Tensor row = prompt_ids[r].contiguous();
    prompts.emplace_back(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
  }
  SamplingOptions options;
  options.max_new_tokens = new_tokens;
  std::vector<std::vector<int64_t>> out;
  const char* calls_env = std::getenv("CALLS");
  const int calls = calls_env != nullptr ? std::max(1, std::atoi(calls_env)) : 5;
  double seconds = std::numeric_limits<double>::infinity();
  for (int call = 0; call <= calls; ++call) {  // the first call warms up; the fastest counts
    auto start = std::chrono::steady_clock::now();
    out = Generate(*lm, prompts, options);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (call > 0) seconds = std::min(seconds, took);
  }
  int64_t tokens = 0, checksum = 0;
  for (const auto& row : out) {
    tokens += static_cast<int64_t>(row.size());
    for (int64_t id : row) checksum += id;
  }
  std::printf("{\"side\": \"kiln\", \"tokens_per_s\": %.1f, \"checksum\": %lld}\n",
              static_cast<double>(tokens) / seconds, static_cast<long long>(checksum));
  return 0;
}
