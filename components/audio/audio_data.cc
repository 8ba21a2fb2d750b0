#include "components/audio/audio_data.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "components/audio/audio_file.h"
#include "lib/base/status_macros.h"
#include "lib/data/shards/shard_set.h"
#include "lib/data/shards/tar_shard.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"

namespace kiln::audio {

namespace fs = std::filesystem;

absl::StatusOr<torch::Tensor> AudioPipeline::Waveform(const AudioSource& source,
                                                      data::SampleRng& rng, bool augment) const {
  KILN_ASSIGN_OR_RETURN(torch::Tensor wave,
                        LoadMono(source.path, o_.sample_rate, source.bytes.get()));
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

absl::StatusOr<torch::Tensor> AudioPipeline::Features(const AudioSource& source,
                                                      data::SampleRng& rng, bool augment) const {
  KILN_ASSIGN_OR_RETURN(torch::Tensor wave, Waveform(source, rng, augment));
  torch::Tensor features = o_.features->Compute(wave);
  switch (o_.normalize) {
    case Normalization::kUtterance: features = NormalizeUtterance(features); break;
    case Normalization::kGlobal:
      if (mean_.defined()) features = (features - mean_) / std_;
      break;
    case Normalization::kNone: break;
  }
  if (augment && !o_.feature_transforms.empty())
    features = o_.feature_transforms.Apply(features, rng);
  return features;
}

absl::StatusOr<torch::Tensor> AudioPipeline::FeaturesOfBytes(std::string_view bytes) const {
  // Decoded from memory (libsndfile's virtual I/O), named by the format its magic number says.
  const char* suffix = nullptr;
  if (bytes.substr(0, 4) == "RIFF" && bytes.substr(8, 4) == "WAVE") suffix = ".wav";
  if (bytes.substr(0, 4) == "fLaC") suffix = ".flac";
  if (bytes.substr(0, 4) == "OggS") suffix = ".ogg";
  if (suffix == nullptr)
    return absl::InvalidArgumentError("the audio is not a WAV, FLAC or Ogg file");
  const std::string name = absl::StrCat("the audio", suffix);
  data::SampleRng rng(0, 0, 0);
  auto features = Features(AudioSource(name, std::make_shared<const std::string>(bytes)), rng,
                           /*augment=*/false);
  if (!features.ok()) {
    std::string message(features.status().message());
    if (absl::StartsWith(message, name))
      message = absl::StrCat("the audio", message.substr(name.size()));
    return absl::Status(features.status().code(), message);
  }
  return features;
}

absl::Status AudioPipeline::FitGlobalStats(const std::vector<AudioSource>& paths) {
  if (paths.empty())
    return absl::FailedPreconditionError("global feature normalization needs training files");
  const size_t n = std::min<size_t>(
      paths.size(), static_cast<size_t>(std::max<int64_t>(o_.global_stats_files, 1)));
  torch::Tensor sum, sum_sq;
  int64_t frames = 0;
  data::SampleRng rng(0, 0, 0);
  for (size_t i = 0; i < n; ++i) {
    KILN_ASSIGN_OR_RETURN(torch::Tensor wave, Waveform(paths[i * paths.size() / n], rng, false));
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
  KILN_ASSIGN_OR_RETURN(e.input, pipeline_->Features(entry.source(), rng, augment_));
  if (token_targets_) {
    e.target = torch::tensor(entry.tokens, torch::kInt64).reshape({-1});
  } else {
    e.target = torch::tensor(entry.label, torch::kInt64);
  }
  return e;
}

absl::StatusOr<data::EncodedSample> AudioDataset::Encoded(int64_t index) const {
  const AudioEntry& entry = entries_->at(static_cast<size_t>(index));
  std::string ext = absl::AsciiStrToLower(fs::path(entry.path).extension().string());
  data::EncodedSample files;
  if (entry.bytes != nullptr) {
    files.emplace_back(ext.substr(1), *entry.bytes);
  } else {
    std::ifstream in(entry.path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(entry.path, ": cannot open audio file"));
    files.emplace_back(ext.substr(1), std::string((std::istreambuf_iterator<char>(in)),
                                                  std::istreambuf_iterator<char>()));
  }
  if (token_targets_ || !entry.text.empty()) files.emplace_back("txt", entry.text);
  if (entry.label >= 0) files.emplace_back("cls", std::to_string(entry.label));
  return files;
}

int64_t AudioDataset::Length(int64_t index) const {
  return std::llround(entries_->at(static_cast<size_t>(index)).duration * 1000.0);
}

absl::StatusOr<std::vector<AudioEntry>> ReadShardAudio(const std::string& spec,
                                                       const ShardAudioNeeds& needs) {
  std::vector<AudioEntry> entries;
  KILN_RETURN_IF_ERROR(data::shards::ForEachShardSample(
      spec, [&](data::shards::ShardSample& sample, const std::string& where) -> absl::Status {
        AudioEntry e;
        e.where = where;
        for (const char* ext : {"wav", "flac", "ogg"}) {
          if (std::string* bytes = sample.Find(ext)) {
            e.path = absl::StrCat(where, ".", ext);
            e.bytes = std::make_shared<const std::string>(std::move(*bytes));
            break;
          }
        }
        if (e.bytes == nullptr)
          return absl::InvalidArgumentError(
              absl::StrCat(where, " has no audio (.wav, .flac or .ogg)"));
        if (const std::string* text = sample.Find("txt")) {
          e.text = *text;
        } else if (needs.text) {
          return absl::InvalidArgumentError(absl::StrCat(where, " has no transcript (.txt)"));
        }
        if (needs.classes > 0) {
          const std::string* cls = sample.Find("cls");
          if (cls == nullptr && !needs.label_optional) {
            return absl::InvalidArgumentError(absl::StrCat(where, " has no class (.cls)"));
          }
          if (cls != nullptr && (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*cls), &e.label) ||
                                 e.label < 0 || e.label >= needs.classes)) {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ".cls: '", absl::StripAsciiWhitespace(*cls).substr(0, 40),
                             "' is not a class index in [0, ", needs.classes, ")"));
          }
        }
        entries.push_back(std::move(e));
        return absl::OkStatus();
      }));
  if (entries.empty()) return absl::InvalidArgumentError(absl::StrCat(spec, ": no utterances"));
  return entries;
}

absl::StatusOr<std::vector<AudioEntry>> CheckEntries(std::vector<AudioEntry> entries,
                                                     int64_t sample_rate, OnError on_error,
                                                     const std::string& what) {
  std::vector<absl::Status> status(entries.size());
  tbb::parallel_for(size_t{0}, entries.size(), [&](size_t i) {
    AudioEntry& entry = entries[i];
    absl::Status s = CheckAudioExtension(entry.path);
    if (s.ok()) {
      auto info = entry.bytes != nullptr ? ReadAudioInfoBytes(*entry.bytes, entry.path)
                                         : ReadAudioInfo(entry.path);
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

absl::StatusOr<AudioPipelineOptions> BuildAudioPipeline(const AudioDataOptions& o,
                                                        const OptionContext& context) {
  AudioPipelineOptions pipeline;
  pipeline.sample_rate = o.sample_rate;
  pipeline.clip_seconds = o.clip_seconds;
  pipeline.global_stats_files = o.global_stats_files;
  pipeline.normalize = o.normalize == "global" ? Normalization::kGlobal
                       : o.normalize == "none" ? Normalization::kNone
                                               : Normalization::kUtterance;
  KILN_ASSIGN_OR_RETURN(pipeline.features,
                        Registry<FeatureExtractor>::Get().Instantiate(o.features));
  if (pipeline.features->sample_rate() != o.sample_rate) {
    return context.Refuse(
        "sample_rate",
        absl::StrCat("the rate the features work at (", pipeline.features->sample_rate(),
                     " Hz; set features.sample_rate: ${..sample_rate})"));
  }
  KILN_ASSIGN_OR_RETURN(pipeline.waveform_transforms,
                        data::TransformPipeline::FromList(o.waveform_transforms));
  KILN_ASSIGN_OR_RETURN(pipeline.feature_transforms,
                        data::TransformPipeline::FromList(o.feature_transforms));
  return pipeline;
}

}  // namespace kiln::audio
