#include "components/common/option_values.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"

namespace kiln::data {
namespace {

using config::Node;
using config::NodeKind;

std::optional<double> Number(const Node& n) {
  if (n.kind() == NodeKind::kInt) return static_cast<double>(n.as_int());
  if (n.kind() == NodeKind::kFloat) return n.as_float();
  return std::nullopt;
}

std::optional<std::pair<double, double>> Pair(const Node& n) {
  if (!n.is_list() || n.items().size() != 2) return std::nullopt;
  std::optional<double> low = Number(*n.items()[0]), high = Number(*n.items()[1]);
  if (!low || !high) return std::nullopt;
  return std::make_pair(*low, *high);
}

}  // namespace

OptionCheck PairCheck(std::string what, std::function<bool(double, double)> ok) {
  return {std::move(what), [ok = std::move(ok)](const Node& n) {
            std::optional<std::pair<double, double>> pair = Pair(n);
            return pair.has_value() && ok(pair->first, pair->second);
          }};
}

OptionCheck OrderedWithin(double min, double max) {
  return PairCheck(
      absl::StrCat("[low, high] with ", min, " <= low <= high <= ", max),
      [min, max](double low, double high) { return min <= low && low <= high && high <= max; });
}

std::optional<std::pair<double, double>> RangeOption::Range(const Node& value) const {
  std::optional<std::pair<double, double>> range = Pair(value);
  if (!range) {
    std::optional<double> v = Number(value);
    if (!v || !(*v >= 0)) return std::nullopt;
    range = std::make_pair(std::max(min_, centre_ - *v), centre_ + *v);
  }
  if (!(range->first >= min_ && range->first <= range->second && range->second <= max_))
    return std::nullopt;
  return range;
}

OptionCheck RangeOption::check() const {
  std::string what =
      std::isinf(max_)
          ? absl::StrCat("v >= 0 or [low, high] with ", min_, " <= low <= high")
          : absl::StrCat("v >= 0 or [low, high] with low <= high, the range lying within [", min_,
                         ", ", max_, "]");
  return {what, [option = *this](const Node& n) { return option.Range(n).has_value(); }};
}

std::pair<double, double> RangeOption::Of(const Node& value) const { return *Range(value); }

}  // namespace kiln::data

namespace kiln::internal {

config::NodePtr OptionField<data::ImageSize>::ToNode(const data::ImageSize& size) {
  if (size.height == size.width) return config::Node::Int(size.height);
  config::NodePtr list = config::Node::List();
  list->Append(config::Node::Int(size.height));
  list->Append(config::Node::Int(size.width));
  return list;
}

data::ImageSize OptionField<data::ImageSize>::From(const config::Node& n) {
  if (n.is_list()) return {n.items()[0]->as_int(), n.items()[1]->as_int()};
  return {n.as_int(), n.as_int()};
}

bool OptionField<data::ImageSize>::Accepts(const config::Node& n) {
  auto side = [](const config::Node& s) {
    return s.kind() == config::NodeKind::kInt && s.as_int() >= 1;
  };
  if (n.is_list()) return n.items().size() == 2 && side(*n.items()[0]) && side(*n.items()[1]);
  return side(n);
}

}  // namespace kiln::internal
