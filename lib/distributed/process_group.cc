#include "lib/distributed/process_group.h"

#include <algorithm>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include "absl/strings/str_cat.h"
#include "lib/base/error_text.h"
#include "lib/base/status_macros.h"
#include "lib/distributed/internal/nccl_backend.h"

namespace kiln::distributed {
namespace {

// Constant-initialized: libkiln_cuda's static initializers set it.
NcclBackendMaker nccl_backend_maker = nullptr;

// The first line of a c10d/Gloo message, without LibTorch's C++ backtrace.
std::string FirstLine(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  return ErrorLine(c10_error != nullptr ? c10_error->what_without_backtrace() : e.what());
}

bool IsLoopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

}  // namespace

NcclBackendMaker GetNcclBackendMaker() { return nccl_backend_maker; }
void SetNcclBackendMaker(NcclBackendMaker maker) { nccl_backend_maker = maker; }

absl::StatusOr<std::shared_ptr<ProcessGroup>> ProcessGroup::Create(
    const run::Environment& env, const ProcessGroupOptions& options) {
  auto group = std::make_shared<ProcessGroup>();
  group->rank_ = env.rank;
  group->world_size_ = env.world_size;
  // auto, as Lightning: NCCL for ranks that train on CUDA, Gloo for the CPU.
  std::string backend =
      options.backend == "auto" ? (options.cuda ? "nccl" : "gloo") : options.backend;
  if (backend == "nccl" && nccl_backend_maker == nullptr) {
    return absl::UnimplementedError(
        "process_group_backend=nccl: this process has no CUDA (kiln's CUDA module is not loaded: "
        "no CUDA driver here, or a kiln built without CUDA), which leaves gloo only (CPU)");
  }
  if (backend == "nccl" && !options.cuda) {
    return absl::FailedPreconditionError(
        "process_group_backend=nccl reduces CUDA tensors: it needs trainer.accelerator=cuda (or "
        "auto) and a GPU");
  }
  group->backend_ = backend;
  group->options_ = options;
  group->master_addr_ = env.master_addr;
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(env.master_port);
    store_options.isServer = env.rank == 0;
    store_options.numWorkers = static_cast<size_t>(env.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = options.timeout;
    group->store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rank ", env.rank, ": rendezvous at ",
                                               env.master_addr, ":", env.master_port,
                                               " failed: ", FirstLine(e)));
  }
  KILN_RETURN_IF_ERROR(group->Join("kiln/default_pg", "kiln/nccl"));
  return group;
}

absl::Status ProcessGroup::Join(const std::string& prefix, const std::string& nccl_prefix) {
  try {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options_.timeout);
    std::string interface = run::ProcessEnv("GLOO_SOCKET_IFNAME");
    if (!interface.empty()) {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
    } else if (IsLoopback(master_addr_)) {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
    // As torch.distributed.init_process_group: a ProcessGroup that dispatches CPU tensors to its
    // Gloo backend.
    auto gloo =
        c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank_, world_size_, gloo_options);
    group_ = c10::make_intrusive<c10d::ProcessGroup>(prefixed, rank_, world_size_);
    group_->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
    group_->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
    // Gloo also takes CUDA tensors (staged through the host), as torch.distributed's "gloo" does:
    // ranks that share a GPU, or a machine without NCCL.
    if (backend_ == "gloo")
      group_->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::GLOO, gloo);
    // With NCCL, CUDA tensors go to it (gradients, weights, metrics on the device) and CPU ones
    // still to Gloo, as torch.distributed's "cpu:gloo,cuda:nccl".
    if (backend_ == "nccl") {
      auto nccl_store = c10::make_intrusive<c10d::PrefixStore>(nccl_prefix, store_);
      auto nccl = nccl_backend_maker(nccl_store, rank_, world_size_, options_.timeout);
      group_->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
      group_->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rank ", rank_, ": could not join the ", backend_,
                                               " process group ", prefix, ": ", FirstLine(e)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> ProcessGroup::Subgroup(const std::vector<int>& ranks,
                                                                     const std::string& name) {
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, " is not among the ranks of the group '", name, "'"));
  }
  auto sub = std::make_shared<ProcessGroup>();
  sub->rank_ = static_cast<int>(it - ranks.begin());
  sub->world_size_ = static_cast<int>(ranks.size());
  sub->backend_ = backend_;
  sub->options_ = options_;
  sub->master_addr_ = master_addr_;
  sub->store_ = store_;
  sub->name_ = name;
  KILN_RETURN_IF_ERROR(sub->Join("kiln/group/" + name, "kiln/group/" + name + "/nccl"));
  return sub;
}

absl::Status ProcessGroup::Guard(const std::string& what, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    // This worker's own allocation failed (fsdp gathers into new buffers): not a peer's stop. It
    // goes on to where a forward's out-of-memory goes, which says so in one line.
    if (IsOutOfMemory(e)) throw;
    return absl::UnavailableError(
        absl::StrCat("rank ", rank_, " of ", world_size_, ": ", what,
                     " failed; another worker has probably stopped: ", FirstLine(e)));
  }
  return absl::OkStatus();
}

absl::Status ProcessGroup::Barrier() {
  return Guard("barrier", [&] { group_->barrier()->wait(); });
}

absl::Status ProcessGroup::AllReduce(torch::Tensor& tensor, c10d::ReduceOp op) {
  return Guard("all-reduce", [&] {
    std::vector<at::Tensor> tensors{tensor};
    c10d::AllreduceOptions all_reduce;
    all_reduce.reduceOp = op;
    group_->allreduce(tensors, all_reduce)->wait();
  });
}

absl::Status ProcessGroup::Broadcast(std::vector<torch::Tensor> tensors) {
  return Guard("broadcast", [&] {
    torch::NoGradGuard no_grad;
    constexpr size_t kBufferBytes = 250 * 1024 * 1024;  // DDP's broadcast_bucket_size
    c10d::broadcast_coalesced(group_, tensors, kBufferBytes, 0);
  });
}

absl::StatusOr<std::string> ProcessGroup::ShareFromRankZero(const std::string& key,
                                                            const std::string& value) {
  std::string shared;
  auto status = Guard(absl::StrCat("sharing '", key, "'"), [&] {
    std::string full = absl::StrCat("kiln/share/", name_.empty() ? "" : name_ + "/", key);
    if (rank_ == 0) {
      store_->set(full, std::vector<uint8_t>(value.begin(), value.end()));
      shared = value;
    } else {
      std::vector<uint8_t> bytes = store_->get(full);
      shared.assign(bytes.begin(), bytes.end());
    }
  });
  if (!status.ok()) return status;
  return shared;
}

}  // namespace kiln::distributed
