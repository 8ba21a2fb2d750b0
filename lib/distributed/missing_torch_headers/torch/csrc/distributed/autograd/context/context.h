// Debian's libtorch-dev 1.13 ships c10d/reducer.hpp but not the distributed-autograd header it
// includes. The reducer only names these two types (a callback type and a shared_ptr it holds for
// RPC contexts, which kiln never creates), so declaring them keeps its object layout identical to
// the library's. Used only when the real header is missing (lib/CMakeLists.txt).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace torch::distributed::autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};
using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace torch::distributed::autograd
