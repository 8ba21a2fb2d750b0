// Counter, base lrs, length and checkpointing shared by kiln's lr schedules.
#include "components/optim/lr_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kiln {

LrScheduler::LrScheduler(std::string name, Interval interval, Length length)
    : name_(std::move(name)), interval_(interval), length_option_(std::move(length)) {}

LrScheduler::LrScheduler(std::string name, Interval interval)
    : LrScheduler(std::move(name), interval, Length()) {}

absl::Status LrScheduler::Attach(torch::optim::Optimizer* optimizer, int64_t total_steps,
                                 int64_t steps_per_epoch) {
  if (optimizer == nullptr) return absl::InvalidArgumentError("scheduler attached to no optimizer");
  auto& groups = optimizer->param_groups();
  if (restored_) {
    if (groups.size() != base_lrs_.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("scheduler '", name_, "' was restored for ", base_lrs_.size(),
                       " parameter groups but the optimizer has ", groups.size()));
    }
  } else {
    int64_t planned = 0;
    if (interval_ == Interval::kStep) {
      planned = total_steps;
    } else if (total_steps > 0 && steps_per_epoch > 0) {
      planned = (total_steps + steps_per_epoch - 1) / steps_per_epoch;
    }
    length_ = length_option_.fixed > 0 ? length_option_.fixed : std::max<int64_t>(planned, 0);
    if (length_option_.needed && length_ == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("scheduler '", name_, "' needs the length of the schedule: set '",
                       length_option_.option, "', or give the trainer a step or epoch limit"));
    }
    base_lrs_.clear();
    for (const auto& group : groups) base_lrs_.push_back(group.options().get_lr());
    attached_groups_ = base_lrs_.size();
    step_ = 0;
    OnStart();
  }
  optimizer_ = optimizer;
  ApplyLrs();
  return absl::OkStatus();
}

void LrScheduler::Step(double metric) {
  ++step_;
  Observe(metric);
  ApplyLrs();
}

void LrScheduler::OnParamGroupAdded(double base_lr) {
  base_lrs_.push_back(base_lr);
  ApplyLrs();
}

void LrScheduler::ApplyLrs() {
  if (optimizer_ == nullptr) return;
  auto& groups = optimizer_->param_groups();
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i) {
    if (i < attached_groups_ || base_lrs_[0] == 0) {
      groups[i].options().set_lr(i < attached_groups_ ? LrAt(step_, i) : base_lrs_[i]);
    } else {
      groups[i].options().set_lr(LrAt(step_, 0) * (base_lrs_[i] / base_lrs_[0]));
    }
  }
}

void LrScheduler::Save(torch::serialize::OutputArchive& archive) const {
  WriteInt(archive, "step", step_);
  WriteInt(archive, "length", length_);
  WriteDoubles(archive, "base_lrs", base_lrs_);
  WriteInt(archive, "attached_groups", static_cast<int64_t>(attached_groups_));
  SaveExtra(archive);
}

void LrScheduler::Load(torch::serialize::InputArchive& archive) {
  std::vector<double> base_lrs = ReadDoubles(archive, "base_lrs");
  if (optimizer_ != nullptr) {
    TORCH_CHECK(base_lrs.size() == optimizer_->param_groups().size(), "scheduler '", name_,
                "' checkpoint has ", base_lrs.size(), " parameter groups but the optimizer has ",
                optimizer_->param_groups().size());
  }
  base_lrs_ = std::move(base_lrs);
  torch::Tensor attached;
  attached_groups_ = archive.try_read("attached_groups", attached)
                         ? static_cast<size_t>(attached.item<int64_t>())
                         : base_lrs_.size();
  step_ = ReadInt(archive, "step");
  length_ = ReadInt(archive, "length");
  LoadExtra(archive);
  restored_ = true;
  ApplyLrs();
}

OptionCheck IntervalNames() { return OneOf({"step", "epoch"}); }

Scheduler::Interval IntervalNamed(const std::string& interval) {
  return interval == "step" ? Scheduler::Interval::kStep : Scheduler::Interval::kEpoch;
}

void WriteInt(torch::serialize::OutputArchive& archive, const std::string& key, int64_t value) {
  archive.write(key, torch::full({}, value, torch::kInt64));
}

int64_t ReadInt(torch::serialize::InputArchive& archive, const std::string& key) {
  torch::Tensor tensor;
  archive.read(key, tensor);
  return tensor.item<int64_t>();
}

void WriteDoubles(torch::serialize::OutputArchive& archive, const std::string& key,
                  const std::vector<double>& values) {
  archive.write(key, torch::tensor(values, torch::dtype(torch::kFloat64)));
}

std::vector<double> ReadDoubles(torch::serialize::InputArchive& archive, const std::string& key) {
  torch::Tensor tensor;
  archive.read(key, tensor);
  tensor = tensor.to(torch::kFloat64).contiguous();
  const double* data = tensor.data_ptr<double>();
  return std::vector<double>(data, data + tensor.numel());
}

}  // namespace kiln
