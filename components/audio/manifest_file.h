// The JSONL manifest of audio_manifest: one utterance a line, {"audio": PATH, "text": ...,
// "duration": SECONDS}, with configurable field names. Apart from the data module so that the
// reader of these outside bytes can be fuzzed alone (fuzz/audio_manifest_fuzzer.cc).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "components/audio/audio_data.h"

namespace kiln::audio {

struct ManifestFields {
  std::string audio = "audio", text = "text", duration = "duration";
};

// The entries of a JSONL manifest; a relative PATH is relative to the manifest's folder. Malformed
// lines and missing fields name FILE:LINE; with kSkip they are counted, left out and logged in
// one line. No entries is an error.
absl::StatusOr<std::vector<AudioEntry>> ReadJsonlManifest(const std::string& path,
                                                          const ManifestFields& fields,
                                                          bool need_text, OnError on_error);

}  // namespace kiln::audio
