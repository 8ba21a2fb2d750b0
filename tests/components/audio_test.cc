// components/audio: reading and writing audio, resampling (a sine keeps its frequency), the mel
// filterbank and log-mel features against reference values computed in Python (torchaudio's
// melscale_fbanks formula), augmentation (shift, SNR, speed, SpecAugment), padding collation of
// features, the audio data modules (folder per class, JSONL manifest) with their bad-input errors
// and skips, and the DS-CNN's shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "components/audio/audio_data.h"
#include "components/audio/audio_file.h"
#include "components/audio/augment.h"
#include "components/audio/features.h"
#include "components/models/model.h"
#include "lib/data/datamodule.h"
#include "lib/data/padding.h"
#include "tests/components/instantiate.h"
#include "tests/support/process.h"

namespace kiln::audio {
namespace audio_test {

using kiln::testing::InstantiateOk;
using kiln::testing::TempDir;

torch::Tensor Sine(double hz, int64_t rate, double seconds, double amplitude = 0.5) {
  torch::Tensor t =
      torch::arange(static_cast<int64_t>(std::llround(seconds * static_cast<double>(rate))),
                    torch::kFloat64) /
      static_cast<double>(rate);
  return (amplitude * torch::sin(2 * M_PI * hz * t)).to(torch::kFloat32);
}

// The frequency (Hz) of the largest FFT magnitude of `wave` at `rate`.
double PeakHz(const torch::Tensor& wave, int64_t rate) {
  torch::Tensor magnitude = torch::fft::rfft(wave.to(torch::kFloat64)).abs();
  return magnitude.argmax().item<double>() * static_cast<double>(rate) /
         static_cast<double>(wave.size(0));
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(AudioFile, WavRoundTripAndMonoDownmix) {
  TempDir dir;
  std::string path = dir.path() + "/stereo.wav";
  torch::Tensor left = Sine(440, 8000, 0.5), right = torch::zeros_like(left);
  ASSERT_TRUE(WriteWav(path, torch::stack({left, right}), 8000).ok());
  auto info = ReadAudioInfo(path);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->frames, 4000);
  EXPECT_EQ(info->channels, 2);
  EXPECT_EQ(info->sample_rate, 8000);
  EXPECT_DOUBLE_EQ(info->seconds(), 0.5);
  auto wave = ReadAudio(path);
  ASSERT_TRUE(wave.ok()) << wave.status();
  EXPECT_EQ(wave->samples.sizes(), (std::vector<int64_t>{2, 4000}));
  EXPECT_LT((wave->samples[0] - left).abs().max().item<double>(),
            1.0 / 32768 + 1e-6);  // 16-bit PCM
  torch::Tensor mono = ToMono(wave->samples);
  EXPECT_LT((mono - left / 2).abs().max().item<double>(), 1.0 / 32768 + 1e-6);
}

TEST(AudioFile, ResampledSineKeepsItsFrequency) {
  auto down = Resample(Sine(1000, 22050, 1.0), 22050, 16000);
  ASSERT_TRUE(down.ok()) << down.status();
  EXPECT_EQ(down->size(0), 16000);
  EXPECT_NEAR(PeakHz(*down, 16000), 1000.0, 1.0);
  auto up = Resample(Sine(440, 8000, 1.0), 8000, 16000);
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(up->size(0), 16000);
  EXPECT_NEAR(PeakHz(*up, 16000), 440.0, 1.0);
  // The amplitude survives (away from the edges), and nothing appears above the old Nyquist.
  EXPECT_NEAR(up->narrow(0, 1000, 14000).abs().max().item<double>(), 0.5, 0.01);
  torch::Tensor spectrum = torch::fft::rfft(up->to(torch::kFloat64)).abs();
  EXPECT_LT(spectrum.narrow(0, 4100, 3900).max().item<double>(),
            1e-3 * spectrum.max().item<double>());
}

TEST(AudioFile, LoadMonoResamplesAFileToTheAskedRate) {
  TempDir dir;
  std::string path = dir.path() + "/a.wav";
  ASSERT_TRUE(WriteWav(path, Sine(1000, 22050, 0.5), 22050).ok());
  auto wave = LoadMono(path, 16000);
  ASSERT_TRUE(wave.ok()) << wave.status();
  EXPECT_EQ(wave->dim(), 1);
  EXPECT_EQ(wave->size(0), 8000);
  EXPECT_NEAR(PeakHz(*wave, 16000), 1000.0, 2.0);
}

TEST(AudioFile, BadFilesAreErrorsNamingTheFile) {
  TempDir dir;
  dir.Write("empty.wav", "");
  dir.Write("text.wav", "this is not a RIFF file at all, just some words\n");
  dir.Write("song.mp3", "ID3");
  std::string tiny = dir.path() + "/tiny_rate.wav";
  ASSERT_TRUE(WriteWav(tiny, torch::zeros({100}), 8).ok());
  std::string header_only = dir.path() + "/header_only.wav";
  ASSERT_TRUE(WriteWav(header_only, torch::zeros({0}), 16000).ok());

  auto empty = LoadMono(dir.path() + "/empty.wav", 16000);
  EXPECT_EQ(Message(empty.status()), dir.path() + "/empty.wav: empty file (0 bytes), not audio");
  auto text = LoadMono(dir.path() + "/text.wav", 16000);
  EXPECT_EQ(Message(text.status()).rfind(dir.path() + "/text.wav: cannot read audio: ", 0), 0u)
      << text.status();
  auto mp3 = LoadMono(dir.path() + "/song.mp3", 16000);
  EXPECT_EQ(
      Message(mp3.status()),
      dir.path() + "/song.mp3: unsupported audio format '.mp3' (kiln reads .wav, .flac and .ogg)");
  auto rate = LoadMono(tiny, 16000);
  EXPECT_EQ(Message(rate.status()),
            tiny + ": cannot resample 8 Hz to 16000 Hz: the ratio is beyond 1:256");
  auto no_samples = LoadMono(header_only, 16000);
  EXPECT_EQ(Message(no_samples.status()), header_only + ": no audio samples (empty recording)");
  EXPECT_FALSE(CheckResampleRates(16000, 0).ok());
  EXPECT_TRUE(CheckResampleRates(22050, 16000).ok());
}

TEST(Features, MelFilterbankMatchesTorchaudiosFormula) {
  // Reference: torchaudio.functional.melscale_fbanks(257, 20, 8000, 40, 16000) (htk, norm=None),
  // computed in Python.
  torch::Tensor fb = MelFilterbank(257, 20, 8000, 40, 16000);
  ASSERT_EQ(fb.sizes(), (std::vector<int64_t>{257, 40}));
  EXPECT_NEAR(fb[3][0].item<double>(), 0.4027500310177903, 1e-6);
  EXPECT_NEAR(fb[10][5].item<double>(), 0.6022865483607412, 1e-6);
  EXPECT_NEAR(fb[200][37].item<double>(), 0.2983722401261244, 1e-6);
  EXPECT_EQ(fb[50][20].item<double>(), 0.0);
  torch::Tensor sums = fb.sum(0);
  EXPECT_NEAR(sums[0].item<double>(), 1.594123, 1e-5);
  EXPECT_NEAR(sums[10].item<double>(), 2.701296, 1e-5);
  EXPECT_NEAR(sums[39].item<double>(), 15.920731, 1e-4);
  std::vector<int64_t> peaks = {2,   4,   5,   7,   9,   11,  13,  15,  17,  20,  23,  25, 28, 32,
                                35,  39,  42,  46,  51,  55,  60,  65,  71,  77,  83,  89, 97, 104,
                                112, 120, 129, 139, 149, 160, 171, 183, 196, 210, 224, 240};
  torch::Tensor argmax = fb.argmax(0);
  for (int64_t m = 0; m < 40; ++m)
    EXPECT_EQ(argmax[m].item<int64_t>(), peaks[static_cast<size_t>(m)]) << m;
  EXPECT_NEAR(MelToHz(HzToMel(1234.5)), 1234.5, 1e-9);
}

TEST(Features, LogMelOfASinePeaksInItsBandAsInPython) {
  SpectrogramOptions o;  // 16 kHz, n_fft 512, window 400, hop 160, 40 mels from 20 Hz
  LogMel log_mel(o);
  torch::Tensor features = log_mel.Compute(Sine(1000, 16000, 1.0));
  ASSERT_EQ(features.sizes(), (std::vector<int64_t>{101, 40}));
  EXPECT_EQ(log_mel.num_frames(16000), 101);
  // Reference (torch.stft + the filterbank above, in Python): frame 50 peaks in mel 13 at 8.2282.
  EXPECT_EQ(features[50].argmax().item<int64_t>(), 13);
  EXPECT_NEAR(features[50].max().item<double>(), 8.228239, 1e-3);
}

TEST(Features, MfccIsAnOrthonormalDctOfLogMel) {
  torch::Tensor dct = DctMatrix(40, 40);
  EXPECT_TRUE(torch::allclose(dct.t().matmul(dct), torch::eye(40), 1e-5, 1e-5));
  SpectrogramOptions o;
  Mfcc mfcc(o, 13);
  LogMel log_mel(o);
  torch::Tensor wave = Sine(700, 16000, 0.3);
  torch::Tensor c = mfcc.Compute(wave);
  ASSERT_EQ(c.sizes(), (std::vector<int64_t>{31, 13}));  // 1 + 4800 / 160 frames
  // c0 is the mean log-mel energy times sqrt(n_mels).
  EXPECT_NEAR(c[10][0].item<double>(),
              log_mel.Compute(wave)[10].mean().item<double>() * std::sqrt(40.0), 1e-3);
}

TEST(Features, UtteranceNormalizationGivesZeroMeanUnitVariance) {
  torch::Tensor f = torch::randn({50, 8}) * 3 + 7;
  torch::Tensor n = NormalizeUtterance(f);
  EXPECT_LT(n.mean(0).abs().max().item<double>(), 1e-5);
  EXPECT_NEAR(n.std(0, false).mean().item<double>(), 1.0, 1e-3);
}

TEST(Augment, ShiftMovesSamplesAndFillsWithZeros) {
  torch::Tensor w = torch::arange(1, 6, torch::kFloat32);  // 1 2 3 4 5
  EXPECT_TRUE(torch::equal(Shift(w, 2), torch::tensor({0.f, 0.f, 1.f, 2.f, 3.f})));
  EXPECT_TRUE(torch::equal(Shift(w, -1), torch::tensor({2.f, 3.f, 4.f, 5.f, 0.f})));
  EXPECT_TRUE(torch::equal(Shift(w, 9), torch::zeros({5})));
}

TEST(Augment, NoiseIsMixedAtTheAskedSnr) {
  torch::Tensor wave = Sine(300, 16000, 1.0);
  torch::Tensor noise = torch::randn({4000});  // shorter: repeated
  for (double snr : {0.0, 10.0, 25.0}) {
    torch::Tensor mixed = MixAtSnr(wave, noise, snr);
    double measured = 10 * std::log10(wave.pow(2).mean().item<double>() /
                                      (mixed - wave).pow(2).mean().item<double>());
    EXPECT_NEAR(measured, snr, 0.01);
  }
  EXPECT_TRUE(torch::equal(MixAtSnr(torch::zeros({10}), noise, 10), torch::zeros({10})));
}

TEST(Augment, RegisteredTransformsAreReproducibleFromTheSampleRng) {
  auto speed =
      InstantiateOk<data::Transform>("_target_: speed_perturb\nrange: [1.25, 1.25]\n", "t");
  ASSERT_TRUE(speed);
  data::SampleRng rng(1, 0, 0);
  torch::Tensor fast = speed->Apply(Sine(400, 16000, 1.0), rng);
  EXPECT_EQ(fast.size(0), 12800);  // 1 s played 1.25x faster
  EXPECT_NEAR(PeakHz(fast, 16000), 500.0, 2.0);

  auto shift = InstantiateOk<data::Transform>("_target_: time_shift\nmax_seconds: 0.01\n", "t");
  data::SampleRng a(7, 2, 3), b(7, 2, 3);
  torch::Tensor w = Sine(100, 16000, 0.1);
  EXPECT_TRUE(torch::equal(shift->Apply(w, a), shift->Apply(w, b)));

  auto noise =
      InstantiateOk<data::Transform>("_target_: add_noise\nsnr_db: [20, 20]\np: 1.0\n", "t");
  data::SampleRng c(3, 0, 0);
  torch::Tensor noisy = noise->Apply(w, c);
  double snr =
      10 * std::log10(w.pow(2).mean().item<double>() / (noisy - w).pow(2).mean().item<double>());
  EXPECT_NEAR(snr, 20.0, 0.01);

  auto bad = kiln::testing::Instantiate<data::Transform>(
      "_target_: speed_perturb\nrange: [0.1, 1.0]\n", "t");
  EXPECT_FALSE(bad.ok());
}

TEST(Augment, SpecAugmentMasksBandsAndSpansWithinTheirWidths) {
  SpecAugmentOptions o;
  o.freq_masks = 1;
  o.freq_width = 5;
  o.time_masks = 1;
  o.time_width = 10;
  o.value = -100;
  torch::Tensor features = torch::zeros({100, 40});
  int64_t masked_somewhere = 0;
  for (int64_t i = 0; i < 20; ++i) {
    data::SampleRng rng(5, 0, i);
    torch::Tensor out = SpecAugment(features, o, rng);
    torch::Tensor masked = out.eq(-100);
    int64_t full_columns =
        masked.all(0).sum().item<int64_t>();                  // frequency bands masked everywhere
    int64_t full_rows = masked.all(1).sum().item<int64_t>();  // frames masked entirely
    EXPECT_LE(full_columns, 5);
    EXPECT_LE(full_rows, 10);
    masked_somewhere += masked.any().item<bool>();
    data::SampleRng again(5, 0, i);
    EXPECT_TRUE(torch::equal(SpecAugment(features, o, again), out));
  }
  EXPECT_GT(masked_somewhere, 10);
  EXPECT_TRUE(torch::equal(features, torch::zeros({100, 40})));  // the input is left alone
}

TEST(Collate, PadsFeatureSequencesWithLengthsAndMask) {
  std::vector<data::Example> examples = {{torch::ones({3, 2}), torch::tensor(int64_t{1})},
                                         {torch::full({5, 2}, 2.0), torch::tensor(int64_t{0})}};
  auto batch = data::PadCollate(examples, 0);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->input.sizes(), (std::vector<int64_t>{2, 5, 2}));
  EXPECT_EQ(batch->input.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(batch->lengths, torch::tensor({int64_t{3}, int64_t{5}})));
  EXPECT_EQ(batch->input[0].sum().item<double>(), 6.0);
  EXPECT_EQ(batch->mask.sum().item<int64_t>(), 8);
  std::vector<data::Example> mismatched = {{torch::ones({3, 2}), torch::tensor(int64_t{1})},
                                           {torch::ones({3, 4}), torch::tensor(int64_t{1})}};
  EXPECT_FALSE(data::PadCollate(mismatched, 0).ok());
}

// A tiny keyword folder: CLASS/N.wav, one sine frequency per class.
void WriteClasses(const TempDir& dir, const std::string& split, int per_class) {
  std::vector<std::pair<std::string, double>> classes = {{"go", 500}, {"stop", 1500}};
  for (const auto& [name, hz] : classes) {
    std::filesystem::create_directories(dir.path() + "/" + split + "/" + name);
    for (int i = 0; i < per_class; ++i) {
      std::string path = dir.path() + "/" + split + "/" + name + "/" + std::to_string(i) + ".wav";
      ASSERT_TRUE(WriteWav(path, Sine(hz + 10 * i, 22050, 0.8), 22050).ok());
    }
  }
}

std::string FolderYaml(const TempDir& dir, const std::string& extra) {
  return "_target_: audio_folder\ntrain: " + dir.path() + "/train\ntest: " + dir.path() +
         "/test\nval_fraction: 0.25\nbatch_size: 4\nfeatures: {_target_: log_mel, n_mels: 20}\n" +
         extra;
}

TEST(AudioFolder, LoadsFixedLengthFeaturesWithClassIndices) {
  TempDir dir;
  WriteClasses(dir, "train", 4);
  WriteClasses(dir, "test", 1);
  auto dm = InstantiateOk<data::DataModule>(FolderYaml(dir, ""), "data");
  ASSERT_TRUE(dm);
  ASSERT_TRUE(dm->Setup(data::Stage::kFit).ok());
  EXPECT_EQ(dm->class_names(), (std::vector<std::string>{"go", "stop"}));
  EXPECT_EQ(dm->train_dataset()->size(), 6);
  EXPECT_EQ(dm->val_dataset()->size(), 2);
  ASSERT_TRUE(dm->Setup(data::Stage::kTest).ok());
  ASSERT_EQ(dm->test_dataset()->size(), 2);
  data::SampleRng rng(0, 0, 0);
  auto example = dm->test_dataset()->Get(1, rng);
  ASSERT_TRUE(example.ok()) << example.status();
  EXPECT_EQ(example->input.sizes(), (std::vector<int64_t>{101, 20}));  // 0.8 s padded to 1 s
  EXPECT_EQ(example->target.item<int64_t>(), 1);
  EXPECT_EQ(dm->test_dataset()->Source(1), dir.path() + "/test/stop/0.wav");
  EXPECT_LT(example->input.mean(0).abs().max().item<double>(),
            1e-4);  // per-utterance normalization
}

TEST(AudioFolder, GlobalNormalizationUsesTrainingStatistics) {
  TempDir dir;
  WriteClasses(dir, "train", 4);
  WriteClasses(dir, "test", 1);
  auto dm = InstantiateOk<data::DataModule>(FolderYaml(dir, "normalize: global\n"), "data");
  ASSERT_TRUE(dm->Setup(data::Stage::kTest).ok());
  data::SampleRng rng(0, 0, 0);
  auto a = dm->test_dataset()->Get(0, rng);
  ASSERT_TRUE(a.ok());
  // Not per utterance: one clip's own mean is not zero in every band, but the values are scaled.
  EXPECT_GT(a->input.mean(0).abs().max().item<double>(), 0.1);
  EXPECT_LT(a->input.abs().max().item<double>(), 50.0);
}

TEST(AudioFolder, BadFileFailsNamingItOrIsSkippedWithACount) {
  TempDir dir;
  WriteClasses(dir, "train", 4);
  dir.Write("train/go/broken.wav", "RIFF....WAVEfmt garbage");
  dir.Write("train/stop/notes.txt", "not audio, ignored");
  auto dm = InstantiateOk<data::DataModule>(FolderYaml(dir, ""), "data");
  absl::Status fail = dm->Setup(data::Stage::kFit);
  EXPECT_EQ(Message(fail).rfind(dir.path() + "/train/go/broken.wav: cannot read audio: ", 0), 0u)
      << fail;
  EXPECT_NE(Message(fail).find("data.on_error=skip"), std::string::npos);
  auto skip = InstantiateOk<data::DataModule>(FolderYaml(dir, "on_error: skip\n"), "data");
  ASSERT_TRUE(skip->Setup(data::Stage::kFit).ok());
  EXPECT_EQ(skip->train_dataset()->size() + skip->val_dataset()->size(), 8);
}

// train.jsonl in `dir`: clips/0..7.wav of 0.2, 0.3, ... 0.9 s, "go down" or "go up"; clip 3's
// line has no duration field.
void WriteEightUtterances(TempDir& dir) {
  std::string lines;
  for (int i = 0; i < 8; ++i) {
    std::string name = "clips/" + std::to_string(i) + ".wav";
    std::filesystem::create_directories(dir.path() + "/clips");
    double seconds = 0.2 + 0.1 * i;
    ASSERT_TRUE(WriteWav(dir.path() + "/" + name, Sine(400, 16000, seconds), 16000).ok());
    lines += "{\"audio\": \"" + name + "\", \"text\": \"go " + std::string(i % 2 ? "up" : "down") +
             "\"" + (i == 3 ? std::string() : ", \"duration\": " + std::to_string(seconds)) + "}\n";
  }
  dir.Write("train.jsonl", lines);
}

TEST(AudioManifest, SortaGradWithoutBucketingSortsOnlyTheFirstEpochs) {
  TempDir dir;
  WriteEightUtterances(dir);
  auto make = [&](const std::string& extra) {
    return InstantiateOk<data::DataModule>(
        "_target_: audio_manifest\ntrain: " + dir.path() +
            "/train.jsonl\nval_fraction: 0.0\nbatch_size: 4\nbucket_by_length: false\n"
            "tokenizer: {_target_: char}\nfeatures: {_target_: log_mel, n_mels: 20}\n" +
            extra,
        "data");
  };
  auto dm = make("sortagrad_epochs: 2\n");
  ASSERT_TRUE(dm);
  ASSERT_TRUE(dm->Setup(data::Stage::kFit).ok());
  const data::Dataset& train = *dm->train_dataset();
  auto loader = dm->loader_options();
  ASSERT_TRUE(loader.batch_order);
  const std::vector<int64_t> shuffled = {5, 2, 7, 0, 3, 6, 1, 4};
  for (int64_t epoch : {0, 1}) {
    std::vector<int64_t> order = loader.batch_order(shuffled, epoch, train);
    ASSERT_EQ(order.size(), 8u);
    for (size_t i = 1; i < order.size(); ++i)
      EXPECT_LE(train.Length(order[i - 1]), train.Length(order[i])) << "epoch " << epoch;
  }
  EXPECT_EQ(loader.batch_order(shuffled, 2, train), shuffled);  // then the sampler's order
  // Neither bucketing nor SortaGrad: the sampler's order as it is.
  auto plain = make("");
  ASSERT_TRUE(plain);
  ASSERT_TRUE(plain->Setup(data::Stage::kFit).ok());
  EXPECT_FALSE(plain->loader_options().batch_order);
}

TEST(AudioManifest, ReadsUtterancesAndBucketsByDuration) {
  TempDir dir;
  WriteEightUtterances(dir);
  auto dm = InstantiateOk<data::DataModule>(
      "_target_: audio_manifest\ntrain: " + dir.path() +
          "/train.jsonl\nval_fraction: 0.0\nbatch_size: 4\n"
          "tokenizer: {_target_: char}\nfeatures: {_target_: mfcc, n_mels: 20, n_mfcc: 10}\n",
      "data");
  ASSERT_TRUE(dm);
  ASSERT_TRUE(dm->Setup(data::Stage::kFit).ok());
  const data::Dataset& train = *dm->train_dataset();
  ASSERT_EQ(train.size(), 8);
  // The split shuffles (val_fraction 0 still permutes): find clips by their file.
  auto index_of = [&](int clip) {
    for (int64_t i = 0; i < train.size(); ++i) {
      if (train.Source(i) == dir.path() + "/clips/" + std::to_string(clip) + ".wav") return i;
    }
    return int64_t{-1};
  };
  EXPECT_EQ(train.Length(index_of(3)), 500);  // no duration field: read from the header
  EXPECT_EQ(train.Length(index_of(7)), 900);
  data::SampleRng rng(0, 0, 0);
  auto example = train.Get(index_of(7), rng);
  ASSERT_TRUE(example.ok()) << example.status();
  EXPECT_EQ(example->input.sizes(),
            (std::vector<int64_t>{1 + 14400 / 160, 10}));  // variable length
  EXPECT_EQ(example->target.numel(), 5);                   // "go up", one token per character
  auto loader = dm->loader_options();
  ASSERT_TRUE(loader.batch_order);
  std::vector<int64_t> order = loader.batch_order({0, 1, 2, 3, 4, 5, 6, 7}, 0, train);
  int64_t first_max = 0, first_min = 1 << 30, second_max = 0, second_min = 1 << 30;
  for (size_t i = 0; i < 8; ++i) {
    int64_t length = train.Length(order[i]);
    (i < 4 ? first_max : second_max) = std::max(i < 4 ? first_max : second_max, length);
    (i < 4 ? first_min : second_min) = std::min(i < 4 ? first_min : second_min, length);
  }
  EXPECT_TRUE(first_max < second_min || second_max < first_min);  // the 4 shortest batched together
  std::vector<data::Example> examples;
  for (int clip : {0, 7}) examples.push_back(*train.Get(index_of(clip), rng));
  auto batch = loader.collate(examples);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->input.sizes(), (std::vector<int64_t>{2, 91, 10}));
  EXPECT_EQ(batch->lengths[0].item<int64_t>(), 21);
  EXPECT_EQ(batch->target.sizes(),
            (std::vector<int64_t>{2, 7}));  // "go down" and "go up" padded with 0
  EXPECT_EQ(batch->target[1][6].item<int64_t>(), 0);
}

TEST(AudioManifest, LineWithoutAFieldIsNamedOrSkipped) {
  TempDir dir;
  ASSERT_TRUE(WriteWav(dir.path() + "/a.wav", Sine(400, 16000, 0.3), 16000).ok());
  dir.Write("train.jsonl",
            "{\"audio\": \"a.wav\", \"text\": \"yes\", \"duration\": 0.3}\n{\"text\": \"no\"}\n"
            "{\"audio\": \"a.wav\", \"text\": \"up\"}\n");
  std::string yaml = "_target_: audio_manifest\ntrain: " + dir.path() +
                     "/train.jsonl\nval_fraction: 0.0\ntokenizer: {_target_: char}\nfeatures: "
                     "{_target_: log_mel}\n";
  auto dm = InstantiateOk<data::DataModule>(yaml, "data");
  absl::Status fail = dm->Setup(data::Stage::kFit);
  EXPECT_EQ(Message(fail),
            dir.path() + "/train.jsonl:2: no \"audio\" field (a string: the audio file)");
  auto skip = InstantiateOk<data::DataModule>(yaml + "on_error: skip\n", "data");
  ASSERT_TRUE(skip->Setup(data::Stage::kFit).ok());
  EXPECT_EQ(skip->train_dataset()->size(), 2);
}

TEST(DsCnn, MapsFeaturesToClassLogits) {
  auto model =
      InstantiateOk<Model>("_target_: ds_cnn\nchannels: 16\nblocks: 2\nnum_classes: 12\n", "model");
  ASSERT_TRUE(model);
  torch::Tensor logits = model->forward(torch::randn({4, 101, 40}));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{4, 12}));
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  // conv 10x4 (640) + bn (32) + 2 x (dw 144 + bn 32 + pw 256 + bn 32) + fc (16 * 12 + 12)
  EXPECT_EQ(params, 640 + 32 + 2 * (144 + 32 + 256 + 32) + 16 * 12 + 12);
  auto bad = kiln::testing::Instantiate<Model>("_target_: ds_cnn\nkernel: [3]\nnum_classes: 12\n",
                                               "model");
  EXPECT_FALSE(bad.ok());
}

}  // namespace audio_test
}  // namespace kiln::audio
