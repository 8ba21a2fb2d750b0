// The batch_count_test metric of fit_fixture.h, registered once for the trainer tests.
#include "tests/trainer/fit_fixture.h"

#include "lib/registry/registry.h"

namespace kiln::fit_fixture {

KILN_REGISTER_BOUND(Metric, "batch_count_test", "Batches seen (trainer test)",
                    MetricOptionBinding<MetricOptions>(),
                    [](const MetricOptions& o) -> absl::StatusOr<std::shared_ptr<Metric>> {
                      return std::make_shared<BatchCount>(o);
                    });

}  // namespace kiln::fit_fixture
