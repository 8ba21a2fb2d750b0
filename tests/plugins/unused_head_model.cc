// A test model whose parameters are not all used by its forward: an MLP (the blobs experiment's
// options) with a second head, `spare`, that no step touches. Data parallel must be told
// (trainer.ddp_find_unused_parameters=true), as PyTorch's DDP must.
#include <kiln/models.h>
#include <kiln/plugin.h>
#include <kiln/registry.h>

#include <vector>

namespace {

class UnusedHeadMlp : public kiln::Model {
 public:
  UnusedHeadMlp(int64_t in_features, int64_t hidden, int64_t num_classes) {
    fc_ = register_module("fc", torch::nn::Linear(in_features, hidden));
    head_ = register_module("head", torch::nn::Linear(hidden, num_classes));
    spare_ = register_module("spare", torch::nn::Linear(hidden, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    return head_->forward(torch::relu(fc_->forward(x)));
  }

 private:
  torch::nn::Linear fc_{nullptr}, head_{nullptr}, spare_{nullptr};
};

struct Options {
  int64_t in_features = 0;
  std::vector<int64_t> hidden = {32};
  int64_t num_classes = 0;
  double dropout = 0;  // accepted for the blobs experiment's overrides; unused
};

void Register(kiln::Registrar& registrar) {
  registrar.Add<kiln::Model>(
      "unused_head_mlp", "An MLP with a head its forward never uses (a data-parallel test)",
      kiln::OptionBinding<Options>()
          .Required("in_features", &Options::in_features, "input features", kiln::AtLeast(1))
          .Field("hidden", &Options::hidden, "hidden widths (the first is used)")
          .Required("num_classes", &Options::num_classes, "outputs", kiln::AtLeast(1))
          .Field("dropout", &Options::dropout, "unused"),
      [](const Options& o) -> absl::StatusOr<std::shared_ptr<kiln::Model>> {
        return std::make_shared<UnusedHeadMlp>(o.in_features, o.hidden.empty() ? 32 : o.hidden[0],
                                               o.num_classes);
      });
}

}  // namespace

KILN_PLUGIN("unused_head_model", "1.0.0", Register, KILN_PLUGIN_CONFIG_DIR)
