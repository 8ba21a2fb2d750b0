#include "lib/trainer/profiler.h"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "lib/base/files.h"

namespace kiln {

namespace {

// LibTorch's legacy writer puts the string "CPU Functions" in every event's pid, where the Trace
// Event Format has a number: chrome://tracing copes, but viewers that key processes by number
// lose the events (speedscope refuses the trace). Numbers the process 1 and names it, and the
// thread, in metadata events.
void NumberTheProcess(const std::string& path) {
  std::ifstream in(path);
  std::stringstream read;
  read << in.rdbuf();
  std::string json = read.str();
  if (json.empty() || json[0] != '[' || json.find('{') == std::string::npos) return;
  json = absl::StrReplaceAll(json, {{"\"pid\": \"CPU Functions\"", "\"pid\": 1"}});
  json.replace(0, 1,
               "[\n{\"name\": \"process_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": 1, \"tid\": 1, "
               "\"args\": {\"name\": \"kiln (CPU Functions)\"}},\n"
               "{\"name\": \"thread_name\", \"ph\": \"M\", \"ts\": 0, \"pid\": 1, \"tid\": 1, "
               "\"args\": {\"name\": \"training thread\"}},");
  WriteFileAtomically(path, json).IgnoreError();  // the trace as LibTorch wrote it stays otherwise
}

}  // namespace

const char* PhaseProfiler::Name(Phase phase) {
  static const char* const kNames[kPhases] = {"data",      "forward", "backward",  "optimizer",
                                              "callbacks", "logging", "validation"};
  return kNames[phase];
}

PhaseProfiler::Scope::Scope(PhaseProfiler& profiler, Phase phase)
    : profiler_(profiler.enabled_ ? &profiler : nullptr) {
  if (profiler_ != nullptr) profiler_->Push(phase);
}

PhaseProfiler::Scope::~Scope() {
  if (profiler_ != nullptr) profiler_->Pop();
}

void PhaseProfiler::Push(Phase phase) {
  auto now = Clock::now();
  if (!stack_.empty())
    seconds_[stack_.back()] += std::chrono::duration<double>(now - since_).count();
  stack_.push_back(phase);
  ++calls_[phase];
  since_ = now;
}

void PhaseProfiler::Pop() {
  auto now = Clock::now();
  seconds_[stack_.back()] += std::chrono::duration<double>(now - since_).count();
  stack_.pop_back();
  since_ = now;
}

void PhaseProfiler::Add(Phase phase, double seconds, int64_t calls) {
  if (!enabled_) return;
  seconds_[phase] += seconds;
  calls_[phase] += calls;
}

std::vector<std::string> PhaseProfiler::Report(double total_seconds) const {
  std::vector<std::string> lines;
  lines.push_back(
      absl::StrFormat("%-12s %8s %10s %10s %7s", "phase", "calls", "total s", "mean ms", "share"));
  double measured = 0;
  const double total = std::max(total_seconds, 1e-9);
  for (int p = 0; p < kPhases; ++p) {
    measured += seconds_[p];
    if (calls_[p] == 0) continue;
    lines.push_back(absl::StrFormat("%-12s %8d %10.3f %10.3f %6.1f%%", Name(static_cast<Phase>(p)),
                                    calls_[p], seconds_[p], 1000 * seconds_[p] / calls_[p],
                                    100 * seconds_[p] / total));
  }
  const double other = std::max(0.0, total_seconds - measured);
  lines.push_back(absl::StrFormat("%-12s %8s %10.3f %10s %6.1f%%", "other", "", other, "",
                                  100 * other / total));
  lines.push_back(absl::StrFormat("%-12s %8s %10.3f", "fit", "", total_seconds));
  return lines;
}

OperatorTrace::~OperatorTrace() { Finish(); }

void OperatorTrace::BeforeBatch(int64_t n) {
  if (n == first_ && !recording_ && !written_) {
    recording_ = std::make_unique<torch::autograd::profiler::RecordProfile>(path_);
  }
}

void OperatorTrace::AfterBatch(int64_t n) {
  if (n + 1 == first_ + count_) Finish();
}

bool OperatorTrace::Finish() {
  if (recording_) {
    recording_.reset();  // RecordProfile writes the trace as it ends
    NumberTheProcess(path_);
    written_ = true;
  }
  return written_;
}

}  // namespace kiln
