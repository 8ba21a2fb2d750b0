// `rowwise_adagrad_adam` (components/optim/rowwise_adagrad_adam.h).
#include "components/optim/rowwise_adagrad_adam.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "components/common/parallel.h"
#include "components/optim/adam_options.h"
#include "lib/registry/registry.h"

namespace kiln {

namespace {

// The row-wise step of a float32 table on the CPU in one pass, without coalescing the gradient
// first (at a batch's shape, coalesce, the mean of squares and the index_add/index_select pairs
// were each a separate op per table: 40% of a DLRM step). The (row, position) pairs are sorted so
// that duplicates are summed in their order, as coalesce sums them.
struct FusedRowwise {
  torch::Tensor weights, accumulator, grad;
  torch::Tensor indices, values;  // grad's: [nnz], [nnz, dim]
  float lr, eps;

  // The tensors' preparation (ATen ops: on the calling thread, under its no-grad guard). Empty:
  // another dtype, layout or device, which takes the op-by-op path.
  static std::optional<FusedRowwise> Prepare(const torch::Tensor& weights,
                                             const torch::Tensor& accumulator,
                                             const torch::Tensor& grad, double lr, double eps) {
    if (!weights.device().is_cpu() || weights.scalar_type() != torch::kFloat32 ||
        !weights.is_contiguous() || weights.dim() != 2 || grad.sparse_dim() != 1 ||
        !accumulator.is_contiguous() || accumulator.scalar_type() != torch::kFloat32) {
      return std::nullopt;
    }
    const int64_t nnz = grad._nnz();
    FusedRowwise job{
        weights,
        accumulator,
        grad,
        grad._indices()[0].contiguous(),
        grad._values().to(torch::kFloat32).reshape({nnz, weights.size(1)}).contiguous(),
        static_cast<float>(lr),
        static_cast<float>(eps)};
    return job;
  }

  // The step itself, plain C++ (any thread). False, with nothing changed, where an index is out of
  // the table's rows (the op-by-op path then says so).
  bool Run() const {
    const int64_t nnz = indices.numel(), dim = weights.size(1);
    const int64_t* index = indices.data_ptr<int64_t>();
    const float* value = values.data_ptr<float>();
    float* w = weights.data_ptr<float>();
    float* acc = accumulator.data_ptr<float>();
    std::vector<std::pair<int64_t, int64_t>> order(static_cast<size_t>(nnz));
    for (int64_t i = 0; i < nnz; ++i) {
      if (index[i] < 0 || index[i] >= weights.size(0)) return false;
      order[static_cast<size_t>(i)] = {index[i], i};
    }
    std::sort(order.begin(), order.end());
    std::vector<float> sum(static_cast<size_t>(dim));
    for (size_t i = 0; i < order.size();) {
      const int64_t row = order[i].first;
      std::copy_n(value + order[i].second * dim, dim, sum.begin());
      for (++i; i < order.size() && order[i].first == row; ++i) {
        const float* more = value + order[i].second * dim;
        for (int64_t d = 0; d < dim; ++d) sum[static_cast<size_t>(d)] += more[d];
      }
      float squares = 0;
      for (float g : sum) squares += g * g;
      acc[row] += squares / static_cast<float>(dim);
      const float scale = lr / (std::sqrt(acc[row]) + eps);
      float* out = w + row * dim;
      for (int64_t d = 0; d < dim; ++d) out[d] -= sum[static_cast<size_t>(d)] * scale;
    }
    return true;
  }
};

}  // namespace

torch::Tensor RowwiseAdagradAdam::step(LossClosure closure) {
  // The sparse gradients take the row-wise step here and are hidden from Adam's, then restored
  // (the trainer clears them as usual). The tables' fused steps run in parallel, one table per
  // task (each touches its own table and accumulator alone, so the results do not depend on the
  // thread count); the others, op by op, after them.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> hidden;
  {
    torch::NoGradGuard no_grad;
    std::vector<FusedRowwise> fused;
    std::vector<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, double>> op_by_op;
    for (auto& group : param_groups_) {
      double lr = sparse_lr_ * group.options().get_lr() / base_lr_;
      for (auto& p : group.params()) {
        if (!p.grad().defined() || !p.grad().is_sparse()) continue;
        torch::Tensor accumulator = RowwiseState(p);
        std::optional<FusedRowwise> job =
            FusedRowwise::Prepare(p.detach(), accumulator, p.grad(), lr, sparse_eps_);
        if (job) {
          fused.push_back(std::move(*job));
        } else {
          op_by_op.emplace_back(p.detach(), accumulator, p.grad(), lr);
        }
        hidden.emplace_back(p, p.grad());
      }
    }
    std::vector<char> done(fused.size(), 0);
    ParallelFor(0, static_cast<int64_t>(fused.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        done[static_cast<size_t>(i)] = fused[static_cast<size_t>(i)].Run();
    });
    for (size_t i = 0; i < fused.size(); ++i) {
      // An index out of range: the op-by-op path, which refuses it in ATen's words.
      const FusedRowwise& job = fused[i];
      if (!done[i]) RowwiseStepOps(job.weights, job.accumulator, job.grad, job.lr);
    }
    for (auto& [weights, accumulator, grad, lr] : op_by_op)
      RowwiseStepOps(weights, accumulator, grad, lr);
    for (auto& [param, grad] : hidden) param.mutable_grad() = torch::Tensor();
  }
  torch::Tensor loss = FusedAdam::step(std::move(closure));
  for (auto& [param, grad] : hidden) param.mutable_grad() = grad;
  return loss;
}

torch::Tensor RowwiseAdagradAdam::RowwiseState(const torch::Tensor& param) {
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
  return state.exp_avg_sq();
}

void RowwiseAdagradAdam::RowwiseStepOps(const torch::Tensor& weights,
                                        const torch::Tensor& accumulator, const torch::Tensor& grad,
                                        double lr) {
  torch::Tensor g = grad.coalesce();
  torch::Tensor rows = g.indices()[0];
  if (rows.numel() == 0) return;  // no row touched (a sharded table's piece no batch asked of)
  torch::Tensor values = g.values().reshape({rows.size(0), -1});
  accumulator.index_add_(0, rows, values.to(torch::kFloat32).pow(2).mean(1));
  torch::Tensor scale = lr / (accumulator.index_select(0, rows).sqrt() + sparse_eps_);
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
