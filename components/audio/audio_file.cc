#include "components/audio/audio_file.h"

#include <sndfile.h>
#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"

namespace kiln::audio {
namespace {

struct SndfileCloser {
  void operator()(SNDFILE* file) const { sf_close(file); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileCloser>;

// A WAV whose data chunk claims more bytes than the file holds (a truncated upload, or a header
// that lies): libsndfile would quietly read what is there; kiln refuses it. 0xFFFFFFFF is the
// "length unknown" of a WAV written as a stream, and not a lie.
// `read(at, out, n)` gives n bytes at offset `at` of the file, false past its end.
absl::Status CheckWavDataChunk(const std::string& path, uint64_t file_size,
                               const std::function<bool(uint64_t, char*, size_t)>& read) {
  char head[12];
  if (!read(0, head, 12) || std::memcmp(head, "RIFF", 4) != 0 ||
      std::memcmp(head + 8, "WAVE", 4) != 0) {
    return absl::OkStatus();  // not a RIFF WAV: libsndfile says what it is or is not
  }
  auto le32 = [](const char* p) {
    return static_cast<uint32_t>(static_cast<uint8_t>(p[0])) |
           static_cast<uint32_t>(static_cast<uint8_t>(p[1])) << 8 |
           static_cast<uint32_t>(static_cast<uint8_t>(p[2])) << 16 |
           static_cast<uint32_t>(static_cast<uint8_t>(p[3])) << 24;
  };
  uint64_t at = 12;
  char chunk[8];
  while (at + 8 <= file_size && read(at, chunk, 8)) {
    const uint64_t size = le32(chunk + 4);
    if (std::memcmp(chunk, "data", 4) == 0) {
      if (size != 0xFFFFFFFFu && at + 8 + size > file_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": the WAV header says its data chunk holds ", size, " bytes, but the file has ",
            file_size - at - 8, " after it (truncated, or a header that lies)"));
      }
      return absl::OkStatus();
    }
    at += 8 + size + (size & 1);
  }
  return absl::OkStatus();  // no data chunk: libsndfile says so
}

// An opened file's header checked: samples, channels and rate.
absl::Status CheckOpened(const std::string& what, const SF_INFO& info) {
  if (info.frames <= 0)
    return absl::InvalidArgumentError(absl::StrCat(what, ": no audio samples (empty recording)"));
  if (info.channels <= 0 || info.samplerate <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": invalid header (", info.channels,
                                                   " channels at ", info.samplerate, " Hz)"));
  }
  return absl::OkStatus();
}

// An audio file's bytes in memory, read by libsndfile through its virtual I/O.
struct MemoryFile {
  std::string_view data;
  sf_count_t position = 0;
};
sf_count_t MemoryLength(void* user) {
  return static_cast<sf_count_t>(static_cast<MemoryFile*>(user)->data.size());
}
sf_count_t MemorySeek(sf_count_t offset, int whence, void* user) {
  auto* m = static_cast<MemoryFile*>(user);
  sf_count_t base = whence == SEEK_SET   ? 0
                    : whence == SEEK_CUR ? m->position
                                         : static_cast<sf_count_t>(m->data.size());
  m->position = std::clamp<sf_count_t>(base + offset, 0, static_cast<sf_count_t>(m->data.size()));
  return m->position;
}
sf_count_t MemoryRead(void* out, sf_count_t count, void* user) {
  auto* m = static_cast<MemoryFile*>(user);
  sf_count_t n = std::min<sf_count_t>(count, static_cast<sf_count_t>(m->data.size()) - m->position);
  if (n <= 0) return 0;
  std::memcpy(out, m->data.data() + m->position, static_cast<size_t>(n));
  m->position += n;
  return n;
}
sf_count_t MemoryWrite(const void*, sf_count_t, void*) { return 0; }
sf_count_t MemoryTell(void* user) { return static_cast<MemoryFile*>(user)->position; }

// Opens audio bytes (`memory` must outlive the file); errors name `what`.
absl::StatusOr<SndfilePtr> OpenMemory(MemoryFile& memory, const std::string& what, SF_INFO& info) {
  if (memory.data.empty())
    return absl::InvalidArgumentError(absl::StrCat(what, ": empty (0 bytes), not audio"));
  const std::string_view data = memory.data;
  KILN_RETURN_IF_ERROR(CheckWavDataChunk(what, data.size(), [&](uint64_t at, char* out, size_t n) {
    if (at + n > data.size()) return false;
    std::memcpy(out, data.data() + at, n);
    return true;
  }));
  static SF_VIRTUAL_IO io = {MemoryLength, MemorySeek, MemoryRead, MemoryWrite, MemoryTell};
  info = SF_INFO{};
  SNDFILE* file = sf_open_virtual(&io, SFM_READ, &info, &memory);
  if (file == nullptr)
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": cannot read audio: ", sf_strerror(nullptr)));
  SndfilePtr owned(file);
  KILN_RETURN_IF_ERROR(CheckOpened(what, info));
  return owned;
}

// Opens `path` for reading; an empty or unreadable file is an error naming it.
absl::StatusOr<SndfilePtr> Open(const std::string& path, SF_INFO& info) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such audio file"));
  }
  const uint64_t file_size = std::filesystem::file_size(path, error);
  if (file_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file (0 bytes), not audio"));
  }
  std::ifstream in(path, std::ios::binary);
  KILN_RETURN_IF_ERROR(CheckWavDataChunk(path, file_size, [&](uint64_t at, char* out, size_t n) {
    return static_cast<bool>(in.seekg(static_cast<std::streamoff>(at)) &&
                             in.read(out, static_cast<std::streamsize>(n)));
  }));
  info = SF_INFO{};
  SNDFILE* file = sf_open(path.c_str(), SFM_READ, &info);
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read audio: ", sf_strerror(nullptr)));
  }
  SndfilePtr owned(file);
  KILN_RETURN_IF_ERROR(CheckOpened(path, info));
  return owned;
}

// Decodes an opened file's samples; errors name `what`.
absl::StatusOr<Waveform> Decode(SNDFILE* file, const SF_INFO& info, const std::string& what) {
  // Read in blocks, the buffer growing with the samples that arrive: a header can claim 2^36
  // frames (FLAC) in a file of a few hundred bytes.
  const sf_count_t channels = info.channels, block = sf_count_t{1} << 16;
  std::vector<float> interleaved;
  sf_count_t read = 0;
  while (read < info.frames) {
    const sf_count_t want = std::min(block, info.frames - read);
    interleaved.resize(static_cast<size_t>((read + want) * channels));
    const sf_count_t n = sf_readf_float(file, interleaved.data() + read * channels, want);
    if (n > 0) read += n;
    if (n < want) break;
  }
  interleaved.resize(static_cast<size_t>(read * channels));
  if (read <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": cannot decode audio samples: ", sf_strerror(file)));
  }
  if (read < info.frames) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": truncated audio: the header promises ",
                                                   info.frames, " frames, the file holds ", read));
  }
  // clone: from_blob borrows `interleaved`, and for one channel t().contiguous() is still a view.
  torch::Tensor samples =
      torch::from_blob(interleaved.data(), {info.frames, info.channels}, torch::kFloat32)
          .t()
          .clone();
  if (!torch::isfinite(samples).all().item<bool>()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": audio samples are not finite (corrupt data)"));
  }
  return Waveform{samples, info.samplerate};
}

// The largest ratio between two rates this pipeline resamples (soxr's filters need a sane ratio,
// and a file claiming 8 Hz is corrupt rather than audio).
constexpr double kMaxRatio = 256;

}  // namespace

bool IsAudioFile(const std::string& path) {
  std::string ext = absl::AsciiStrToLower(std::filesystem::path(path).extension().string());
  return ext == ".wav" || ext == ".flac" || ext == ".ogg";
}

absl::Status CheckAudioExtension(const std::string& path) {
  if (IsAudioFile(path)) return absl::OkStatus();
  std::string ext = std::filesystem::path(path).extension().string();
  return absl::InvalidArgumentError(absl::StrCat(path, ": unsupported audio format '",
                                                 ext.empty() ? "(no extension)" : ext,
                                                 "' (kiln reads .wav, .flac and .ogg)"));
}

absl::StatusOr<AudioInfo> ReadAudioInfo(const std::string& path) {
  SF_INFO info;
  KILN_ASSIGN_OR_RETURN(SndfilePtr file, Open(path, info));
  return AudioInfo{info.frames, info.channels, info.samplerate};
}

absl::StatusOr<Waveform> ReadAudio(const std::string& path) {
  SF_INFO info;
  KILN_ASSIGN_OR_RETURN(SndfilePtr file, Open(path, info));
  return Decode(file.get(), info, path);
}

absl::StatusOr<AudioInfo> ReadAudioInfoBytes(std::string_view bytes, const std::string& what) {
  MemoryFile memory{bytes};
  SF_INFO info;
  KILN_ASSIGN_OR_RETURN(SndfilePtr file, OpenMemory(memory, what, info));
  return AudioInfo{info.frames, info.channels, info.samplerate};
}

absl::StatusOr<Waveform> ReadAudioBytes(std::string_view bytes, const std::string& what) {
  MemoryFile memory{bytes};
  SF_INFO info;
  KILN_ASSIGN_OR_RETURN(SndfilePtr file, OpenMemory(memory, what, info));
  return Decode(file.get(), info, what);
}

absl::Status WriteWav(const std::string& path, const torch::Tensor& samples, int64_t sample_rate) {
  torch::Tensor s = samples.dim() == 1 ? samples.unsqueeze(0) : samples;
  torch::Tensor interleaved = s.to(torch::kFloat32).clamp(-1, 1).t().contiguous();
  SF_INFO info{};
  info.samplerate = static_cast<int>(sample_rate);
  info.channels = static_cast<int>(s.size(0));
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot write audio: ", sf_strerror(nullptr)));
  }
  SndfilePtr owned(file);
  sf_count_t frames = s.size(1);
  if (sf_writef_float(file, interleaved.data_ptr<float>(), frames) != frames) {
    return absl::InternalError(absl::StrCat(path, ": cannot write audio: ", sf_strerror(file)));
  }
  return absl::OkStatus();
}

torch::Tensor ToMono(const torch::Tensor& samples) {
  if (samples.dim() == 1) return samples;
  return samples.size(0) == 1 ? samples[0] : samples.mean(0);
}

absl::Status CheckResampleRates(double from, double to) {
  if (!(from > 0) || !(to > 0) || !std::isfinite(from) || !std::isfinite(to)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot resample %g Hz to %g Hz: sample rates must be positive", from, to));
  }
  if (from / to > kMaxRatio || to / from > kMaxRatio) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cannot resample %g Hz to %g Hz: the ratio is beyond 1:%g", from, to, kMaxRatio));
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> Resample(const torch::Tensor& mono, double from, double to) {
  KILN_RETURN_IF_ERROR(CheckResampleRates(from, to));
  torch::Tensor in = mono.to(torch::kFloat32).contiguous();
  if (from == to) return in;
  const size_t in_len = static_cast<size_t>(in.numel());
  const size_t out_len = static_cast<size_t>(std::llround(static_cast<double>(in_len) * to / from));
  torch::Tensor out = torch::zeros({static_cast<int64_t>(out_len)}, torch::kFloat32);
  if (in_len == 0 || out_len == 0) return out;
  soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  // One thread: the data loader already runs samples in parallel.
  soxr_runtime_spec_t runtime = soxr_runtime_spec(1);
  size_t done = 0;
  soxr_error_t error = soxr_oneshot(from, to, 1, in.data_ptr<float>(), in_len, nullptr,
                                    out.data_ptr<float>(), out_len, &done, &io, &quality, &runtime);
  if (error != nullptr) {
    return absl::InternalError(
        absl::StrFormat("soxr cannot resample %g Hz to %g Hz: %s", from, to, error));
  }
  return done == out_len ? out : out.narrow(0, 0, static_cast<int64_t>(done));
}

absl::StatusOr<torch::Tensor> LoadMono(const std::string& path, int64_t sample_rate,
                                       const std::string* bytes) {
  KILN_RETURN_IF_ERROR(CheckAudioExtension(path));
  KILN_ASSIGN_OR_RETURN(Waveform wave,
                        bytes != nullptr ? ReadAudioBytes(*bytes, path) : ReadAudio(path));
  torch::Tensor mono = ToMono(wave.samples);
  auto resampled =
      Resample(mono, static_cast<double>(wave.sample_rate), static_cast<double>(sample_rate));
  if (!resampled.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", resampled.status().message()));
  }
  return *resampled;
}

}  // namespace kiln::audio
