// Speech features from a mono waveform: log-mel filterbanks and MFCCs computed with torch::stft,
// following torchaudio's MelSpectrogram/MFCC conventions (HTK mel scale, unnormalized triangles,
// periodic Hann window, centred frames with reflection padding, orthonormal DCT-II). Built by name
// from a `features` config node (`{_target_: log_mel, n_mels: 40, ...}`) through
// Registry<FeatureExtractor>; the result is time-major [frames, features].
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace kiln::audio {

struct SpectrogramOptions {
  int64_t sample_rate = 16000;
  int64_t n_fft = 512;
  int64_t win_length = 400;  // samples (25 ms at 16 kHz)
  int64_t hop_length = 160;  // samples (10 ms at 16 kHz)
  int64_t n_mels = 40;
  double f_min = 20;
  double f_max = 0;          // 0: sample_rate / 2
  double log_offset = 1e-6;  // log(mel + log_offset)
};

// torchaudio.functional.melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate, norm=None,
// mel_scale="htk"): [n_freqs, n_mels] triangles, each peaking at 1 on its centre frequency.
torch::Tensor MelFilterbank(int64_t n_freqs, double f_min, double f_max, int64_t n_mels,
                            int64_t sample_rate);
// torchaudio.functional.create_dct(n_mfcc, n_mels, norm="ortho"): [n_mels, n_mfcc].
torch::Tensor DctMatrix(int64_t n_mfcc, int64_t n_mels);
// The Hz of a mel value and back (HTK: 2595 log10(1 + f / 700)).
double HzToMel(double hz);
double MelToHz(double mel);

class FeatureExtractor {
 public:
  static constexpr const char* kKind = "audio_features";
  virtual ~FeatureExtractor() = default;
  // float32 [frames, num_features()] of mono samples [n] at sample_rate().
  virtual torch::Tensor Compute(const torch::Tensor& waveform) const = 0;
  virtual int64_t num_features() const = 0;
  virtual int64_t sample_rate() const = 0;
  // Frames of a waveform of `samples` samples (centred frames: 1 + samples / hop).
  virtual int64_t num_frames(int64_t samples) const = 0;
};

// log(mel power + offset): [frames, n_mels].
class LogMel : public FeatureExtractor {
 public:
  explicit LogMel(SpectrogramOptions options);
  torch::Tensor Compute(const torch::Tensor& waveform) const override;
  int64_t num_features() const override { return o_.n_mels; }
  int64_t sample_rate() const override { return o_.sample_rate; }
  int64_t num_frames(int64_t samples) const override { return 1 + samples / o_.hop_length; }

 private:
  SpectrogramOptions o_;
  torch::Tensor window_, filterbank_;  // [win_length], [n_fft / 2 + 1, n_mels]
};

// The first n_mfcc coefficients of the DCT of the log-mel features: [frames, n_mfcc].
class Mfcc : public FeatureExtractor {
 public:
  Mfcc(SpectrogramOptions options, int64_t n_mfcc);
  torch::Tensor Compute(const torch::Tensor& waveform) const override;
  int64_t num_features() const override { return dct_.size(1); }
  int64_t sample_rate() const override { return log_mel_.sample_rate(); }
  int64_t num_frames(int64_t samples) const override { return log_mel_.num_frames(samples); }

 private:
  LogMel log_mel_;
  torch::Tensor dct_;  // [n_mels, n_mfcc]
};

// Per-utterance normalization: each feature to zero mean and unit variance over the frames
// (cepstral mean and variance normalization). `features` is [frames, F].
torch::Tensor NormalizeUtterance(const torch::Tensor& features);

}  // namespace kiln::audio
