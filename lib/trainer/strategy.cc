#include "lib/trainer/strategy.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/base/torch_compat.h"
#include "lib/data/dataset.h"
#include "lib/distributed/data_parallel.h"
#include "lib/distributed/fully_sharded.h"
#include "lib/distributed/process_group.h"
#include "lib/distributed/sharded_tables.h"
#include "lib/distributed/sharding_units.h"
#include "lib/logging/logger.h"
#include "lib/run/environment.h"
#include "lib/trainer/internal/cuda_module.h"
#include "lib/trainer/precision.h"
#include "lib/trainer/process_settings.h"

namespace kiln {

Strategy::~Strategy() = default;

int Strategy::global_rank() const { return group_ ? group_->rank() : 0; }
int Strategy::world_size() const { return group_ ? group_->world_size() : 1; }
int Strategy::piece_count() const { return node_group_ ? node_group_->world_size() : world_size(); }
int Strategy::piece_index() const { return node_group_ ? node_group_->rank() : global_rank(); }

int Strategy::ConfigureProcess() const {
  int local_workers = 1;
  if (distributed()) {
    local_workers = world_size();
    std::string local = run::ProcessEnv("LOCAL_WORLD_SIZE");
    if (!local.empty()) local_workers = std::max(1, std::atoi(local.c_str()));
  }
  return kiln::ConfigureProcess(options_.num_threads, local_workers);
}

absl::Status Strategy::SelectDevice() {
  bool cuda = torch::cuda::is_available();
  if (options_.accelerator == TrainerOptions::Accelerator::kCuda && !cuda) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer.accelerator=cuda, but ", NoCudaDeviceAvailable()));
  }
  if (options_.devices_listed && !cuda) {
    return absl::FailedPreconditionError(
        "trainer.devices lists GPU ids, but no CUDA device is available: give a count "
        "(trainer.devices=N)");
  }
  device_ = torch::Device(torch::kCPU);
  if (options_.accelerator != TrainerOptions::Accelerator::kCpu && cuda) {
    // One GPU per process: a data-parallel worker takes its local rank's (as Lightning's DDP).
    device_ = data::TrainingGpu();
    UseCudaDevice(device_);
  }
  SetMathModes(options_.matmul_precision, options_.cudnn_benchmark);
  PrecisionChoice precision =
      ResolvePrecision(options_.precision, device_.is_cpu(), CpuFlags(), CudaHasBf16(device_));
  if (!precision.error.empty()) return absl::FailedPreconditionError(precision.error);
  bf16_autocast_ = precision.bf16;
  scaler_ = precision.fp16 ? std::make_shared<GradScaler>(device_) : nullptr;
  bf16_weights_ = precision.bf16_weights;
  if (!precision.log.empty() && !precision_logged_ && global_rank() == 0) {
    precision_logged_ = true;
    if (precision.warning) {
      Logger::Instance().Warning(precision.log);
    } else {
      Logger::Instance().Info(precision.log);
    }
  }
  return absl::OkStatus();
}

torch::Tensor Strategy::ToDevice(const torch::Tensor& t) const {
  if (t.device() == device_) return t;
  // Host to GPU through pinned memory: the copy is queued on the stream and the host goes on to
  // launch the step's kernels (from pageable memory the copy would wait for the GPU).
  if (t.is_cpu() && device_.is_cuda()) return t.pin_memory().to(device_, /*non_blocking=*/true);
  return t.to(device_, /*non_blocking=*/true);
}

namespace {
// NHWC strides even where contiguous() would keep NCHW ones: with one channel both orders are
// "contiguous", and the convolution then picks NCHW and converts back and forth.
torch::Tensor ToChannelsLast(const torch::Tensor& t) {
  return torch::empty_like(t, t.options().memory_format(torch::MemoryFormat::ChannelsLast))
      .copy_(t);
}
}  // namespace

torch::Tensor Strategy::InputToDevice(const torch::Tensor& t) const {
  torch::Tensor on_device = ToDevice(t);
  if (bf16_weights_ && on_device.is_floating_point()) on_device = on_device.to(torch::kBFloat16);
  return options_.channels_last && on_device.dim() == 4 ? ToChannelsLast(on_device) : on_device;
}

void Strategy::BatchToDevice(data::Batch& batch) const {
  batch.input = InputToDevice(batch.input);
  if (batch.target.defined()) batch.target = ToDevice(batch.target);
  if (batch.segments.defined()) batch.segments = ToDevice(batch.segments);
}

absl::Status Strategy::PlaceModule(torch::nn::Module& module) const {
  module.to(device_);
  torch::NoGradGuard no_grad;
  if (bf16_weights_) {
    // Floating tensors only: LibTorch's Module::to(dtype), unlike Python's, converts integer
    // buffers too (BatchNorm's num_batches_tracked, the tokenizer fingerprint).
    for (auto& p : module.parameters()) {
      if (p.is_floating_point()) p.set_data(p.data().to(torch::kBFloat16));
    }
    for (auto& b : module.buffers()) {
      if (b.is_floating_point()) b.set_data(b.to(torch::kBFloat16));
    }
  }
  if (!options_.channels_last) return absl::OkStatus();
  // torch::nn::Module::to has no memory-format overload (Python's has): convert the 4-D tensors.
  for (auto& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(ToChannelsLast(p.data()));
  }
  return absl::OkStatus();
}

namespace {
// c10d's reducer all-reduces dense buckets only, and fsdp reduce-scatters dense pieces: sparse
// table gradients wait for table sharding (issue 56).
absl::Status RefuseSparseTables(torch::nn::Module& module, const std::string& where,
                                const std::string& who) {
  for (const auto& item : module.named_modules()) {
    bool sparse = false;
    if (const auto* table = item.value()->as<torch::nn::Embedding>()) {
      sparse = table->options.sparse();
    } else if (const auto* bag = item.value()->as<torch::nn::EmbeddingBag>()) {
      sparse = bag->options.sparse();
    }
    if (sparse) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": the model's table ", item.key(), " gives sparse gradients, which ", who,
          "; train on one device, or set model.sparse=false (dense table gradients)"));
    }
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status Strategy::SetupDataParallel(torch::nn::Module& module) {
  if (options_.strategy == TrainerOptions::StrategyKind::kFsdp &&
      options_.fsdp_sharding_strategy != TrainerOptions::Sharding::kNoShard) {
    return SetupSharding(module);
  }
  if (!distributed()) return absl::OkStatus();
  if (bf16_weights_) {
    return absl::FailedPreconditionError(
        "trainer.precision=bf16-true runs in one process only (bf16 gradient all-reduce is "
        "untested); use bf16-mixed "
        "with several processes");
  }
  KILN_ASSIGN_OR_RETURN(bool tables, SetupTableSharding(module));
  if (!tables) {
    KILN_RETURN_IF_ERROR(RefuseSparseTables(module, "trainer.devices > 1",
                                            "data-parallel training does not reduce"));
  }
  data_parallel_ = MakeDataParallel(module);
  KILN_RETURN_IF_ERROR(data_parallel_->SyncModuleStates());
  // One blocking all-reduce of a gradient-sized buffer: what a step would pay if nothing
  // overlapped.
  // (Sharded tables are not all-reduced, and their pieces differ in size between ranks.)
  const std::set<const void*> local = tables_ ? tables_->parameters() : std::set<const void*>{};
  int64_t numel = 0;
  for (const auto& p : module.parameters()) {
    if (local.count(p.unsafeGetTensorImpl()) == 0) numel += p.numel();
  }
  torch::Tensor probe = torch::zeros(
      {numel},
      torch::TensorOptions(torch::kFloat32).device(CollectiveDevice(group_->backend(), device_)));
  KILN_RETURN_IF_ERROR(group_->AllReduce(probe));
  constexpr int kRounds = 5;
  auto begin = std::chrono::steady_clock::now();
  for (int i = 0; i < kRounds; ++i) KILN_RETURN_IF_ERROR(group_->AllReduce(probe));
  double allreduce_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count() /
      kRounds;
  Logger::Instance().Info(absl::StrFormat(
      "data parallel: %d ranks over %s; %d gradient buckets (cap %g MB); one all-reduce of all "
      "%.2f MB of "
      "gradients takes %.2f ms",
      world_size(), group_->backend(), data_parallel_->num_buckets(), options_.ddp_bucket_cap_mb,
      static_cast<double>(numel) * 4 / (1024.0 * 1024.0), allreduce_ms));
  return absl::OkStatus();
}

absl::Status Strategy::ShareShardedRun() {
  std::random_device entropy;
  std::string run = absl::StrFormat("%08x%08x", entropy(), entropy());
  if (group_) {
    KILN_ASSIGN_OR_RETURN(run, group_->ShareFromRankZero("fsdp_run", run));
  }
  sharded_run_ = run;
  return absl::OkStatus();
}

absl::StatusOr<bool> Strategy::SetupTableSharding(torch::nn::Module& module) {
  const distributed::EmbeddingTables* owner = nullptr;
  for (const auto& m : module.modules(/*include_self=*/true)) {
    owner = dynamic_cast<const distributed::EmbeddingTables*>(m.get());
    if (owner != nullptr) break;
  }
  if (owner == nullptr) return false;
  bool sparse = false;
  for (const auto& table : owner->embedding_tables()) sparse |= table->options.sparse();
  if (!sparse) return false;  // dense table gradients: all-reduced with the rest
  const std::string& how = options_.table_sharding;
  KILN_ASSIGN_OR_RETURN(
      tables_, distributed::ShardedTables::Create(group_, module, *owner,
                                                  distributed::TableShardingKindNamed(how)));
  KILN_RETURN_IF_ERROR(ShareShardedRun());
  Logger::Instance().Info(tables_->Describe());
  return true;
}

absl::Status Strategy::SetupSharding(torch::nn::Module& module) {
  KILN_RETURN_IF_ERROR(RefuseSparseTables(module, "trainer.strategy=fsdp",
                                          "fsdp does not reduce-scatter (trainer.strategy=ddp "
                                          "shards the tables instead)"));
  if (options_.cuda_graphs) {
    return absl::FailedPreconditionError(
        "trainer.cuda_graphs does not compose with trainer.strategy=fsdp (the step's "
        "collectives change the parameters' storage); use one or the other");
  }
  std::vector<std::vector<std::shared_ptr<torch::nn::Module>>> units;
  const std::string& policy = options_.fsdp_auto_wrap_policy;
  if (policy == "blocks" || policy == "size") {
    std::vector<std::shared_ptr<torch::nn::Module>> blocks;
    bool found = false;
    for (const auto& m : module.modules(/*include_self=*/true)) {
      if (const auto* provider = dynamic_cast<const distributed::ShardingUnits*>(m.get())) {
        blocks = provider->sharding_units();
        found = true;
        break;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trainer.fsdp_auto_wrap_policy=", policy,
          ": this model has no blocks that fsdp can gather one at a time (gpt, gpt2 and llama "
          "have); set trainer.fsdp_auto_wrap_policy=none to shard it as one unit"));
    }
    if (policy == "blocks") {
      for (auto& block : blocks) units.push_back({block});
    } else {
      // As torch's size_based_auto_wrap_policy over the blocks: consecutive blocks make a unit
      // once they hold fsdp_min_num_params parameters; the blocks left at the end join the last
      // unit, or, when no unit fills, stay in the root.
      std::vector<std::shared_ptr<torch::nn::Module>> run;
      int64_t count = 0;
      for (auto& block : blocks) {
        run.push_back(block);
        for (const auto& p : block->parameters()) {
          // A block built in pieces counts as whole.
          std::optional<distributed::BuiltPiece> piece = distributed::BuiltPieceOf(p);
          count += piece ? c10::multiply_integers(piece->shape) : p.numel();
        }
        if (count >= options_.fsdp_min_num_params) {
          units.push_back(std::move(run));
          run.clear();
          count = 0;
        }
      }
      if (!units.empty()) units.back().insert(units.back().end(), run.begin(), run.end());
    }
  }
  distributed::FullyShardedOptions sharding;
  sharding.reshard_after_forward =
      options_.fsdp_sharding_strategy != TrainerOptions::Sharding::kShardGradOp;
  // HYBRID_SHARD, as Lightning's and FSDP's: full sharding among the ranks of a node, the nodes
  // replicas of each other (ranks count node by node: node n holds ranks n*D .. n*D+D-1). On one
  // node it is FULL_SHARD.
  std::shared_ptr<distributed::ProcessGroup> shard_group = group_;
  const bool hybrid = options_.fsdp_sharding_strategy == TrainerOptions::Sharding::kHybridShard &&
                      options_.num_nodes > 1 && group_ != nullptr;
  if (hybrid) {
    const int nodes = options_.num_nodes, per_node = world_size() / nodes;
    if (world_size() % nodes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("trainer.fsdp_sharding_strategy=HYBRID_SHARD: ", world_size(), " ranks on ",
                       nodes, " nodes are not the same number on each"));
    }
    const int node = global_rank() / per_node, local = global_rank() % per_node;
    std::vector<int> node_ranks, peers;
    for (int i = 0; i < per_node; ++i) node_ranks.push_back(node * per_node + i);
    for (int n = 0; n < nodes; ++n) peers.push_back(n * per_node + local);
    KILN_ASSIGN_OR_RETURN(node_group_,
                          group_->Subgroup(node_ranks, absl::StrCat("fsdp/node", node)));
    KILN_ASSIGN_OR_RETURN(sharding.replicate_group,
                          group_->Subgroup(peers, absl::StrCat("fsdp/peers", local)));
    shard_group = node_group_;
  }
  // bf16-mixed: the parameters travel and compute in bf16, as Lightning's FSDP mixed precision;
  // gradients reduce in float32 into float32 pieces.
  if (bf16_autocast_ && !bf16_weights_) sharding.gather_dtype = at::kBFloat16;
  sharding.offload_to_cpu = options_.fsdp_cpu_offload;
  KILN_RETURN_IF_ERROR(ShareShardedRun());
  int64_t built = 0;  // tensors the model built as this worker's pieces (job.cc's PlaceBlocks)
  for (const auto& p : module.parameters()) built += distributed::BuiltPieceOf(p) ? 1 : 0;
  KILN_ASSIGN_OR_RETURN(sharded_, distributed::FullyShardedDataParallel::Create(shard_group, module,
                                                                                units, sharding));
  distributed::ShardedMemory m = sharded_->memory();
  auto mb = [](int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  const std::string name =
      hybrid ? absl::StrCat("HYBRID_SHARD (each of ", options_.num_nodes, " nodes a replica)")
      : options_.fsdp_sharding_strategy == TrainerOptions::Sharding::kShardGradOp ? "SHARD_GRAD_OP"
                                                                                  : "FULL_SHARD";
  Logger::Instance().Info(absl::StrFormat(
      "fsdp: %s over %d rank(s)%s, %d units and the root; parameters %.2f MB whole, %.2f MB on "
      "each rank, the largest unit %.2f MB when gathered%s%s%s",
      name, piece_count(), group_ ? absl::StrCat(" (", group_->backend(), ")") : "", m.units,
      mb(m.full_parameter_bytes), mb(m.shard_parameter_bytes), mb(m.largest_unit_bytes),
      sharding.gather_dtype ? " (in bf16; gradients reduced in float32)" : "",
      !options_.fsdp_cpu_offload ? ""
      : device_.is_cpu()
          ? "; cpu offload: the model is on the CPU already, nothing moves"
          : "; cpu offload: the pieces, their gradients and the optimizer state are in the CPU's "
            "memory (pinned), the optimizer steps there",
      built > 0 ? absl::StrCat("; ", built, " parameter tensors were built as pieces, never whole")
                : ""));
  return absl::OkStatus();
}

namespace {
// The state tensors of `param` in the optimizers kiln has (torch's, and kiln's fused Adam(W) that
// keeps torch's state types); nullopt when the optimizer holds state of a kind it does not know.
std::optional<std::vector<torch::Tensor*>> StateTensors(torch::optim::Optimizer& optimizer,
                                                        const torch::Tensor& param) {
  auto it = optimizer.state().find(param.unsafeGetTensorImpl());
  if (it == optimizer.state().end()) return std::vector<torch::Tensor*>{};
  torch::optim::OptimizerParamState* state = it->second.get();
  if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(state))
    return std::vector<torch::Tensor*>{&s->exp_avg(), &s->exp_avg_sq(), &s->max_exp_avg_sq()};
  if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(state))
    return std::vector<torch::Tensor*>{&s->exp_avg(), &s->exp_avg_sq(), &s->max_exp_avg_sq()};
  if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(state))
    return std::vector<torch::Tensor*>{&s->momentum_buffer()};
  if (auto* s = dynamic_cast<torch::optim::AdagradParamState*>(state))
    return std::vector<torch::Tensor*>{&s->sum()};
  if (auto* s = dynamic_cast<torch::optim::RMSpropParamState*>(state))
    return std::vector<torch::Tensor*>{&s->square_avg(), &s->momentum_buffer(), &s->grad_avg()};
  return std::nullopt;
}
}  // namespace

absl::Status Strategy::ShardOptimizerState(torch::optim::Optimizer& optimizer) {
  if (tables_) {
    tables_->ShardState([&](const torch::Tensor& param) {
      return StateTensors(optimizer, param).value_or(std::vector<torch::Tensor*>{});
    });
  }
  if (!sharded_) return absl::OkStatus();
  bool unknown = false;
  sharded_->ShardState([&](const torch::Tensor& param) {
    auto tensors = StateTensors(optimizer, param);
    if (!tensors) unknown = true;
    return tensors.value_or(std::vector<torch::Tensor*>{});
  });
  if (unknown) {
    return absl::UnimplementedError(
        "trainer.strategy=fsdp: the optimizer's state is of a kind kiln cannot cut into pieces "
        "(adam, adamw, sgd, adagrad and rmsprop it can); resume this checkpoint with "
        "trainer.strategy=ddp");
  }
  return absl::OkStatus();
}

ModelStateBytes Strategy::ModelState(torch::nn::Module& module,
                                     torch::optim::Optimizer& optimizer) {
  ModelStateBytes bytes;
  for (const auto& p : module.parameters()) {
    const int64_t n = p.numel() * static_cast<int64_t>(p.element_size());
    bytes.parameters += n;
    if (p.requires_grad()) bytes.parameters_trained += n;
    for (torch::Tensor* t : StateTensors(optimizer, p).value_or(std::vector<torch::Tensor*>{})) {
      if (t != nullptr && t->defined())
        bytes.optimizer += t->numel() * static_cast<int64_t>(t->element_size());
    }
  }
  return bytes;
}

std::map<std::string, std::vector<int64_t>> Strategy::sharded_shapes() const {
  std::map<std::string, std::vector<int64_t>> shapes;
  if (sharded_) shapes = sharded_->whole_shapes();
  if (tables_) {
    for (auto& [name, shape] : tables_->whole_shapes()) shapes[name] = shape;
  }
  return shapes;
}

absl::Status Strategy::EndSharding() {
  if (tables_ && whole_model_after_fit_) {
    KILN_RETURN_IF_ERROR(tables_->Unshard());
    tables_.reset();
  }
  if (!sharded_ || !whole_model_after_fit_) return absl::OkStatus();
  KILN_RETURN_IF_ERROR(sharded_->Unshard());
  sharded_.reset();
  return absl::OkStatus();
}

absl::Status Strategy::BeforeEvaluationForward() {
  return sharded_ ? sharded_->BeforeForward(/*training=*/false) : absl::OkStatus();
}

absl::Status Strategy::AfterEvaluation() {
  return sharded_ ? sharded_->Reshard() : absl::OkStatus();
}

absl::Status Strategy::ClipShardedGradNorm(double max_norm) {
  if (!sharded_) return absl::OkStatus();
  return sharded_->ClipGradNorm(max_norm).status();
}

std::shared_ptr<distributed::DataParallel> Strategy::MakeDataParallel(
    torch::nn::Module& module) const {
  return std::make_shared<distributed::DataParallel>(
      group_, module, options_.ddp_bucket_cap_mb, options_.ddp_find_unused_parameters,
      tables_ ? tables_->parameters() : std::set<const void*>{});
}

absl::Status Strategy::TrainedParametersChanged(torch::nn::Module& module) {
  if (!data_parallel_) return absl::OkStatus();
  // The old reducer's hooks go with it before the new one hooks the gradients again. The
  // parameters are still every rank's alike: frozen ones were not stepped.
  data_parallel_.reset();
  data_parallel_ = MakeDataParallel(module);
  Logger::Instance().Info(
      absl::StrFormat("data parallel: the trained parameters changed; %d gradient buckets now",
                      data_parallel_->num_buckets()));
  return absl::OkStatus();
}

absl::Status Strategy::BeforeTrainingForward() {
  if (sharded_) return sharded_->BeforeForward(/*training=*/true);
  return data_parallel_ ? data_parallel_->BroadcastBuffers() : absl::OkStatus();
}

absl::Status Strategy::Backward(const torch::Tensor& loss, bool sync) {
  // 16-mixed: the gradients come out multiplied by the loss scale (unscaled before the step).
  torch::Tensor scaled = scaler_ != nullptr ? scaler_->Scale(loss) : loss;
  if (sharded_) {
    // Each unit's gradients are reduce-scattered from the backward's hooks; what is left (the
    // root, parameters the loss did not use) after it.
    KILN_RETURN_IF_ERROR(
        sharded_->Guard("backward with the gradient reduce-scatter", [&] { scaled.backward(); }));
    return sharded_->FinishBackward();
  }
  if (!data_parallel_) {
    scaled.backward();
    return absl::OkStatus();
  }
  // Micro-steps accumulate locally; the step's last backward averages the sum over ranks.
  if (sync) KILN_RETURN_IF_ERROR(data_parallel_->PrepareSyncedBackward(scaled));
  return group_->Guard("backward with gradient all-reduce", [&] { scaled.backward(); });
}

absl::StatusOr<bool> Strategy::AnyRank(bool local) {
  if (!distributed()) return local;
  torch::Tensor flag = torch::tensor({local ? 1.0 : 0.0}, torch::kFloat64);
  KILN_RETURN_IF_ERROR(MaxOverRanks(flag));
  return flag.item<double>() > 0;
}

torch::Device Strategy::CollectiveDevice(const std::string& backend, const torch::Device& device) {
  return backend == "nccl" ? device : torch::Device(torch::kCPU);
}

absl::Status Strategy::AllReduce(torch::Tensor& t, bool max) {
  torch::Device device = CollectiveDevice(group_->backend(), device_);
  torch::Tensor there = t.device() == device ? t : t.to(device);
  KILN_RETURN_IF_ERROR(group_->AllReduce(there, max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM));
  if (!there.is_same(t)) t.copy_(there);
  return absl::OkStatus();
}

absl::Status Strategy::MaxOverRanks(torch::Tensor& values) {
  if (!distributed()) return absl::OkStatus();
  return AllReduce(values, /*max=*/true);
}

absl::Status Strategy::SumOverRanks(torch::Tensor& t) {
  if (!distributed()) return absl::OkStatus();
  return AllReduce(t, /*max=*/false);
}

absl::Status Strategy::AverageOverRanks(std::map<std::string, double>& means) {
  if (!distributed() || means.empty()) return absl::OkStatus();
  std::vector<double> values;
  for (const auto& [name, value] : means) values.push_back(value);
  torch::Tensor sums = torch::tensor(values, torch::kFloat64);
  KILN_RETURN_IF_ERROR(AllReduce(sums, /*max=*/false));
  size_t i = 0;
  for (auto& [name, value] : means)
    value = sums[static_cast<int64_t>(i++)].item<double>() / world_size();
  return absl::OkStatus();
}

absl::Status Strategy::Barrier() { return distributed() ? group_->Barrier() : absl::OkStatus(); }

AutocastScope::AutocastScope(const Strategy& strategy)
    : enabled_(strategy.autocast()),
      device_(strategy.device().type()),
      dtype_(strategy.autocast_dtype()) {
  if (enabled_) compat::SetAutocast(device_, true, dtype_);
}

AutocastScope::~AutocastScope() {
  if (enabled_) compat::SetAutocast(device_, false, dtype_);
}

}  // namespace kiln
