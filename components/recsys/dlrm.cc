// `dlrm`: the DLRM of Naumov et al. 2019 (facebookresearch/dlrm's dlrm_s_pytorch.py, TorchRec's
// DLRM): log(1 + x) of the integer features through a bottom MLP (dense_arch); one embedding table
// per categorical feature (sparse_arch); the pairwise dot products of those 27 vectors (the strict
// upper triangle, as arch_interaction_itself=False) beside the bottom MLP's output; a top MLP
// (over_arch) to one logit. Tables give sparse gradients (only the rows a batch touched) unless
// sparse=false; rowwise_adagrad_adam steps them. With several workers the tables are sharded
// across them (trainer.table_sharding), the MLPs data-parallel.
//
// `dcn_v2`: the same with DCN-v2's cross network (Wang et al. 2021; TorchRec's DLRM_DCN with
// LowRankCrossNet) in place of the dot interaction: x0 is the 27 vectors concatenated, and each of
// dcn_num_layers layers computes x_{l+1} = x0 * (W_l V_l x_l + b_l) + x_l, V_l of rank
// dcn_low_rank_dim; the top MLP reads the last x.
#include <ATen/CPUGeneratorImpl.h>

#include "absl/strings/str_cat.h"
#include "components/recsys/click_model.h"
#include "components/recsys/criteo_line.h"
#include "components/recsys/table_sizes.h"
#include "lib/base/status_macros.h"
#include "lib/distributed/sharded_tables.h"
#include "lib/registry/registry.h"

namespace kiln::recsys {
namespace {

struct DlrmOptions {
  int64_t embedding_dim = 16;
  std::vector<int64_t> num_embeddings_per_feature = std::vector<int64_t>(kCriteoSparse, 100000);
  std::vector<int64_t> dense_arch_layer_sizes = {64, 16};
  std::vector<int64_t> over_arch_layer_sizes = {64, 32, 1};
  bool sparse = true;
};

struct DcnV2Options : DlrmOptions {
  int64_t dcn_num_layers = 3;
  int64_t dcn_low_rank_dim = 512;
};

class Dlrm : public ClickModel, public distributed::EmbeddingTables {
 public:
  // `cross`: dcn_v2's cross network in place of the dot interaction; null: dlrm.
  Dlrm(const DlrmOptions& o, const DcnV2Options* cross) : sizes_(o.num_embeddings_per_feature) {
    dense_arch_ = register_module("dense_arch", torch::nn::Sequential());
    int64_t width = kCriteoDense;
    for (int64_t h : o.dense_arch_layer_sizes) {
      dense_arch_->push_back(torch::nn::Linear(width, h));
      dense_arch_->push_back(torch::nn::ReLU());
      width = h;
    }
    // dlrm_s_pytorch.py's initialization: uniform in +-sqrt(1 / rows), drawn per block of rows
    // from a generator of its own (seeded from the global one, table by table), so that a worker
    // building only its piece of a table (several workers, sharded_tables.h) gets the rows the
    // whole table would have.
    for (size_t j = 0; j < sizes_.size(); ++j)
      table_seeds_.push_back(torch::randint(int64_t{1} << 62, {1}, torch::kInt64).item<int64_t>());
    auto tables = register_module("sparse_arch", std::make_shared<torch::nn::Module>());
    tables_ = distributed::BuildTables(
        sizes_, o.embedding_dim, o.sparse,
        [this](size_t j, int64_t first, torch::Tensor out) { InitRows(j, first, out); });
    for (size_t j = 0; j < tables_.size(); ++j)
      tables->register_module(absl::StrCat("t_cat_", j), tables_[j]);
    int64_t vectors = static_cast<int64_t>(sizes_.size()) + 1;
    if (cross == nullptr) {
      torch::Tensor pairs = torch::triu_indices(vectors, vectors, 1);
      pairs_ = pairs[0] * vectors + pairs[1];  // in the flattened [B, (F + 1)^2] products
      width = o.embedding_dim + vectors * (vectors - 1) / 2;
    } else {
      width = vectors * o.embedding_dim;
      auto crossnet = register_module("crossnet", std::make_shared<torch::nn::Module>());
      auto v = crossnet->register_module("V", torch::nn::ModuleList());
      auto w = crossnet->register_module("W", torch::nn::ModuleList());
      for (int64_t l = 0; l < cross->dcn_num_layers; ++l) {
        cross_v_.push_back(torch::nn::Linear(
            torch::nn::LinearOptions(width, cross->dcn_low_rank_dim).bias(false)));
        cross_w_.push_back(torch::nn::Linear(cross->dcn_low_rank_dim, width));
        v->push_back(cross_v_.back());
        w->push_back(cross_w_.back());
      }
    }
    over_arch_ = register_module("over_arch", torch::nn::Sequential());
    for (size_t i = 0; i < o.over_arch_layer_sizes.size(); ++i) {
      int64_t h = o.over_arch_layer_sizes[i];
      over_arch_->push_back(torch::nn::Linear(width, h));
      if (i + 1 < o.over_arch_layer_sizes.size()) over_arch_->push_back(torch::nn::ReLU());
      width = h;
    }
  }

  const std::vector<int64_t>& num_embeddings() const override { return sizes_; }
  int64_t num_dense() const override { return kCriteoDense; }
  std::vector<torch::nn::Embedding> embedding_tables() const override { return tables_; }
  std::vector<int64_t> table_rows() const override { return sizes_; }

  torch::Tensor forward(torch::Tensor input) override {
    using torch::indexing::Slice;
    torch::Tensor dense =
        torch::log1p(input.index({Slice(), Slice(0, kCriteoDense)}).to(torch::kFloat32));
    torch::Tensor x = dense_arch_->forward(dense);  // [B, D]
    // The tables' rows [B, F, D]: one lookup each, or, sharded across workers, from the workers
    // holding them (lib/distributed/sharded_tables.h).
    torch::Tensor rows = distributed::LookupTables(
        *this, input.narrow(1, kCriteoDense, static_cast<int64_t>(tables_.size())));
    torch::Tensor t = torch::cat({x.unsqueeze(1), rows}, 1);  // [B, F + 1, D]
    if (!cross_v_.empty()) {
      torch::Tensor x0 = t.flatten(1), xl = x0;
      for (size_t l = 0; l < cross_v_.size(); ++l)
        xl = x0 * cross_w_[l]->forward(cross_v_[l]->forward(xl)) + xl;
      return over_arch_->forward(xl).squeeze(1);
    }
    torch::Tensor z = torch::bmm(t, t.transpose(1, 2));  // [B, F + 1, F + 1]
    // One index_select of the flattened products (its backward an index_add, where indexing
    // with two index tensors takes index_put's sorting accumulate).
    torch::Tensor pairs = z.flatten(1).index_select(1, pairs_.to(z.device()));
    return over_arch_->forward(torch::cat({x, pairs}, 1)).squeeze(1);
  }

 private:
  // Rows first..first + out.size(0) of table j, initialized.
  void InitRows(size_t j, int64_t first, torch::Tensor out) const {
    constexpr int64_t kBlock = 4096;
    const double bound = std::sqrt(1.0 / static_cast<double>(sizes_[j]));
    const int64_t end = first + out.size(0);
    for (int64_t block = first / kBlock; block * kBlock < end; ++block) {
      const int64_t begin = block * kBlock, rows = std::min(kBlock, sizes_[j] - begin);
      auto generator =
          at::detail::createCPUGenerator(static_cast<uint64_t>(table_seeds_[j]) ^
                                         (static_cast<uint64_t>(block) * 0x9E3779B97F4A7C15ULL));
      torch::Tensor values =
          torch::empty({rows, out.size(1)}, out.options()).uniform_(-bound, bound, generator);
      const int64_t from = std::max(first, begin), to = std::min(end, begin + rows);
      out.narrow(0, from - first, to - from).copy_(values.narrow(0, from - begin, to - from));
    }
  }

  std::vector<int64_t> sizes_;
  std::vector<int64_t> table_seeds_;
  torch::nn::Sequential dense_arch_{nullptr}, over_arch_{nullptr};
  std::vector<torch::nn::Embedding> tables_;
  torch::Tensor pairs_;                               // dlrm: the pairs (i < j) as i * (F + 1) + j
  std::vector<torch::nn::Linear> cross_v_, cross_w_;  // dcn_v2: each cross layer's V_l, W_l
};

// The options dlrm and dcn_v2 share, declared once on S.
template <typename S>
OptionBinding<S> DlrmBinding() {
  using O = DlrmOptions;
  return OptionBinding<S>()
      .Field("embedding_dim", static_cast<int64_t S::*>(&O::embedding_dim),
             "width of every table's rows", AtLeast(1))
      .template Parsed<std::vector<int64_t>>(
          "num_embeddings_per_feature",
          static_cast<std::vector<int64_t> S::*>(&O::num_embeddings_per_feature), OptionType::kAny,
          "100000", kTableSizesDoc, kTableSizesWhat,
          [](const config::Node& n) { return ReadTableSizes(n, kCriteoSparse); })
      .Field("dense_arch_layer_sizes",
             static_cast<std::vector<int64_t> S::*>(&O::dense_arch_layer_sizes),
             "the bottom MLP's widths (each with ReLU); the last must be embedding_dim", NonEmpty())
      .Field("over_arch_layer_sizes",
             static_cast<std::vector<int64_t> S::*>(&O::over_arch_layer_sizes),
             "the top MLP's widths (ReLU between); the last must be 1, the logit", NonEmpty())
      .Field("sparse", static_cast<bool S::*>(&O::sparse),
             "tables give sparse gradients (the rows a batch touched only)");
}

// Refuses widths the interaction or the logit cannot take.
absl::Status CheckLayerSizes(const DlrmOptions& o) {
  if (o.dense_arch_layer_sizes.back() != o.embedding_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.dense_arch_layer_sizes must end with embedding_dim (", o.embedding_dim,
                     "), not ", o.dense_arch_layer_sizes.back(),
                     ": the interaction takes the bottom MLP's output beside the table rows"));
  }
  if (o.over_arch_layer_sizes.back() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.over_arch_layer_sizes must end with 1 (the click logit), not ",
                     o.over_arch_layer_sizes.back()));
  }
  for (int64_t h : o.dense_arch_layer_sizes)
    if (h < 1) return absl::InvalidArgumentError("model.dense_arch_layer_sizes must be >= 1");
  for (int64_t h : o.over_arch_layer_sizes)
    if (h < 1) return absl::InvalidArgumentError("model.over_arch_layer_sizes must be >= 1");
  return absl::OkStatus();
}

KILN_REGISTER_BOUND(Model, "dlrm",
                    "DLRM: bottom MLP on the integer features, a table per categorical feature, "
                    "pairwise dot interaction, top MLP to one click logit",
                    DlrmBinding<DlrmOptions>(),
                    [](const DlrmOptions& o) -> absl::StatusOr<std::shared_ptr<Model>> {
                      KILN_RETURN_IF_ERROR(CheckLayerSizes(o));
                      return std::make_shared<Dlrm>(o, nullptr);
                    });

KILN_REGISTER_BOUND(
    Model, "dcn_v2",
    "DLRM with DCN-v2's low-rank cross network in place of the dot interaction (TorchRec's "
    "DLRM_DCN)",
    DlrmBinding<DcnV2Options>()
        .Field("dcn_num_layers", &DcnV2Options::dcn_num_layers, "cross layers", AtLeast(1))
        .Field("dcn_low_rank_dim", &DcnV2Options::dcn_low_rank_dim,
               "rank of each cross layer's weight (V_l: width -> rank, W_l: rank -> width)",
               AtLeast(1)),
    [](const DcnV2Options& o) -> absl::StatusOr<std::shared_ptr<Model>> {
      KILN_RETURN_IF_ERROR(CheckLayerSizes(o));
      return std::make_shared<Dlrm>(o, &o);
    });

}  // namespace
}  // namespace kiln::recsys
