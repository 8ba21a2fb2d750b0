#include "components/audio/audio_data.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "components/audio/audio_file.h"
#include "lib/core/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln::audio {

namespace fs = std::filesystem;

absl::StatusOr<torch::Tensor> AudioPipeline::Waveform(const std::string& path, data::SampleRng& rng,
                                                      bool augment) const {
  KILN_ASSIGN_OR_RETURN(torch::Tensor wave, LoadMono(path, o_.sample_rate));
  if (augment && !o_.waveform_transforms.empty()) wave = o_.waveform_transforms.Apply(wave, rng);
  if (o_.clip_seconds > 0) {
    const int64_t length = std::llround(o_.clip_seconds * static_cast<double>(o_.sample_rate));
    if (wave.size(0) > length) {
      wave = wave.narrow(0, 0, length);
    } else if (wave.size(0) < length) {
      wave = torch::constant_pad_nd(wave, {0, length - wave.size(0)});
    }
  }
  return wave;
}

absl::StatusOr<torch::Tensor> AudioPipeline::Features(const std::string& path, data::SampleRng& rng,
                                                      bool augment) const {
  KILN_ASSIGN_OR_RETURN(torch::Tensor wave, Waveform(path, rng, augment));
  torch::Tensor features = o_.features->Compute(wave);
  switch (o_.normalize) {
    case Normalization::kUtterance:
      features = NormalizeUtterance(features);
      break;
    case Normalization::kGlobal:
      if (mean_.defined()) features = (features - mean_) / std_;
      break;
    case Normalization::kNone:
      break;
  }
  if (augment && !o_.feature_transforms.empty())
    features = o_.feature_transforms.Apply(features, rng);
  return features;
}

absl::Status AudioPipeline::FitGlobalStats(const std::vector<std::string>& paths) {
  if (paths.empty())
    return absl::FailedPreconditionError("global feature normalization needs training files");
  const size_t n = std::min<size_t>(
      paths.size(), static_cast<size_t>(std::max<int64_t>(o_.global_stats_files, 1)));
  torch::Tensor sum, sum_sq;
  int64_t frames = 0;
  data::SampleRng rng(0, 0, 0);
  for (size_t i = 0; i < n; ++i) {
    const std::string& path = paths[i * paths.size() / n];
    KILN_ASSIGN_OR_RETURN(torch::Tensor wave, Waveform(path, rng, false));
    torch::Tensor f = o_.features->Compute(wave).to(torch::kFloat64);
    sum = sum.defined() ? sum + f.sum(0) : f.sum(0);
    sum_sq = sum_sq.defined() ? sum_sq + f.pow(2).sum(0) : f.pow(2).sum(0);
    frames += f.size(0);
  }
  torch::Tensor mean = sum / static_cast<double>(frames);
  torch::Tensor var = (sum_sq / static_cast<double>(frames) - mean.pow(2)).clamp_min(0);
  mean_ = mean.to(torch::kFloat32);
  std_ = (var.sqrt() + 1e-5).to(torch::kFloat32);
  Logger::Instance().Info(absl::StrCat("global feature normalization: mean and std of ", frames,
                                       " frames of ", n, " training files"));
  return absl::OkStatus();
}

absl::StatusOr<data::Example> AudioDataset::Get(int64_t index, data::SampleRng& rng) const {
  const AudioEntry& entry = entries_->at(static_cast<size_t>(index));
  data::Example e;
  KILN_ASSIGN_OR_RETURN(e.input, pipeline_->Features(entry.path, rng, augment_));
  if (token_targets_) {
    e.target = torch::tensor(entry.tokens, torch::kInt64).reshape({-1});
  } else {
    e.target = torch::tensor(entry.label, torch::kInt64);
  }
  return e;
}

int64_t AudioDataset::Length(int64_t index) const {
  return std::llround(entries_->at(static_cast<size_t>(index)).duration * 1000.0);
}

absl::StatusOr<std::vector<AudioEntry>> CheckEntries(std::vector<AudioEntry> entries,
                                                     int64_t sample_rate, OnError on_error,
                                                     const std::string& what) {
  std::vector<absl::Status> status(entries.size());
  tbb::parallel_for(size_t{0}, entries.size(), [&](size_t i) {
    AudioEntry& entry = entries[i];
    absl::Status s = CheckAudioExtension(entry.path);
    if (s.ok()) {
      auto info = ReadAudioInfo(entry.path);
      if (!info.ok()) {
        s = info.status();
      } else {
        s = CheckResampleRates(static_cast<double>(info->sample_rate),
                               static_cast<double>(sample_rate));
        if (!s.ok()) s = absl::InvalidArgumentError(absl::StrCat(entry.path, ": ", s.message()));
        if (entry.duration <= 0) entry.duration = info->seconds();
      }
    }
    if (!s.ok() && entry.where != entry.path) {
      s = absl::InvalidArgumentError(absl::StrCat(entry.where, ": ", s.message()));
    }
    status[i] = std::move(s);
  });
  std::vector<AudioEntry> kept;
  kept.reserve(entries.size());
  int64_t skipped = 0;
  std::string first;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (status[i].ok()) {
      kept.push_back(std::move(entries[i]));
      continue;
    }
    if (on_error == OnError::kFail) {
      return absl::Status(status[i].code(), absl::StrCat(status[i].message(),
                                                         " (data.on_error=skip skips bad files)"));
    }
    if (skipped++ == 0) first = std::string(status[i].message());
  }
  if (skipped > 0) {
    Logger::Instance().Warning(absl::StrCat("skipped ", skipped, " of ", entries.size(),
                                            " audio files in ", what,
                                            " (data.on_error=skip); first: ", first));
  }
  if (kept.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": no usable audio files",
                     skipped > 0 ? absl::StrCat(" (", skipped, " skipped; first: ", first, ")")
                                 : std::string()));
  }
  return kept;
}

absl::StatusOr<std::vector<std::string>> AudioFilesAt(const std::string& path) {
  std::error_code error;
  if (fs::is_regular_file(path, error)) {
    KILN_RETURN_IF_ERROR(CheckAudioExtension(path));
    return std::vector<std::string>{path};
  }
  if (!fs::is_directory(path, error))
    return absl::NotFoundError(absl::StrCat(path, ": no such file or folder"));
  std::vector<std::string> out;
  for (fs::recursive_directory_iterator
           it(path, fs::directory_options::follow_directory_symlink, error),
       end;
       !error && it != end; it.increment(error)) {
    if (it->is_regular_file(error) && IsAudioFile(it->path().string()))
      out.push_back(it->path().string());
  }
  if (error) return absl::NotFoundError(absl::StrCat(path, ": cannot list: ", error.message()));
  std::sort(out.begin(), out.end());
  return out;
}

OptionSchema& AddAudioDataOptions(OptionSchema& schema, double default_clip_seconds) {
  return schema.Int("sample_rate", 16000, "every file is resampled to this rate (soxr)")
      .Float("clip_seconds", default_clip_seconds,
             "> 0: every waveform is padded with zeros or cut to this length; 0 keeps lengths")
      .Required("features", OptionType::kMap, "the features: {_target_: log_mel|mfcc, ...}")
      .String(
          "normalize", "utterance",
          "feature normalization: utterance (per-file mean/variance), global (training set), none")
      .Int("global_stats_files", 500, "training files the global mean/std are estimated from")
      .Add("waveform_transforms", OptionType::kList, "null",
           "training augmentation of the waveform (time_shift, speed_perturb, add_noise)")
      .Add("feature_transforms", OptionType::kList, "null",
           "training augmentation of the features (spec_augment)")
      .String("on_error", "fail",
              "a bad audio file or manifest line: fail (one error naming it) or skip (counted)")
      .Int("batch_size", 64, "utterances per batch")
      .Int("num_workers", 1, "threads loading batches (0: on the training thread)")
      .Int("prefetch", 4, "batches prepared ahead at most");
}

absl::StatusOr<AudioPipelineOptions> ReadAudioPipelineOptions(const config::Config& cfg) {
  AudioPipelineOptions o;
  KILN_ASSIGN_OR_RETURN(o.sample_rate, cfg.Get<int64_t>("sample_rate"));
  KILN_ASSIGN_OR_RETURN(o.clip_seconds, cfg.Get<double>("clip_seconds"));
  KILN_ASSIGN_OR_RETURN(o.global_stats_files, cfg.Get<int64_t>("global_stats_files"));
  KILN_ASSIGN_OR_RETURN(std::string normalize, cfg.Get<std::string>("normalize"));
  if (normalize == "utterance") {
    o.normalize = Normalization::kUtterance;
  } else if (normalize == "global") {
    o.normalize = Normalization::kGlobal;
  } else if (normalize == "none") {
    o.normalize = Normalization::kNone;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "option '", cfg.FullKey("normalize"), "' must be utterance, global or none, got '",
        normalize, "' (set at ", cfg.WhereSet("normalize"), ")"));
  }
  if (o.sample_rate <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey("sample_rate"),
                                                   "' must be positive, got ", o.sample_rate,
                                                   " (set at ", cfg.WhereSet("sample_rate"), ")"));
  }
  if (o.clip_seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("option '", cfg.FullKey("clip_seconds"), "' must be >= 0"));
  }
  KILN_ASSIGN_OR_RETURN(config::Config features, cfg.Sub("features"));
  KILN_ASSIGN_OR_RETURN(o.features, Registry<FeatureExtractor>::Get().Instantiate(features));
  if (o.features->sample_rate() != o.sample_rate) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", cfg.FullKey("features"), "' works at ", o.features->sample_rate(),
                     " Hz but '", cfg.FullKey("sample_rate"), "' is ", o.sample_rate,
                     " (set features.sample_rate: ${..sample_rate})"));
  }
  KILN_ASSIGN_OR_RETURN(o.waveform_transforms,
                        data::TransformPipeline::FromConfig(cfg, "waveform_transforms"));
  KILN_ASSIGN_OR_RETURN(o.feature_transforms,
                        data::TransformPipeline::FromConfig(cfg, "feature_transforms"));
  return o;
}

absl::StatusOr<AudioSplits> ReadAudioSplits(const config::Config& cfg) {
  AudioSplits o;
  KILN_ASSIGN_OR_RETURN(o.train, cfg.Get<std::string>("train"));
  KILN_ASSIGN_OR_RETURN(o.val, cfg.GetOr<std::string>("val", ""));
  KILN_ASSIGN_OR_RETURN(o.test, cfg.GetOr<std::string>("test", ""));
  KILN_ASSIGN_OR_RETURN(o.predict, cfg.GetOr<std::string>("predict", ""));
  KILN_ASSIGN_OR_RETURN(o.val_fraction, cfg.Get<double>("val_fraction"));
  KILN_ASSIGN_OR_RETURN(o.split_seed, cfg.Get<int64_t>("split_seed"));
  if (o.val_fraction < 0 || o.val_fraction >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("option '", cfg.FullKey("val_fraction"), "' must be in [0, 1)"));
  }
  KILN_ASSIGN_OR_RETURN(std::string on_error, cfg.Get<std::string>("on_error"));
  if (on_error != "fail" && on_error != "skip") {
    return absl::InvalidArgumentError(absl::StrCat("option '", cfg.FullKey("on_error"),
                                                   "' must be fail or skip, got '", on_error,
                                                   "' (set at ", cfg.WhereSet("on_error"), ")"));
  }
  o.on_error = on_error == "skip" ? OnError::kSkip : OnError::kFail;
  return o;
}

absl::StatusOr<data::LoaderOptions> ReadAudioLoaderOptions(const config::Config& cfg) {
  data::LoaderOptions o;
  KILN_ASSIGN_OR_RETURN(o.batch_size, cfg.Get<int64_t>("batch_size"));
  KILN_ASSIGN_OR_RETURN(o.num_workers, cfg.Get<int>("num_workers"));
  KILN_ASSIGN_OR_RETURN(o.prefetch, cfg.Get<int>("prefetch"));
  if (o.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("option '", cfg.FullKey("batch_size"), "' must be positive"));
  }
  return o;
}

}  // namespace kiln::audio
