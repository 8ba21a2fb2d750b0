// libFuzzer target: audio through libsndfile with kiln's checks around it
// (components/audio/audio_file.cc): WAV/FLAC/OGG bytes as shards and `kiln serve` uploads bring
// them (the header, the whole decode, then mono and resampling as LoadMono does for a pipeline),
// and the same bytes as a file (the path readers, with the WAV data-chunk check on the file).
#include <cstdlib>
#include <string>

#include "components/audio/audio_file.h"
#include "fuzz/fuzz_input.h"

// Seeds: WAV files as kiln writes them (mono and stereo); run_fuzzers.sh adds FLAC and OGG from
// sox.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = kiln::fuzz::SeedDir();
  if (dir == nullptr) return 0;
  torch::Tensor t = torch::sin(torch::arange(64, torch::kFloat32) * 0.3) * 0.5;
  bool ok =
      kiln::audio::WriteWav(std::string(dir) + "/mono.wav", t, 8000).ok() &&
      kiln::audio::WriteWav(std::string(dir) + "/stereo.wav", torch::stack({t, -t}), 22050).ok();
  std::exit(ok ? 0 : 1);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto info = kiln::audio::ReadAudioInfoBytes(bytes, "fuzz.wav");
  auto wave = kiln::audio::ReadAudioBytes(bytes, "fuzz.wav");
  if (wave.ok()) {
    if (!info.ok() || wave->samples.size(0) != info->channels) __builtin_trap();
    auto mono = kiln::audio::LoadMono("fuzz.wav", 16000, &bytes);
    (void)mono;
  }
  kiln::fuzz::MemFile file(data, size);
  if (!file.ok()) return 0;
  auto from_file = kiln::audio::ReadAudio(file.path());
  if (from_file.ok() != wave.ok()) __builtin_trap();  // the file and memory readers agree
  return 0;
}
