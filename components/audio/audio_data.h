// What the audio data modules (audio_folder, audio_manifest) share: the pipeline from a file to
// features (load, mono, resample, waveform augmentation, fixed clip length, features,
// normalization, feature augmentation), a dataset of audio entries over it, the check of every
// file before training (fail on the first bad file, or skip bad files with a count), and the
// options each module declares.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "components/audio/features.h"
#include "lib/config/config.h"
#include "lib/data/batching_options.h"
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

// Where an utterance's audio is: a file, or that file's bytes in memory (a shard's member), `path`
// then only naming it (with the file's extension).
struct AudioSource {
  AudioSource(std::string file) : path(std::move(file)) {}  // NOLINT: a path is a source
  AudioSource(std::string name, std::shared_ptr<const std::string> contents)
      : path(std::move(name)), bytes(std::move(contents)) {}
  std::string path;
  std::shared_ptr<const std::string> bytes;  // null: read `path`
};

class AudioPipeline {
 public:
  explicit AudioPipeline(AudioPipelineOptions options) : o_(std::move(options)) {}
  // Features [frames, F] of one file; `augment` applies the training transforms.
  absl::StatusOr<torch::Tensor> Features(const AudioSource& source, data::SampleRng& rng,
                                         bool augment) const;
  // Features [frames, F] of an audio file's bytes (WAV, FLAC, Ogg), without augmentation; errors
  // name "the audio". For raw inputs (kiln::Predictor, `kiln serve`).
  absl::StatusOr<torch::Tensor> FeaturesOfBytes(std::string_view bytes) const;
  // The waveform as the features see it (resampled, augmented, cut or padded).
  absl::StatusOr<torch::Tensor> Waveform(const AudioSource& source, data::SampleRng& rng,
                                         bool augment) const;
  // Global normalization: the per-feature mean and standard deviation over up to
  // global_stats_files of `sources` (evenly spaced, without augmentation).
  absl::Status FitGlobalStats(const std::vector<AudioSource>& sources);
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
  std::vector<int64_t> tokens;               // the text's token ids, when a tokenizer encoded it
  double duration = 0;                       // seconds (for length bucketing); 0 when unknown
  std::string where;                         // "manifest.jsonl:12" or the path, for messages
  std::shared_ptr<const std::string> bytes;  // the file's contents when they come from a shard
  AudioSource source() const { return AudioSource(path, bytes); }
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
  // The audio file's bytes (KEY.wav, .flac or .ogg), the transcript (KEY.txt) or the class
  // (KEY.cls).
  absl::StatusOr<data::EncodedSample> Encoded(int64_t index) const override;

 private:
  std::shared_ptr<const std::vector<AudioEntry>> entries_;
  std::shared_ptr<const AudioPipeline> pipeline_;
  bool augment_;
  bool token_targets_;
};

// What to do with a file that cannot be used (empty, corrupt, unsupported format, sample rate
// that cannot be resampled) or a manifest line that cannot be read.
enum class OnError { kFail, kSkip };

// The splits, error policy, pipeline and loader options both data modules declare; their options
// structs derive from this one. val null splits val_fraction off train; predict null uses test.
struct AudioDataOptions : data::BatchingOptions {
  AudioDataOptions() { batch_size = 64; }
  std::string train;
  std::optional<std::string> val, test, predict;
  double val_fraction = 0.1;
  int64_t split_seed = 1234;
  int64_t sample_rate = 16000;
  double clip_seconds = 0;
  config::Config features;  // {_target_: log_mel|mfcc, ...}, instantiated by BuildAudioPipeline
  std::string normalize = "utterance";
  int64_t global_stats_files = 500;
  config::Config waveform_transforms, feature_transforms;  // lists of transforms, or null
  std::string on_error = "fail";

  OnError on_error_policy() const { return on_error == "skip" ? OnError::kSkip : OnError::kFail; }
};

// Checks every entry's file header (format, samples, resampling) in parallel. kFail: the first
// bad entry's error, naming it. kSkip: drops bad entries and logs "skipped N of M ... (first:
// ...)". `what` names the set in that line ("train folder data/x"). An empty result is an error.
absl::StatusOr<std::vector<AudioEntry>> CheckEntries(std::vector<AudioEntry> entries,
                                                     int64_t sample_rate, OnError on_error,
                                                     const std::string& what);

// What an audio sample of a shard must carry (ReadShardAudio).
struct ShardAudioNeeds {
  bool text = false;            // KEY.txt, the transcript (recognition)
  int64_t classes = 0;          // > 0: KEY.cls, a class index below this (classification)
  bool label_optional = false;  // a missing KEY.cls is the label -1 (prediction inputs)
};

// The utterances of shards (KEY.wav|flac|ogg with KEY.txt and/or KEY.cls, as `kiln shard` writes
// an audio module's splits) in storage order, their audio bytes in memory. Errors name the shard
// and key.
absl::StatusOr<std::vector<AudioEntry>> ReadShardAudio(const std::string& spec,
                                                       const ShardAudioNeeds& needs);

// Audio files (wav, flac, ogg) below `dir`, sorted; or `path` itself when it is a file (which
// must then have an audio extension).
absl::StatusOr<std::vector<std::string>> AudioFilesAt(const std::string& path);

// Starts S's declaration with train, val, test and predict, each in the module's own words.
template <typename S>
OptionBinding<S> AudioSplitsBinding(std::string train_doc, std::string val_doc,
                                    std::string test_doc, std::string predict_doc) {
  static_assert(std::is_base_of_v<AudioDataOptions, S>);
  using A = AudioDataOptions;
  using Path = std::optional<std::string> S::*;
  return OptionBinding<S>()
      .Required("train", static_cast<std::string S::*>(&A::train), std::move(train_doc))
      .Field("val", static_cast<Path>(&A::val), std::move(val_doc))
      .Field("test", static_cast<Path>(&A::test), std::move(test_doc))
      .Field("predict", static_cast<Path>(&A::predict), std::move(predict_doc));
}

// Declares sample_rate, clip_seconds, features, normalize, global_stats_files,
// waveform_transforms, feature_transforms, on_error, batch_size, num_workers and prefetch on S,
// after the options `binding` already has (train, val, test, predict, val_fraction and
// split_seed, which each module declares in its own words). S() gives the defaults.
template <typename S>
OptionBinding<S> AddAudioDataOptions(OptionBinding<S> binding) {
  static_assert(std::is_base_of_v<AudioDataOptions, S>);
  using A = AudioDataOptions;
  binding =
      binding
          .Field("sample_rate", static_cast<int64_t S::*>(&A::sample_rate),
                 "every file is resampled to this rate (soxr)", AtLeast(1))
          .Field("clip_seconds", static_cast<double S::*>(&A::clip_seconds),
                 "> 0: every waveform is padded with zeros or cut to this length; 0 keeps lengths",
                 AtLeast(0))
          .RequiredNode("features", static_cast<config::Config S::*>(&A::features),
                        OptionType::kMap, "the features: {_target_: log_mel|mfcc, ...}")
          .Field("normalize", static_cast<std::string S::*>(&A::normalize),
                 "feature normalization: utterance (per-file mean/variance), global (training "
                 "set), none",
                 OneOf({"utterance", "global", "none"}))
          .Field("global_stats_files", static_cast<int64_t S::*>(&A::global_stats_files),
                 "training files the global mean/std are estimated from")
          .Node("waveform_transforms", static_cast<config::Config S::*>(&A::waveform_transforms),
                OptionType::kList,
                "training augmentation of the waveform (time_shift, speed_perturb, add_noise)")
          .Node("feature_transforms", static_cast<config::Config S::*>(&A::feature_transforms),
                OptionType::kList, "training augmentation of the features (spec_augment)")
          .Field("on_error", static_cast<std::string S::*>(&A::on_error),
                 "a bad audio file or manifest line: fail (one error naming it) or skip (counted)",
                 OneOf({"fail", "skip"}));
  return data::AddBatchingOptions(std::move(binding), "utterances");
}

// The pipeline the options describe, with its feature extractor instantiated (refused when it
// works at another rate than sample_rate) and its transforms built.
absl::StatusOr<AudioPipelineOptions> BuildAudioPipeline(const AudioDataOptions& o,
                                                        const OptionContext& context);

}  // namespace kiln::audio
