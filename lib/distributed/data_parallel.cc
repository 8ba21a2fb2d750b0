#include "lib/distributed/data_parallel.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/error_text.h"

namespace kiln::distributed {

DataParallel::DataParallel(std::shared_ptr<ProcessGroup> group, torch::nn::Module& module,
                           double bucket_cap_mb, bool find_unused_parameters,
                           std::set<const void*> local)
    : group_(std::move(group)), module_(module), local_(std::move(local)) {
  std::vector<at::Tensor> params;
  std::unordered_map<size_t, std::string> names;
  for (const auto& item : module.named_parameters()) {
    if (!item.value().requires_grad() || local_.count(item.value().unsafeGetTensorImpl()) > 0)
      continue;
    names[params.size()] = item.key();
    names_.push_back(item.key());
    params.push_back(item.value());
  }
  auto bucket_bytes = static_cast<int64_t>(bucket_cap_mb * 1024 * 1024);
  // As DistributedDataParallel: a small first bucket (1 MiB, or less when the cap is smaller) so
  // communication starts early, buckets laid
  // out in reverse because backward produces the last layers' gradients first.
  auto first_bucket_bytes = std::min<int64_t>(c10d::kDefaultFirstBucketBytes, bucket_bytes);
  auto buckets = std::get<0>(c10d::compute_bucket_assignment_by_size(
      params, {static_cast<size_t>(first_bucket_bytes), static_cast<size_t>(bucket_bytes)},
      std::vector<bool>(params.size(), false)));
  std::reverse(buckets.begin(), buckets.end());
  num_buckets_ = buckets.size();
  reducer_ = std::make_unique<c10d::Reducer>(
      params, std::move(buckets), group_->group(), std::vector<bool>(params.size(), false),
      bucket_bytes, find_unused_parameters, /*gradient_as_bucket_view=*/false, std::move(names),
      first_bucket_bytes,
      /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
      /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
}

DataParallel::~DataParallel() = default;

absl::Status DataParallel::SyncModuleStates() {
  std::vector<torch::Tensor> states;
  for (const auto& p : module_.parameters()) {
    if (local_.count(p.unsafeGetTensorImpl()) == 0) states.push_back(p.detach());
  }
  auto status = group_->Guard("comparing the model across workers", [&] {
    c10d::verify_params_across_processes(group_->group(), states, std::nullopt);
  });
  if (!status.ok()) return status;
  for (const auto& b : module_.buffers()) states.push_back(b.detach());
  return group_->Broadcast(states);
}

absl::Status DataParallel::BroadcastBuffers() {
  std::vector<torch::Tensor> buffers;
  for (const auto& b : module_.buffers()) buffers.push_back(b.detach());
  if (buffers.empty()) return absl::OkStatus();
  return group_->Broadcast(buffers);
}

absl::Status DataParallel::PrepareSyncedBackward(const torch::Tensor& loss) {
  std::optional<std::string> reducer_error;
  // Rebuilding the buckets broadcasts their new order (a collective), so a worker that stopped
  // shows here too: the transport's error (gloo's is not a c10::Error) goes to Guard, which says
  // so; the reducer's own checks throw c10::Error and are read below.
  absl::Status status = group_->Guard("preparing the gradient reduction", [&] {
    try {
      // As DDP's forward: the check that the previous step reduced every bucket (the reducer
      // throws when it did not), and once, after the first step, buckets rebuilt in the order
      // backward produced the gradients.
      reducer_->rebuild_buckets();
      reducer_->prepare_for_forward();
      reducer_->prepare_for_backward({loss});
    } catch (const c10::DistError&) {
      throw;
    } catch (const c10::Error& e) {
      reducer_error = e.what_without_backtrace();
    }
  });
  if (!reducer_error) return status;
  // The reducer finds out at the next step that the previous one never reduced some buckets, and
  // says which parameter indices got no gradient.
  const std::string& message = *reducer_error;
  std::vector<std::string> unused;
  const std::string marker = "did not receive grad for rank ";
  if (size_t at = message.find(marker); at != std::string::npos) {
    std::istringstream indices(message.substr(message.find(':', at) + 1));
    for (size_t i; indices >> i;) {
      if (i < names_.size()) unused.push_back(names_[i]);
    }
  }
  if (!unused.empty() || message.find("not used in producing loss") != std::string::npos) {
    return absl::FailedPreconditionError(
        absl::StrCat("data parallel: the loss does not use every parameter",
                     unused.empty() ? "" : absl::StrCat(" (", absl::StrJoin(unused, ", "), ")"),
                     ", and the gradient reduction waits for them; set "
                     "trainer.ddp_find_unused_parameters=true"));
  }
  return absl::InternalError(absl::StrCat("data parallel: ", ErrorLine(message)));
}

}  // namespace kiln::distributed
