// Speech augmentation, drawing only from the sample's own SampleRng. Waveform transforms take mono
// samples [n]; SpecAugment takes features [frames, F]. Each is also registered as a Transform
// (time_shift, speed_perturb, add_noise, spec_augment) for the audio data modules'
// `waveform_transforms` and `feature_transforms` lists.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "lib/data/sample_rng.h"
#include "lib/data/transform.h"

namespace kiln::audio {

// Moves the samples by `shift` (positive: later), filling with zeros; the length is kept.
torch::Tensor Shift(const torch::Tensor& wave, int64_t shift);

// Adds `noise` (repeated or cut to the wave's length) scaled so that the signal-to-noise ratio is
// `snr_db` decibels. A silent wave is returned unchanged.
torch::Tensor MixAtSnr(const torch::Tensor& wave, const torch::Tensor& noise, double snr_db);

// SpecAugment (Park et al. 2019) without time warping: `freq_masks` bands of up to `freq_width`
// features and `time_masks` spans of up to `time_width` frames (at most `max_time_fraction` of
// the frames each) set to `value`.
struct SpecAugmentOptions {
  int64_t freq_masks = 2, freq_width = 8;
  int64_t time_masks = 2, time_width = 10;
  double max_time_fraction = 0.2;
  double value = 0;
};
torch::Tensor SpecAugment(const torch::Tensor& features, const SpecAugmentOptions& o,
                          data::SampleRng& rng);

}  // namespace kiln::audio
