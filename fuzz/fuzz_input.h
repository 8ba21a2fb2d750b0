// Helpers for fuzz targets whose reader takes a path: the input's bytes as a file.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

namespace kiln::fuzz {

inline void WriteAll(int fd, const uint8_t* data, size_t size) {
  size_t written = 0;
  while (written < size) {
    ssize_t n = ::write(fd, data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
}

// The bytes in an anonymous in-memory file, named /proc/self/fd/N while it lives.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) : fd_(memfd_create("fuzz", MFD_CLOEXEC)) {
    if (fd_ >= 0) WriteAll(fd_, data, size);
  }
  ~MemFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  bool ok() const { return fd_ >= 0; }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

// A folder of this process's own under $TMPDIR (made once, removed at exit), for readers that want
// a named file (a fixed name in a folder, or a path they resolve).
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-fuzz-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    static std::string removed = pattern;
    std::atexit([] { std::system(("rm -rf '" + removed + "'").c_str()); });
    return pattern;
  }();
  return dir;
}

// Writes the bytes to ScratchDir()/name and returns its path.
inline std::string WriteScratchFile(const std::string& name, const uint8_t* data, size_t size) {
  std::string path = ScratchDir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// Seeds from kiln's own writers: run with KILN_FUZZ_WRITE_SEEDS=DIR, a target that defines
// LLVMFuzzerInitialize writes small real files into DIR and exits (fuzz/run_fuzzers.sh does this).
inline const char* SeedDir() {
  const char* dir = std::getenv("KILN_FUZZ_WRITE_SEEDS");
  return dir != nullptr && *dir != '\0' ? dir : nullptr;
}

inline void WriteSeed(const std::string& name, const std::string& bytes) {
  std::ofstream out(std::string(SeedDir()) + "/" + name, std::ios::binary | std::ios::trunc);
  out << bytes;
}

}  // namespace kiln::fuzz
