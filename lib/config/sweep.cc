#include "lib/config/sweep.h"

#include <fnmatch.h>

#include <algorithm>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kiln::config {
namespace {

double AsDouble(const Node& n) {
  return n.kind() == NodeKind::kInt ? static_cast<double>(n.as_int()) : n.as_float();
}

absl::StatusOr<std::vector<OverrideValue>> SweepValues(const Override& o, const ConfigRepository& repo) {
  const Sweep& sweep = o.sweep;
  std::vector<OverrideValue> values;
  switch (sweep.kind) {
    case SweepKind::kChoice:
      values = sweep.choices;
      break;
    case SweepKind::kRange: {
      const Node& start = *sweep.range_start;
      const Node& stop = *sweep.range_stop;
      const Node& step = *sweep.range_step;
      if (start.kind() == NodeKind::kInt && stop.kind() == NodeKind::kInt && step.kind() == NodeKind::kInt) {
        int64_t s = start.as_int(), e = stop.as_int(), d = step.as_int();
        for (int64_t v = s; d > 0 ? v < e : v > e; v += d) values.push_back({Node::Int(v)});
      } else {
        double s = AsDouble(start), e = AsDouble(stop), d = AsDouble(step);
        for (double v = s; d > 0 ? v < e : v > e; v += d) values.push_back({Node::Float(v)});
      }
      break;
    }
    case SweepKind::kGlob: {
      if (!repo.GroupExists(o.key_or_group)) {
        return absl::InvalidArgumentError(absl::StrCat("glob() in '", o.input_line,
                                                       "' needs a config group, and '", o.key_or_group,
                                                       "' is not one"));
      }
      for (const auto& option : repo.GroupOptions(o.key_or_group)) {
        auto matches = [&](const std::vector<std::string>& patterns) {
          return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) {
            return fnmatch(p.c_str(), option.c_str(), 0) == 0;
          });
        };
        if (matches(sweep.glob_include) && !matches(sweep.glob_exclude)) {
          values.push_back({Node::String(option)});
        }
      }
      break;
    }
    case SweepKind::kInterval:
      return absl::InvalidArgumentError(absl::StrCat(
          "the basic sweeper cannot sweep over interval() in '", o.input_line,
          "': it needs a sweeper that samples (use choice() or range())"));
    case SweepKind::kNone:
      break;
  }
  if (sweep.sort) {
    bool numbers = std::all_of(values.begin(), values.end(), [](const OverrideValue& v) {
      return v.node->kind() == NodeKind::kInt || v.node->kind() == NodeKind::kFloat;
    });
    std::stable_sort(values.begin(), values.end(), [&](const OverrideValue& a, const OverrideValue& b) {
      bool less = numbers ? AsDouble(*a.node) < AsDouble(*b.node)
                          : NodeToOverrideString(*a.node) < NodeToOverrideString(*b.node);
      bool greater = numbers ? AsDouble(*b.node) < AsDouble(*a.node)
                             : NodeToOverrideString(*b.node) < NodeToOverrideString(*a.node);
      return sweep.sort_reverse ? greater : less;
    });
  }
  if (sweep.shuffle) std::shuffle(values.begin(), values.end(), std::mt19937(std::random_device{}()));
  return values;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<std::string>>> PlanSweep(const std::vector<Override>& params,
                                                                const std::vector<Override>& overrides,
                                                                const ConfigRepository& repo) {
  std::vector<std::pair<std::string, std::vector<std::string>>> lists;
  auto add = [&](const std::string& key, std::vector<std::string> lines) {
    for (auto& [k, v] : lists) {
      if (k == key) {
        v = std::move(lines);
        return;
      }
    }
    lists.emplace_back(key, std::move(lines));
  };
  std::vector<Override> all = params;
  all.insert(all.end(), overrides.begin(), overrides.end());
  for (const auto& o : all) {
    std::string key = o.KeyElement();
    if (o.is_sweep()) {
      auto values = SweepValues(o, repo);
      if (!values.ok()) return values.status();
      std::vector<std::string> lines;
      for (const auto& v : *values) lines.push_back(key + "=" + OverrideValueToString(v));
      add(key, std::move(lines));
    } else if (!o.has_value) {
      add(key, {key});
    } else {
      add(key, {key + "=" + OverrideValueToString(o.value)});
    }
  }
  std::vector<std::vector<std::string>> jobs = {{}};
  for (const auto& [key, lines] : lists) {
    std::vector<std::vector<std::string>> next;
    for (const auto& job : jobs) {
      for (const auto& line : lines) {
        auto extended = job;
        extended.push_back(line);
        next.push_back(std::move(extended));
      }
    }
    jobs = std::move(next);
  }
  return jobs;
}

}  // namespace kiln::config
