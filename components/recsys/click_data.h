// What a click data module tells a click task beyond DataModule: the table sizes it hashed the
// categorical features into, which the model's tables must match.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/data/datamodule.h"

namespace kiln::recsys {

class ClickDataModule : public data::DataModule {
 public:
  virtual const std::vector<int64_t>& num_embeddings() const = 0;
};

}  // namespace kiln::recsys
