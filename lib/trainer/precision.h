// trainer.precision resolved for this machine: `auto` picks bf16-mixed where the CPU multiplies
// bfloat16 in hardware (AVX-512 BF16 or AMX) or the GPU has bf16 units (compute capability 8.0+),
// float32 elsewhere, and says which and why; an explicit bf16-mixed on a CPU without them runs
// (emulated, usually slower) with one warning, and on an older GPU is refused.
// bf16-true also keeps the weights and the optimizer state in bf16 (no float32 master copy).
#pragma once

#include <string>

#include "lib/trainer/trainer_options.h"

namespace kiln {

// The CPU's feature flags, space-separated: the `flags` line of /proc/cpuinfo, or the value of
// KILN_CPU_FLAGS when that is set (tests simulate another CPU with it; empty means no flags).
std::string CpuFlags();

// The flag in `flags` that makes bf16 fast ("amx_bf16" or "avx512_bf16"), or "" when neither.
std::string Bf16HardwareFlag(const std::string& flags);

struct PrecisionChoice {
  bool bf16 = false;          // forward passes under bf16 autocast
  bool fp16 = false;          // 16-mixed: under float16 autocast, with dynamic loss scaling
  bool bf16_weights = false;  // bf16-true: weights, gradients and optimizer state in bf16 too
  std::string error;          // non-empty: the run cannot go on this way (one line)
  std::string log;            // one line for the training log: what runs and why ("" for plain 32)
  bool warning = false;       // log is a warning (bf16 requested where it is emulated)
};

// `cpu`: the model runs on the CPU, where `cpu_flags` say whether bf16 is fast; otherwise on a GPU,
// where `gpu_bf16` says whether it has bf16 units (compute capability 8.0 or newer): without them
// bf16 is refused in one line.
PrecisionChoice ResolvePrecision(TrainerOptions::Precision requested, bool cpu,
                                 const std::string& cpu_flags, bool gpu_bf16 = false);

}  // namespace kiln
