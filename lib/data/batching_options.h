// batch_size, num_workers and prefetch: the loader options every data module takes, declared once
// with the same checks. A data module's options struct derives from BatchingOptions (setting its
// own defaults in its constructor) and its binding calls AddBatchingOptions where they belong.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "lib/data/loader.h"
#include "lib/registry/options.h"

namespace kiln::data {

struct BatchingOptions {
  int64_t batch_size = 32;
  int num_workers = 1;
  int prefetch = 4;

  // The loader options these give (the data module adds its collate and batch order).
  LoaderOptions loader() const {
    LoaderOptions o;
    o.batch_size = batch_size;
    o.num_workers = num_workers;
    o.prefetch = prefetch;
    return o;
  }
};

// Declares batch_size ("`items` per batch"), num_workers and prefetch on S.
template <typename S>
OptionBinding<S> AddBatchingOptions(OptionBinding<S> binding, const std::string& items) {
  static_assert(std::is_base_of_v<BatchingOptions, S>);
  using B = BatchingOptions;
  return binding
      .Field("batch_size", static_cast<int64_t S::*>(&B::batch_size), items + " per batch",
             AtLeast(1))
      .Field("num_workers", static_cast<int S::*>(&B::num_workers),
             "threads loading batches (0: load on the training thread)", AtLeast(0))
      .Field("prefetch", static_cast<int S::*>(&B::prefetch), "batches loaded ahead at most",
             AtLeast(1));
}

}  // namespace kiln::data
