#include "components/audio/features.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "lib/core/status_macros.h"
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

absl::Status CheckSpectrogramOptions(const SpectrogramOptions& o) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  if (o.sample_rate <= 0)
    return bad(absl::StrCat("features: sample_rate must be positive, got ", o.sample_rate));
  if (o.n_fft < 2) return bad(absl::StrCat("features: n_fft must be at least 2, got ", o.n_fft));
  if (o.win_length < 1 || o.win_length > o.n_fft) {
    return bad(absl::StrCat("features: win_length must be in [1, n_fft=", o.n_fft, "], got ",
                            o.win_length));
  }
  if (o.hop_length < 1)
    return bad(absl::StrCat("features: hop_length must be positive, got ", o.hop_length));
  if (o.n_mels < 1) return bad(absl::StrCat("features: n_mels must be positive, got ", o.n_mels));
  double f_max = o.f_max > 0 ? o.f_max : o.sample_rate / 2.0;
  if (o.f_min < 0 || o.f_min >= f_max || f_max > o.sample_rate / 2.0) {
    return bad(absl::StrCat("features: need 0 <= f_min < f_max <= sample_rate / 2 = ",
                            o.sample_rate / 2.0, ", got f_min=", o.f_min, ", f_max=", f_max));
  }
  if (o.log_offset <= 0)
    return bad(absl::StrCat("features: log_offset must be positive, got ", o.log_offset));
  return absl::OkStatus();
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

OptionSchema SpectrogramSchema() {
  return OptionSchema()
      .Int("sample_rate", 16000, "the waveform's sample rate (the data's sample_rate)")
      .Int("n_fft", 512, "FFT size")
      .Int("win_length", 400, "window length in samples (25 ms at 16 kHz)")
      .Int("hop_length", 160, "hop between frames in samples (10 ms at 16 kHz)")
      .Int("n_mels", 40, "mel filters")
      .Float("f_min", 20.0, "lowest frequency of the filterbank (Hz)")
      .Float("f_max", 0.0, "highest frequency (Hz); 0: sample_rate / 2")
      .Float("log_offset", 1e-6, "added to the mel power before the log");
}

absl::StatusOr<SpectrogramOptions> ReadSpectrogramOptions(const config::Config& cfg) {
  SpectrogramOptions o;
  KILN_ASSIGN_OR_RETURN(o.sample_rate, cfg.Get<int64_t>("sample_rate"));
  KILN_ASSIGN_OR_RETURN(o.n_fft, cfg.Get<int64_t>("n_fft"));
  KILN_ASSIGN_OR_RETURN(o.win_length, cfg.Get<int64_t>("win_length"));
  KILN_ASSIGN_OR_RETURN(o.hop_length, cfg.Get<int64_t>("hop_length"));
  KILN_ASSIGN_OR_RETURN(o.n_mels, cfg.Get<int64_t>("n_mels"));
  KILN_ASSIGN_OR_RETURN(o.f_min, cfg.Get<double>("f_min"));
  KILN_ASSIGN_OR_RETURN(o.f_max, cfg.Get<double>("f_max"));
  KILN_ASSIGN_OR_RETURN(o.log_offset, cfg.Get<double>("log_offset"));
  absl::Status status = CheckSpectrogramOptions(o);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("'", cfg.prefix(), "': ", status.message()));
  }
  return o;
}

KILN_REGISTER(FeatureExtractor, "log_mel",
              "Log-mel filterbank energies [frames, n_mels] (torch::stft)", SpectrogramSchema(),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<FeatureExtractor>> {
                KILN_ASSIGN_OR_RETURN(SpectrogramOptions o, ReadSpectrogramOptions(cfg));
                return std::make_shared<LogMel>(o);
              });

KILN_REGISTER(FeatureExtractor, "mfcc",
              "MFCCs: orthonormal DCT-II of the log-mel energies [frames, n_mfcc]",
              SpectrogramSchema().Int("n_mfcc", 13, "cepstral coefficients kept (at most n_mels)"),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<FeatureExtractor>> {
                KILN_ASSIGN_OR_RETURN(SpectrogramOptions o, ReadSpectrogramOptions(cfg));
                KILN_ASSIGN_OR_RETURN(int64_t n_mfcc, cfg.Get<int64_t>("n_mfcc"));
                if (n_mfcc < 1 || n_mfcc > o.n_mels) {
                  return absl::InvalidArgumentError(
                      absl::StrCat("option '", cfg.FullKey("n_mfcc"),
                                   "' must be in [1, n_mels=", o.n_mels, "], got ", n_mfcc));
                }
                return std::make_shared<Mfcc>(o, n_mfcc);
              });

}  // namespace
}  // namespace kiln::audio
