#include "lib/data/shards/tar_shard.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"

extern char** environ;

namespace kiln::data::shards {
namespace {

// libarchive's last error, or `fallback` when it has none.
std::string ArchiveError(struct archive* a, const char* fallback = "?") {
  const char* message = archive_error_string(a);
  return message != nullptr ? message : fallback;
}

}  // namespace

std::pair<std::string, std::string> SplitKeyExt(std::string_view name) {
  size_t slash = name.rfind('/');
  size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  size_t dot = name.find('.', base);
  if (dot == std::string_view::npos) return {std::string(name), ""};
  return {std::string(name.substr(0, dot)),
          absl::AsciiStrToLower(std::string(name.substr(dot + 1)))};
}

const std::string* ShardSample::Find(std::string_view ext) const {
  for (const auto& [e, bytes] : files) {
    if (e == ext) return &bytes;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<ShardReader>> ShardReader::Open(const std::string& url) {
  std::unique_ptr<ShardReader> reader(new ShardReader(url));
  if (absl::StartsWith(url, "pipe:")) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      return absl::InternalError(absl::StrCat(url, ": cannot make a pipe: ", std::strerror(errno)));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    std::string command = url.substr(5);
    const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, "/bin/sh", &actions, nullptr, const_cast<char**>(argv), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (rc != 0) {
      ::close(fds[0]);
      return absl::InternalError(
          absl::StrCat(url, ": cannot start the command: ", std::strerror(rc)));
    }
    reader->child_ = pid;
    reader->fd_ = fds[0];
  } else {
    reader->fd_ = ::open(url.c_str(), O_RDONLY | O_CLOEXEC);
    if (reader->fd_ < 0) {
      return absl::NotFoundError(
          absl::StrCat("shard ", url, ": cannot open: ", std::strerror(errno)));
    }
  }
  reader->archive_ = archive_read_new();
  archive_read_support_filter_all(reader->archive_);
  archive_read_support_format_tar(reader->archive_);
  if (archive_read_open_fd(reader->archive_, reader->fd_, 1 << 16) != ARCHIVE_OK) {
    return reader->Fail(ArchiveError(reader->archive_, "not a tar"));
  }
  return reader;
}

ShardReader::~ShardReader() {
  if (archive_ != nullptr) archive_read_free(archive_);
  if (fd_ >= 0) ::close(fd_);
  if (child_ > 0) {
    // Stopped before the end (a resume skipped the rest, a failure): the command is not needed.
    ::kill(child_, SIGTERM);
    int status = 0;
    ::waitpid(child_, &status, 0);
  }
}

absl::Status ShardReader::FinishPipe() {
  if (child_ <= 0) return absl::OkStatus();
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  int status = 0;
  pid_t pid = child_;
  child_ = -1;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  std::string how = WIFEXITED(status) ? absl::StrCat("exited with status ", WEXITSTATUS(status))
                                      : absl::StrCat("was killed by signal ", WTERMSIG(status));
  return absl::UnavailableError(absl::StrCat("shard ", url_, ": the command ", how));
}

absl::Status ShardReader::Fail(const std::string& what) {
  done_ = true;
  // A command that failed explains a short or empty stream better than the tar reader does.
  if (child_ > 0) {
    absl::Status command = FinishPipe();
    if (!command.ok()) return command;
  }
  return absl::DataLossError(absl::StrCat("shard ", url_, ": ", what));
}

absl::StatusOr<std::string> ShardReader::MemberData(bool keep, const std::string& name) {
  std::string bytes;
  if (!keep) {
    if (archive_read_data_skip(archive_) != ARCHIVE_OK) {
      return Fail(
          absl::StrCat("truncated or corrupt tar at ", name, " (", ArchiveError(archive_), ")"));
    }
    return bytes;
  }
  // The header's size is only a claim (a 500-byte shard may say 5 GB): the buffer grows with the
  // data that actually arrives, and the data read must then match the claim.
  const int64_t want = std::max<int64_t>(entry_size_, 0);
  size_t have = 0;
  while (static_cast<int64_t>(have) < want) {
    size_t room =
        std::min<size_t>(static_cast<size_t>(want) - have, std::max<size_t>(have, size_t{1} << 16));
    bytes.resize(have + room);
    la_ssize_t got = archive_read_data(archive_, bytes.data() + have, room);
    if (got <= 0) break;
    have += static_cast<size_t>(got);
  }
  bytes.resize(have);
  if (static_cast<int64_t>(have) != want) {
    return Fail(absl::StrCat("truncated or corrupt tar at ", name, " (",
                             ArchiveError(archive_, "short read"), ")"));
  }
  return bytes;
}

absl::StatusOr<std::optional<ShardSample>> ShardReader::Next(bool keep) {
  if (done_) return std::optional<ShardSample>();
  ShardSample sample;
  bool started = false;
  if (pending_) {
    pending_ = false;
    KILN_ASSIGN_OR_RETURN(std::string bytes, MemberData(keep, pending_name_));
    sample.key = std::move(pending_key_);
    sample.files.emplace_back(std::move(pending_ext_), std::move(bytes));
    started = true;
  }
  while (true) {
    struct archive_entry* entry = nullptr;
    int rc = archive_read_next_header(archive_, &entry);
    if (rc == ARCHIVE_EOF) {
      done_ = true;
      absl::Status command = FinishPipe();
      if (!command.ok()) return command;
      if (!started) return std::optional<ShardSample>();
      return std::optional<ShardSample>(std::move(sample));
    }
    if (rc < ARCHIVE_WARN)
      return Fail(absl::StrCat("truncated or corrupt tar (", ArchiveError(archive_), ")"));
    if (archive_entry_filetype(entry) != AE_IFREG) continue;  // folders, links
    const char* raw_name = archive_entry_pathname(entry);
    std::string name = raw_name ? raw_name : "";
    if (absl::StartsWith(name, "./")) name = name.substr(2);
    // WebDataset skips members whose base name starts with "__" (metadata of the shard).
    size_t slash = name.rfind('/');
    if (absl::StartsWith(name.substr(slash == std::string::npos ? 0 : slash + 1), "__")) continue;
    auto [key, ext] = SplitKeyExt(name);
    entry_size_ = archive_entry_size(entry);
    if (started && key != sample.key) {
      pending_ = true;
      pending_name_ = std::move(name);
      pending_key_ = std::move(key);
      pending_ext_ = std::move(ext);
      return std::optional<ShardSample>(std::move(sample));
    }
    KILN_ASSIGN_OR_RETURN(std::string bytes, MemberData(keep, name));
    if (!started) sample.key = key;
    started = true;
    sample.files.emplace_back(std::move(ext), std::move(bytes));
  }
}

absl::StatusOr<int64_t> CountSamples(const std::string& url) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ShardReader> reader, ShardReader::Open(url));
  int64_t count = 0;
  while (true) {
    KILN_ASSIGN_OR_RETURN(std::optional<ShardSample> sample, reader->Next(/*keep=*/false));
    if (!sample) return count;
    ++count;
  }
}

absl::StatusOr<std::unique_ptr<ShardWriter>> ShardWriter::Create(const std::string& path) {
  std::unique_ptr<ShardWriter> writer(new ShardWriter());
  writer->path_ = path;
  writer->temp_ = absl::StrCat(path, ".tmp", ::getpid());
  writer->archive_ = archive_write_new();
  archive_write_set_format_pax_restricted(writer->archive_);
  if (archive_write_open_filename(writer->archive_, writer->temp_.c_str()) != ARCHIVE_OK) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot write shard: ", ArchiveError(writer->archive_)));
  }
  return writer;
}

ShardWriter::~ShardWriter() {
  if (archive_ != nullptr) archive_write_free(archive_);
  if (!closed_) ::unlink(temp_.c_str());
}

absl::Status ShardWriter::Add(const std::string& key, const EncodedSample& files) {
  for (const auto& [ext, bytes] : files) {
    std::string name = absl::StrCat(key, ".", ext);
    struct archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, name.c_str());
    archive_entry_set_size(entry, static_cast<la_int64_t>(bytes.size()));
    archive_entry_set_filetype(entry, AE_IFREG);
    archive_entry_set_perm(entry, 0644);
    archive_entry_set_mtime(entry, 0, 0);
    int rc = archive_write_header(archive_, entry);
    archive_entry_free(entry);
    if (rc != ARCHIVE_OK || archive_write_data(archive_, bytes.data(), bytes.size()) !=
                                static_cast<la_ssize_t>(bytes.size())) {
      return absl::DataLossError(
          absl::StrCat(path_, ": cannot write ", name, ": ", ArchiveError(archive_)));
    }
    bytes_ += 512 + ((static_cast<int64_t>(bytes.size()) + 511) / 512) * 512;
  }
  ++samples_;
  return absl::OkStatus();
}

absl::StatusOr<std::string> ShardWriter::Close() {
  int rc = archive_write_close(archive_);
  archive_write_free(archive_);
  archive_ = nullptr;
  if (rc != ARCHIVE_OK) return absl::DataLossError(absl::StrCat(path_, ": cannot finish shard"));
  int fd = ::open(temp_.c_str(), O_RDONLY | O_CLOEXEC);
  bool synced = fd >= 0 && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  if (!synced || std::rename(temp_.c_str(), path_.c_str()) != 0) {
    return absl::DataLossError(
        absl::StrCat(path_, ": cannot finish shard: ", std::strerror(errno)));
  }
  closed_ = true;
  return FileSha256(path_);
}

absl::StatusOr<std::string> FileSha256(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buffer(1 << 20);
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file)) > 0)
    EVP_DigestUpdate(ctx, buffer.data(), n);
  bool failed = std::ferror(file) != 0;
  std::fclose(file);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx, digest, &length);
  EVP_MD_CTX_free(ctx);
  if (failed) return absl::DataLossError(absl::StrCat(path, ": read error"));
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) absl::StrAppendFormat(&hex, "%02x", digest[i]);
  return hex;
}

}  // namespace kiln::data::shards
