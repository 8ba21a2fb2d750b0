// Adam for the dense parameters and row-wise Adagrad for the embedding tables, in one optimizer
// (DLRM's recipe; FBGEMM's EXACT_ROWWISE_ADAGRAD for the tables). A parameter whose gradient is
// sparse (an embedding table with sparse=true: only the rows the batch touched) takes the row-wise
// step, on those rows alone; no dense gradient or state of a whole table is made. For each touched
// row r with gradient g (duplicates summed), of width D:
//   acc[r] += sum(g^2) / D;   w[r] -= lr_sparse * g / (sqrt(acc[r]) + eps_sparse)
// One float accumulator per row. Every other parameter takes the fused Adam step. The tables' lr
// follows the groups' (a schedule scales both): lr_sparse = sparse_lr * group lr / lr.
//
// The accumulator lives in the table's torch Adam state as exp_avg_sq [rows] (exp_avg empty), so
// checkpoints save and load it as Adam's own.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "components/optim/fused_adam.h"

namespace kiln {

class RowwiseAdagradAdam : public FusedAdam {
 public:
  RowwiseAdagradAdam(std::vector<torch::optim::OptimizerParamGroup> groups,
                     const torch::optim::AdamOptions& defaults, double sparse_lr, double sparse_eps)
      : FusedAdam(std::move(groups), defaults),
        base_lr_(defaults.lr()),
        sparse_lr_(sparse_lr),
        sparse_eps_(sparse_eps) {}

  torch::Tensor step(LossClosure closure = nullptr) override;
  absl::Status MakeCapturable() override {
    return absl::FailedPreconditionError("rowwise_adagrad_adam steps sparse gradients");
  }

 private:
  // The table's row accumulator (made on its first step), its step counted.
  torch::Tensor RowwiseState(const torch::Tensor& param);
  // The row-wise step in ATen ops (any dtype or device).
  void RowwiseStepOps(const torch::Tensor& weights, const torch::Tensor& accumulator,
                      const torch::Tensor& grad, double lr);

  double base_lr_, sparse_lr_, sparse_eps_;
};

}  // namespace kiln
