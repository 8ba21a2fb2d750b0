// libFuzzer target: safetensors files (ReadSafetensors in lib/weights/safetensors.cc: pretrained
// weights from outside, `kiln export` output read back): the JSON header and every tensor.
#include <cstdlib>

#include "fuzz/fuzz_input.h"
#include "lib/weights/safetensors.h"

// Seeds: files as kiln's writer writes them (several dtypes, metadata, an empty tensor).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = kiln::fuzz::SeedDir();
  if (dir == nullptr) return 0;
  auto status = kiln::WriteSafetensors(std::string(dir) + "/weights.safetensors",
                                       {{"w", torch::arange(6, torch::kFloat32).reshape({2, 3})},
                                        {"b", torch::ones({3}, torch::kBFloat16)},
                                        {"steps", torch::tensor(int64_t{3})},
                                        {"mask", torch::tensor({true, false})},
                                        {"empty", torch::zeros({0, 4}, torch::kInt8)},
                                        {"h", torch::ones({2}, torch::kFloat16)}},
                                       {{"format", "pt"}});
  std::exit(status.ok() ? 0 : 1);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::MemFile file(data, size);
  if (!file.ok()) return 0;
  auto tensors = kiln::ReadSafetensors(file.path());
  if (tensors.ok()) {
    for (const auto& [name, tensor] : *tensors) {
      if (tensor.nbytes() > size) __builtin_trap();  // a tensor's bytes are in the file
    }
  }
  return 0;
}
