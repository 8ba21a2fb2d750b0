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

PrecisionChoice ResolvePrecision(TrainerOptions::Precision requested, bool cpu,
                                 const std::string& cpu_flags, bool gpu_bf16) {
  using P = TrainerOptions::Precision;
  PrecisionChoice choice;
  if (requested == P::k32) return choice;
  // Where bf16 is fast: the CPU's flag, or "" on a GPU (compute capability 8.0 or newer).
  const std::string flag = cpu ? Bf16HardwareFlag(cpu_flags) : "";
  const bool fast = cpu ? !flag.empty() : gpu_bf16;
  const std::string where =
      cpu ? absl::StrCat("the CPU has ", flag) : "the GPU computes bf16 natively";
  if (requested == P::kAuto) {
    choice.bf16 = fast;
    if (choice.bf16) {
      choice.log = absl::StrCat("precision bf16-mixed (trainer.precision=auto: ", where,
                                "; weights, optimizer state and checkpoints stay float32)");
    } else if (cpu) {
      choice.log =
          "precision 32 (trainer.precision=auto: the CPU has neither avx512_bf16 nor amx_bf16, so "
          "bf16 "
          "would be emulated and slower)";
    } else {
      choice.log =
          "precision 32 (trainer.precision=auto: the GPU predates compute capability 8.0 and has "
          "no bf16 units)";
    }
    return choice;
  }
  if (requested == P::k16Mixed) {
    choice.fp16 = true;
    if (cpu) {
      choice.log =
          "trainer.precision=16-mixed on the CPU: float16 autocast is emulated there and slower "
          "than float32 "
          "(bf16-mixed is the CPU's mixed precision)";
      choice.warning = true;
    } else {
      choice.log =
          "precision 16-mixed (float16 autocast, dynamic loss scaling; weights, optimizer state "
          "and "
          "checkpoints float32)";
    }
    return choice;
  }
  // bf16-mixed or bf16-true, asked for.
  const bool bf16_true = requested == P::kBf16True;
  const char* name = bf16_true ? "bf16-true" : "bf16-mixed";
  if (!cpu && !gpu_bf16) {
    choice.error =
        absl::StrCat("trainer.precision=", name,
                     " needs a GPU of compute capability 8.0 or newer (Ampere, Hopper, ...); "
                     "use precision 32 on this one");
    return choice;
  }
  choice.bf16 = true;
  choice.bf16_weights = bf16_true;
  if (!fast) {
    choice.log = absl::StrCat(
        "trainer.precision=", name,
        " on a CPU without avx512_bf16 or amx_bf16: bf16 is emulated there and usually several "
        "times slower than float32 (trainer.precision=auto would choose 32)");
    choice.warning = true;
  } else {
    choice.log = absl::StrCat(
        "precision ", name, " (", where,
        bf16_true ? "; weights and optimizer state in bf16, checkpoints float32)" : ")");
  }
  return choice;
}

}  // namespace kiln
