#include "components/models/checkpointing.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <memory>
#include <utility>

#include "lib/base/torch_compat.h"

namespace kiln {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the backward needs to run the block again as the forward did.
struct Recompute {
  std::function<torch::Tensor(const torch::Tensor&)> block;
  torch::Tensor cpu_rng;
  bool autocast = false;
  at::ScalarType autocast_dtype = at::kBFloat16;
};

// Sets the CPU random state and autocast as `r` saved them, and back on destruction.
class AsInForward {
 public:
  explicit AsInForward(const Recompute& r)
      : rng_(at::detail::getDefaultCPUGenerator().get_state()),
        autocast_(at::autocast::is_autocast_enabled(at::kCPU)),
        dtype_(at::autocast::get_autocast_dtype(at::kCPU)) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(r.cpu_rng);
    compat::SetCpuAutocast(r.autocast, r.autocast_dtype);
  }
  ~AsInForward() {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(rng_);
    compat::SetCpuAutocast(autocast_, dtype_);
  }

 private:
  torch::Tensor rng_;
  bool autocast_;
  at::ScalarType dtype_;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x,
                               std::shared_ptr<Recompute> r) {
    r->cpu_rng = at::detail::getDefaultCPUGenerator().get_state();
    r->autocast = at::autocast::is_autocast_enabled(at::kCPU);
    r->autocast_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    // Held by a one-byte tensor whose deleter frees it with the graph (saved_data holds tensors,
    // not C++ objects), so a forward never followed by a backward leaks nothing.
    auto* held = new std::shared_ptr<Recompute>(r);
    ctx->saved_data["recompute"] = torch::from_blob(
        held, {1}, [](void* p) { delete static_cast<std::shared_ptr<Recompute>*>(p); },
        torch::kUInt8);
    ctx->save_for_backward({x});
    return r->block(x);  // custom functions run their forward without gradients
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    std::shared_ptr<Recompute> r = *static_cast<std::shared_ptr<Recompute>*>(
        ctx->saved_data["recompute"].toTensor().data_ptr());
    torch::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor y;
    {
      AsInForward as_before(*r);
      torch::AutoGradMode grad(true);
      y = r->block(x);
    }
    // The block's parameters get their gradients here; the input's goes back to the graph.
    torch::autograd::backward({y}, {grads[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor Checkpointed(std::function<torch::Tensor(const torch::Tensor&)> block,
                           const torch::Tensor& x) {
  if (!torch::GradMode::is_enabled()) return block(x);
  auto r = std::make_shared<Recompute>();
  r->block = std::move(block);
  // An input without gradient (a frozen embedding's output, under LoRA) would leave the output
  // without one, and the block's own trainable parameters without theirs.
  return CheckpointFunction::apply(x.requires_grad() ? x : x.detach().requires_grad_(true), r);
}

}  // namespace kiln
