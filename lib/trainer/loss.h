// A loss (torch.nn's criterion modules) for a task that offers a choice of them in `task.loss`:
// maps the model's output and the target to the scalar to minimize. Built by name through
// Registry<Loss>; losses live in components/losses/.
#pragma once

#include <torch/torch.h>

namespace kiln {

class Loss {
 public:
  static constexpr const char* kKind = "loss";
  virtual ~Loss() = default;
  virtual torch::Tensor Forward(const torch::Tensor& output, const torch::Tensor& target) = 0;
};

}  // namespace kiln
