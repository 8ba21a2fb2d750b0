// libFuzzer target: a sweep's ledger (lib/sweep/sweep_ledger.cc), SWEEP_DIR/ledger.yaml as a killed
// or foreign process may leave it: read, the last entry per job, and the summary over four jobs.
#include "fuzz/fuzz_input.h"
#include "lib/sweep/sweep_ledger.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::WriteScratchFile("ledger.yaml", data, size);
  const std::string& dir = kiln::fuzz::ScratchDir();
  auto entries = kiln::sweep::ReadLedger(dir);
  if (!entries.ok()) return 0;
  auto latest = kiln::sweep::LatestByJob(*entries);
  if (latest.size() > entries->size()) __builtin_trap();
  auto summary = kiln::sweep::WriteSweepSummary(dir, {{"a=1"}, {"a=2"}, {}, {"b=x", "c=y"}});
  (void)summary;
  return 0;
}
