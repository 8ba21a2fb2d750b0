// csv, jsonl and tensorboard loggers write what they are given: JSON rows read back with nlohmann,
// and TensorBoard event files read back record by record (lengths, masked CRC32Cs, Event protos).
// When Python's tensorboard package is installed, it must read the event file too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "components/loggers/tfrecord.h"
#include "lib/trainer/callback.h"
#include "tests/components/instantiate.h"
#include "tests/support/process.h"

namespace kiln {
namespace loggers_test {

std::shared_ptr<MetricsLogger> BuildLogger(const std::string& yaml) {
  return testing::InstantiateOk<MetricsLogger>(yaml, "logger.x");
}

TEST(JsonlLogger, OneObjectPerRowAlsoAfterFinish) {
  testing::TempDir dir;
  auto logger = BuildLogger("_target_: jsonl\nsave_dir: " + dir.path() + "/logs\n");
  ASSERT_TRUE(logger->LogMetrics({{"train/loss", 0.5}, {"lr", 0.001}}, 10).ok());
  ASSERT_TRUE(logger->LogMetrics({{"val/acc", std::nan("")}}, 20).ok());
  ASSERT_TRUE(logger->Finish().ok());
  ASSERT_TRUE(logger->LogMetrics({{"test/acc", 0.75}}, 20).ok());  // the test after a fit
  ASSERT_TRUE(logger->Finish().ok());
  std::ifstream in(dir.path() + "/logs/metrics.jsonl");
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["step"], 10);
  EXPECT_EQ(rows[0]["train/loss"], 0.5);
  EXPECT_EQ(rows[0]["lr"], 0.001);
  EXPECT_TRUE(rows[1]["val/acc"].is_null());
  EXPECT_EQ(rows[2]["test/acc"], 0.75);
  // A new run starts the file afresh.
  auto again = BuildLogger("_target_: jsonl\nsave_dir: " + dir.path() + "/logs\n");
  ASSERT_TRUE(again->LogMetrics({{"a", 1}}, 1).ok());
  EXPECT_EQ(testing::ReadFile(dir.path() + "/logs/metrics.jsonl"), "{\"step\":1,\"a\":1.0}\n");
}

// A resumed fit keeps the rows up to the checkpoint's step; later rows and a row cut short by the
// interruption go, and the new rows follow.
TEST(JsonlLogger, AResumedFitKeepsTheRowsUpToItsStep) {
  testing::TempDir dir;
  std::string path = dir.path() + "/logs/metrics.jsonl";
  {
    auto first = BuildLogger("_target_: jsonl\nsave_dir: " + dir.path() + "/logs\n");
    for (int64_t step : {1, 2, 3}) ASSERT_TRUE(first->LogMetrics({{"a", step * 0.5}}, step).ok());
    ASSERT_TRUE(first->Finish().ok());
  }
  std::ofstream(path, std::ios::app) << "{\"step\":4,\"a\":";  // killed mid-row
  auto resumed = BuildLogger("_target_: jsonl\nsave_dir: " + dir.path() + "/logs\n");
  ASSERT_TRUE(resumed->OnResume(2).ok());
  EXPECT_EQ(testing::ReadFile(path), "{\"step\":1,\"a\":0.5}\n{\"step\":2,\"a\":1.0}\n");
  ASSERT_TRUE(resumed->LogMetrics({{"a", 7.5}}, 3).ok());
  EXPECT_EQ(testing::ReadFile(path),
            "{\"step\":1,\"a\":0.5}\n{\"step\":2,\"a\":1.0}\n{\"step\":3,\"a\":7.5}\n");
  // Resuming where nothing was logged yet starts an empty file.
  testing::TempDir empty;
  auto none = BuildLogger("_target_: jsonl\nsave_dir: " + empty.path() + "/logs\n");
  ASSERT_TRUE(none->OnResume(5).ok());
  ASSERT_TRUE(none->LogMetrics({{"a", 1}}, 6).ok());
  EXPECT_EQ(testing::ReadFile(empty.path() + "/logs/metrics.jsonl"), "{\"step\":6,\"a\":1.0}\n");
}

// metrics.csv: rows appended (and on disk) as they come, the file rewritten once a new metric
// adds a column; numbers in their shortest round-trip text; a resumed fit keeps the earlier rows.
TEST(CsvLogger, AppendsRowsRewritesOnANewColumnAndKeepsEveryDigit) {
  testing::TempDir dir;
  std::string path = dir.path() + "/logs/metrics.csv";
  auto logger = BuildLogger("_target_: csv\nsave_dir: " + dir.path() + "/logs\n");
  ASSERT_TRUE(logger->LogMetrics({{"lr", 1.2345678e-05}, {"train/loss", 0.5}}, 1).ok());
  EXPECT_EQ(testing::ReadFile(path), "step,lr,train/loss\n1,1.2345678e-05,0.5\n");
  ASSERT_TRUE(logger->LogMetrics({{"lr", 0.000123456789012}, {"train/loss", 0.1}}, 2).ok());
  // Appended and flushed: readable before Finish.
  EXPECT_EQ(testing::ReadFile(path),
            "step,lr,train/loss\n1,1.2345678e-05,0.5\n2,0.000123456789012,0.1\n");
  ASSERT_TRUE(logger->LogMetrics({{"val/acc", 0.75}}, 2).ok());  // a new column: rewritten
  ASSERT_TRUE(logger->LogMetrics({{"train/loss", 1.0 / 3}}, 3).ok());
  ASSERT_TRUE(logger->Finish().ok());
  ASSERT_TRUE(logger->LogMetrics({{"val/acc", std::nan("")}}, 3).ok());  // the test after a fit
  std::string all =
      "step,lr,train/loss,val/acc\n1,1.2345678e-05,0.5,\n2,0.000123456789012,0.1,\n2,,,0.75\n"
      "3,,0.3333333333333333,\n3,,,nan\n";
  EXPECT_EQ(testing::ReadFile(path), all);
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  std::getline(in, line);
  EXPECT_EQ(std::stod(line.substr(2, line.find(',', 2) - 2)), 1.2345678e-05);  // reads back exactly

  // Resumed from step 2: rows up to step 2 stay, later ones (logged after that checkpoint) go.
  auto resumed = BuildLogger("_target_: csv\nsave_dir: " + dir.path() + "/logs\n");
  ASSERT_TRUE(resumed->OnResume(2).ok());
  ASSERT_TRUE(resumed->LogMetrics({{"train/loss", 0.25}}, 3).ok());
  EXPECT_EQ(testing::ReadFile(path),
            "step,lr,train/loss,val/"
            "acc\n1,1.2345678e-05,0.5,\n2,0.000123456789012,0.1,\n2,,,0.75\n3,,0.25,\n");
  // A new run (not resumed) starts the file afresh.
  auto fresh = BuildLogger("_target_: csv\nsave_dir: " + dir.path() + "/logs\n");
  ASSERT_TRUE(fresh->LogMetrics({{"a", 1}}, 1).ok());
  EXPECT_EQ(testing::ReadFile(path), "step,a\n1,1.0\n");
}

TEST(TfRecord, Crc32cMatchesTheStandardCheckValue) {
  EXPECT_EQ(tfrecord::Crc32c("123456789"), 0xe3069283u);  // the CRC-32C check value
  EXPECT_EQ(tfrecord::Crc32c(""), 0u);
}

// Reads a varint at `at`, advancing it.
uint64_t Varint(const std::string& data, size_t& at) {
  uint64_t value = 0;
  for (int shift = 0; at < data.size(); shift += 7) {
    auto byte = static_cast<unsigned char>(data[at++]);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) break;
  }
  return value;
}

struct Event {
  double wall_time = 0;
  int64_t step = -1;
  std::string file_version;
  std::map<std::string, float> scalars;
};

// Decodes the fields of tensorflow.Event that the logger writes.
Event DecodeEvent(const std::string& data) {
  Event e;
  size_t at = 0;
  while (at < data.size()) {
    uint64_t key = Varint(data, at);
    int field = static_cast<int>(key >> 3);
    if (field == 1) {
      std::memcpy(&e.wall_time, data.data() + at, 8);
      at += 8;
    } else if (field == 2) {
      e.step = static_cast<int64_t>(Varint(data, at));
    } else {
      size_t n = Varint(data, at);
      std::string bytes = data.substr(at, n);
      at += n;
      if (field == 3) e.file_version = bytes;
      if (field != 5) continue;
      for (size_t s = 0; s < bytes.size();) {  // Summary: repeated Value value = 1
        Varint(bytes, s);
        size_t value_size = Varint(bytes, s);
        std::string value = bytes.substr(s, value_size);
        s += value_size;
        size_t v = 0;
        Varint(value, v);  // tag = 1
        size_t tag_size = Varint(value, v);
        std::string tag = value.substr(v, tag_size);
        v += tag_size;
        EXPECT_EQ(Varint(value, v), (2u << 3) | 5u);  // simple_value = 2, 32-bit
        float f;
        std::memcpy(&f, value.data() + v, 4);
        e.scalars[tag] = f;
      }
    }
  }
  return e;
}

std::vector<Event> ReadEvents(const std::string& path) {
  std::string data = testing::ReadFile(path);
  std::vector<Event> events;
  size_t at = 0;
  while (at < data.size()) {
    EXPECT_GE(data.size() - at, 12u);
    std::string length_bytes = data.substr(at, 8);
    uint64_t length;
    uint32_t length_crc, data_crc;
    std::memcpy(&length, length_bytes.data(), 8);
    std::memcpy(&length_crc, data.data() + at + 8, 4);
    EXPECT_EQ(length_crc, tfrecord::MaskedCrc32c(length_bytes));
    std::string record = data.substr(at + 12, length);
    std::memcpy(&data_crc, data.data() + at + 12 + length, 4);
    EXPECT_EQ(data_crc, tfrecord::MaskedCrc32c(record));
    events.push_back(DecodeEvent(record));
    at += 12 + length + 4;
  }
  return events;
}

std::string OnlyFile(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path().string());
  EXPECT_EQ(files.size(), 1u);
  return files.empty() ? "" : files[0];
}

TEST(TensorBoardLogger, EventFileReadsBackWithValidCrcsAndValues) {
  testing::TempDir dir;
  auto logger = BuildLogger("_target_: tensorboard\nsave_dir: " + dir.path() + "/tb\n");
  ASSERT_TRUE(logger->LogMetrics({{"train/loss", 0.25}, {"lr", 0.001}}, 7).ok());
  ASSERT_TRUE(logger->LogMetrics({{"val/acc", 0.875}}, 300).ok());
  ASSERT_TRUE(logger->Finish().ok());
  ASSERT_TRUE(logger->LogMetrics({{"test/acc", 0.5}}, 300).ok());
  ASSERT_TRUE(logger->Finish().ok());
  std::string path = OnlyFile(dir.path() + "/tb");
  EXPECT_NE(path.find("/events.out.tfevents."), std::string::npos);
  auto events = ReadEvents(path);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.6e9);
  EXPECT_EQ(events[1].step, 7);
  EXPECT_EQ(events[1].scalars,
            (std::map<std::string, float>{{"lr", 0.001f}, {"train/loss", 0.25f}}));
  EXPECT_EQ(events[2].step, 300);
  EXPECT_EQ(events[2].scalars.at("val/acc"), 0.875f);
  EXPECT_EQ(events[3].scalars.at("test/acc"), 0.5f);
}

TEST(TensorBoardLogger, PythonTensorboardReadsTheFile) {
  auto probe = testing::RunProcess({KILN_PYTHON_EXE, "-c", "import tensorboard"});
  if (probe.exit_code != 0)
    GTEST_SKIP() << "Python's tensorboard package is not installed; checked by hand-decoding only";
  testing::TempDir dir;
  auto logger = BuildLogger("_target_: tensorboard\nsave_dir: " + dir.path() + "\n");
  ASSERT_TRUE(logger->LogMetrics({{"train/loss", 0.25}}, 7).ok());
  ASSERT_TRUE(logger->Finish().ok());
  auto r = testing::RunProcess(
      {KILN_PYTHON_EXE, "-c",
       "import sys\nfrom tensorboard.backend.event_processing.event_file_loader import "
       "EventFileLoader\n"
       "for e in EventFileLoader(sys.argv[1]).Load():\n"
       "  for v in e.summary.value: print(e.step, v.tag, v.tensor.float_val[0] if "
       "v.HasField('tensor') else v.simple_value)\n",
       OnlyFile(dir.path())});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "7 train/loss 0.25\n");
}

}  // namespace loggers_test
}  // namespace kiln
