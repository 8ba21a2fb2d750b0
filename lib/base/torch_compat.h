// The LibTorch calls kiln wraps because their spelling is long or has changed between 2.x releases
// (kiln builds against the torch wheel pinned in scripts/python/torch.txt).
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

namespace kiln::compat {

// Turns autocast on or off on `device` (bf16-mixed precision); SetCpuAutocast: on the CPU.
inline void SetAutocast(at::DeviceType device, bool enabled, at::ScalarType dtype) {
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
  if (!enabled) at::autocast::clear_cache();
}
inline void SetCpuAutocast(bool enabled, at::ScalarType dtype) {
  SetAutocast(at::kCPU, enabled, dtype);
}

// Whether autocast is on, on the CPU or on CUDA (inside a mixed-precision forward pass).
inline bool AutocastEnabled() {
  return at::autocast::is_autocast_enabled(at::kCPU) ||
         at::autocast::is_autocast_enabled(at::kCUDA);
}

inline std::string TorchVersion() { return TORCH_VERSION; }

}  // namespace kiln::compat
