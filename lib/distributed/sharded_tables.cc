#include "lib/distributed/sharded_tables.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/distributed/sharding_units.h"

namespace kiln::distributed {

EmbeddingTables::~EmbeddingTables() = default;

// Where one table's rows are, and which of them a rank holds. Outside the anonymous namespace
// because ShardedTables::Table (which has external linkage) holds one.
namespace sharded_tables_detail {

struct Layout {
  int64_t rows = 0;
  bool row_wise = false;
  int placed = 0;             // table-wise: the rank holding it
  int64_t rows_per_rank = 0;  // row-wise: ceil(rows / N)
  int rank = 0;               // the rank this layout's piece is for
  int world = 1;

  // `whole` (rows first) cut to this rank's piece: a row block, zero-padded (row-wise); the whole
  // table on its rank and an empty piece elsewhere (table-wise).
  torch::Tensor Piece(const torch::Tensor& whole) const {
    if (!row_wise) return placed == rank ? whole.contiguous() : whole.narrow(0, 0, 0).clone();
    return RowsOfRank(whole, rank, world);
  }
};

}  // namespace sharded_tables_detail

using sharded_tables_detail::Layout;

namespace {

// Table-wise tables largest first onto the rank holding the fewest rows; with kAuto, row-wise for
// a table larger than an even share (the tables share one width, so rows stand for bytes).
std::vector<Layout> Plan(const std::vector<int64_t>& rows, int world, int rank,
                         TableShardingKind kind) {
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  const int64_t share = (total + world - 1) / world;
  std::vector<Layout> plan(rows.size());
  std::vector<size_t> table_wise;
  for (size_t j = 0; j < rows.size(); ++j) {
    Layout& t = plan[j];
    t.rows = rows[j];
    t.rank = rank;
    t.world = world;
    t.row_wise = kind == TableShardingKind::kRowWise ||
                 (kind == TableShardingKind::kAuto && world > 1 && rows[j] > share);
    if (t.row_wise) {
      t.rows_per_rank = RowsPerRank(t.rows, world);
    } else {
      table_wise.push_back(j);
    }
  }
  std::stable_sort(table_wise.begin(), table_wise.end(),
                   [&](size_t a, size_t b) { return rows[a] > rows[b]; });
  std::vector<int64_t> load(static_cast<size_t>(world), 0);
  for (size_t j : table_wise) {
    int least = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    plan[j].placed = least;
    load[static_cast<size_t>(least)] += rows[j];
  }
  return plan;
}

// The table pieces of this process, by parameter.
std::unordered_map<const void*, Layout>& Pieces() {
  static std::unordered_map<const void*, Layout> pieces;
  return pieces;
}

std::optional<TablePlacement>& Placement() {
  static std::optional<TablePlacement> placement;
  return placement;
}

}  // namespace

struct ShardedTables::Table {
  torch::nn::Embedding module{nullptr};
  torch::Tensor param;  // the module's weight: this rank's piece while sharded
  std::string name;
  Layout layout;
  int64_t bytes(int64_t dim) const { return layout.rows * dim * param.element_size(); }
};

namespace {

std::unordered_map<const EmbeddingTables*, ShardedTables*>& InstalledLookups() {
  static std::unordered_map<const EmbeddingTables*, ShardedTables*> installed;
  return installed;
}

// c10d's variable all-to-all: `in`'s dimension-0 blocks of in_splits go to the ranks in order;
// `out` receives out_splits from each.
void AllToAll(c10d::ProcessGroup& group, torch::Tensor& out, torch::Tensor& in,
              std::vector<int64_t> out_splits, std::vector<int64_t> in_splits) {
  group.alltoall_base(out, in, out_splits, in_splits)->wait();
}

// Rows sent to the ranks that asked for them; the backward sends their gradients back, scaled
// (1 / N: averaged over ranks, as data parallel averages the dense gradients).
struct RowsAllToAll : public torch::autograd::Function<RowsAllToAll> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor rows,
                               int64_t group, std::vector<int64_t> send, std::vector<int64_t> recv,
                               double scale) {
    auto* g = reinterpret_cast<c10d::ProcessGroup*>(group);
    ctx->saved_data["group"] = group;
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    ctx->saved_data["scale"] = scale;
    const int64_t n = std::accumulate(recv.begin(), recv.end(), int64_t{0});
    torch::Tensor in = rows.contiguous();
    torch::Tensor out = torch::empty({n, rows.size(1)}, rows.options());
    AllToAll(*g, out, in, recv, send);
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* g = reinterpret_cast<c10d::ProcessGroup*>(ctx->saved_data["group"].toInt());
    std::vector<int64_t> send = ctx->saved_data["send"].toIntVector();
    std::vector<int64_t> recv = ctx->saved_data["recv"].toIntVector();
    const int64_t n = std::accumulate(send.begin(), send.end(), int64_t{0});
    torch::Tensor in = (grads[0] * ctx->saved_data["scale"].toDouble()).contiguous();
    torch::Tensor out = torch::empty({n, in.size(1)}, in.options());
    AllToAll(*g, out, in, send, recv);
    return {out, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The permutation that undoes `order` (a permutation of 0..n-1).
torch::Tensor Inverse(const torch::Tensor& order) {
  torch::Tensor inverse = torch::empty_like(order);
  inverse.index_put_({order}, torch::arange(order.size(0), order.options()));
  return inverse;
}

std::vector<int64_t> ToVector(const torch::Tensor& t) {
  torch::Tensor c = t.to(torch::kCPU).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

}  // namespace

namespace {

// Every table's rows in one op: rows[b, j] = tables[j][ids[b, j]], float32 on the CPU, and in the
// backward each table's sparse gradient made directly (indices and values of its own, so that
// autograd's accumulation takes them without a copy). At a DLRM batch's shape the per-table
// Embedding lookups, their backwards and the copies of their gradients were a quarter of a step.
struct GatherTableRows : torch::autograd::Function<GatherTableRows> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& ids,
                               torch::TensorList tables) {
    torch::Tensor index = ids.contiguous();
    const int64_t batch = index.size(0), count = index.size(1), dim = tables[0].size(1);
    std::vector<const float*> from;
    std::vector<int64_t> sizes;
    for (const auto& t : tables) {
      from.push_back(t.data_ptr<float>());
      sizes.push_back(t.size(0));
    }
    const int64_t* id = index.data_ptr<int64_t>();
    for (int64_t i = 0; i < batch * count; ++i) {
      TORCH_CHECK(id[i] >= 0 && id[i] < sizes[static_cast<size_t>(i % count)], "table ", i % count,
                  ": index ", id[i], " out of range of its ", sizes[static_cast<size_t>(i % count)],
                  " rows");
    }
    torch::Tensor out = torch::empty({batch, count, dim}, tables[0].options());
    float* to = out.data_ptr<float>();
    at::parallel_for(0, batch, 64, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        for (int64_t j = 0; j < count; ++j) {
          std::copy_n(from[static_cast<size_t>(j)] + id[b * count + j] * dim, dim,
                      to + (b * count + j) * dim);
        }
      }
    });
    ctx->saved_data["ids"] = index;
    ctx->saved_data["sizes"] = sizes;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::Tensor ids = ctx->saved_data["ids"].toTensor();
    std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    torch::Tensor grad = grads[0].to(torch::kFloat32).contiguous();  // [B, T, D]
    const int64_t batch = grad.size(0), count = grad.size(1), dim = grad.size(2);
    // Each table's rows of the gradient and their ids, in one pass over it.
    std::vector<torch::Tensor> values, indices;
    std::vector<float*> to_values;
    std::vector<int64_t*> to_indices;
    for (int64_t j = 0; j < count; ++j) {
      values.push_back(torch::empty({batch, dim}, grad.options()));
      indices.push_back(torch::empty({1, batch}, ids.options()));
      to_values.push_back(values.back().data_ptr<float>());
      to_indices.push_back(indices.back().data_ptr<int64_t>());
    }
    const float* from = grad.data_ptr<float>();
    const int64_t* id = ids.data_ptr<int64_t>();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t j = 0; j < count; ++j) {
        const auto k = static_cast<size_t>(j);
        std::copy_n(from + (b * count + j) * dim, dim, to_values[k] + b * dim);
        to_indices[k][b] = id[b * count + j];
      }
    }
    torch::autograd::variable_list out = {torch::Tensor()};
    for (size_t j = 0; j < sizes.size(); ++j) {
      out.push_back(at::_sparse_coo_tensor_unsafe(indices[j], values[j], {sizes[j], dim},
                                                  values[j].options().layout(torch::kSparse)));
    }
    return out;
  }
};

}  // namespace

torch::Tensor LookupTables(const EmbeddingTables& owner, const torch::Tensor& ids) {
  auto it = InstalledLookups().find(&owner);
  if (it != InstalledLookups().end()) return it->second->Lookup(ids);
  std::vector<torch::nn::Embedding> tables = owner.embedding_tables();
  std::vector<torch::Tensor> weights;
  for (const auto& table : tables) {
    const torch::Tensor& w = table->weight;
    if (!table->options.sparse() || !w.device().is_cpu() || w.scalar_type() != torch::kFloat32 ||
        !w.is_contiguous() || w.dim() != 2 || (!weights.empty() && w.size(1) != weights[0].size(1)))
      break;
    weights.push_back(w);
  }
  if (!tables.empty() && weights.size() == tables.size() && ids.scalar_type() == torch::kInt64)
    return GatherTableRows::apply(ids, torch::TensorList(weights));
  std::vector<torch::Tensor> rows;
  rows.reserve(tables.size());
  for (size_t j = 0; j < tables.size(); ++j)
    rows.push_back(tables[j]->forward(ids.select(1, static_cast<int64_t>(j))));
  return torch::stack(rows, 1);
}

ShardedTables::ShardedTables(std::shared_ptr<ProcessGroup> group, const EmbeddingTables& owner)
    : group_(std::move(group)), owner_(owner) {}

ShardedTables::~ShardedTables() {
  auto it = InstalledLookups().find(&owner_);
  if (it != InstalledLookups().end() && it->second == this) InstalledLookups().erase(it);
  for (const Table& t : tables_) Pieces().erase(t.param.unsafeGetTensorImpl());
}

absl::StatusOr<std::unique_ptr<ShardedTables>> ShardedTables::Create(
    std::shared_ptr<ProcessGroup> group, torch::nn::Module& model, const EmbeddingTables& owner,
    TableShardingKind kind) {
  std::unique_ptr<ShardedTables> s(new ShardedTables(group, owner));
  const int world = group->world_size(), rank = group->rank();
  std::unordered_map<const void*, std::string> names;
  for (const auto& p : model.named_parameters()) names[p.value().unsafeGetTensorImpl()] = p.key();
  const std::vector<int64_t> rows = owner.table_rows();
  const std::vector<torch::nn::Embedding> modules = owner.embedding_tables();
  if (modules.empty()) return absl::InvalidArgumentError("the model has no tables to shard");
  std::vector<Layout> plan = Plan(rows, world, rank, kind);
  std::vector<torch::Tensor> whole;  // tables built whole: rank 0's values go to every rank
  for (size_t j = 0; j < modules.size(); ++j) {
    Table t;
    t.module = modules[j];
    t.param = t.module->weight;
    const void* key = t.param.unsafeGetTensorImpl();
    t.name = names.count(key) ? names[key] : absl::StrCat("table ", j);
    auto built = Pieces().find(key);
    t.layout = built != Pieces().end() ? built->second : plan[j];
    if (s->dim_ == 0) s->dim_ = t.param.size(1);
    if (t.param.size(1) != s->dim_) {
      return absl::InvalidArgumentError(
          absl::StrCat("sharded tables must share one width: ", t.name, " has ", t.param.size(1),
                       " columns, the first table ", s->dim_));
    }
    if (built == Pieces().end()) whole.push_back(t.param.detach());
    s->tables_.push_back(std::move(t));
  }
  if (world > 1 && !whole.empty()) {
    absl::Status shared = group->Broadcast(whole);
    if (!shared.ok()) return shared;
  }
  std::vector<int64_t> block, placed;
  {
    torch::NoGradGuard no_grad;
    for (Table& t : s->tables_) {
      const void* key = t.param.unsafeGetTensorImpl();
      if (Pieces().count(key) == 0) {
        t.param.set_data(t.layout.Piece(t.param.data()));
        Pieces()[key] = t.layout;
      }
      block.push_back(t.layout.row_wise ? t.layout.rows_per_rank : 0);
      placed.push_back(t.layout.placed);
    }
  }
  s->block_ = torch::tensor(block, torch::kInt64);
  s->placed_ = torch::tensor(placed, torch::kInt64);
  InstalledLookups()[&owner] = s.get();
  return s;
}

void SetTablePlacement(std::optional<TablePlacement> placement) { Placement() = placement; }

std::vector<torch::nn::Embedding> BuildTables(
    const std::vector<int64_t>& rows, int64_t dim, bool sparse,
    const std::function<void(size_t, int64_t, torch::Tensor)>& init) {
  const std::optional<TablePlacement>& placement = Placement();
  const bool pieces = sparse && placement.has_value() && placement->world_size > 1;
  std::vector<Layout> plan;
  if (pieces) plan = Plan(rows, placement->world_size, placement->rank, placement->kind);
  std::vector<torch::nn::Embedding> tables;
  torch::NoGradGuard no_grad;
  // Embedding's own initialization draws from the global generator as many numbers as the rows
  // it holds, which a piece and a whole table would not draw alike; `init` sets the values, so
  // the draws are undone: the layers built after the tables start the same either way.
  at::Generator global = at::detail::getDefaultCPUGenerator();
  struct Restore {
    at::Generator generator;
    at::Tensor state;
    ~Restore() { generator.set_state(state); }
  } restore{global, global.get_state()};
  for (size_t j = 0; j < rows.size(); ++j) {
    if (!pieces) {
      auto table = torch::nn::Embedding(torch::nn::EmbeddingOptions(rows[j], dim).sparse(sparse));
      init(j, 0, table->weight);
      tables.push_back(table);
      continue;
    }
    const Layout& layout = plan[j];
    int64_t held = 0, first = 0;
    if (layout.row_wise) {
      held = layout.rows_per_rank;
      first = std::min(layout.rows, layout.rank * layout.rows_per_rank);
    } else if (layout.placed == layout.rank) {
      held = layout.rows;
    }
    auto table = torch::nn::Embedding(torch::nn::EmbeddingOptions(held, dim).sparse(sparse));
    table->weight.zero_();
    const int64_t real = std::min(held, layout.rows - first);
    if (real > 0) init(j, first, table->weight.narrow(0, 0, real));
    Pieces()[table->weight.unsafeGetTensorImpl()] = layout;
    tables.push_back(table);
  }
  return tables;
}

std::optional<TableRows> PieceRowsOf(const torch::Tensor& param) {
  auto it = Pieces().find(param.unsafeGetTensorImpl());
  if (it == Pieces().end()) return std::nullopt;
  const Layout& l = it->second;
  if (l.row_wise) return TableRows{l.rank * l.rows_per_rank, l.rows_per_rank, l.rows};
  return TableRows{0, l.placed == l.rank ? l.rows : 0, l.rows};
}

torch::Tensor ShardedTables::Lookup(const torch::Tensor& ids) {
  const int64_t batch = ids.size(0), features = static_cast<int64_t>(tables_.size());
  const int world = group_->world_size();
  torch::Tensor flat = ids.reshape({-1}).to(torch::kInt64);
  auto index = flat.options();
  torch::Tensor feature = torch::arange(features, index).repeat({batch});
  torch::Tensor block = block_.to(flat.device()).index_select(0, feature);
  torch::Tensor row_wise = block > 0;
  torch::Tensor divisor = block.clamp_min(1);
  // Where each (sample, table) row lives, and its row in that rank's piece.
  torch::Tensor holder = torch::where(row_wise, flat.div(divisor, "floor"),
                                      placed_.to(flat.device()).index_select(0, feature));
  torch::Tensor local = torch::where(row_wise, flat.remainder(divisor), flat);
  torch::Tensor order = std::get<1>(holder.sort(/*stable=*/true, 0, /*descending=*/false));
  torch::Tensor send_counts = torch::bincount(holder, {}, world);
  torch::Tensor pairs =
      torch::stack({feature.index_select(0, order), local.index_select(0, order)}, 1).contiguous();
  // How many rows each rank asks of this one, then the (table, row) pairs themselves.
  torch::Tensor recv_counts = torch::empty_like(send_counts);
  std::vector<int64_t> ones(static_cast<size_t>(world), 1);
  AllToAll(*group_->group(), recv_counts, send_counts, ones, ones);
  std::vector<int64_t> send = ToVector(send_counts), recv = ToVector(recv_counts);
  const int64_t asked = std::accumulate(recv.begin(), recv.end(), int64_t{0});
  torch::Tensor asked_pairs = torch::empty({asked, 2}, index);
  AllToAll(*group_->group(), asked_pairs, pairs, recv, send);
  // This rank's pieces answer: one lookup per table (empty ones too, so every piece takes part in
  // the backward and gets a gradient, possibly with no rows).
  torch::Tensor asked_table = asked_pairs.select(1, 0), asked_row = asked_pairs.select(1, 1);
  std::vector<torch::Tensor> found, positions;
  for (int64_t j = 0; j < features; ++j) {
    const Table& t = tables_[static_cast<size_t>(j)];
    torch::Tensor at = (asked_table == j).nonzero().squeeze(1);
    found.push_back(torch::embedding(t.param, asked_row.index_select(0, at), /*padding_idx=*/-1,
                                     /*scale_grad_by_freq=*/false, t.module->options.sparse()));
    positions.push_back(at);
  }
  torch::Tensor answers = torch::cat(found, 0).index_select(0, Inverse(torch::cat(positions, 0)));
  torch::Tensor rows =
      RowsAllToAll::apply(answers, reinterpret_cast<int64_t>(group_->group().get()), recv, send,
                          1.0 / static_cast<double>(world));
  return rows.index_select(0, Inverse(order)).view({batch, features, dim_});
}

absl::Status ShardedTables::Unshard() {
  auto it = InstalledLookups().find(&owner_);
  if (it != InstalledLookups().end() && it->second == this) InstalledLookups().erase(it);
  const int rank = group_->rank(), world = group_->world_size();
  torch::NoGradGuard no_grad;
  for (Table& t : tables_) {
    const Layout& l = t.layout;
    const int64_t padded = l.row_wise ? l.rows_per_rank * world : l.rows;
    torch::Tensor whole = torch::zeros({padded, dim_}, t.param.options());
    if (l.row_wise) {
      whole.narrow(0, rank * l.rows_per_rank, l.rows_per_rank).copy_(t.param.data());
    } else if (l.placed == rank) {
      whole.copy_(t.param.data());
    }
    absl::Status summed = group_->AllReduce(whole);
    if (!summed.ok()) return summed;
    t.param.set_data(whole.narrow(0, 0, l.rows).contiguous());
    Pieces().erase(t.param.unsafeGetTensorImpl());
  }
  return absl::OkStatus();
}

std::map<std::string, std::vector<int64_t>> ShardedTables::whole_shapes() const {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const Table& t : tables_) shapes[t.name] = {t.layout.rows, dim_};
  return shapes;
}

std::set<const void*> ShardedTables::parameters() const {
  std::set<const void*> out;
  for (const Table& t : tables_) out.insert(t.param.unsafeGetTensorImpl());
  return out;
}

void ShardedTables::ShardState(
    const std::function<std::vector<torch::Tensor*>(const torch::Tensor&)>& state_of) {
  torch::NoGradGuard no_grad;
  for (const Table& t : tables_) {
    for (torch::Tensor* s : state_of(t.param)) {
      if (s != nullptr && s->defined() && s->dim() >= 1 && s->size(0) == t.layout.rows)
        *s = t.layout.Piece(*s);
    }
  }
}

int64_t ShardedTables::local_bytes() const {
  int64_t n = 0;
  for (const Table& t : tables_) n += t.param.numel() * t.param.element_size();
  return n;
}

int64_t ShardedTables::whole_bytes() const {
  int64_t n = 0;
  for (const Table& t : tables_) n += t.bytes(dim_);
  return n;
}

std::string ShardedTables::Describe() const {
  int row_wise = 0;
  for (const Table& t : tables_) row_wise += t.layout.row_wise ? 1 : 0;
  auto mb = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  return absl::StrFormat(
      "sharded tables: %d tables over %d ranks, %d table-wise and %d row-wise; rank %d holds "
      "%.2f MB of their %.2f MB; the rest of the model is data-parallel",
      tables_.size(), group_->world_size(), tables_.size() - row_wise, row_wise, group_->rank(),
      mb(local_bytes()), mb(whole_bytes()));
}

}  // namespace kiln::distributed
