// A disk that fails on demand, for the disk-fault tests: loaded with LD_PRELOAD into a kiln
// process, it makes calls on the files whose path contains KILN_FAULT_PATH fail with an errno,
// as a full disk (ENOSPC), a failing one (EIO) or a read-only one (EROFS) would, without mounting
// anything. Set in the environment:
//   KILN_FAULT_PATH   the substring a path must contain (unset: the shim does nothing)
//   KILN_FAULT_OPS    which calls fail, comma-separated: write (write, writev, pwrite, fwrite,
//                     fputs, fflush), fsync (fsync, fdatasync), rename, open (opening for writing,
//                     creating, mkdir). Default: write
//   KILN_FAULT_ERRNO  ENOSPC (default), EIO or EROFS; or KILL: the process SIGKILLs itself at
//                     the call instead (a crash just before it), or KILL_AFTER: right after a
//                     rename or fsync succeeded (a crash just after it)
//   KILN_FAULT_AFTER  how many matching calls succeed first (default 0); every one after fails,
//                     as a disk stays full
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>

namespace {

enum Op { kWrite = 1, kFsync = 2, kRename = 4, kOpen = 8 };

enum Mode { kFail, kKill, kKillAfter };

struct Settings {
  const char* path = nullptr;
  int ops = kWrite;
  int error = ENOSPC;
  Mode mode = kFail;
  long after = 0;
};

const Settings& Config() {
  static const Settings settings = [] {
    Settings s;
    s.path = getenv("KILN_FAULT_PATH");
    if (s.path != nullptr && *s.path == '\0') s.path = nullptr;
    if (const char* ops = getenv("KILN_FAULT_OPS")) {
      s.ops = (strstr(ops, "write") ? kWrite : 0) | (strstr(ops, "fsync") ? kFsync : 0) |
              (strstr(ops, "rename") ? kRename : 0) | (strstr(ops, "open") ? kOpen : 0);
    }
    if (const char* e = getenv("KILN_FAULT_ERRNO")) {
      s.error = strcmp(e, "EIO") == 0 ? EIO : strcmp(e, "EROFS") == 0 ? EROFS : ENOSPC;
      s.mode = strcmp(e, "KILL") == 0 ? kKill : strcmp(e, "KILL_AFTER") == 0 ? kKillAfter : kFail;
    }
    if (const char* after = getenv("KILN_FAULT_AFTER")) s.after = atol(after);
    return s;
  }();
  return settings;
}

std::atomic<long> matched{0};

// Whether this call (of kind `op`, on `path`) is one the settings pick (counted).
bool Matches(int op, const char* path) {
  const Settings& s = Config();
  if (s.path == nullptr || (s.ops & op) == 0 || path == nullptr || strstr(path, s.path) == nullptr)
    return false;
  return matched.fetch_add(1) >= s.after;
}

// Whether this call fails; sets errno when it does. With KILL the process dies here instead.
bool Fails(int op, const char* path) {
  if (Config().mode == kKillAfter || !Matches(op, path)) return false;
  if (Config().mode == kKill) ::kill(::getpid(), SIGKILL);
  errno = Config().error;
  return true;
}

// With KILL_AFTER: the process dies once the picked call has returned `result`.
template <typename T>
T KillAfter(int op, const char* path, T result) {
  if (Config().mode == kKillAfter && Matches(op, path)) ::kill(::getpid(), SIGKILL);
  return result;
}

// The path `fd` is open on (into `target`), or false.
bool FdPath(int fd, char (&target)[4096]) {
  if (Config().path == nullptr || fd < 0) return false;
  char link[64];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return true;
}

bool FdFails(int op, int fd) {
  char target[4096];
  return FdPath(fd, target) && Fails(op, target);
}

int FdKillAfter(int op, int fd, int result) {
  char target[4096];
  return FdPath(fd, target) ? KillAfter(op, target, result) : result;
}

bool StreamFails(int op, FILE* stream) { return stream != nullptr && FdFails(op, fileno(stream)); }

bool OpensForWriting(int flags) { return (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) != 0; }

template <typename F>
F Next(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

using OpenFn = int (*)(const char*, int, ...);

int OpenUnlessFails(OpenFn next, const char* path, int flags, va_list args) {
  mode_t mode = (flags & O_CREAT) != 0 ? va_arg(args, mode_t) : 0;
  return OpensForWriting(flags) && Fails(kOpen, path) ? -1 : next(path, flags, mode);
}

}  // namespace

extern "C" {

ssize_t write(int fd, const void* buf, size_t n) {
  static auto next = Next<ssize_t (*)(int, const void*, size_t)>("write");
  return FdFails(kWrite, fd) ? -1 : next(fd, buf, n);
}

ssize_t writev(int fd, const struct iovec* iov, int count) {
  static auto next = Next<ssize_t (*)(int, const struct iovec*, int)>("writev");
  return FdFails(kWrite, fd) ? -1 : next(fd, iov, count);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t offset) {
  static auto next = Next<ssize_t (*)(int, const void*, size_t, off_t)>("pwrite");
  return FdFails(kWrite, fd) ? -1 : next(fd, buf, n, offset);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off64_t offset) {
  static auto next = Next<ssize_t (*)(int, const void*, size_t, off64_t)>("pwrite64");
  return FdFails(kWrite, fd) ? -1 : next(fd, buf, n, offset);
}

size_t fwrite(const void* buf, size_t size, size_t count, FILE* stream) {
  static auto next = Next<size_t (*)(const void*, size_t, size_t, FILE*)>("fwrite");
  return StreamFails(kWrite, stream) ? 0 : next(buf, size, count, stream);
}

int fputs(const char* text, FILE* stream) {
  static auto next = Next<int (*)(const char*, FILE*)>("fputs");
  return StreamFails(kWrite, stream) ? EOF : next(text, stream);
}

int fflush(FILE* stream) {
  static auto next = Next<int (*)(FILE*)>("fflush");
  return StreamFails(kWrite, stream) ? EOF : next(stream);
}

int fsync(int fd) {
  static auto next = Next<int (*)(int)>("fsync");
  return FdFails(kFsync, fd) ? -1 : FdKillAfter(kFsync, fd, next(fd));
}

int fdatasync(int fd) {
  static auto next = Next<int (*)(int)>("fdatasync");
  return FdFails(kFsync, fd) ? -1 : next(fd);
}

int rename(const char* from, const char* to) {
  static auto next = Next<int (*)(const char*, const char*)>("rename");
  return Fails(kRename, to) ? -1 : KillAfter(kRename, to, next(from, to));
}

int open(const char* path, int flags, ...) {
  static auto next = Next<OpenFn>("open");
  va_list args;
  va_start(args, flags);
  int fd = OpenUnlessFails(next, path, flags, args);
  va_end(args);
  return fd;
}

int open64(const char* path, int flags, ...) {
  static auto next = Next<OpenFn>("open64");
  va_list args;
  va_start(args, flags);
  int fd = OpenUnlessFails(next, path, flags, args);
  va_end(args);
  return fd;
}

FILE* fopen(const char* path, const char* mode) {
  static auto next = Next<FILE* (*)(const char*, const char*)>("fopen");
  return strpbrk(mode, "wa+") != nullptr && Fails(kOpen, path) ? nullptr : next(path, mode);
}

FILE* fopen64(const char* path, const char* mode) {
  static auto next = Next<FILE* (*)(const char*, const char*)>("fopen64");
  return strpbrk(mode, "wa+") != nullptr && Fails(kOpen, path) ? nullptr : next(path, mode);
}

int mkdir(const char* path, mode_t mode) {
  static auto next = Next<int (*)(const char*, mode_t)>("mkdir");
  return Fails(kOpen, path) ? -1 : next(path, mode);
}

}  // extern "C"
