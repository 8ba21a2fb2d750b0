#include "components/audio/augment.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "components/audio/audio_file.h"
#include "components/common/option_values.h"
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

struct TimeShiftOptions {
  double max_seconds = 0.1;
  int64_t sample_rate = 16000;
  double p = 1.0;
};

KILN_REGISTER_BOUND(Transform, "time_shift",
                    "Waveform: shift by up to max_seconds either way, zero-filled",
                    OptionBinding<TimeShiftOptions>()
                        .Field("max_seconds", &TimeShiftOptions::max_seconds,
                               "largest shift in seconds", AtLeast(0))
                        .Field("sample_rate", &TimeShiftOptions::sample_rate,
                               "the waveform's sample rate (the data's sample_rate)", AtLeast(1))
                        .Field("p", &TimeShiftOptions::p, "probability of shifting a sample"),
                    [](const TimeShiftOptions& o) -> TransformOr {
                      return std::make_shared<TimeShift>(
                          std::llround(o.max_seconds * static_cast<double>(o.sample_rate)), o.p);
                    });

struct SpeedPerturbOptions {
  std::pair<double, double> range = {0.9, 1.1};
  double p = 1.0;
};

KILN_REGISTER_BOUND(Transform, "speed_perturb",
                    "Waveform: play faster or slower by a factor drawn from range (soxr)",
                    OptionBinding<SpeedPerturbOptions>()
                        .Field("range", &SpeedPerturbOptions::range, "speed factors [low, high]",
                               data::OrderedWithin(0.5, 2))
                        .Field("p", &SpeedPerturbOptions::p, "probability of perturbing a sample"),
                    [](const SpeedPerturbOptions& o) -> TransformOr {
                      return std::make_shared<SpeedPerturb>(o.range.first, o.range.second, o.p);
                    });

struct AddNoiseOptions {
  std::pair<double, double> snr_db = {10, 30};
  double p = 0.5;
};

KILN_REGISTER_BOUND(Transform, "add_noise",
                    "Waveform: add white Gaussian noise at an SNR (dB) drawn from snr_db",
                    OptionBinding<AddNoiseOptions>()
                        .Field("snr_db", &AddNoiseOptions::snr_db,
                               "signal-to-noise ratios [low, high] in dB",
                               data::OrderedWithin(-30, 100))
                        .Field("p", &AddNoiseOptions::p, "probability of adding noise to a sample"),
                    [](const AddNoiseOptions& o) -> TransformOr {
                      return std::make_shared<AddNoise>(o.snr_db.first, o.snr_db.second, o.p);
                    });

using S = SpecAugmentOptions;
KILN_REGISTER_BOUND(
    Transform, "spec_augment", "Features [frames, F]: SpecAugment frequency and time masks",
    OptionBinding<S>()
        .Field("freq_masks", &S::freq_masks, "frequency bands masked", AtLeast(0))
        .Field("freq_width", &S::freq_width, "widest frequency band (features)", AtLeast(0))
        .Field("time_masks", &S::time_masks, "time spans masked", AtLeast(0))
        .Field("time_width", &S::time_width, "longest time span (frames)", AtLeast(0))
        .Field("max_time_fraction", &S::max_time_fraction,
               "a time span covers at most this share of the frames")
        .Field("value", &S::value, "the masked value (0 is the mean of normalized features)"),
    [](const S& o) -> TransformOr { return std::make_shared<SpecAugmentTransform>(o); });

}  // namespace
}  // namespace kiln::audio
