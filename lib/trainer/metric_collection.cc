#include "lib/trainer/metric_collection.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/config/config.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

// How many targets a batch counts: its unmasked target positions, else its texts.
double CountedTargets(const MetricBatch& batch) {
  if (batch.mask.defined()) return batch.mask.sum().item<double>();
  if (batch.target.defined()) return static_cast<double>(batch.target.numel());
  return static_cast<double>(batch.target_texts.size());
}

std::string ValueName(const std::string& stage, const std::string& entry, const std::string& part) {
  return part.empty() ? absl::StrCat(stage, "/", entry)
                      : absl::StrCat(stage, "/", entry, "/", part);
}

}  // namespace

absl::Status MetricCollection::Build(const config::NodePtr& metrics, const std::string& key,
                                     const MetricSetup& setup) {
  stages_.clear();
  if (!metrics || metrics->is_null()) return absl::OkStatus();
  if (!metrics->is_map()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", key, "' must be a mapping of name: {_target_: METRIC, ...}"));
  }
  config::Config group(metrics, key);
  for (const auto& [name, node] : metrics->entries()) {
    if (node->is_null()) continue;
    KILN_ASSIGN_OR_RETURN(config::Config item, group.Sub(name));
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<Metric> first, Registry<Metric>::Get().Instantiate(item));
    // One instance per stage (each keeps its own state); a stage listed twice runs once.
    std::set<std::string> stages(first->stages().begin(), first->stages().end());
    for (const std::string& stage : stages) {
      std::shared_ptr<Metric> metric = first;
      if (stage != *stages.begin()) {
        KILN_ASSIGN_OR_RETURN(metric, Registry<Metric>::Get().Instantiate(item));
      }
      absl::Status st = metric->Setup(setup);
      if (!st.ok()) {
        return absl::Status(st.code(),
                            absl::StrCat("metric '", item.prefix(), "': ", st.message()));
      }
      stages_[stage].entries.push_back({name, std::move(metric)});
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> MetricCollection::ClassNames() const {
  return data_ ? data_->class_names() : std::vector<std::string>();
}

absl::Status MetricCollection::Update(const std::string& stage, const MetricBatch& batch,
                                      MetricLog& log) {
  auto it = stages_.find(stage);
  if (it == stages_.end()) return absl::OkStatus();
  Stage& s = it->second;
  if (s.computed) {
    for (Entry& e : s.entries) e.metric->Reset();
    s.computed = false;
  }
  s.updated = true;
  if (stage != "train") {
    for (Entry& e : s.entries) KILN_RETURN_IF_ERROR(e.metric->Update(batch));
    return absl::OkStatus();
  }
  // Training also logs each batch's own value (the step's); the epoch's comes from Compute.
  torch::NoGradGuard no_grad;  // the scores still belong to the training graph
  std::vector<std::string> names = ClassNames();
  double weight = CountedTargets(batch);
  for (Entry& e : s.entries) {
    KILN_ASSIGN_OR_RETURN(MetricValues values, e.metric->Forward(batch, names));
    for (const auto& [part, value] : values) log.Log(ValueName(stage, e.name, part), value, weight);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, double>> MetricCollection::Compute(
    const std::string& stage, const SumOverRanks& sum_over_ranks) {
  std::map<std::string, double> out;
  auto it = stages_.find(stage);
  if (it == stages_.end()) return out;
  Stage& s = it->second;
  std::vector<std::string> names = ClassNames();
  for (Entry& e : s.entries) {
    if (!s.updated) e.metric->Reset();  // an epoch without batches (here) adds nothing
    if (sum_over_ranks) KILN_RETURN_IF_ERROR(e.metric->Sync(sum_over_ranks));
    KILN_ASSIGN_OR_RETURN(MetricValues values, e.metric->Compute(names));
    for (const auto& [part, value] : values) out[ValueName(stage, e.name, part)] = value;
  }
  s.updated = false;
  s.computed = true;
  return out;
}

absl::Status MetricCollection::WriteReports(const std::string& stage, const std::string& output_dir,
                                            const std::vector<std::string>& class_names) const {
  auto it = stages_.find(stage);
  if (it == stages_.end()) return absl::OkStatus();
  for (const Entry& e : it->second.entries)
    KILN_RETURN_IF_ERROR(e.metric->WriteReport(output_dir, stage, class_names));
  return absl::OkStatus();
}

std::map<std::string, torch::Tensor> MetricCollection::StateDict() const {
  std::map<std::string, torch::Tensor> state;
  for (const auto& [stage, s] : stages_) {
    for (const Entry& e : s.entries) {
      for (auto& [name, tensor] : e.metric->StateDict())
        state[absl::StrCat(stage, "/", e.name, "/", name)] = tensor;
    }
  }
  return state;
}

absl::Status MetricCollection::LoadStateDict(const std::map<std::string, torch::Tensor>& state) {
  for (auto& [stage, s] : stages_) {
    for (Entry& e : s.entries) {
      std::string prefix = absl::StrCat(stage, "/", e.name, "/");
      std::map<std::string, torch::Tensor> mine;
      for (auto it = state.lower_bound(prefix);
           it != state.end() && it->first.rfind(prefix, 0) == 0; ++it) {
        mine[it->first.substr(prefix.size())] = it->second;
      }
      absl::Status st = e.metric->LoadStateDict(mine);
      if (!st.ok())
        return absl::Status(st.code(), absl::StrCat(stage, "/", e.name, ": ", st.message()));
      s.updated = true;
      s.computed = false;
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln
