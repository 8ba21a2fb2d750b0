// The only place that branches on the LibTorch version (Debian's 1.13 on CPU machines, 2.x with
// CUDA on GPU machines).
#pragma once

#include <torch/torch.h>
#include <torch/version.h>
#include <ATen/autocast_mode.h>

// LibTorch 1.x: ProcessGroupGloo is itself a c10d::ProcessGroup that c10d::Reducer accepts. In 2.x
// it became a c10d::Backend behind a ProcessGroup, and the construction differs between 2.x
// releases; lib/distributed supports the 1.x form only so far and says so at run time.
#if TORCH_VERSION_MAJOR < 2
#define KILN_TORCH_GLOO_IS_PROCESS_GROUP 1
#else
#define KILN_TORCH_GLOO_IS_PROCESS_GROUP 0
#endif

// LibTorch MAJOR.MINOR or later (3.0 counts as later than 2.4).
#define KILN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace kiln::compat {

// Turns CPU autocast on or off (bf16-mixed precision).
inline void SetCpuAutocast(bool enabled, at::ScalarType dtype) {
#if KILN_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(at::kCPU, enabled);
  at::autocast::set_autocast_dtype(at::kCPU, dtype);
#else
  at::autocast::set_cpu_enabled(enabled);
  at::autocast::set_autocast_cpu_dtype(dtype);
#endif
  if (!enabled) at::autocast::clear_cache();
}

// Whether CPU autocast is on (inside a bf16-mixed forward pass).
inline bool CpuAutocastEnabled() {
#if KILN_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(at::kCPU);
#else
  return at::autocast::is_cpu_enabled();
#endif
}

inline std::string TorchVersion() { return TORCH_VERSION; }

}  // namespace kiln::compat
