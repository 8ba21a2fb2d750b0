#include "components/recsys/table_sizes.h"

#include <limits>

namespace kiln::recsys {
namespace {

bool IsTableSize(const config::Node& n) {
  return n.kind() == config::NodeKind::kInt && !n.is_big_int() && n.as_int() >= 1 &&
         n.as_int() <= std::numeric_limits<int32_t>::max();
}

}  // namespace

std::optional<std::vector<int64_t>> ReadTableSizes(const config::Node& node, size_t count) {
  if (IsTableSize(node)) return std::vector<int64_t>(count, node.as_int());
  if (!node.is_list() || node.size() != count) return std::nullopt;
  std::vector<int64_t> sizes;
  for (const auto& item : node.items()) {
    if (!IsTableSize(*item)) return std::nullopt;
    sizes.push_back(item->as_int());
  }
  return sizes;
}

}  // namespace kiln::recsys
