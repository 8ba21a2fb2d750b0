#include "lib/trainer/precision.h"

#include <cstdlib>
#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln {

std::string CpuFlags() {
  if (const char* simulated = std::getenv("KILN_CPU_FLAGS")) return simulated;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    // "flags\t\t: fpu vme ..." (x86); the first processor's line stands for all.
    if (line.rfind("flags", 0) == 0) {
      auto colon = line.find(':');
      return colon == std::string::npos ? "" : line.substr(colon + 1);
    }
  }
  return "";
}

std::string Bf16HardwareFlag(const std::string& flags) {
  std::set<std::string> have;
  for (absl::string_view f : absl::StrSplit(flags, ' ', absl::SkipWhitespace())) have.emplace(f);
  for (const char* flag : {"amx_bf16", "avx512_bf16"}) {
    if (have.count(flag) > 0) return flag;
  }
  return "";
}

PrecisionChoice ResolvePrecision(TrainerOptions::Precision requested, bool cpu, const std::string& cpu_flags) {
  using P = TrainerOptions::Precision;
  PrecisionChoice choice;
  if (requested == P::k32) return choice;
  const std::string flag = cpu ? Bf16HardwareFlag(cpu_flags) : "";
  if (requested == P::kAuto) {
    choice.bf16 = !flag.empty();
    if (!cpu) {
      choice.log = "precision 32 (trainer.precision=auto: bf16 autocast is wired for the CPU only)";
    } else if (choice.bf16) {
      choice.log = absl::StrCat("precision bf16-mixed (trainer.precision=auto: the CPU has ", flag,
                                "; weights, optimizer state and checkpoints stay float32)");
    } else {
      choice.log =
          "precision 32 (trainer.precision=auto: the CPU has neither avx512_bf16 nor amx_bf16, so bf16 "
          "would be emulated and slower)";
    }
    return choice;
  }
  const bool bf16_true = requested == P::kBf16True;
  const char* name = bf16_true ? "bf16-true" : "bf16-mixed";
  if (bf16_true && !cpu) {
    choice.error =
        "trainer.precision=bf16-true is wired for the CPU only (use bf16-mixed or 32 on the GPU)";
    return choice;
  }
  // bf16-mixed or bf16-true, asked for.
  choice.bf16 = true;
  choice.bf16_weights = bf16_true;
  if (!cpu) {
    choice.log = "trainer.precision=bf16-mixed: bf16 autocast is wired for the CPU only; this run computes in float32 on the GPU";
    choice.bf16 = false;
    choice.warning = true;
  } else if (flag.empty()) {
    choice.log = absl::StrCat(
        "trainer.precision=", name,
        " on a CPU without avx512_bf16 or amx_bf16: bf16 is emulated there and usually several "
        "times slower than float32 (trainer.precision=auto would choose 32)");
    choice.warning = true;
  } else {
    choice.log = absl::StrCat(
        "precision ", name, " (the CPU has ", flag,
        bf16_true ? "; weights and optimizer state in bf16, checkpoints float32)" : ")");
  }
  return choice;
}

}  // namespace kiln
