// The randomness of one sample, derived only from (seed, epoch, index): augmentations draw from
// it, so a sample looks the same whatever the thread count, timing, or a resume in mid-epoch.
#pragma once

#include <cstdint>
#include <random>

namespace kiln::data {

class SampleRng {
 public:
  SampleRng(uint64_t seed, int64_t epoch, int64_t index);

  uint64_t NextU64() { return engine_(); }
  // Uniform in [0, 1).
  double Uniform();
  // Uniform in [low, high] (inclusive).
  int64_t UniformInt(int64_t low, int64_t high);
  bool Bernoulli(double p) { return Uniform() < p; }
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

// SplitMix64: mixes several integers into one well-spread 64-bit seed.
uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c = 0);

}  // namespace kiln::data
