#include "components/audio/augment.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "components/audio/audio_file.h"
#include "lib/core/status_macros.h"
#include "lib/registry/registry.h"

namespace kiln::audio {

torch::Tensor Shift(const torch::Tensor& wave, int64_t shift) {
  const int64_t n = wave.size(0);
  torch::Tensor out = torch::zeros_like(wave);
  if (std::abs(shift) >= n) return out;
  if (shift >= 0) {
    out.narrow(0, shift, n - shift).copy_(wave.narrow(0, 0, n - shift));
  } else {
    out.narrow(0, 0, n + shift).copy_(wave.narrow(0, -shift, n + shift));
  }
  return out;
}

torch::Tensor MixAtSnr(const torch::Tensor& wave, const torch::Tensor& noise, double snr_db) {
  const int64_t n = wave.size(0);
  if (n == 0 || noise.numel() == 0) return wave;
  torch::Tensor fitted =
      noise.numel() >= n ? noise.narrow(0, 0, n)
                         : noise.repeat({(n + noise.numel() - 1) / noise.numel()}).narrow(0, 0, n);
  double signal_power = wave.pow(2).mean().item<double>();
  double noise_power = fitted.pow(2).mean().item<double>();
  if (signal_power <= 0 || noise_power <= 0) return wave;
  double scale = std::sqrt(signal_power / (noise_power * std::pow(10.0, snr_db / 10.0)));
  return wave + scale * fitted;
}

torch::Tensor SpecAugment(const torch::Tensor& features, const SpecAugmentOptions& o,
                          data::SampleRng& rng) {
  torch::Tensor out = features.clone();
  const int64_t frames = out.size(0), bins = out.size(1);
  for (int64_t m = 0; m < o.freq_masks && bins > 0; ++m) {
    int64_t width = rng.UniformInt(0, std::min(o.freq_width, bins));
    int64_t start = rng.UniformInt(0, bins - width);
    if (width > 0) out.narrow(1, start, width).fill_(o.value);
  }
  const int64_t time_limit = std::min<int64_t>(
      o.time_width,
      static_cast<int64_t>(std::floor(o.max_time_fraction * static_cast<double>(frames))));
  for (int64_t m = 0; m < o.time_masks && frames > 0; ++m) {
    int64_t width = rng.UniformInt(0, std::max<int64_t>(time_limit, 0));
    int64_t start = rng.UniformInt(0, frames - width);
    if (width > 0) out.narrow(0, start, width).fill_(o.value);
  }
  return out;
}

namespace {

using data::SampleRng;
using data::Transform;
using TransformOr = absl::StatusOr<std::shared_ptr<Transform>>;

absl::Status CheckRange(const config::Config& cfg, const std::string& key, double low, double high,
                        double min, double max) {
  if (!(low <= high) || low < min || high > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("option '", cfg.FullKey(key), "' must be [low, high] with ", min,
                     " <= low <= high <= ", max, " (set at ", cfg.WhereSet(key), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<double, double>> GetRange(const config::Config& cfg,
                                                   const std::string& key) {
  KILN_ASSIGN_OR_RETURN(auto values, cfg.Get<std::vector<double>>(key));
  if (values.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey(key),
                                                   "' must be a pair [low, high] (set at ",
                                                   cfg.WhereSet(key), ")"));
  }
  return std::make_pair(values[0], values[1]);
}

class TimeShift : public Transform {
 public:
  TimeShift(int64_t max_samples, double p) : max_samples_(max_samples), p_(p) {}
  torch::Tensor Apply(torch::Tensor wave, SampleRng& rng) const override {
    if (!rng.Bernoulli(p_)) return wave;
    return Shift(wave, rng.UniformInt(-max_samples_, max_samples_));
  }

 private:
  int64_t max_samples_;
  double p_;
};

class SpeedPerturb : public Transform {
 public:
  SpeedPerturb(double low, double high, double p) : low_(low), high_(high), p_(p) {}
  // Playing `factor` times faster: the samples, read as recorded at factor x the rate, resampled
  // back to the rate (Kaldi's and sox's `speed`), so pitch and tempo change together.
  torch::Tensor Apply(torch::Tensor wave, SampleRng& rng) const override {
    if (!rng.Bernoulli(p_)) return wave;
    double factor = low_ + (high_ - low_) * rng.Uniform();
    auto out = Resample(wave, 16000.0 * factor, 16000.0);
    return out.ok() ? *out : wave;  // the factor range was checked when the transform was built
  }

 private:
  double low_, high_, p_;
};

class AddNoise : public Transform {
 public:
  AddNoise(double snr_low, double snr_high, double p) : low_(snr_low), high_(snr_high), p_(p) {}
  torch::Tensor Apply(torch::Tensor wave, SampleRng& rng) const override {
    if (!rng.Bernoulli(p_)) return wave;
    double snr = low_ + (high_ - low_) * rng.Uniform();
    torch::Tensor noise = torch::empty({wave.size(0)}, torch::kFloat32);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    float* out = noise.data_ptr<float>();
    for (int64_t i = 0; i < noise.numel(); ++i) out[i] = normal(rng.engine());
    return MixAtSnr(wave, noise, snr);
  }

 private:
  double low_, high_, p_;
};

class SpecAugmentTransform : public Transform {
 public:
  explicit SpecAugmentTransform(SpecAugmentOptions o) : o_(o) {}
  torch::Tensor Apply(torch::Tensor features, SampleRng& rng) const override {
    return SpecAugment(features, o_, rng);
  }

 private:
  SpecAugmentOptions o_;
};

KILN_REGISTER(Transform, "time_shift",
              "Waveform: shift by up to max_seconds either way, zero-filled",
              OptionSchema()
                  .Float("max_seconds", 0.1, "largest shift in seconds")
                  .Int("sample_rate", 16000, "the waveform's sample rate (the data's sample_rate)")
                  .Float("p", 1.0, "probability of shifting a sample"),
              [](const config::Config& cfg) -> TransformOr {
                KILN_ASSIGN_OR_RETURN(double seconds, cfg.Get<double>("max_seconds"));
                KILN_ASSIGN_OR_RETURN(int64_t rate, cfg.Get<int64_t>("sample_rate"));
                KILN_ASSIGN_OR_RETURN(double p, cfg.Get<double>("p"));
                if (seconds < 0 || rate <= 0) {
                  return absl::InvalidArgumentError(absl::StrCat(
                      "'", cfg.prefix(), "': max_seconds must be >= 0 and sample_rate positive"));
                }
                return std::make_shared<TimeShift>(
                    std::llround(seconds * static_cast<double>(rate)), p);
              });

KILN_REGISTER(Transform, "speed_perturb",
              "Waveform: play faster or slower by a factor drawn from range (soxr)",
              OptionSchema()
                  .Add("range", OptionType::kList, "[0.9, 1.1]", "speed factors [low, high]")
                  .Float("p", 1.0, "probability of perturbing a sample"),
              [](const config::Config& cfg) -> TransformOr {
                KILN_ASSIGN_OR_RETURN(auto range, GetRange(cfg, "range"));
                KILN_ASSIGN_OR_RETURN(double p, cfg.Get<double>("p"));
                KILN_RETURN_IF_ERROR(CheckRange(cfg, "range", range.first, range.second, 0.5, 2.0));
                return std::make_shared<SpeedPerturb>(range.first, range.second, p);
              });

KILN_REGISTER(Transform, "add_noise",
              "Waveform: add white Gaussian noise at an SNR (dB) drawn from snr_db",
              OptionSchema()
                  .Add("snr_db", OptionType::kList, "[10, 30]",
                       "signal-to-noise ratios [low, high] in dB")
                  .Float("p", 0.5, "probability of adding noise to a sample"),
              [](const config::Config& cfg) -> TransformOr {
                KILN_ASSIGN_OR_RETURN(auto snr, GetRange(cfg, "snr_db"));
                KILN_ASSIGN_OR_RETURN(double p, cfg.Get<double>("p"));
                KILN_RETURN_IF_ERROR(CheckRange(cfg, "snr_db", snr.first, snr.second, -30, 100));
                return std::make_shared<AddNoise>(snr.first, snr.second, p);
              });

KILN_REGISTER(Transform, "spec_augment",
              "Features [frames, F]: SpecAugment frequency and time masks",
              OptionSchema()
                  .Int("freq_masks", 2, "frequency bands masked")
                  .Int("freq_width", 8, "widest frequency band (features)")
                  .Int("time_masks", 2, "time spans masked")
                  .Int("time_width", 10, "longest time span (frames)")
                  .Float("max_time_fraction", 0.2,
                         "a time span covers at most this share of the frames")
                  .Float("value", 0.0, "the masked value (0 is the mean of normalized features)"),
              [](const config::Config& cfg) -> TransformOr {
                SpecAugmentOptions o;
                KILN_ASSIGN_OR_RETURN(o.freq_masks, cfg.Get<int64_t>("freq_masks"));
                KILN_ASSIGN_OR_RETURN(o.freq_width, cfg.Get<int64_t>("freq_width"));
                KILN_ASSIGN_OR_RETURN(o.time_masks, cfg.Get<int64_t>("time_masks"));
                KILN_ASSIGN_OR_RETURN(o.time_width, cfg.Get<int64_t>("time_width"));
                KILN_ASSIGN_OR_RETURN(o.max_time_fraction, cfg.Get<double>("max_time_fraction"));
                KILN_ASSIGN_OR_RETURN(o.value, cfg.Get<double>("value"));
                if (o.freq_masks < 0 || o.freq_width < 0 || o.time_masks < 0 || o.time_width < 0) {
                  return absl::InvalidArgumentError(
                      absl::StrCat("'", cfg.prefix(), "': mask counts and widths must be >= 0"));
                }
                return std::make_shared<SpecAugmentTransform>(o);
              });

}  // namespace
}  // namespace kiln::audio
