// `num_embeddings_per_feature`, the option the criteo data module and the dlrm model both take:
// one size for every categorical feature's table, or a list of one per feature. Declared once here
// so both read it the same way.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "lib/config/node.h"

namespace kiln::recsys {

inline constexpr const char* kTableSizesDoc =
    "rows of each categorical feature's embedding table (a hash is taken modulo it): one number "
    "for every table, or a list of one per categorical feature";
inline constexpr const char* kTableSizesWhat =
    "a table size in [1, 2^31) or a list of them, one per categorical feature";

// The `count` table sizes `node` gives (an int or a list of `count` ints, each in [1, 2^31)), or
// nullopt when it gives none.
std::optional<std::vector<int64_t>> ReadTableSizes(const config::Node& node, size_t count);

}  // namespace kiln::recsys
