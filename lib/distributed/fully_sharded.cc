#include "lib/distributed/fully_sharded.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "lib/base/error_text.h"
#include "lib/base/status_macros.h"

namespace kiln::distributed {

struct FullyShardedDataParallel::UnitParam {
  torch::Tensor param;  // the module's tensor: its data is `shard`, or a view of `full`
  std::string name;
  std::vector<int64_t> shape;  // whole
  int64_t rows = 1, row_numel = 1, rows_per_rank = 1;
  int64_t offset = 0;   // in the unit's flat piece, elements
  torch::Tensor shard;  // [rows_per_rank, ...]: this rank's rows, zero-padded
  torch::Tensor stash;  // the piece's gradient from earlier micro-steps
  bool built = false;   // the model built it as this piece (KeepOwnPieces)
  int64_t shard_numel() const { return rows_per_rank * row_numel; }
};

struct FullyShardedDataParallel::Unit {
  using Param = UnitParam;
  // The unit's modules: a run of blocks, in forward order; none for the root.
  std::vector<const torch::nn::Module*> modules;
  bool root() const { return modules.empty(); }
  std::string name;
  std::vector<Param> params;
  int64_t shard_numel = 0;
  // [world * shard_numel], each parameter contiguous in it; its storage is freed while sharded.
  torch::Tensor full;
  bool gathered = false;
  bool backward_expected = false;
  std::function<void()> post_backward;  // what the input's marker calls in the backward
  // An all-gather on the way (a prefetch): it sends from, and receives into, the gather buffers
  // (views of them) until it is waited for.
  c10::intrusive_ptr<c10d::Work> work;
  torch::Tensor send, recv;
  size_t index = 0;
};

namespace {

// The storage under `t` takes `nbytes` (0 frees it). Tensors saved for the backward keep pointing
// at this storage, so a unit's buffer can be freed after its forward and refilled before its
// backward.
void ResizeStorage(const torch::Tensor& t, size_t nbytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (storage->nbytes() == nbytes) return;
  if (nbytes == 0) {
    storage->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  } else {
    storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  }
  storage->set_nbytes(nbytes);
}

// Identity in the forward, applied to a unit's input; its backward runs once the gradient of that
// input is whole, which is after every operation of the unit has run its backward and every
// gradient of the unit's parameters has been accumulated (AccumulateGrad runs first among the
// ready nodes). That is when the unit's gradients are reduce-scattered (FSDP2's post-backward).
struct PostBackwardMarker : public torch::autograd::Function<PostBackwardMarker> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               int64_t callback) {
    ctx->saved_data["callback"] = callback;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    (*reinterpret_cast<std::function<void()>*>(ctx->saved_data["callback"].toInt()))();
    return {grads[0], torch::Tensor()};
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<FullyShardedDataParallel>> FullyShardedDataParallel::Create(
    std::shared_ptr<ProcessGroup> group, torch::nn::Module& module,
    const std::vector<std::vector<std::shared_ptr<torch::nn::Module>>>& units,
    const FullyShardedOptions& options) {
  std::unique_ptr<FullyShardedDataParallel> fsdp(new FullyShardedDataParallel());
  fsdp->group_ = group;
  fsdp->options_ = options;
  fsdp->rank_ = group ? group->rank() : 0;
  fsdp->world_ = group ? group->world_size() : 1;
  // Parameters the model built in pieces (KeepOwnPieces) hold this rank's rows already.
  std::unordered_map<const c10::TensorImpl*, BuiltPiece> built;
  for (const auto& item : module.named_parameters()) {
    std::optional<BuiltPiece> piece = BuiltPieceOf(item.value());
    if (!piece.has_value()) continue;
    if (piece->world_size != fsdp->world_ || piece->first != fsdp->rank_ * piece->count) {
      return absl::FailedPreconditionError(
          absl::StrCat("trainer.strategy=fsdp: ", item.key(), " was built as a piece for ",
                       piece->world_size, " ranks, and this model is sharded over ", fsdp->world_));
    }
    built.emplace(item.value().unsafeGetTensorImpl(), *piece);
  }
  if (group) {
    // Rank 0's values everywhere first, as data parallel starts (the models must match). Pieces
    // built from the same seed stay as they are: every rank holds its own rows.
    std::vector<torch::Tensor> states, whole;
    for (const auto& p : module.parameters()) {
      states.push_back(p.detach());
      if (built.count(p.unsafeGetTensorImpl()) == 0) whole.push_back(p.detach());
    }
    KILN_RETURN_IF_ERROR(fsdp->Guard("comparing the model across workers", [&] {
      c10d::verify_params_across_processes(group->group(), states, std::nullopt);
    }));
    states = std::move(whole);
    for (const auto& b : module.buffers()) states.push_back(b.detach());
    KILN_RETURN_IF_ERROR(group->Broadcast(states));
    // HYBRID_SHARD: then node 0's values to the other nodes, each rank from its peer there.
    if (options.replicate_group) KILN_RETURN_IF_ERROR(options.replicate_group->Broadcast(states));
  }

  // Which unit each parameter belongs to: the units' own, the rest the root's.
  std::unordered_map<const c10::TensorImpl*, size_t> owner;
  for (size_t u = 0; u < units.size(); ++u) {
    for (const auto& m : units[u]) {
      for (const auto& p : m->parameters()) {
        auto [it, fresh] = owner.emplace(p.unsafeGetTensorImpl(), u);
        if (!fresh && it->second != u) {
          return absl::InvalidArgumentError(
              "trainer.strategy=fsdp: a parameter is shared by two sharding units (tied weights "
              "across blocks); such a model cannot be sharded per block");
        }
      }
    }
  }
  for (size_t u = 0; u <= units.size(); ++u) {
    auto unit = std::make_unique<Unit>();
    if (u < units.size()) {
      for (const auto& m : units[u]) unit->modules.push_back(m.get());
    }
    unit->index = u;
    fsdp->units_.push_back(std::move(unit));
  }
  for (const auto& item : module.named_parameters()) {
    auto it = owner.find(item.value().unsafeGetTensorImpl());
    Unit& unit = *fsdp->units_[it == owner.end() ? units.size() : it->second];
    Unit::Param p;
    p.param = item.value();
    p.name = item.key();
    auto piece = built.find(p.param.unsafeGetTensorImpl());
    p.built = piece != built.end();
    p.shape = p.built ? piece->second.shape : p.param.sizes().vec();
    p.rows = p.shape.empty() ? 1 : p.shape[0];
    p.row_numel = p.rows == 0 ? 0 : c10::multiply_integers(p.shape) / p.rows;
    p.rows_per_rank = RowsPerRank(p.rows, fsdp->world_);
    p.offset = unit.shard_numel;
    unit.shard_numel += p.shard_numel();
    if (unit.name.empty()) unit.name = item.key().substr(0, item.key().rfind('.'));
    if (!unit.params.empty() && unit.params[0].param.scalar_type() != p.param.scalar_type()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer.strategy=fsdp: ", p.name, " is ", c10::toString(p.param.scalar_type()), " and ",
          unit.params[0].name, " ", c10::toString(unit.params[0].param.scalar_type()),
          "; the parameters of one sharding unit must share a dtype"));
    }
    unit.params.push_back(std::move(p));
  }
  torch::NoGradGuard no_grad;
  FullyShardedDataParallel* self = fsdp.get();
  // The units compute where the model is; the pieces stay there, or in the CPU's memory.
  for (const auto& p : module.parameters()) {
    fsdp->compute_device_ = p.device();
    break;
  }
  fsdp->piece_device_ = options.offload_to_cpu ? torch::Device(torch::kCPU) : fsdp->compute_device_;
  for (auto& unit_ptr : fsdp->units_) {
    Unit& unit = *unit_ptr;
    if (unit.params.empty()) continue;
    torch::TensorOptions whole =
        unit.params[0].param.options().device(fsdp->compute_device_).requires_grad(false);
    // Mixed precision: floating parameters gathered (and computed with) in the gather dtype; their
    // pieces, the gradients' reduction and the optimizer stay in the parameters' own.
    if (options.gather_dtype.has_value() && whole.dtype().isScalarType(torch::kFloat32))
      whole = whole.dtype(*options.gather_dtype);
    unit.full = torch::empty({fsdp->world_ * unit.shard_numel}, whole);
    ResizeStorage(unit.full, 0);
    for (Unit::Param& p : unit.params) {
      p.shard =
          p.built ? p.param.detach() : RowsOfRank(p.param.detach(), fsdp->rank_, fsdp->world_);
      if (p.shard.device() != fsdp->piece_device_) p.shard = fsdp->PieceCopy(p.shard);
      p.param.set_data(p.shard);
    }
    if (!unit.root()) {
      Unit* u = &unit;
      unit.post_backward = [self, u] { self->PostBackward(*u); };
      for (const torch::nn::Module* m : unit.modules) SetUnitHooks(m, self);
    }
    GatherBuffers& buffers = fsdp->gather_buffers_[unit.full.scalar_type()];
    if (!buffers.send.defined() || buffers.send.numel() < unit.shard_numel) {
      buffers.send = torch::empty({unit.shard_numel}, unit.full.options());
      buffers.recv = fsdp->world_ == 1
                         ? buffers.send
                         : torch::empty({fsdp->world_ * unit.shard_numel}, unit.full.options());
    }
  }
  fsdp->WaitForHostCopies();
  return fsdp;
}

torch::Tensor FullyShardedDataParallel::PieceCopy(const torch::Tensor& t) {
  if (t.device() == piece_device_) return t.clone();
  // Pinned host memory: the copies between it and the GPU are queued on the stream (from pageable
  // memory each one would wait for the GPU).
  const bool from_gpu = t.is_cuda();
  torch::Tensor piece =
      torch::empty(t.sizes(), t.options().device(piece_device_).pinned_memory(from_gpu));
  piece.copy_(t, /*non_blocking=*/from_gpu);
  copying_to_host_ |= from_gpu;
  return piece;
}

void FullyShardedDataParallel::WaitForHostCopies() {
  if (!copying_to_host_) return;
  torch::cuda::synchronize(compute_device_.has_index() ? compute_device_.index() : -1);
  copying_to_host_ = false;
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  for (auto& unit : units_) {
    for (const torch::nn::Module* m : unit->modules) SetUnitHooks(m, nullptr);
  }
}

absl::Status FullyShardedDataParallel::Guard(const std::string& what,
                                             const std::function<void()>& fn) {
  if (group_) return group_->Guard(absl::StrCat("fsdp: ", what), fn);
  try {
    fn();
    return absl::OkStatus();
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("fsdp: ", what, ": ", ErrorLine(e.what_without_backtrace())));
  }
}

FullyShardedDataParallel::Unit* FullyShardedDataParallel::Find(const torch::nn::Module& module) {
  for (auto& unit : units_) {
    for (const torch::nn::Module* m : unit->modules) {
      if (m == &module) return unit.get();
    }
  }
  return nullptr;
}

void FullyShardedDataParallel::StartGather(Unit& unit) {
  if (unit.gathered || unit.work || unit.params.empty()) return;
  // The buffers are shared: a gather still on the way (a prefetch no forward or backward reached)
  // lands in its unit first.
  if (gathering_ != nullptr && gathering_ != &unit) Gather(*gathering_);
  torch::NoGradGuard no_grad;
  GatherBuffers& buffers = gather_buffers_.at(unit.full.scalar_type());
  unit.send = buffers.send.narrow(0, 0, unit.shard_numel);
  unit.recv = buffers.recv.narrow(0, 0, world_ * unit.shard_numel);
  for (const Unit::Param& p : unit.params) {
    // From pinned host memory (offload), the copy is queued on the stream before the collective.
    unit.send.narrow(0, p.offset, p.shard_numel())
        .copy_(p.shard.reshape({-1}), /*non_blocking=*/true);
  }
  gathering_ = &unit;
  if (world_ == 1) return;
  unit.work = group_->group()->_allgather_base(unit.recv, unit.send);
}

void FullyShardedDataParallel::Gather(Unit& unit) {
  if (unit.gathered || unit.params.empty()) return;
  StartGather(unit);
  if (unit.work) {
    unit.work->wait();
    unit.work.reset();
  }
  torch::NoGradGuard no_grad;
  const int64_t elem = static_cast<int64_t>(unit.full.element_size());
  ResizeStorage(unit.full, static_cast<size_t>(world_ * unit.shard_numel * elem));
  torch::Tensor pieces = unit.recv.view({world_, unit.shard_numel});
  for (Unit::Param& p : unit.params) {
    const int64_t k = p.shard_numel();
    torch::Tensor region = unit.full.narrow(0, world_ * p.offset, world_ * k);
    // Writing through `full` leaves alone the version counters of the tensors the forward saved
    // (the parameters and their views): the values are the same ones again.
    region.view({world_, k}).view({world_, k}).copy_(pieces.narrow(1, p.offset, k));
    p.param.set_data(region.narrow(0, 0, p.rows * p.row_numel).view(p.shape));
  }
  unit.send = torch::Tensor();
  unit.recv = torch::Tensor();
  gathering_ = nullptr;
  unit.gathered = true;
}

void FullyShardedDataParallel::ReshardUnit(Unit& unit) {
  if (!unit.gathered) return;
  for (Unit::Param& p : unit.params) p.param.set_data(p.shard);
  ResizeStorage(unit.full, 0);
  unit.gathered = false;
}

torch::Tensor FullyShardedDataParallel::BeforeForward(const torch::nn::Module& module,
                                                      const torch::Tensor& input) {
  Unit* unit = Find(module);
  if (unit == nullptr) return input;
  Gather(*unit);  // a no-op after the unit's first block
  // A unit of several blocks: what follows is done once, at its first block's input.
  if (&module != unit->modules.front()) return input;
  // The next unit's all-gather runs while this one computes.
  if (unit->index + 1 < units_.size() - 1) StartGather(*units_[unit->index + 1]);
  if (!training_forward_ || !torch::GradMode::is_enabled() || !input.requires_grad()) return input;
  return PostBackwardMarker::apply(input, reinterpret_cast<int64_t>(&unit->post_backward));
}

void FullyShardedDataParallel::AfterForward(const torch::nn::Module& module,
                                            const torch::Tensor& output) {
  Unit* unit = Find(module);
  if (unit == nullptr || &module != unit->modules.back()) return;
  if (!training_forward_ || !torch::GradMode::is_enabled() || !output.requires_grad()) {
    ReshardUnit(*unit);
    return;
  }
  unit->backward_expected = true;
  if (options_.reshard_after_forward) ReshardUnit(*unit);
  output.register_hook([this, unit](const torch::Tensor&) { PreBackward(*unit); });
}

void FullyShardedDataParallel::PreBackward(Unit& unit) {
  Gather(unit);
  // The unit before this one is the backward's next: its gather goes out now.
  if (unit.index > 0 && !unit.root()) StartGather(*units_[unit.index - 1]);
  for (Unit::Param& p : unit.params) {
    if (p.param.grad().defined()) {
      p.stash = p.param.grad();
      p.param.mutable_grad() = torch::Tensor();
    }
  }
}

void FullyShardedDataParallel::PostBackward(Unit& unit) {
  if (unit.backward_expected) ReduceScatter(unit);
}

void FullyShardedDataParallel::ReduceScatter(Unit& unit) {
  torch::NoGradGuard no_grad;
  unit.backward_expected = false;
  torch::TensorOptions options = unit.params[0].shard.options().device(compute_device_);
  torch::Tensor in = torch::empty({world_ * unit.shard_numel}, options);
  torch::Tensor pieces = in.view({world_, unit.shard_numel});
  for (Unit::Param& p : unit.params) {
    const int64_t k = p.shard_numel();
    torch::Tensor grad = p.param.grad();
    torch::Tensor slot = pieces.narrow(1, p.offset, k);
    if (!grad.defined()) {
      slot.zero_();
    } else if (p.rows == p.rows_per_rank * world_) {
      slot.copy_(grad.reshape({world_, k}));
    } else {
      torch::Tensor padded = torch::zeros({world_ * k}, options);
      padded.narrow(0, 0, p.rows * p.row_numel).copy_(grad.reshape({-1}));
      slot.copy_(padded.view({world_, k}));
    }
    p.param.mutable_grad() = torch::Tensor();  // the whole gradient goes; its piece comes back
  }
  ReshardUnit(unit);
  // One reduce-scatter in flight at a time: the previous unit's completes before this one's goes
  // out, and this one's runs while the backward computes the next unit.
  FinishReduce();
  reducing_.unit = &unit;
  reducing_.in = in;
  if (world_ > 1) {
    reducing_.out = torch::empty({unit.shard_numel}, options);
    reducing_.work = group_->group()->_reduce_scatter_base(reducing_.out, reducing_.in);
  } else {
    reducing_.out = in;
  }
}

void FullyShardedDataParallel::FinishReduce() {
  if (reducing_.unit == nullptr) return;
  torch::NoGradGuard no_grad;
  Unit& unit = *reducing_.unit;
  if (reducing_.work) {
    reducing_.work->wait();
    reducing_.out.div_(world_);
  }
  if (const auto& replicas = options_.replicate_group; replicas && replicas->world_size() > 1) {
    // HYBRID_SHARD: the node's average, averaged over the nodes (every rank of a node reduces its
    // own piece with its peers). What it throws reaches the caller's Guard, as the wait above.
    std::vector<at::Tensor> tensors{reducing_.out};
    replicas->group()->allreduce(tensors)->wait();
    reducing_.out.div_(replicas->world_size());
  }
  for (Unit::Param& p : unit.params) {
    if (!p.param.requires_grad()) continue;
    torch::Tensor piece = reducing_.out.narrow(0, p.offset, p.shard_numel()).view(p.shard.sizes());
    if (p.stash.defined()) {
      p.param.mutable_grad() = p.stash.add_(piece.to(p.stash.device()));
      p.stash = torch::Tensor();
    } else {
      // Its own tensor (optimizers detach_() gradients), where the piece is (offload: the CPU).
      p.param.mutable_grad() = PieceCopy(piece);
    }
  }
  reducing_ = Reducing();
}

absl::Status FullyShardedDataParallel::BeforeForward(bool training) {
  training_forward_ = training && torch::GradMode::is_enabled();
  Unit& root = *units_.back();
  return Guard("gathering the root's parameters", [&] {
    Gather(root);
    if (units_.size() > 1) StartGather(*units_[0]);
    if (!training_forward_) return;
    root.backward_expected = true;
    for (Unit::Param& p : root.params) {
      if (p.param.grad().defined()) {
        p.stash = p.param.grad();
        p.param.mutable_grad() = torch::Tensor();
      }
    }
  });
}

absl::Status FullyShardedDataParallel::FinishBackward() {
  return Guard("reducing the gradients", [&] {
    // Every rank runs the same graph, so the same units are left, in the same order.
    for (auto& unit : units_) {
      if (unit->backward_expected) ReduceScatter(*unit);
    }
    FinishReduce();
    training_forward_ = false;
    DropPrefetches();
    WaitForHostCopies();  // the optimizer reads the gradients next
  });
}

void FullyShardedDataParallel::DropPrefetches() {
  // A prefetch no forward or backward used (it would hold the values from before the step).
  for (auto& unit : units_) {
    if (unit->work) {
      unit->work->wait();
      unit->work.reset();
    }
    unit->send = unit->recv = torch::Tensor();
    ReshardUnit(*unit);
    gathering_ = nullptr;
  }
}

absl::Status FullyShardedDataParallel::Reshard() {
  return Guard("finishing the gathers", [&] { DropPrefetches(); });
}

absl::Status FullyShardedDataParallel::GatherAll() {
  return Guard("gathering the whole model", [&] {
    for (auto& unit : units_) Gather(*unit);
  });
}

absl::Status FullyShardedDataParallel::Unshard() {
  KILN_RETURN_IF_ERROR(Reshard());
  KILN_RETURN_IF_ERROR(GatherAll());
  torch::NoGradGuard no_grad;
  for (auto& unit : units_) {
    for (const torch::nn::Module* m : unit->modules) SetUnitHooks(m, nullptr);
    for (auto& p : unit->params) {
      // Whole tensors of their own, in the parameters' dtype (a bf16 gather is not kept).
      p.param.set_data(p.param.detach().to(p.shard.scalar_type()).clone());
      ForgetBuiltPiece(p.param);
      p.param.mutable_grad() = torch::Tensor();
      p.shard = p.stash = torch::Tensor();
    }
    unit->gathered = false;
    unit->full = torch::Tensor();
  }
  units_.clear();
  gather_buffers_.clear();
  gathering_ = nullptr;
  return absl::OkStatus();
}

absl::StatusOr<double> FullyShardedDataParallel::ClipGradNorm(double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (auto& unit : units_) {
    for (auto& p : unit->params) {
      if (p.param.grad().defined()) grads.push_back(p.param.grad());
    }
  }
  if (grads.empty()) return 0.0;
  // The padding's gradients are zero, so the pieces' squares sum to the whole model's.
  torch::Tensor squares = torch::zeros({1}, grads[0].options().dtype(torch::kFloat32));
  for (const auto& g : grads) squares += g.to(torch::kFloat32).pow(2).sum();
  // NCCL reduces on the GPU (the gradients may be on the CPU: offload), Gloo here on the CPU.
  torch::Tensor on_wire =
      squares.to(group_ && group_->backend() == "nccl" ? compute_device_ : torch::kCPU);
  if (group_) KILN_RETURN_IF_ERROR(group_->AllReduce(on_wire));
  double norm = std::sqrt(on_wire.item<double>());
  double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (auto& g : grads) g.mul_(coef);
  }
  return norm;
}

std::map<std::string, std::vector<int64_t>> FullyShardedDataParallel::whole_shapes() const {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& unit : units_) {
    for (const auto& p : unit->params) shapes[p.name] = p.shape;
  }
  return shapes;
}

void FullyShardedDataParallel::ShardState(
    const std::function<std::vector<torch::Tensor*>(const torch::Tensor&)>& state_of) {
  torch::NoGradGuard no_grad;
  for (auto& unit : units_) {
    for (auto& p : unit->params) {
      for (torch::Tensor* t : state_of(p.param)) {
        if (t == nullptr || !t->defined()) continue;
        if (t->sizes().vec() == p.shape) *t = RowsOfRank(*t, rank_, world_);
        if (t->device() != piece_device_) *t = PieceCopy(*t);
      }
    }
  }
  WaitForHostCopies();
}

ShardedMemory FullyShardedDataParallel::memory() const {
  ShardedMemory m;
  for (const auto& unit : units_) {
    if (unit->params.empty()) continue;
    const int64_t elem = static_cast<int64_t>(unit->params[0].shard.element_size());
    const int64_t gathered = static_cast<int64_t>(unit->full.element_size());
    int64_t whole = 0;
    for (const auto& p : unit->params) whole += p.rows * p.row_numel * elem;
    m.full_parameter_bytes += whole;
    m.shard_parameter_bytes += unit->shard_numel * elem;
    m.largest_unit_bytes = std::max(m.largest_unit_bytes, unit->shard_numel * world_ * gathered);
    if (!unit->root()) ++m.units;
  }
  return m;
}

}  // namespace kiln::distributed
