// ParallelFor: at::parallel_for for kiln's own kernels, on LibTorch's intra-op threads.
//
// LibTorch (PyPI's, as Debian's before it) parallelizes with OpenMP, and ATen's parallel_for is
// inline: a translation unit compiled without -fopenmp leaves INTRA_OP_PARALLEL undefined
// (ATen/ParallelOpenMP.h), and its parallel_for quietly runs the whole range on the calling thread.
// kiln's sources share one precompiled <torch/torch.h> built without OpenMP, so they call this
// function instead, whose one source (parallel.cc) is compiled with it. Same contract as
// at::parallel_for: f(begin, end) over disjoint chunks of at least `grain` items (one chunk, on the
// calling thread, when the range is small, when one thread is set, or inside another parallel
// region); the first exception is rethrown on the calling thread.
#pragma once

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace kiln {

void ParallelFor(int64_t begin, int64_t end, int64_t grain,
                 absl::FunctionRef<void(int64_t, int64_t)> f);

}  // namespace kiln
