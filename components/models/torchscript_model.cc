// `torchscript`: a model written anywhere (a torch.nn.Module in Python, torch.jit.script'ed and
// saved) trained by kiln's loop like a built-in one. Its parameters and buffers are registered
// under their own names (layers.0.weight, ...), so checkpoints, optimizers, freezing, safetensors
// export and PyTorch's state_dict agree; the forward is TorchScript's, run by LibTorch without
// Python. kiln.fit(..., model=module) (docs/python.md) saves the module and names it here.
#include <torch/script.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "components/models/model.h"
#include "lib/base/error_text.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

class TorchScriptModel : public Model {
 public:
  explicit TorchScriptModel(torch::jit::Module module) : module_(std::move(module)) {
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      auto [owner, name] = Owner(p.name);
      owner->register_parameter(name, p.value, p.value.requires_grad());
    }
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
      auto [owner, name] = Owner(b.name);
      owner->register_buffer(name, b.value);
    }
  }

  torch::Tensor forward(torch::Tensor input) override {
    return module_.forward({input}).toTensor();
  }

  void train(bool on = true) override {
    torch::nn::Module::train(on);
    module_.train(on);
  }

 private:
  // The submodule that holds "a.b.weight" (made on the way) and the last part of the name.
  std::pair<torch::nn::Module*, std::string> Owner(const std::string& dotted) {
    std::vector<std::string> parts = absl::StrSplit(dotted, '.');
    torch::nn::Module* at = this;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto children = at->named_children();
      if (auto* child = children.find(parts[i])) {
        at = child->get();
      } else {
        at = at->register_module(parts[i], std::make_shared<torch::nn::Module>()).get();
      }
    }
    return {at, parts.back()};
  }

  torch::jit::Module module_;
};

struct TorchScriptOptions {
  std::string path;
};

KILN_REGISTER_BOUND(
    Model, "torchscript",
    "A TorchScript module file (torch.jit.script(model).save(path)), trained as a kiln model",
    OptionBinding<TorchScriptOptions>().Required("path", &TorchScriptOptions::path,
                                                 "the .pt file torch.jit.save wrote"),
    [](const TorchScriptOptions& o) -> absl::StatusOr<std::shared_ptr<Model>> {
      try {
        return std::make_shared<TorchScriptModel>(torch::jit::load(o.path));
      } catch (const std::exception& e) {
        std::string what = e.what();
        return absl::InvalidArgumentError(absl::StrCat(
            "model.path '", o.path, "': not a TorchScript module (", ErrorLine(what), ")"));
      }
    });

}  // namespace
}  // namespace kiln
