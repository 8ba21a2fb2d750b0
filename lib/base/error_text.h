// The one line of an exception's message that says what went wrong, for kiln's one-line errors:
// LibTorch's messages are several lines; the TorchScript interpreter's start with "The following
// operation failed in the TorchScript interpreter." and a call stack, and end with the error. And
// whether an exception is running out of memory, which kiln says in words.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

inline std::string ErrorLine(std::string_view what) {
  std::vector<std::string_view> lines;
  while (!what.empty()) {
    size_t nl = what.find('\n');
    std::string_view line = what.substr(0, nl);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r' || line.back() == '\t'))
      line.remove_suffix(1);
    if (line.find_first_not_of(" \t") != std::string_view::npos) lines.push_back(line);
    what = nl == std::string_view::npos ? std::string_view() : what.substr(nl + 1);
  }
  if (lines.empty()) return "unknown error";
  bool interpreter = lines.front().find("TorchScript interpreter") != std::string_view::npos;
  return std::string(interpreter ? lines.back() : lines.front());
}

// True when `e` says the process ran out of memory: a std::bad_alloc, or LibTorch's allocator's
// c10::Error ("can't allocate memory: you tried to allocate N bytes").
inline bool IsOutOfMemory(const std::exception& e) {
  return dynamic_cast<const std::bad_alloc*>(&e) != nullptr ||
         std::string_view(e.what()).find("can't allocate memory") != std::string_view::npos;
}

}  // namespace kiln
