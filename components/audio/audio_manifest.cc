// `audio_manifest`: speech recognition data from JSONL manifests, one utterance a line:
// {"audio": PATH, "text": ..., "duration": SECONDS} (field names configurable; a relative PATH is
// relative to the manifest's folder; duration is read from the file header when absent). Texts
// are encoded by the data's tokenizer, fitted on the training texts (a TextDataModule, so text
// tasks' tokenizer checks apply). Training batches are bucketed by duration; features are padded
// per batch with lengths and masks, token targets padded with 0 (<pad>).
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "components/audio/audio_data.h"
#include "components/audio/audio_file.h"
#include "components/audio/manifest_file.h"
#include "components/text/text_data_module.h"
#include "lib/base/status_macros.h"
#include "lib/data/padding.h"
#include "lib/data/shards/shard_set.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln::audio {
namespace {

namespace fs = std::filesystem;

struct ManifestOptions : AudioDataOptions {
  config::Config tokenizer;  // {_target_: char, ...}, instantiated by the factory
  std::string audio_field = "audio", text_field = "text", duration_field = "duration";
  double min_duration = 0, max_duration = 0;  // 0: no limit
  bool bucket_by_length = true;
  int64_t bucket_window = 50;
  int64_t sortagrad_epochs = 0;
};

// The entries of a manifest: JSONL (manifest_file.h) or shards.
absl::StatusOr<std::vector<AudioEntry>> ReadManifest(const std::string& path,
                                                     const ManifestOptions& o, bool need_text) {
  if (data::shards::LooksLikeShardSpec(path)) {
    ShardAudioNeeds needs;
    needs.text = need_text;
    return ReadShardAudio(path, needs);
  }
  return ReadJsonlManifest(path, {o.audio_field, o.text_field, o.duration_field}, need_text,
                           o.on_error_policy());
}

class AudioManifest : public text::TextDataModule {
 public:
  AudioManifest(ManifestOptions o, AudioPipelineOptions pipeline,
                std::shared_ptr<text::Tokenizer> tokenizer)
      : TextDataModule(std::move(tokenizer), o.loader()),
        o_(std::move(o)),
        pipeline_(std::make_shared<AudioPipeline>(std::move(pipeline))) {}

  absl::Status Setup(data::Stage stage) override {
    KILN_ASSIGN_OR_RETURN(auto tok, tokenizer());
    data::LoaderOptions& lo = mutable_loader();
    SetPadCollate();
    lo.batch_order = nullptr;
    if (stage == data::Stage::kFit) {
      data::BatchOrderFn then;
      if (o_.bucket_by_length) {
        then = data::LengthBucketing(lo.batch_size, o_.bucket_window,
                                     static_cast<uint64_t>(o_.split_seed));
      }
      lo.batch_order = data::SortaGrad(o_.sortagrad_epochs, std::move(then));
    }
    KILN_RETURN_IF_ERROR(FitGlobalStats());
    if ((stage == data::Stage::kFit || stage == data::Stage::kValidate) && !train_) {
      KILN_RETURN_IF_ERROR(LoadTrain());
      if (o_.val.value_or("").empty()) {
        auto [train_idx, val_idx] = data::RandomSplit(static_cast<int64_t>(train_entries_.size()),
                                                      o_.val_fraction, o_.split_seed);
        std::vector<AudioEntry> t, v;
        for (int64_t i : train_idx) t.push_back(train_entries_[static_cast<size_t>(i)]);
        for (int64_t i : val_idx) v.push_back(train_entries_[static_cast<size_t>(i)]);
        train_ = Make(std::move(t), *tok, true);
        if (!v.empty()) val_ = Make(std::move(v), *tok, false);
      } else {
        train_ = Make(train_entries_, *tok, true);
        KILN_ASSIGN_OR_RETURN(auto val, Load(*o_.val, true));
        val_ = Make(std::move(val), *tok, false);
      }
    }
    if (stage == data::Stage::kTest && !test_ && !o_.test.value_or("").empty()) {
      KILN_ASSIGN_OR_RETURN(auto test, Load(*o_.test, true));
      test_ = Make(std::move(test), *tok, false);
    }
    if (stage == data::Stage::kPredict && !predict_) {
      std::string path = o_.predict.value_or("").empty() ? o_.test.value_or("") : *o_.predict;
      if (path.empty()) {
        return absl::FailedPreconditionError(
            "nothing to predict: set data.predict=PATH (a manifest, an audio file or a folder)");
      }
      std::vector<AudioEntry> entries;
      if (absl::AsciiStrToLower(fs::path(path).extension().string()) == ".jsonl" ||
          data::shards::LooksLikeShardSpec(path)) {
        KILN_ASSIGN_OR_RETURN(entries, Load(path, false));
      } else {
        KILN_ASSIGN_OR_RETURN(std::vector<std::string> paths, AudioFilesAt(path));
        for (auto& p : paths) {
          AudioEntry e;
          e.path = e.where = std::move(p);
          entries.push_back(std::move(e));
        }
        KILN_ASSIGN_OR_RETURN(entries,
                              CheckEntries(std::move(entries), pipeline_->options().sample_rate,
                                           o_.on_error_policy(), path));
      }
      predict_ = Make(std::move(entries), *tok, false);
    }
    return absl::OkStatus();
  }

  // The tokenizer and global feature statistics; a raw input is an audio file's bytes.
  absl::Status PrepareRawInputs() override {
    KILN_RETURN_IF_ERROR(tokenizer().status());
    SetPadCollate();
    return FitGlobalStats();
  }
  absl::StatusOr<data::Example> RawExample(std::string_view raw) const override {
    KILN_ASSIGN_OR_RETURN(torch::Tensor features, pipeline_->FeaturesOfBytes(raw));
    return data::Example{features, torch::zeros({0}, torch::kInt64)};
  }

  std::shared_ptr<const data::Dataset> train_dataset() const override { return train_; }
  std::shared_ptr<const data::Dataset> val_dataset() const override { return val_; }
  std::shared_ptr<const data::Dataset> test_dataset() const override { return test_; }
  std::shared_ptr<const data::Dataset> predict_dataset() const override { return predict_; }

 protected:
  absl::StatusOr<std::vector<std::string>> TrainingTexts() override {
    KILN_RETURN_IF_ERROR(LoadTrain());
    std::vector<std::string> texts;
    texts.reserve(train_entries_.size());
    for (const auto& e : train_entries_) texts.push_back(e.text);
    return texts;
  }
  std::string TrainingName() const override { return o_.train; }

 private:
  void SetPadCollate() {
    mutable_loader().collate = [](std::vector<data::Example>& examples) {
      return data::PadCollate(examples, text::SpecialTokens::kPad);
    };
  }

  absl::Status FitGlobalStats() {
    if (!pipeline_->needs_global_stats()) return absl::OkStatus();
    KILN_RETURN_IF_ERROR(LoadTrain());
    std::vector<AudioSource> paths;
    for (const auto& e : train_entries_) paths.push_back(e.source());
    return pipeline_->FitGlobalStats(paths);
  }

  absl::Status LoadTrain() {
    if (!train_entries_.empty()) return absl::OkStatus();
    KILN_ASSIGN_OR_RETURN(train_entries_, Load(o_.train, true));
    return absl::OkStatus();
  }

  // A manifest's entries whose files pass the header check and whose duration is in range.
  absl::StatusOr<std::vector<AudioEntry>> Load(const std::string& path, bool need_text) const {
    KILN_ASSIGN_OR_RETURN(std::vector<AudioEntry> entries, ReadManifest(path, o_, need_text));
    KILN_ASSIGN_OR_RETURN(entries,
                          CheckEntries(std::move(entries), pipeline_->options().sample_rate,
                                       o_.on_error_policy(), absl::StrCat("manifest ", path)));
    if (o_.min_duration <= 0 && o_.max_duration <= 0) return entries;
    std::vector<AudioEntry> kept;
    for (auto& e : entries) {
      if ((o_.min_duration <= 0 || e.duration >= o_.min_duration) &&
          (o_.max_duration <= 0 || e.duration <= o_.max_duration)) {
        kept.push_back(std::move(e));
      }
    }
    if (kept.size() < entries.size()) {
      Logger::Instance().Info(absl::StrCat("left out ", entries.size() - kept.size(), " of ",
                                           entries.size(), " utterances of ", path,
                                           " outside data.min_duration/max_duration"));
    }
    if (kept.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": no utterance within the duration limits"));
    return kept;
  }

  std::shared_ptr<const data::Dataset> Make(std::vector<AudioEntry> entries,
                                            const text::Tokenizer& tok, bool augment) const {
    std::vector<std::string> texts;
    texts.reserve(entries.size());
    for (const auto& e : entries) texts.push_back(e.text);
    std::vector<std::vector<int64_t>> tokens = tok.EncodeAll(texts);
    for (size_t i = 0; i < entries.size(); ++i) entries[i].tokens = std::move(tokens[i]);
    return std::make_shared<AudioDataset>(
        std::make_shared<const std::vector<AudioEntry>>(std::move(entries)), pipeline_, augment,
        /*token_targets=*/true);
  }

  ManifestOptions o_;
  std::shared_ptr<AudioPipeline> pipeline_;
  std::vector<AudioEntry> train_entries_;
  std::shared_ptr<const data::Dataset> train_, val_, test_, predict_;
};

KILN_REGISTER_BOUND(
    data::DataModule, "audio_manifest",
    "Speech recognition data: JSONL manifests {audio, text, duration}, duration-bucketed batches",
    AddAudioDataOptions(
        AudioSplitsBinding<ManifestOptions>(
            "training manifest (.jsonl)", "validation manifest (null: val_fraction of train)",
            "test manifest (null: no test split)",
            "a manifest, an audio file or a folder to transcribe (null: the test manifest)")
            .RequiredNode("tokenizer", &ManifestOptions::tokenizer, OptionType::kMap,
                          "the tokenizer of the transcripts: {_target_: char, ...}")
            .Field("audio_field", &ManifestOptions::audio_field,
                   "the manifest field holding the audio path")
            .Field("text_field", &ManifestOptions::text_field,
                   "the manifest field holding the transcript")
            .Field("duration_field", &ManifestOptions::duration_field,
                   "the manifest field holding the duration (seconds)")
            .Field("min_duration", &ManifestOptions::min_duration,
                   "utterances shorter than this are left out (0: no limit)")
            .Field("max_duration", &ManifestOptions::max_duration,
                   "utterances longer than this are left out (0: no limit)")
            .Field("val_fraction",
                   static_cast<double ManifestOptions::*>(&ManifestOptions::val_fraction),
                   "share of train held out for validation when val is null", InHalfOpenRange(0, 1))
            .Field("split_seed",
                   static_cast<int64_t ManifestOptions::*>(&ManifestOptions::split_seed),
                   "seed of that split and of the batch shuffle of bucketing")
            .Field("bucket_by_length", &ManifestOptions::bucket_by_length,
                   "training batches of similar durations (less padding)")
            .Field("bucket_window", &ManifestOptions::bucket_window,
                   "batches sorted together when bucketing")
            .Field("sortagrad_epochs", &ManifestOptions::sortagrad_epochs,
                   "first epochs that go through the training set shortest first, unshuffled "
                   "(DeepSpeech 2's SortaGrad curriculum), with or without bucket_by_length",
                   AtLeast(0))),
    [](const ManifestOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<data::DataModule>> {
      KILN_ASSIGN_OR_RETURN(AudioPipelineOptions pipeline, BuildAudioPipeline(o, context));
      KILN_ASSIGN_OR_RETURN(auto tokenizer,
                            Registry<text::Tokenizer>::Get().Instantiate(o.tokenizer));
      return std::make_shared<AudioManifest>(o, std::move(pipeline), std::move(tokenizer));
    });

}  // namespace
}  // namespace kiln::audio
