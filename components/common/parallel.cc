// Compiled with OpenMP and without the precompiled header (components/CMakeLists.txt).
#include "components/common/parallel.h"

#include <ATen/Parallel.h>

#ifndef _OPENMP
#error "components/common/parallel.cc must be compiled with OpenMP (see parallel.h)"
#endif

namespace kiln {

void ParallelFor(int64_t begin, int64_t end, int64_t grain,
                 absl::FunctionRef<void(int64_t, int64_t)> f) {
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) { f(b, e); });
}

}  // namespace kiln
