#include "lib/distributed/sharding_units.h"

#include <algorithm>
#include <unordered_map>

#include "lib/base/freed_memory.h"

namespace kiln::distributed {
namespace {
std::unordered_map<const torch::nn::Module*, UnitHooks*>& Installed() {
  static auto* installed = new std::unordered_map<const torch::nn::Module*, UnitHooks*>();
  return *installed;
}
std::optional<BuildPlacement>& UnitPlacement() {
  static auto* placement = new std::optional<BuildPlacement>();
  return *placement;
}
// The parameters KeepOwnPieces cut, by their TensorImpl (set_data keeps it); the weak reference
// tells a live parameter from a later tensor at the address of one that is gone.
struct Cut {
  c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> param;
  BuiltPiece piece;
};
std::unordered_map<const c10::TensorImpl*, Cut>& Built() {
  static auto* built = new std::unordered_map<const c10::TensorImpl*, Cut>();
  return *built;
}
int64_t RowsIn(const std::vector<int64_t>& shape) { return shape.empty() ? 1 : shape[0]; }
}  // namespace

ShardingUnits::~ShardingUnits() = default;
UnitHooks::~UnitHooks() = default;

void SetUnitHooks(const torch::nn::Module* unit, UnitHooks* hooks) {
  if (hooks == nullptr) {
    Installed().erase(unit);
  } else {
    Installed()[unit] = hooks;
  }
}

torch::Tensor RunUnit(const torch::nn::Module& unit,
                      const std::function<torch::Tensor(const torch::Tensor&)>& fn,
                      const torch::Tensor& x) {
  auto it = Installed().find(&unit);
  if (it == Installed().end()) return fn(x);
  UnitHooks* hooks = it->second;
  torch::Tensor out = fn(hooks->BeforeForward(unit, x));
  hooks->AfterForward(unit, out);
  return out;
}

void SetBuildPlacement(std::optional<BuildPlacement> placement) { UnitPlacement() = placement; }

torch::Tensor RowsOfRank(const torch::Tensor& whole, int rank, int world_size) {
  std::vector<int64_t> shape = whole.sizes().vec();
  const int64_t rows = RowsIn(shape);
  if (shape.empty()) shape.push_back(1);
  const int64_t per_rank = RowsPerRank(rows, world_size);
  shape[0] = per_rank;
  torch::Tensor piece = torch::zeros(shape, whole.options().requires_grad(false));
  const int64_t row_numel = rows == 0 ? 0 : whole.numel() / rows;
  const int64_t begin = std::min(rows, rank * per_rank) * row_numel;
  const int64_t end = std::min(rows, (rank + 1) * per_rank) * row_numel;
  if (end > begin) {
    piece.view({-1})
        .narrow(0, 0, end - begin)
        .copy_(whole.reshape({-1}).narrow(0, begin, end - begin));
  }
  return piece;
}

void KeepOwnPieces(torch::nn::Module& unit) {
  const std::optional<BuildPlacement>& placement = UnitPlacement();
  if (!placement.has_value() || placement->world_size <= 1) return;
  torch::NoGradGuard no_grad;
  // The whole block's memory, freed, goes back to the system: glibc's heap would otherwise keep
  // it between the pieces (kiln keeps freed memory for reuse), and a model built of many blocks
  // would hold most of its whole size in holes.
  struct GiveBack {
    ~GiveBack() { ReturnFreedMemory(); }
  } give_back;
  for (auto& p : unit.parameters()) {
    if (BuiltPieceOf(p).has_value()) continue;
    BuiltPiece piece;
    piece.shape = p.sizes().vec();
    piece.world_size = placement->world_size;
    piece.count = RowsPerRank(RowsIn(piece.shape), piece.world_size);
    piece.first = placement->rank * piece.count;
    p.set_data(RowsOfRank(p.detach(), placement->rank, placement->world_size));
    Built().insert_or_assign(
        p.unsafeGetTensorImpl(),
        Cut{c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>(p.getIntrusivePtr()),
            std::move(piece)});
  }
}

std::optional<BuiltPiece> BuiltPieceOf(const torch::Tensor& param) {
  auto it = Built().find(param.unsafeGetTensorImpl());
  if (it == Built().end()) return std::nullopt;
  if (it->second.param.expired()) {
    Built().erase(it);
    return std::nullopt;
  }
  return it->second.piece;
}

void ForgetBuiltPiece(const torch::Tensor& param) { Built().erase(param.unsafeGetTensorImpl()); }

void InitWhole(torch::Tensor& param, const std::function<void(torch::Tensor&)>& init) {
  torch::NoGradGuard no_grad;
  std::optional<BuiltPiece> piece = BuiltPieceOf(param);
  if (!piece.has_value()) {
    init(param);
    return;
  }
  // The whole starts as the piece's rows (an `init` that leaves some values as they are, an
  // RMSNorm's ones, keeps them) and zero elsewhere.
  torch::Tensor whole = torch::zeros(piece->shape, param.options().requires_grad(false));
  const int64_t rows = RowsIn(piece->shape);
  const int64_t real = std::max<int64_t>(0, std::min(piece->count, rows - piece->first));
  torch::Tensor own, there;
  if (real > 0) {
    own = param.view({piece->count, -1}).narrow(0, 0, real);
    there = whole.view({rows, -1}).narrow(0, piece->first, real);
    there.copy_(own);
  }
  init(whole);
  if (real > 0) own.copy_(there);
}

}  // namespace kiln::distributed
