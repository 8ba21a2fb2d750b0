// The base of the click models (dlrm; dcn_v2 later): input int64 [B, 13 + 26], the integer
// features' counts then one index per categorical feature's table (the criteo data module's
// batches); output one logit per row [B]. A task checks the indices against the tables' sizes
// before the forward, so a data/model mismatch is a message, not an index error in a kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "components/models/model.h"

namespace kiln::recsys {

class ClickModel : public Model {
 public:
  // Rows of each categorical feature's table, in input order.
  virtual const std::vector<int64_t>& num_embeddings() const = 0;
  // The number of integer (dense) features that come first in the input.
  virtual int64_t num_dense() const = 0;
};

}  // namespace kiln::recsys
