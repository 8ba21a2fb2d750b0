// Small IDX image sets (the Fashion-MNIST file format) that tests write for `kiln` to train on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::testing {

// An IDX file of unsigned bytes with `shape`; gzipped unless `gzip` is false; cut to
// `truncate_to` bytes (before compression) when that is non-zero.
void WriteIdx(const std::string& path, const std::vector<uint32_t>& shape,
              const std::vector<uint8_t>& data, bool gzip = true, size_t truncate_to = 0);

// `n_train` training and 128 test images of 28x28 in `dir`
// (train-/t10k-images/labels-idx*-ubyte.gz) whose class (0, 1 or 2) is a brightness band: any
// working model learns it in an epoch or two.
void WriteBrightnessBands(const std::string& dir, int n_train = 512);

// test/acc in the text of a run's test_metrics.yaml; -1 when it has none.
double TestAccuracy(const std::string& test_metrics_yaml);

}  // namespace kiln::testing
