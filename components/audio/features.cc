#include "components/audio/features.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln::audio {

double HzToMel(double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); }
double MelToHz(double mel) { return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0); }

torch::Tensor MelFilterbank(int64_t n_freqs, double f_min, double f_max, int64_t n_mels,
                            int64_t sample_rate) {
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor freqs = torch::linspace(0, static_cast<double>(sample_rate / 2), n_freqs, f64);
  torch::Tensor mels = torch::linspace(HzToMel(f_min), HzToMel(f_max), n_mels + 2, f64);
  torch::Tensor points = 700.0 * (torch::pow(10.0, mels / 2595.0) - 1.0);  // [n_mels + 2]
  torch::Tensor widths = points.slice(0, 1) - points.slice(0, 0, -1);      // [n_mels + 1]
  torch::Tensor slopes = points.unsqueeze(0) - freqs.unsqueeze(1);         // [n_freqs, n_mels + 2]
  torch::Tensor down = -slopes.slice(1, 0, -2) / widths.slice(0, 0, -1);
  torch::Tensor up = slopes.slice(1, 2) / widths.slice(0, 1);
  return torch::clamp_min(torch::minimum(down, up), 0.0).to(torch::kFloat32);
}

torch::Tensor DctMatrix(int64_t n_mfcc, int64_t n_mels) {
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor n = torch::arange(n_mels, f64);
  torch::Tensor k = torch::arange(n_mfcc, f64).unsqueeze(1);
  torch::Tensor dct =
      torch::cos(M_PI / static_cast<double>(n_mels) * (n + 0.5) * k);  // [n_mfcc, n_mels]
  dct[0] *= 1.0 / std::sqrt(2.0);
  dct *= std::sqrt(2.0 / static_cast<double>(n_mels));
  return dct.t().contiguous().to(torch::kFloat32);
}

LogMel::LogMel(SpectrogramOptions options) : o_(options) {
  if (o_.f_max <= 0) o_.f_max = o_.sample_rate / 2.0;
  window_ = torch::hann_window(o_.win_length, torch::TensorOptions().dtype(torch::kFloat32));
  filterbank_ = MelFilterbank(o_.n_fft / 2 + 1, o_.f_min, o_.f_max, o_.n_mels, o_.sample_rate);
}

torch::Tensor LogMel::Compute(const torch::Tensor& waveform) const {
  torch::Tensor x = waveform.to(torch::kFloat32).reshape({-1});
  // Reflection padding (center=true) needs more samples than half a frame.
  if (x.size(0) <= o_.n_fft / 2) x = torch::constant_pad_nd(x, {0, o_.n_fft / 2 + 1 - x.size(0)});
  torch::Tensor spec =
      torch::stft(x, o_.n_fft, o_.hop_length, o_.win_length, window_, /*center=*/true, "reflect",
                  /*normalized=*/false, /*onesided=*/true,
                  /*return_complex=*/true);
  torch::Tensor power = torch::view_as_real(spec).pow(2).sum(-1);  // [n_freqs, frames]
  return torch::log(torch::matmul(power.t(), filterbank_) + o_.log_offset);
}

Mfcc::Mfcc(SpectrogramOptions options, int64_t n_mfcc)
    : log_mel_(options), dct_(DctMatrix(n_mfcc, options.n_mels)) {}

torch::Tensor Mfcc::Compute(const torch::Tensor& waveform) const {
  return torch::matmul(log_mel_.Compute(waveform), dct_);
}

torch::Tensor NormalizeUtterance(const torch::Tensor& features) {
  torch::Tensor mean = features.mean(0, /*keepdim=*/true);
  torch::Tensor std = features.std(0, /*unbiased=*/false, /*keepdim=*/true);
  return (features - mean) / (std + 1e-5);
}

namespace {

// Declares the spectrogram options on S, SpectrogramOptions or derived from it.
template <typename S>
OptionBinding<S> SpectrogramBinding() {
  using O = SpectrogramOptions;
  return OptionBinding<S>()
      .Field("sample_rate", static_cast<int64_t S::*>(&O::sample_rate),
             "the waveform's sample rate (the data's sample_rate)", AtLeast(1))
      .Field("n_fft", static_cast<int64_t S::*>(&O::n_fft), "FFT size", AtLeast(2))
      .Field("win_length", static_cast<int64_t S::*>(&O::win_length),
             "window length in samples (25 ms at 16 kHz)", AtLeast(1))
      .Field("hop_length", static_cast<int64_t S::*>(&O::hop_length),
             "hop between frames in samples (10 ms at 16 kHz)", AtLeast(1))
      .Field("n_mels", static_cast<int64_t S::*>(&O::n_mels), "mel filters", AtLeast(1))
      .Field("f_min", static_cast<double S::*>(&O::f_min),
             "lowest frequency of the filterbank (Hz)", AtLeast(0))
      .Field("f_max", static_cast<double S::*>(&O::f_max),
             "highest frequency (Hz); 0: sample_rate / 2")
      .Field("log_offset", static_cast<double S::*>(&O::log_offset),
             "added to the mel power before the log", GreaterThan(0));
}

// What the declaration cannot check alone: the window within the FFT, f_min < f_max <= sample_rate
// / 2.
absl::Status CheckTogether(const SpectrogramOptions& o, const OptionContext& context) {
  if (o.win_length > o.n_fft)
    return context.Refuse("win_length", absl::StrCat("at most n_fft (", o.n_fft, ")"));
  const double nyquist = static_cast<double>(o.sample_rate) / 2.0;
  if (o.f_max > nyquist) {
    return context.Refuse("f_max",
                          absl::StrCat("at most sample_rate / 2 (", nyquist, "), or 0 for that"));
  }
  const double f_max = o.f_max > 0 ? o.f_max : nyquist;
  if (o.f_min >= f_max) return context.Refuse("f_min", absl::StrCat("below f_max (", f_max, ")"));
  return absl::OkStatus();
}

struct MfccOptions : SpectrogramOptions {
  int64_t n_mfcc = 13;
};

KILN_REGISTER_BOUND(FeatureExtractor, "log_mel",
                    "Log-mel filterbank energies [frames, n_mels] (torch::stft)",
                    SpectrogramBinding<SpectrogramOptions>(),
                    [](const SpectrogramOptions& o, const OptionContext& context)
                        -> absl::StatusOr<std::shared_ptr<FeatureExtractor>> {
                      KILN_RETURN_IF_ERROR(CheckTogether(o, context));
                      return std::make_shared<LogMel>(o);
                    });

KILN_REGISTER_BOUND(
    FeatureExtractor, "mfcc", "MFCCs: orthonormal DCT-II of the log-mel energies [frames, n_mfcc]",
    SpectrogramBinding<MfccOptions>().Field("n_mfcc", &MfccOptions::n_mfcc,
                                            "cepstral coefficients kept (at most n_mels)",
                                            AtLeast(1)),
    [](const MfccOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<FeatureExtractor>> {
      KILN_RETURN_IF_ERROR(CheckTogether(o, context));
      if (o.n_mfcc > o.n_mels) {
        return context.Refuse("n_mfcc", absl::StrCat("at most n_mels (", o.n_mels, ")"));
      }
      return std::make_shared<Mfcc>(o, o.n_mfcc);
    });

}  // namespace
}  // namespace kiln::audio
