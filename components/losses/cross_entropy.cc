// cross_entropy: of scores [B, classes] (logits, computed in float32) against class ids [B],
// with label smoothing (torch.nn.CrossEntropyLoss). The file to copy for a new loss.
#include "lib/registry/registry.h"
#include "lib/trainer/loss.h"

namespace kiln {
namespace {

struct CrossEntropyOptions {
  double label_smoothing = 0.0;
};

class CrossEntropy : public Loss {
 public:
  explicit CrossEntropy(const CrossEntropyOptions& o) : label_smoothing_(o.label_smoothing) {}

  torch::Tensor Forward(const torch::Tensor& output, const torch::Tensor& target) override {
    return torch::nn::functional::cross_entropy(
        output.to(torch::kFloat32), target,
        torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(label_smoothing_));
  }

 private:
  double label_smoothing_;
};

KILN_REGISTER_BOUND(Loss, "cross_entropy",
                    "Cross-entropy of logits against class ids, with label smoothing",
                    OptionBinding<CrossEntropyOptions>().Field(
                        "label_smoothing", &CrossEntropyOptions::label_smoothing,
                        "share of the target spread over all classes, in [0, 1)",
                        InHalfOpenRange(0, 1)),
                    [](const CrossEntropyOptions& o) -> absl::StatusOr<std::shared_ptr<Loss>> {
                      return std::make_shared<CrossEntropy>(o);
                    });

}  // namespace
}  // namespace kiln
