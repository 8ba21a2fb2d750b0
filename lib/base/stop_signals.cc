#include "lib/base/stop_signals.h"

#include <signal.h>

#include <atomic>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "lib/base/exit_code.h"

namespace kiln {
namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<int> g_stop_depth{0};       // StopSignals alive
std::atomic<uint64_t> g_stop_count{0};  // signals received, ever

extern "C" void OnStopSignal(int signal) {
  g_stop_signal.store(signal);
  g_stop_count.fetch_add(1);
}

}  // namespace

struct StopSignals::Saved {
  struct sigaction int_ {
  }, term_{}, usr1_{};
};

StopSignals::StopSignals() : saved_(new Saved()) {
  if (g_stop_depth.fetch_add(1) == 0) g_stop_signal.store(0);
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &saved_->int_);
  sigaction(SIGTERM, &action, &saved_->term_);
  sigaction(SIGUSR1, &action, &saved_->usr1_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &saved_->int_, nullptr);
  sigaction(SIGTERM, &saved_->term_, nullptr);
  sigaction(SIGUSR1, &saved_->usr1_, nullptr);
  g_stop_depth.fetch_sub(1);
  delete saved_;
}

int StopSignals::Received() { return g_stop_signal.load(); }

uint64_t StopSignals::Count() { return g_stop_count.load(); }

const char* StopSignalName(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "SIGUSR1";
}

absl::Status CheckStopSignal(const std::string& doing) {
  const int signal = StopSignals::Received();
  if (signal == 0) return absl::OkStatus();
  return WithExitCode(
      absl::CancelledError(absl::StrCat("stopped by ", StopSignalName(signal), " ", doing)),
      128 + signal);
}

}  // namespace kiln
