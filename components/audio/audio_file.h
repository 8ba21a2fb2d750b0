// Audio files in and out: reading WAV/FLAC/OGG with libsndfile, downmixing to mono and resampling
// with libsoxr to the rate a pipeline works at. Every error names the file and what is wrong.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::audio {

struct Waveform {
  torch::Tensor samples;  // float32 [channels, frames] in [-1, 1]
  int64_t sample_rate = 0;
};

// The formats the readers accept, by extension: wav, flac, ogg (any case).
bool IsAudioFile(const std::string& path);
// OK when `path` has an accepted extension; else names the file and the formats.
absl::Status CheckAudioExtension(const std::string& path);

// What a file's header says, without decoding it.
struct AudioInfo {
  int64_t frames = 0;
  int64_t channels = 0;
  int64_t sample_rate = 0;
  double seconds() const { return sample_rate > 0 ? static_cast<double>(frames) / sample_rate : 0; }
};
absl::StatusOr<AudioInfo> ReadAudioInfo(const std::string& path);

// Decodes the whole file. Empty, unreadable, truncated or unknown-format files are errors.
absl::StatusOr<Waveform> ReadAudio(const std::string& path);
// The same for a file's bytes in memory (from a shard); errors name `what`.
absl::StatusOr<AudioInfo> ReadAudioInfoBytes(std::string_view bytes, const std::string& what);
absl::StatusOr<Waveform> ReadAudioBytes(std::string_view bytes, const std::string& what);

// Writes float samples [channels, frames] (or [frames]) as 16-bit PCM WAV (tests, tools).
absl::Status WriteWav(const std::string& path, const torch::Tensor& samples, int64_t sample_rate);

// The mean over channels: [channels, frames] -> [frames].
torch::Tensor ToMono(const torch::Tensor& samples);

// OK when soxr can take `from` Hz to `to` Hz (both positive, ratio within 1:256).
absl::Status CheckResampleRates(double from, double to);
// Resamples mono samples [frames] from `from` Hz to `to` Hz with soxr (high quality); `from` may
// be fractional (speed perturbation resamples by a factor).
absl::StatusOr<torch::Tensor> Resample(const torch::Tensor& mono, double from, double to);

// ReadAudio + ToMono + Resample to `sample_rate`: float32 [frames]. Errors start with the path.
// With `bytes`, those are the file's contents (a shard's member) and `path` only names it.
absl::StatusOr<torch::Tensor> LoadMono(const std::string& path, int64_t sample_rate,
                                       const std::string* bytes = nullptr);

}  // namespace kiln::audio
