// Job logging: lines to stderr and to the run directory's log file, in Hydra's format
// "[2026-11-22 03:40:00,123][kiln][INFO] - message". Only rank 0 writes (ranks come later).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"

namespace kiln {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

class Logger {
 public:
  static Logger& Instance();

  // Also write every line to `path` (appending). Replaces a previous file. A line that cannot be
  // written there (a full disk, an I/O error) closes the file with one warning on stderr; the job
  // goes on, logging to stderr.
  absl::Status OpenFile(const std::string& path);
  void CloseFile();
  void set_level(LogLevel level) { level_ = level; }
  void set_console(bool enabled) { console_ = enabled; }
  // Where console lines go instead of stderr (the Python package: Python's sys.stderr, which a
  // notebook shows); nullptr: stderr. Called without the logger's lock held, one line at a time.
  void set_console_sink(std::function<void(const std::string&)> sink);

  void Log(LogLevel level, const std::string& message);
  void Info(const std::string& message) { Log(LogLevel::kInfo, message); }
  void Warning(const std::string& message) { Log(LogLevel::kWarning, message); }
  void Error(const std::string& message) { Log(LogLevel::kError, message); }

 private:
  std::mutex mu_;
  std::FILE* file_ = nullptr;
  std::string file_path_;
  LogLevel level_ = LogLevel::kInfo;
  bool console_ = true;
  std::shared_ptr<const std::function<void(const std::string&)>> sink_;
};

// A source of messages that may come in floods (a decoder's complaint about each bad upload):
// logs one line per `interval_seconds` at most; the lines held back in between are counted, and
// the next line logged says how many there were.
class RateLimitedLog {
 public:
  RateLimitedLog(LogLevel level, double interval_seconds)
      : level_(level), interval_(interval_seconds) {}
  void Log(const std::string& message);

 private:
  std::mutex mu_;
  LogLevel level_;
  double interval_;
  double last_ = -1e300;  // seconds on the steady clock
  int64_t held_back_ = 0;
};

// Parses "DEBUG", "INFO", "WARNING", "ERROR" (any case).
bool ParseLogLevel(const std::string& text, LogLevel* level);

}  // namespace kiln
