#include "lib/logging/logger.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}

std::string Timestamp() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm local{};
  localtime_r(&t, &local);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &local);
  char out[48];
  std::snprintf(out, sizeof(out), "%s,%03d", buf, static_cast<int>(ms));
  return out;
}

}  // namespace

Logger& Logger::Instance() {
  static Logger* logger = new Logger();
  return *logger;
}

absl::Status Logger::OpenFile(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ != nullptr) std::fclose(file_);
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open log file: ", std::strerror(errno)));
  }
  file_path_ = path;
  return absl::OkStatus();
}

void Logger::CloseFile() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

void Logger::set_console_sink(std::function<void(const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(mu_);
  sink_ = sink ? std::make_shared<const std::function<void(const std::string&)>>(std::move(sink))
               : nullptr;
}

void Logger::Log(LogLevel level, const std::string& message) {
  if (level < level_) return;
  std::string line =
      absl::StrCat("[", Timestamp(), "][kiln][", LevelName(level), "] - ", message, "\n");
  std::vector<std::string> console;
  std::shared_ptr<const std::function<void(const std::string&)>> sink;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sink = sink_;
    // Log lines go to the console's stderr so that what a command prints on stdout stays
    // machine-readable.
    if (console_) console.push_back(line);
    if (file_ != nullptr && (std::fputs(line.c_str(), file_) == EOF || std::fflush(file_) != 0)) {
      console.push_back(absl::StrCat("[", Timestamp(), "][kiln][WARNING] - log file ", file_path_,
                                     ": write failed: ", std::strerror(errno),
                                     "; the job goes on, logging to stderr only\n"));
      std::fclose(file_);
      file_ = nullptr;
    }
  }
  // Outside the lock: a sink may wait (for Python's GIL) while its holder logs.
  for (const std::string& text : console) {
    if (sink) {
      (*sink)(text);
    } else {
      std::fputs(text.c_str(), stderr);
      std::fflush(stderr);
    }
  }
}

bool ParseLogLevel(const std::string& text, LogLevel* level) {
  std::string upper = absl::AsciiStrToUpper(text);
  if (upper == "DEBUG")
    *level = LogLevel::kDebug;
  else if (upper == "INFO")
    *level = LogLevel::kInfo;
  else if (upper == "WARNING" || upper == "WARN")
    *level = LogLevel::kWarning;
  else if (upper == "ERROR")
    *level = LogLevel::kError;
  else
    return false;
  return true;
}

void RateLimitedLog::Log(const std::string& message) {
  double now =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  int64_t held_back = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (now - last_ < interval_) {
      ++held_back_;
      return;
    }
    last_ = now;
    held_back = held_back_;
    held_back_ = 0;
  }
  Logger::Instance().Log(level_, held_back == 0 ? message
                                                : absl::StrCat(message, " (and ", held_back,
                                                               " more like it since the last)"));
}

}  // namespace kiln
