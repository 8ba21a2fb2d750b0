// `kiln train/predict experiment=commands_kws` on tiny audio folders the test writes (tone bursts,
// one band per class; no augmentation): the keyword spotter trains, tests (accuracy, confusion
// matrix) and labels WAV files; bad audio (an empty file, a sample rate that cannot be resampled,
// an unsupported format, a manifest line without a field) ends in one line naming what and where
// with a non-zero exit, or is skipped with a count when data.on_error=skip.
#include <gtest/gtest.h>
#include <sndfile.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;

// A 1 s, 16-bit mono WAV at `rate`: a tone burst of `hz` from 0.2 s to 0.6 s (shifted by
// `offset` seconds) in faint noise.
void WriteBurst(const std::string& path, double hz, double offset, int rate = 22050) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::vector<float> samples(static_cast<size_t>(rate));
  uint32_t state = static_cast<uint32_t>(hz * 1000 + offset * 1e6);
  for (size_t i = 0; i < samples.size(); ++i) {
    double t = static_cast<double>(i) / rate;
    state = state * 1664525u + 1013904223u;
    double noise = 0.002 * (static_cast<double>(state >> 8) / (1 << 24) - 0.5);
    bool on = t >= 0.2 + offset && t < 0.6 + offset;
    samples[i] = static_cast<float>((on ? 0.4 * std::sin(2 * M_PI * hz * t) : 0.0) + noise);
  }
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(file, nullptr) << sf_strerror(nullptr);
  sf_writef_float(file, samples.data(), static_cast<sf_count_t>(samples.size()));
  sf_close(file);
}

// The stderr line that says what went wrong ("kiln: error: ...").
std::string ErrorLine(const std::string& err) {
  size_t at = err.find("kiln: error: ");
  return at == std::string::npos ? "" : err.substr(at, err.find('\n', at) - at);
}

class SpeechCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<std::pair<std::string, double>> classes = {{"go", 400}, {"stop", 2500}};
    for (const auto& [name, hz] : classes) {
      for (int i = 0; i < 12; ++i)
        WriteBurst(Path("train/" + name + "/" + std::to_string(i) + ".wav"), hz, 0.02 * i);
      for (int i = 0; i < 3; ++i)
        WriteBurst(Path("val/" + name + "/" + std::to_string(i) + ".wav"), hz, 0.03 * i);
      for (int i = 0; i < 3; ++i)
        WriteBurst(Path("test/" + name + "/" + std::to_string(i) + ".wav"), hz, 0.05 * i);
    }
  }

  std::string Path(const std::string& relative) const { return dir_.path() + "/" + relative; }

  testing::ProcessResult Kws(const std::string& command, std::vector<std::string> extra) {
    std::vector<std::string> argv = {KILN_BINARY,
                                     command,
                                     "experiment=commands_kws",
                                     "data.train=" + Path("train"),
                                     "data.val=" + Path("val"),
                                     "data.test=" + Path("test"),
                                     "data.classes=[go,stop]",
                                     "data.batch_size=8",
                                     "task.num_classes=2",
                                     "task.filler_classes=[]",
                                     "data.waveform_transforms=null",
                                     "data.feature_transforms=null",
                                     "model.channels=16",
                                     "model.blocks=1",
                                     "model.dropout=0.0",
                                     "optimizer.lr=0.01",
                                     "scheduler.warmup_steps=2",
                                     "trainer.max_epochs=12",
                                     "trainer.num_threads=1",
                                     "hydra.run.dir=" + Path("run_" + command)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunProcess(argv);
  }

  TempDir dir_;
};

TEST_F(SpeechCliTest, KeywordSpotterTrainsTestsAndLabelsWavFilesButNotMp3) {
  auto r = Kws("train", {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string metrics = ReadFile(Path("run_train/test_metrics.yaml"));
  EXPECT_NE(metrics.find("test/acc: 1"), std::string::npos) << metrics;  // one band per class
  EXPECT_NE(ReadFile(Path("run_train/test_confusion_matrix.csv"))
                .find("true/predicted,go,stop\ngo,3,0\nstop,0,3\n"),
            std::string::npos);
  WriteBurst(Path("new/a.wav"), 2500, 0.1);
  WriteBurst(Path("new/b.wav"), 400, 0.0, 16000);
  auto p = Kws("predict", {"ckpt_path=" + Path("run_train/checkpoints/last.ckpt"),
                           "data.predict=" + Path("new")});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  std::string csv = ReadFile(Path("run_predict/predictions.csv"));
  EXPECT_NE(csv.find(Path("new/a.wav") + ",1,stop,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(Path("new/b.wav") + ",0,go,"), std::string::npos) << csv;
  dir_.Write("song.mp3", "ID3\x03\x00");
  auto mp3 = Kws("predict", {"ckpt_path=" + Path("run_train/checkpoints/last.ckpt"),
                             "data.predict=" + Path("song.mp3")});
  EXPECT_NE(mp3.exit_code, 0);
  EXPECT_NE(
      ErrorLine(mp3.err).find(
          Path("song.mp3") + ": unsupported audio format '.mp3' (kiln reads .wav, .flac and .ogg)"),
      std::string::npos)
      << mp3.err;
}

TEST_F(SpeechCliTest, EmptyAudioFileIsOneLineOrASkipWithACount) {
  dir_.Write("train/go/empty.wav", "");
  auto r = Kws("train", {"trainer.max_epochs=1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(ErrorLine(r.err).find(Path("train/go/empty.wav") + ": empty file (0 bytes), not audio"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("terminate"), std::string::npos);
  auto skip = Kws("train", {"trainer.max_epochs=1", "test=false", "data.on_error=skip"});
  EXPECT_EQ(skip.exit_code, 0) << skip.err;
  EXPECT_NE(skip.err.find("skipped 1 of 25 audio files in folder " + Path("train")),
            std::string::npos)
      << skip.err;
}

TEST_F(SpeechCliTest, CorruptAudioAndUnresamplableRateNameTheFile) {
  dir_.Write("train/stop/corrupt.wav", "RIFF\x10\x00\x00\x00WAVEfmt this is not a wave header");
  auto r = Kws("train", {"trainer.max_epochs=1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(ErrorLine(r.err).find(Path("train/stop/corrupt.wav") + ": cannot read audio: "),
            std::string::npos)
      << r.err;
  std::filesystem::remove(Path("train/stop/corrupt.wav"));
  WriteBurst(Path("val/go/slow.wav"), 1, 0.0, 4);  // a header claiming 4 Hz
  auto rate = Kws("train", {"trainer.max_epochs=1"});
  EXPECT_NE(rate.exit_code, 0);
  EXPECT_NE(
      ErrorLine(rate.err).find(Path("val/go/slow.wav") + ": cannot resample 4 Hz to 16000 Hz"),
      std::string::npos)
      << rate.err;
}

TEST_F(SpeechCliTest, ManifestLineWithoutAFieldNamesTheLine) {
  WriteBurst(Path("clips/a.wav"), 400, 0.0);
  dir_.Write(
      "clips/train.jsonl",
      "{\"audio\": \"a.wav\", \"text\": \"go\", \"duration\": 1.0}\n{\"audio\": \"a.wav\"}\n");
  auto r = RunProcess({KILN_BINARY, "train", "experiment=commands_kws", "data=sentences",
                       "data.train=" + Path("clips/train.jsonl"), "data.val=null", "data.test=null",
                       "hydra.run.dir=" + Path("run_manifest")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(ErrorLine(r.err).find(Path("clips/train.jsonl") +
                                  ":2: no \"text\" field (a string: the transcript)"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace kiln
