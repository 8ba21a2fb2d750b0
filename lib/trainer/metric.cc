#include "lib/trainer/metric.h"

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace kiln {

void Metric::AddState(std::string name, torch::Tensor* tensor) {
  states_.push_back({std::move(name), tensor, tensor->clone()});
}

void Metric::Reset() {
  for (State& s : states_) s.tensor->copy_(s.initial);
}

absl::StatusOr<MetricValues> Metric::Forward(const MetricBatch& batch,
                                             const std::vector<std::string>& class_names) {
  // The batch alone in fresh state; then the state so far added back (every state is a sum).
  std::vector<torch::Tensor> before;
  before.reserve(states_.size());
  for (State& s : states_) {
    before.push_back(s.tensor->clone());
    s.tensor->copy_(s.initial);
  }
  absl::Status updated = Update(batch);
  absl::StatusOr<MetricValues> values =
      updated.ok() ? Compute(class_names) : absl::StatusOr<MetricValues>(updated);
  for (size_t i = 0; i < states_.size(); ++i) {
    if (updated.ok()) {
      states_[i].tensor->add_(before[i]);
    } else {
      states_[i].tensor->copy_(before[i]);
    }
  }
  return values;
}

absl::Status Metric::Sync(const SumOverRanks& sum_over_ranks) {
  for (State& s : states_) KILN_RETURN_IF_ERROR(sum_over_ranks(*s.tensor));
  return absl::OkStatus();
}

std::map<std::string, torch::Tensor> Metric::StateDict() const {
  std::map<std::string, torch::Tensor> state;
  for (const State& s : states_) state[s.name] = s.tensor->clone();
  return state;
}

absl::Status Metric::LoadStateDict(const std::map<std::string, torch::Tensor>& state) {
  for (const State& s : states_) {
    auto it = state.find(s.name);
    if (it == state.end())
      return absl::InvalidArgumentError(absl::StrCat("metric state '", s.name, "' is missing"));
    if (!it->second.sizes().equals(s.tensor->sizes())) {
      return absl::InvalidArgumentError(absl::StrCat("metric state '", s.name, "' has shape ",
                                                     c10::str(it->second.sizes()), ", expected ",
                                                     c10::str(s.tensor->sizes())));
    }
  }
  for (State& s : states_) s.tensor->copy_(state.at(s.name));
  return absl::OkStatus();
}

MetricValues Share(const torch::Tensor& part, const torch::Tensor& whole) {
  double w = whole.item<double>();
  if (w == 0) return MetricValues();
  return MetricValues{{"", part.item<double>() / w}};
}

OptionCheck StageList() {
  return {"each one of: train, val, test", [](const config::Node& n) {
            for (const auto& item : n.items()) {
              const std::string& s = item->as_string();
              if (s != "train" && s != "val" && s != "test") return false;
            }
            return true;
          }};
}

}  // namespace kiln
