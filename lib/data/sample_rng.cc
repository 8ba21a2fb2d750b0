#include "lib/data/sample_rng.h"

namespace kiln::data {

uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c) {
  auto splitmix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  return splitmix(splitmix(splitmix(a) ^ b) ^ c);
}

SampleRng::SampleRng(uint64_t seed, int64_t epoch, int64_t index)
    : engine_(MixSeed(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index))) {}

double SampleRng::Uniform() {
  return static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0);
}

int64_t SampleRng::UniformInt(int64_t low, int64_t high) {
  if (high <= low) return low;
  uint64_t span = static_cast<uint64_t>(high - low) + 1;
  return low + static_cast<int64_t>(engine_() % span);
}

}  // namespace kiln::data
