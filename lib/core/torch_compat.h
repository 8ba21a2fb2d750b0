// The LibTorch calls kiln wraps because their spelling is long or has changed between 2.x releases
// (kiln builds against the torch wheel pinned in scripts/python/torch.txt).
#pragma once

#include <torch/torch.h>
#include <torch/version.h>
#include <ATen/autocast_mode.h>

namespace kiln::compat {

// Turns CPU autocast on or off (bf16-mixed precision).
inline void SetCpuAutocast(bool enabled, at::ScalarType dtype) {
  at::autocast::set_autocast_enabled(at::kCPU, enabled);
  at::autocast::set_autocast_dtype(at::kCPU, dtype);
  if (!enabled) at::autocast::clear_cache();
}

// Whether CPU autocast is on (inside a bf16-mixed forward pass).
inline bool CpuAutocastEnabled() { return at::autocast::is_autocast_enabled(at::kCPU); }

inline std::string TorchVersion() { return TORCH_VERSION; }

}  // namespace kiln::compat
