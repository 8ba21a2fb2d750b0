// Feature extraction throughput of the speech pipeline on one core: for up to N audio files below
// a folder, the seconds of audio processed per second of wall time by each stage (read with
// libsndfile, resample with soxr, log-mel / MFCC with torch::stft) and by the whole pipeline.
//   audio_features_speed FOLDER [N=1000] [RATE=16000]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "components/audio/audio_data.h"
#include "components/audio/audio_file.h"
#include "components/audio/features.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "audio_features_speed: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: audio_features_speed FOLDER [N=1000] [RATE=16000]\n");
    return 2;
  }
  const size_t limit = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1000;
  const int64_t rate = argc > 3 ? std::strtol(argv[3], nullptr, 10) : 16000;
  torch::set_num_threads(1);
  auto paths = kiln::audio::AudioFilesAt(argv[1]);
  if (!paths.ok()) return Fail(paths.status());
  // Spread the sample over the folder (its classes), not its first files.
  std::vector<std::string> files;
  for (size_t i = 0; i < limit && i < paths->size(); ++i)
    files.push_back((*paths)[i * paths->size() / std::min(limit, paths->size())]);

  std::vector<kiln::audio::Waveform> raw;
  auto start = Clock::now();
  for (const auto& path : files) {
    auto wave = kiln::audio::ReadAudio(path);
    if (!wave.ok()) return Fail(wave.status());
    raw.push_back(*wave);
  }
  double read_s = Since(start);
  double audio_s = 0;
  for (const auto& w : raw)
    audio_s += static_cast<double>(w.samples.size(1)) / static_cast<double>(w.sample_rate);

  std::vector<torch::Tensor> mono;
  start = Clock::now();
  for (const auto& w : raw) {
    auto r = kiln::audio::Resample(kiln::audio::ToMono(w.samples),
                                   static_cast<double>(w.sample_rate), static_cast<double>(rate));
    if (!r.ok()) return Fail(r.status());
    mono.push_back(*r);
  }
  double resample_s = Since(start);

  kiln::audio::SpectrogramOptions options;
  options.sample_rate = rate;
  kiln::audio::LogMel log_mel(options);
  kiln::audio::Mfcc mfcc(options, 13);
  for (size_t i = 0; i < std::min<size_t>(mono.size(), 20); ++i) mfcc.Compute(mono[i]);  // warm-up
  start = Clock::now();
  for (const auto& m : mono) kiln::audio::NormalizeUtterance(log_mel.Compute(m));
  double log_mel_s = Since(start);
  start = Clock::now();
  for (const auto& m : mono) kiln::audio::NormalizeUtterance(mfcc.Compute(m));
  double mfcc_s = Since(start);

  std::printf("%zu files, %.1f s of audio (%ld Hz -> %ld Hz), 1 thread\n", files.size(), audio_s,
              raw.empty() ? 0L : static_cast<long>(raw[0].sample_rate), static_cast<long>(rate));
  auto row = [&](const char* stage, double seconds) {
    std::printf("  %-34s %8.3f s  %9.0f s of audio per second\n", stage, seconds,
                audio_s / seconds);
  };
  row("read (libsndfile)", read_s);
  row("resample (soxr HQ)", resample_s);
  row("log-mel 40 + normalization", log_mel_s);
  row("MFCC 13 + normalization", mfcc_s);
  row("pipeline: read + resample + log-mel", read_s + resample_s + log_mel_s);
  return 0;
}
