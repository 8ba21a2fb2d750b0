#include "tests/support/idx_data.h"

#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <utility>

namespace kiln::testing {

void WriteIdx(const std::string& path, const std::vector<uint32_t>& shape,
              const std::vector<uint8_t>& data, bool gzip, size_t truncate_to) {
  std::string bytes = {0, 0, 8, static_cast<char>(shape.size())};
  for (uint32_t d : shape) {
    for (int s = 24; s >= 0; s -= 8) bytes += static_cast<char>((d >> s) & 0xff);
  }
  bytes.append(reinterpret_cast<const char*>(data.data()), data.size());
  if (truncate_to > 0) bytes.resize(truncate_to);
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << bytes;
  }
}

void WriteBrightnessBands(const std::string& dir, int n_train) {
  std::mt19937 rng(3);
  for (auto [prefix, n] : {std::pair<std::string, int>{"train", n_train}, {"t10k", 128}}) {
    std::vector<uint8_t> images(static_cast<size_t>(n) * 784), labels(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      labels[i] = static_cast<uint8_t>(i % 3);
      for (int p = 0; p < 784; ++p)
        images[static_cast<size_t>(i) * 784 + p] =
            static_cast<uint8_t>(labels[i] * 80 + rng() % 40);
    }
    WriteIdx(dir + "/" + prefix + "-images-idx3-ubyte.gz", {static_cast<uint32_t>(n), 28, 28},
             images);
    WriteIdx(dir + "/" + prefix + "-labels-idx1-ubyte.gz", {static_cast<uint32_t>(n)}, labels);
  }
}

double TestAccuracy(const std::string& test_metrics_yaml) {
  size_t at = test_metrics_yaml.find("test/acc: ");
  return at == std::string::npos ? -1 : std::atof(test_metrics_yaml.c_str() + at + 10);
}

}  // namespace kiln::testing
