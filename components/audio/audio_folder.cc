// `audio_folder`: audio classification data (keyword spotting) in one folder per class,
// ROOT/CLASS/*.{wav,flac,ogg}, the class index being the position of CLASS among the sorted folder
// names (or in `classes`). Train, val and test are separate roots, or val is split from train.
// A split may instead be shards (KEY.wav + KEY.cls, as `kiln shard` writes this module's splits),
// read in storage order into memory; their classes come from `classes` or the shards' index.
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "components/audio/audio_data.h"
#include "lib/base/status_macros.h"
#include "lib/data/datamodule.h"
#include "lib/data/padding.h"
#include "lib/data/shards/shard_set.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln::audio {
namespace {

namespace fs = std::filesystem;

struct AudioFolderOptions : AudioDataOptions {
  AudioFolderOptions() { clip_seconds = 1.0; }
  std::optional<std::vector<std::string>> classes;  // null: the sorted class folders of train
};

class AudioFolder : public data::DataModule {
 public:
  AudioFolder(AudioFolderOptions o, AudioPipelineOptions pipeline)
      : o_(std::move(o)),
        pipeline_(std::make_shared<AudioPipeline>(std::move(pipeline))),
        loader_(o_.loader()) {
    loader_.collate = [](std::vector<data::Example>& examples) {
      return data::PadCollate(examples, 0);
    };
  }

  absl::Status PrepareData() override { return LoadClassNames(); }

  absl::Status Setup(data::Stage stage) override {
    KILN_RETURN_IF_ERROR(PrepareRawInputs());
    if ((stage == data::Stage::kFit || stage == data::Stage::kValidate) && !train_) {
      KILN_RETURN_IF_ERROR(LoadTrain());
      if (o_.val.value_or("").empty()) {
        auto [train_idx, val_idx] = data::RandomSplit(static_cast<int64_t>(train_entries_->size()),
                                                      o_.val_fraction, o_.split_seed);
        train_ = Make(Pick(*train_entries_, train_idx), true);
        if (!val_idx.empty()) val_ = Make(Pick(*train_entries_, val_idx), false);
      } else {
        train_ = Make(*train_entries_, true);
        KILN_ASSIGN_OR_RETURN(auto val, Labelled(*o_.val));
        val_ = Make(std::move(val), false);
      }
    }
    if (stage == data::Stage::kTest && !test_ && !o_.test.value_or("").empty()) {
      KILN_ASSIGN_OR_RETURN(auto test, Labelled(*o_.test));
      test_ = Make(std::move(test), false);
    }
    if (stage == data::Stage::kPredict && !predict_) {
      std::string path = o_.predict.value_or("").empty() ? o_.test.value_or("") : *o_.predict;
      if (path.empty()) {
        return absl::FailedPreconditionError(
            "nothing to predict: set data.predict=PATH (an audio file or a folder)");
      }
      KILN_ASSIGN_OR_RETURN(auto entries, Unlabelled(path));
      predict_ = Make(std::move(entries), false);
    }
    return absl::OkStatus();
  }

  // The class names and global feature statistics; a raw input is an audio file's bytes.
  absl::Status PrepareRawInputs() override {
    KILN_RETURN_IF_ERROR(LoadClassNames());
    if (pipeline_->needs_global_stats()) {
      KILN_RETURN_IF_ERROR(LoadTrain());
      std::vector<AudioSource> paths;
      for (const auto& e : *train_entries_) paths.push_back(e.source());
      KILN_RETURN_IF_ERROR(pipeline_->FitGlobalStats(paths));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<data::Example> RawExample(std::string_view raw) const override {
    KILN_ASSIGN_OR_RETURN(torch::Tensor features, pipeline_->FeaturesOfBytes(raw));
    return data::Example{features, torch::tensor(int64_t{-1})};
  }

  std::shared_ptr<const data::Dataset> train_dataset() const override { return train_; }
  std::shared_ptr<const data::Dataset> val_dataset() const override { return val_; }
  std::shared_ptr<const data::Dataset> test_dataset() const override { return test_; }
  std::shared_ptr<const data::Dataset> predict_dataset() const override { return predict_; }
  std::vector<std::string> class_names() const override { return names_; }
  data::LoaderOptions loader_options() const override { return loader_; }

 private:
  absl::Status LoadClassNames() {
    if (!names_.empty()) return absl::OkStatus();
    if (o_.classes && !o_.classes->empty()) {
      names_ = *o_.classes;
      return absl::OkStatus();
    }
    if (data::shards::LooksLikeShardSpec(o_.train)) {
      KILN_ASSIGN_OR_RETURN(data::shards::ShardSet set,
                            data::shards::OpenShardSet(o_.train, "data.train"));
      names_ = set.classes;
      if (names_.size() < 2) {
        return absl::InvalidArgumentError(
            absl::StrCat(o_.train,
                         ": the shards name no classes (an index written by kiln shard does); set "
                         "data.classes"));
      }
      return absl::OkStatus();
    }
    std::error_code error;
    if (!fs::is_directory(o_.train, error))
      return absl::NotFoundError(absl::StrCat(o_.train, ": no such folder (data.train)"));
    for (const auto& entry : fs::directory_iterator(o_.train, error)) {
      if (entry.is_directory()) names_.push_back(entry.path().filename().string());
    }
    std::sort(names_.begin(), names_.end());
    if (names_.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          o_.train, ": needs at least 2 class folders (TRAIN/CLASS/*.wav), found ", names_.size()));
    }
    return absl::OkStatus();
  }

  absl::Status LoadTrain() {
    if (train_entries_) return absl::OkStatus();
    KILN_ASSIGN_OR_RETURN(auto entries, Labelled(o_.train));
    train_entries_ = std::make_shared<const std::vector<AudioEntry>>(std::move(entries));
    return absl::OkStatus();
  }

  // Every audio file of every class folder of `root`, labelled, checked.
  absl::StatusOr<std::vector<AudioEntry>> Labelled(const std::string& root) const {
    std::vector<AudioEntry> entries;
    if (data::shards::LooksLikeShardSpec(root)) {
      ShardAudioNeeds needs;
      needs.classes = static_cast<int64_t>(names_.size());
      KILN_ASSIGN_OR_RETURN(entries, ReadShardAudio(root, needs));
      return CheckEntries(std::move(entries), pipeline_->options().sample_rate,
                          o_.on_error_policy(), absl::StrCat("shards ", root));
    }
    for (size_t c = 0; c < names_.size(); ++c) {
      fs::path dir = fs::path(root) / names_[c];
      std::error_code error;
      if (!fs::is_directory(dir, error)) {
        return absl::NotFoundError(absl::StrCat(
            dir.string(), ": no such class folder (the classes are those of ",
            (!o_.classes || o_.classes->empty()) ? "data.train" : "data.classes", ")"));
      }
      KILN_ASSIGN_OR_RETURN(std::vector<std::string> paths, AudioFilesAt(dir.string()));
      if (paths.empty())
        return absl::NotFoundError(
            absl::StrCat(dir.string(), ": no audio files (.wav, .flac, .ogg)"));
      for (auto& path : paths) {
        AudioEntry e;
        e.path = e.where = std::move(path);
        e.label = static_cast<int64_t>(c);
        entries.push_back(std::move(e));
      }
    }
    return CheckEntries(std::move(entries), pipeline_->options().sample_rate, o_.on_error_policy(),
                        absl::StrCat("folder ", root));
  }

  // The audio file `path`, or every audio file below the folder `path`; a file inside a class
  // folder carries its label, the others -1.
  absl::StatusOr<std::vector<AudioEntry>> Unlabelled(const std::string& path) const {
    if (data::shards::LooksLikeShardSpec(path)) {
      ShardAudioNeeds needs;
      needs.classes = static_cast<int64_t>(names_.size());
      needs.label_optional = true;
      KILN_ASSIGN_OR_RETURN(std::vector<AudioEntry> entries, ReadShardAudio(path, needs));
      return CheckEntries(std::move(entries), pipeline_->options().sample_rate,
                          o_.on_error_policy(), path);
    }
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> paths, AudioFilesAt(path));
    if (paths.empty())
      return absl::NotFoundError(absl::StrCat(path, ": no audio files (.wav, .flac, .ogg)"));
    std::vector<AudioEntry> entries;
    for (auto& p : paths) {
      AudioEntry e;
      std::string parent = fs::path(p).parent_path().filename().string();
      auto it = std::find(names_.begin(), names_.end(), parent);
      e.label = it == names_.end() ? -1 : it - names_.begin();
      e.path = e.where = std::move(p);
      entries.push_back(std::move(e));
    }
    return CheckEntries(std::move(entries), pipeline_->options().sample_rate, o_.on_error_policy(),
                        path);
  }

  static std::vector<AudioEntry> Pick(const std::vector<AudioEntry>& all,
                                      const std::vector<int64_t>& indices) {
    std::vector<AudioEntry> out;
    out.reserve(indices.size());
    for (int64_t i : indices) out.push_back(all[static_cast<size_t>(i)]);
    return out;
  }

  std::shared_ptr<const data::Dataset> Make(std::vector<AudioEntry> entries, bool augment) const {
    return std::make_shared<AudioDataset>(
        std::make_shared<const std::vector<AudioEntry>>(std::move(entries)), pipeline_, augment);
  }

  AudioFolderOptions o_;
  std::shared_ptr<AudioPipeline> pipeline_;
  data::LoaderOptions loader_;
  std::vector<std::string> names_;
  std::shared_ptr<const std::vector<AudioEntry>> train_entries_;
  std::shared_ptr<const data::Dataset> train_, val_, test_, predict_;
};

KILN_REGISTER_BOUND(
    data::DataModule, "audio_folder",
    "Audio classification (keyword spotting): ROOT/CLASS/*.{wav,flac,ogg}, features per utterance",
    AddAudioDataOptions(
        AudioSplitsBinding<AudioFolderOptions>(
            "folder of class folders (TRAIN/CLASS/*.wav), or shards (KEY.wav + KEY.cls)",
            "folder of the same class folders or shards (null: split from train)",
            "folder of the same class folders or shards (null: no test split)",
            "an audio file, a folder of them or shards to label (null: the test folder)")
            .Field("classes", &AudioFolderOptions::classes,
                   "class names in index order (null: the sorted class folders of train, or the "
                   "classes in its shards' index)")
            .Field("val_fraction",
                   static_cast<double AudioFolderOptions::*>(&AudioFolderOptions::val_fraction),
                   "share of train held out for validation when val is null", InHalfOpenRange(0, 1))
            .Field("split_seed",
                   static_cast<int64_t AudioFolderOptions::*>(&AudioFolderOptions::split_seed),
                   "seed of that split")),
    [](const AudioFolderOptions& o,
       const OptionContext& context) -> absl::StatusOr<std::shared_ptr<data::DataModule>> {
      KILN_ASSIGN_OR_RETURN(AudioPipelineOptions pipeline, BuildAudioPipeline(o, context));
      return std::make_shared<AudioFolder>(o, std::move(pipeline));
    });

}  // namespace
}  // namespace kiln::audio
