// `kiln train/predict experiment=commands_kws` on tiny audio folders the test writes (tone bursts,
// one band per class; no augmentation): the keyword spotter trains, tests (accuracy, confusion
// matrix) and labels WAV files; bad audio (an empty file, a sample rate that cannot be resampled,
// an unsupported format, a manifest line without a field) ends in one line naming what and where
// with a non-zero exit, or is skipped with a count when data.on_error=skip.
#include <gtest/gtest.h>
#include <sndfile.h>

#include <algorithm>
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

// A 16-bit mono WAV of `samples` at `rate`.
void WriteWav(const std::string& path, const std::vector<float>& samples, int rate) {
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(file, nullptr) << sf_strerror(nullptr);
  sf_writef_float(file, samples.data(), static_cast<sf_count_t>(samples.size()));
  sf_close(file);
}

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
  WriteWav(path, samples, rate);
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
  // With `stop` as filler: the false-accept and miss rates, over the test split's classes.
  auto t = Kws("test", {"ckpt_path=" + Path("run_train/checkpoints/last.ckpt"),
                        "task.filler_classes=[stop]"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  metrics = ReadFile(Path("run_test/test_metrics.yaml"));
  EXPECT_NE(metrics.find("test/false_accept_rate: 0.0\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("test/miss_rate: 0.0\n"), std::string::npos) << metrics;
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

// A "spoken" text for the CTC test: each of a, b, c a 0.12 s tone of its own pitch, 0.05 s apart,
// a space 0.2 s of quiet, 0.1 s of quiet around it; 16 kHz, in faint noise.
void WriteSpokenText(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  const int rate = 16000;
  std::vector<float> samples(static_cast<size_t>(0.1 * rate), 0.0f);
  auto quiet = [&](double seconds) {
    samples.resize(samples.size() + static_cast<size_t>(seconds * rate), 0.0f);
  };
  for (char c : text) {
    if (c == ' ') {
      quiet(0.2);
      continue;
    }
    double hz = c == 'a' ? 500 : c == 'b' ? 1200 : 2600;
    for (int i = 0; i < static_cast<int>(0.12 * rate); ++i)
      samples.push_back(static_cast<float>(0.4 * std::sin(2 * M_PI * hz * i / rate)));
    quiet(0.05);
  }
  quiet(0.1);
  uint32_t state = static_cast<uint32_t>(text.size() * 7919);
  for (float& x : samples) {
    state = state * 1664525u + 1013904223u;
    x += static_cast<float>(0.002 * (static_cast<double>(state >> 8) / (1 << 24) - 0.5));
  }
  WriteWav(path, samples, rate);
}

TEST_F(SpeechCliTest, CtcRecognizerTrainsReportsCerAndWerAndTranscribesWavFiles) {
  // Texts of two or three words of a, b and c, drawn by a fixed generator.
  uint32_t state = 12345;
  auto next = [&](uint32_t n) {
    state = state * 1664525u + 1013904223u;
    return (state >> 16) % n;
  };
  for (const auto& [split, count] :
       std::vector<std::pair<std::string, int>>{{"train", 64}, {"val", 8}, {"test", 8}}) {
    std::string manifest;
    for (int i = 0; i < count; ++i) {
      std::string text;
      for (uint32_t w = 0, words = 2 + next(2); w < words; ++w) {
        if (w > 0) text += ' ';
        for (uint32_t k = 0, len = 1 + next(3); k < len; ++k)
          text += static_cast<char>('a' + next(3));
      }
      std::string wav = split + "/" + std::to_string(i) + ".wav";
      WriteSpokenText(Path("speech/" + wav), text);
      manifest += "{\"audio\": \"" + wav + "\", \"text\": \"" + text + "\"}\n";
    }
    dir_.Write("speech/" + split + ".jsonl", manifest);
  }
  // More LM text (task.lm_text), in the transcripts' alphabet.
  dir_.Write("speech/lm.txt", "abc cab\nba ca\n\nc a b\n");
  auto ctc = [&](const std::string& command, std::vector<std::string> extra) {
    std::vector<std::string> argv = {KILN_BINARY,
                                     command,
                                     "experiment=sentences_ctc",
                                     "data.train=" + Path("speech/train.jsonl"),
                                     "data.val=" + Path("speech/val.jsonl"),
                                     "data.test=" + Path("speech/test.jsonl"),
                                     "data.batch_size=8",
                                     "data.waveform_transforms=null",
                                     "data.feature_transforms=null",
                                     "model.channels=8",
                                     "model.hidden=48",
                                     "model.layers=1",
                                     "model.dropout=0.0",
                                     "optimizer.lr=0.01",
                                     "scheduler.warmup_steps=5",
                                     "trainer.max_epochs=80",
                                     "trainer.max_time=null",
                                     "callbacks.early_stopping.patience=80",
                                     "trainer.num_threads=1",
                                     "task.lm_text=" + Path("speech/lm.txt"),
                                     "hydra.run.dir=" + Path("ctc_" + command)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunProcess(argv);
  };
  auto r = ctc("train", {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE((r.out + r.err).find("and 3 lines of " + Path("speech/lm.txt")), std::string::npos)
      << r.out << r.err;
  std::string metrics = ReadFile(Path("ctc_train/test_metrics.yaml"));
  ASSERT_NE(metrics.find("test/cer: "), std::string::npos) << metrics;
  ASSERT_NE(metrics.find("test/wer: "), std::string::npos) << metrics;
  double cer = std::stod(metrics.substr(metrics.find("test/cer: ") + 10));
  EXPECT_LT(cer, 0.6) << metrics;  // untrained it emits nothing (CER 1); 0.42 after 80 epochs
  std::string transcripts = ReadFile(Path("ctc_train/test_transcripts.tsv"));
  EXPECT_EQ(std::count(transcripts.begin(), transcripts.end(), '\n'), 9) << transcripts;
  WriteSpokenText(Path("new/x.wav"), "abc cab");
  auto p = ctc("predict", {"ckpt_path=" + Path("ctc_train/checkpoints/last.ckpt"),
                           "data.predict=" + Path("new")});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  std::string csv = ReadFile(Path("ctc_predict/predictions.csv"));
  EXPECT_EQ(csv.rfind("path,text\n" + Path("new/x.wav") + ",", 0), 0u) << csv;

  // LM options: a missing LM text file, a negative weight, LM text without an LM.
  const std::string last = "ckpt_path=" + Path("ctc_train/checkpoints/last.ckpt");
  auto missing = ctc("validate", {last, "task.lm_text=" + Path("speech/none.txt")});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(ErrorLine(missing.err).find(Path("speech/none.txt")), std::string::npos) << missing.err;
  auto negative = ctc("validate", {last, "task.lm_weight=-0.5"});
  EXPECT_NE(negative.exit_code, 0);
  EXPECT_NE(
      ErrorLine(negative.err)
          .find(
              "option 'task.lm_weight' of task 'speech_recognition' must be at least 0, got -0.5"),
      std::string::npos)
      << negative.err;
  auto no_lm = ctc("validate", {last, "task.lm_order=0"});
  EXPECT_NE(no_lm.exit_code, 0);
  EXPECT_NE(ErrorLine(no_lm.err).find("option 'task.lm_text' of task 'speech_recognition' must be "
                                      "empty without an LM (set task.lm_order above 0)"),
            std::string::npos)
      << no_lm.err;

  // Fewer outputs than the tokenizer has ids: one line naming the model's own option.
  auto small =
      RunProcess({KILN_BINARY, "train", "experiment=sentences_ctc",
                  "data.train=" + Path("speech/train.jsonl"), "data.val=null", "data.test=null",
                  "model.num_classes=4", "hydra.run.dir=" + Path("ctc_small")});
  EXPECT_NE(small.exit_code, 0);
  EXPECT_NE(ErrorLine(small.err).find("exceeds the model's num_classes (4); set "
                                      "model.num_classes: ${data.tokenizer.vocab_size}"),
            std::string::npos)
      << small.err;
}

}  // namespace
}  // namespace kiln
