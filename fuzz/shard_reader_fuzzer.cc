// libFuzzer target: the tar shard reader (lib/data/shards/tar_shard.cc) on arbitrary bytes, as a
// shard from outside arrives: every input either reads to its end or stops with an error status,
// never a crash, a leak or a hang. Samples are read alternately kept and skipped (a resume skips).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "lib/data/shards/tar_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = memfd_create("shard", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(fd, data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto reader = kiln::data::shards::ShardReader::Open(path);
  if (reader.ok()) {
    bool keep = (size % 2) == 0;
    for (int i = 0; i < 100000; ++i) {
      auto sample = (*reader)->Next(keep);
      if (!sample.ok() || !sample->has_value()) break;
      for (const auto& [ext, bytes] : (*sample)->files) {
        if (keep && ext.size() > 1 << 20)
          __builtin_trap();  // an extension is part of a member name
      }
      keep = !keep;
    }
  }
  ::close(fd);
  return 0;
}
