// `rowwise_adagrad_adam` (components/optim/rowwise_adagrad_adam.h).
#include "components/optim/rowwise_adagrad_adam.h"

#include <utility>

#include "components/optim/adam_options.h"
#include "lib/registry/registry.h"

namespace kiln {

torch::Tensor RowwiseAdagradAdam::step(LossClosure closure) {
  // The sparse gradients take the row-wise step here and are hidden from Adam's, then restored
  // (the trainer clears them as usual).
  std::vector<std::pair<torch::Tensor, torch::Tensor>> hidden;
  {
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups_) {
      double lr = sparse_lr_ * group.options().get_lr() / base_lr_;
      for (auto& p : group.params()) {
        if (!p.grad().defined() || !p.grad().is_sparse()) continue;
        RowwiseStep(p, p.grad(), lr);
        hidden.emplace_back(p, p.grad());
        p.mutable_grad() = torch::Tensor();
      }
    }
  }
  torch::Tensor loss = FusedAdam::step(std::move(closure));
  for (auto& [param, grad] : hidden) param.mutable_grad() = grad;
  return loss;
}

void RowwiseAdagradAdam::RowwiseStep(const torch::Tensor& param, const torch::Tensor& grad,
                                     double lr) {
  auto key = param.unsafeGetTensorImpl();
  auto found = state_.find(key);
  if (found == state_.end()) {
    auto state = std::make_unique<torch::optim::AdamParamState>();
    state->step(0);
    state->exp_avg(torch::empty({0}, param.options().dtype(torch::kFloat32)));
    state->exp_avg_sq(torch::zeros({param.size(0)}, param.options().dtype(torch::kFloat32)));
    found = state_.emplace(key, std::move(state)).first;
  }
  auto& state = static_cast<torch::optim::AdamParamState&>(*found->second);
  state.step(state.step() + 1);
  torch::Tensor g = grad.coalesce();
  torch::Tensor rows = g.indices()[0];
  if (rows.numel() == 0) return;  // no row touched (a sharded table's piece no batch asked of)
  torch::Tensor values = g.values().reshape({rows.size(0), -1});
  torch::Tensor accumulator = state.exp_avg_sq();
  accumulator.index_add_(0, rows, values.to(torch::kFloat32).pow(2).mean(1));
  torch::Tensor scale = lr / (accumulator.index_select(0, rows).sqrt() + sparse_eps_);
  torch::Tensor weights = param.detach();
  weights.index_add_(0, rows, (values * scale.unsqueeze(1)).neg().to(weights.scalar_type()));
}

namespace {

struct RowwiseAdagradAdamOptions : AdamOptions {
  double sparse_lr = 0.01;
  double sparse_eps = 1e-8;
};

OptionBinding<RowwiseAdagradAdamOptions> RowwiseAdagradAdamBinding() {
  return AdamBinding<RowwiseAdagradAdamOptions>()
      .Field("sparse_lr", &RowwiseAdagradAdamOptions::sparse_lr,
             "row-wise Adagrad's learning rate for the parameters with sparse gradients (tables)",
             GreaterThan(0))
      .Field("sparse_eps", &RowwiseAdagradAdamOptions::sparse_eps,
             "added to row-wise Adagrad's denominator", AtLeast(0));
}

KILN_REGISTER_BOUND(
    OptimizerFactory, "rowwise_adagrad_adam",
    "Row-wise Adagrad on the sparse-gradient tables (only the rows a batch touched), Adam on the "
    "rest (DLRM's recipe)",
    RowwiseAdagradAdamBinding(),
    [](const RowwiseAdagradAdamOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<OptimizerFactory>> {
      double sparse_lr = o.sparse_lr, sparse_eps = o.sparse_eps;
      return MakeAdamFactory<FusedAdam, torch::optim::AdamOptions>(
          o, context,
          [sparse_lr, sparse_eps](std::vector<torch::optim::OptimizerParamGroup> groups,
                                  const torch::optim::AdamOptions& defaults) {
            return std::unique_ptr<torch::optim::Optimizer>(std::make_unique<RowwiseAdagradAdam>(
                std::move(groups), defaults, sparse_lr, sparse_eps));
          },
          RowwiseAdagradAdamBinding());
    });

}  // namespace
}  // namespace kiln
