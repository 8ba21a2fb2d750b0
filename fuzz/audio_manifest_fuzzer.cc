// libFuzzer target: the JSONL manifest of audio_manifest (components/audio/manifest_file.cc). The
// first byte chooses whether transcripts are needed and whether bad lines fail or are skipped;
// the rest is the file.
#include "components/audio/manifest_file.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  kiln::fuzz::MemFile file(data + 1, size - 1);
  if (!file.ok()) return 0;
  const bool need_text = (data[0] & 1) == 0;
  const auto on_error = data[0] & 2 ? kiln::audio::OnError::kSkip : kiln::audio::OnError::kFail;
  auto entries = kiln::audio::ReadJsonlManifest(file.path(), {}, need_text, on_error);
  if (entries.ok()) {
    if (entries->empty()) __builtin_trap();  // no entries is an error, never an empty success
    for (const auto& e : *entries) {
      if (e.where.empty() || e.path.empty()) __builtin_trap();
    }
  }
  return 0;
}
