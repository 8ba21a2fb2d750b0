// What the audio data modules (audio_folder, audio_manifest) share: the pipeline from a file to
// features (load, mono, resample, waveform augmentation, fixed clip length, features,
// normalization, feature augmentation), a dataset of audio entries over it, the check of every
// file before training (fail on the first bad file, or skip bad files with a count), and the
// options each module declares.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "components/audio/features.h"
#include "lib/config/config.h"
#include "lib/data/dataset.h"
#include "lib/data/loader.h"
#include "lib/data/transform.h"
#include "lib/registry/options.h"

namespace kiln::audio {

enum class Normalization { kNone, kUtterance, kGlobal };

struct AudioPipelineOptions {
  int64_t sample_rate = 16000;
  double clip_seconds = 0;  // > 0: pad with zeros or cut every waveform to this length
  Normalization normalize = Normalization::kUtterance;
  int64_t global_stats_files = 500;  // training files the global mean/std are estimated from
  std::shared_ptr<const FeatureExtractor> features;
  data::TransformPipeline waveform_transforms, feature_transforms;  // applied when training
};

class AudioPipeline {
 public:
  explicit AudioPipeline(AudioPipelineOptions options) : o_(std::move(options)) {}
  // Features [frames, F] of one file; `augment` applies the training transforms.
  absl::StatusOr<torch::Tensor> Features(const std::string& path, data::SampleRng& rng,
                                         bool augment) const;
  // The waveform as the features see it (resampled, augmented, cut or padded).
  absl::StatusOr<torch::Tensor> Waveform(const std::string& path, data::SampleRng& rng,
                                         bool augment) const;
  // Global normalization: the per-feature mean and standard deviation over up to
  // global_stats_files of `paths` (evenly spaced, without augmentation).
  absl::Status FitGlobalStats(const std::vector<std::string>& paths);
  bool needs_global_stats() const {
    return o_.normalize == Normalization::kGlobal && !mean_.defined();
  }
  const AudioPipelineOptions& options() const { return o_; }

 private:
  AudioPipelineOptions o_;
  torch::Tensor mean_, std_;  // [F] for global normalization
};

// One utterance: its file and, for classification, a class index, or for recognition, a text.
struct AudioEntry {
  std::string path;
  int64_t label = -1;  // -1: none (recognition, or an unlabelled prediction input)
  std::string text;
  std::vector<int64_t> tokens;  // the text's token ids, when a tokenizer encoded it
  double duration = 0;          // seconds (for length bucketing); 0 when unknown
  std::string where;            // "manifest.jsonl:12" or the path, for messages
};

// Examples: input features [frames, F] (float); target the class index (0-d int64, -1 when
// unlabelled) or, with token_targets, the text's token ids [L] (int64). Length() is the duration
// in milliseconds, for bucketing.
class AudioDataset : public data::Dataset {
 public:
  AudioDataset(std::shared_ptr<const std::vector<AudioEntry>> entries,
               std::shared_ptr<const AudioPipeline> pipeline, bool augment,
               bool token_targets = false)
      : entries_(std::move(entries)),
        pipeline_(std::move(pipeline)),
        augment_(augment),
        token_targets_(token_targets) {}
  int64_t size() const override { return static_cast<int64_t>(entries_->size()); }
  absl::StatusOr<data::Example> Get(int64_t index, data::SampleRng& rng) const override;
  std::string Source(int64_t index) const override {
    return entries_->at(static_cast<size_t>(index)).path;
  }
  int64_t Length(int64_t index) const override;

 private:
  std::shared_ptr<const std::vector<AudioEntry>> entries_;
  std::shared_ptr<const AudioPipeline> pipeline_;
  bool augment_;
  bool token_targets_;
};

// What to do with a file that cannot be used (empty, corrupt, unsupported format, sample rate
// that cannot be resampled) or a manifest line that cannot be read.
enum class OnError { kFail, kSkip };

// The splits and error policy both data modules declare (train, val, test, predict, val_fraction,
// split_seed, on_error): val null splits val_fraction off train; predict null uses test.
struct AudioSplits {
  std::string train, val, test, predict;
  double val_fraction = 0.1;
  int64_t split_seed = 1234;
  OnError on_error = OnError::kFail;
};
absl::StatusOr<AudioSplits> ReadAudioSplits(const config::Config& cfg);

// Checks every entry's file header (format, samples, resampling) in parallel. kFail: the first
// bad entry's error, naming it. kSkip: drops bad entries and logs "skipped N of M ... (first:
// ...)". `what` names the set in that line ("train folder data/x"). An empty result is an error.
absl::StatusOr<std::vector<AudioEntry>> CheckEntries(std::vector<AudioEntry> entries,
                                                     int64_t sample_rate, OnError on_error,
                                                     const std::string& what);

// Audio files (wav, flac, ogg) below `dir`, sorted; or `path` itself when it is a file (which
// must then have an audio extension).
absl::StatusOr<std::vector<std::string>> AudioFilesAt(const std::string& path);

// Declares sample_rate, clip_seconds, features, normalize, global_stats_files,
// waveform_transforms, feature_transforms, on_error, batch_size, num_workers, prefetch.
OptionSchema& AddAudioDataOptions(OptionSchema& schema, double default_clip_seconds);
absl::StatusOr<AudioPipelineOptions> ReadAudioPipelineOptions(const config::Config& cfg);
absl::StatusOr<data::LoaderOptions> ReadAudioLoaderOptions(const config::Config& cfg);

}  // namespace kiln::audio
