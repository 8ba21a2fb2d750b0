#include "components/recsys/criteo_stream.h"

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/data/sample_rng.h"
#include "lib/data/sampler.h"
#include "lib/data/shards/read_ahead.h"
#include "lib/data/shards/shuffle_buffer.h"
#include "lib/logging/logger.h"

namespace kiln::recsys {
namespace {

constexpr int kFields = kCriteoDense + kCriteoSparse;

// One rank's epochs: the loader's order is the positions 0, 1, ... of the rank's part; which row
// each position holds is the stream's business (OpenEpoch).
class StreamPositions : public data::Sampler {
 public:
  StreamPositions(int64_t total, bool shuffle, uint64_t seed, int64_t rank, int64_t world_size)
      : total(total),
        shuffle(shuffle),
        seed(seed),
        rank(rank),
        world(std::max<int64_t>(1, world_size)),
        per_rank((total + world - 1) / world) {}
  std::vector<int64_t> EpochOrder(int64_t) const override {
    std::vector<int64_t> order(static_cast<size_t>(per_rank));
    for (int64_t p = 0; p < per_rank; ++p) order[static_cast<size_t>(p)] = p;
    return order;
  }
  const int64_t total;
  const bool shuffle;
  const uint64_t seed;
  const int64_t rank, world, per_rank;
};

struct Row {
  std::array<int32_t, kFields> features;
  float label;
  bool bad;  // a bad line skipped (bad_lines: skip)
};

// One epoch's reading: a thread reads the rank's part of the files in the epoch's order, through
// the shuffle buffer, and holds the rows out of it from position `first` on until the loader's
// threads take them; it runs at most `ahead` rows past the furthest position asked for.
class CriteoEpoch : public data::shards::ReadAheadSource {
 public:
  CriteoEpoch(const std::vector<std::string>& files, const std::vector<int64_t>& rows,
              const CriteoReadOptions& read, int64_t buffer, const StreamPositions& order,
              int64_t epoch, size_t first, size_t ahead)
      : files_(files),
        rows_(rows),
        read_(read),
        buffer_(buffer),
        order_(order),
        epoch_(epoch),
        first_(static_cast<int64_t>(first)),
        slack_(static_cast<int64_t>(ahead) + 1),
        base_(static_cast<int64_t>(first)),
        asked_(static_cast<int64_t>(first)) {
    Start();
  }

  ~CriteoEpoch() override { Stop(); }

  absl::StatusOr<data::Example> Get(int64_t index, data::SampleRng&) override {
    int64_t skipped = 0;
    KILN_ASSIGN_OR_RETURN(std::optional<data::Example> one, GetStacked({index}, &skipped));
    if (skipped > 0) return data::Example{};  // undefined input: a sample skipped
    return data::Example{one->input[0], one->target[0]};
  }

  absl::StatusOr<std::optional<data::Example>> GetStacked(const std::vector<int64_t>& indices,
                                                          int64_t* skipped) override {
    std::vector<Row> rows;
    rows.reserve(indices.size());
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (int64_t index : indices) {
        if (index < base_) {
          return absl::InternalError(
              absl::StrCat("stream position ", index, " was asked for twice, or before ", first_));
        }
        if (index > asked_) {
          asked_ = index;
          room_.notify_all();
        }
        arrived_.wait(lock, [&] { return out_ > index || finished_; });
        if (out_ <= index) {
          if (!status_.ok()) return status_;
          return absl::InternalError(absl::StrCat("stream position ", index, " was not read"));
        }
        std::optional<Row>& held = held_[static_cast<size_t>(index - base_)];
        if (!held) return absl::InternalError(absl::StrCat("stream position ", index, " taken"));
        rows.push_back(*held);
        held.reset();
        while (!held_.empty() && !held_.front()) {
          held_.pop_front();
          ++base_;
        }
      }
    }
    int64_t kept = 0;
    for (const Row& row : rows) kept += row.bad ? 0 : 1;
    *skipped = static_cast<int64_t>(rows.size()) - kept;
    torch::Tensor input = torch::empty({kept, kFields}, torch::kInt64);
    torch::Tensor target = torch::empty({kept}, torch::kFloat32);
    int64_t* in = input.data_ptr<int64_t>();
    float* label = target.data_ptr<float>();
    for (const Row& row : rows) {
      if (row.bad) continue;
      for (int f = 0; f < kFields; ++f) *in++ = row.features[static_cast<size_t>(f)];
      *label++ = row.label;
    }
    return std::optional<data::Example>(data::Example{input, target});
  }

 private:
  // Hands row `row` out of the stream at the next position; false when the epoch was given up.
  bool Emit(Row row) {
    std::unique_lock<std::mutex> lock(mu_);
    room_.wait(lock, [&] { return cancelled_ || out_ <= asked_ + slack_; });
    if (cancelled_) return false;
    if (out_ >= first_) held_.push_back(row);
    ++out_;
    arrived_.notify_all();
    return true;
  }

  absl::Status ReadAll() override {
    // The epoch's file order.
    std::vector<size_t> plan(files_.size());
    for (size_t i = 0; i < plan.size(); ++i) plan[i] = i;
    if (order_.shuffle) {
      std::mt19937_64 engine(
          data::MixSeed(order_.seed, static_cast<uint64_t>(epoch_), 0x435249544547ULL));
      for (size_t i = plan.size(); i > 1; --i) std::swap(plan[i - 1], plan[engine() % i]);
    }
    // The rank's part of the stream: [begin, end), positions past the end wrapping round.
    const int64_t begin = order_.rank * order_.per_rank;
    const int64_t end = begin + order_.per_rank;
    size_t k = 0;  // plan index of the file the stream position `at` is in
    int64_t row_in_file = begin % order_.total;
    while (row_in_file >= rows_[plan[k]]) row_in_file -= rows_[plan[k++]];

    data::shards::ShuffleBuffer<Row> buffer(
        order_.shuffle ? buffer_ : 1,
        data::MixSeed(order_.seed, static_cast<uint64_t>(epoch_),
                      0x524f5753ULL + static_cast<uint64_t>(order_.rank)));
    bool going = true;
    auto emit = [&](Row row) { going = going && Emit(row); };
    std::unique_ptr<CriteoLineReader> reader;
    int64_t next_row = 0;  // the reader's next row in its file
    std::string line;
    CriteoRow parsed;
    for (int64_t p = begin; p < end && going; ++p) {
      while (rows_[plan[k]] == 0 || row_in_file >= rows_[plan[k]]) {  // on to the next file
        row_in_file = 0;
        k = (k + 1) % plan.size();
        reader.reset();
      }
      const std::string& path = files_[plan[k]];
      if (reader == nullptr || next_row > row_in_file) {
        KILN_ASSIGN_OR_RETURN(reader, CriteoLineReader::Open(path));
        next_row = 0;
      }
      bool found = false;
      while (!found) {
        if (!reader->Next(&line)) {
          KILN_RETURN_IF_ERROR(reader->status());
          return absl::DataLossError(absl::StrCat(path, ": holds ", next_row, " rows, ",
                                                  rows_[plan[k]],
                                                  " when the run started (was it changed?)"));
        }
        if (IsBlankLine(line)) continue;
        found = next_row++ == row_in_file;  // rows before a part's start are passed over
      }
      Row row{};
      std::string problem = ParseCriteoLine(line, read_.label_optional, &parsed);
      if (!problem.empty()) {
        if (read_.bad_lines == BadLines::kError)
          return BadLineError(path, reader->line_number(), problem);
        row.bad = true;
      } else {
        CriteoFeatures(parsed, read_.num_embeddings, row.features.data());
        row.label = static_cast<float>(parsed.label);
      }
      buffer.Push(row, emit);
      ++row_in_file;
    }
    buffer.Drain(emit);
    return absl::OkStatus();
  }

  const std::vector<std::string>& files_;
  const std::vector<int64_t>& rows_;
  const CriteoReadOptions& read_;
  const int64_t buffer_;
  const StreamPositions& order_;
  const int64_t epoch_, first_, slack_;
  std::deque<std::optional<Row>> held_;  // positions base_, base_ + 1, ... (taken: nullopt)
  int64_t base_, asked_, out_ = 0;
};

}  // namespace

absl::StatusOr<std::shared_ptr<CriteoStream>> CriteoStream::Open(std::vector<std::string> files,
                                                                 CriteoReadOptions read,
                                                                 int64_t shuffle_buffer,
                                                                 const std::string& option) {
  if (read.num_embeddings.size() != kCriteoSparse)
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", kCriteoSparse, " table sizes, got ", read.num_embeddings.size()));
  auto start = std::chrono::steady_clock::now();
  std::shared_ptr<CriteoStream> stream(new CriteoStream());
  for (const auto& file : files) {
    KILN_ASSIGN_OR_RETURN(int64_t rows, CountCriteoRows(file, read.max_rows));
    stream->rows_.push_back(rows);
    stream->total_ += rows;
  }
  if (stream->total_ == 0)
    return absl::InvalidArgumentError(
        absl::StrCat(option, ": no rows in ", files.size(), " files"));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Logger::Instance().Info(
      absl::StrFormat("criteo: %s: %d rows in %d files (counted in %.1f s), read as a stream",
                      option, stream->total_, files.size(), seconds));
  stream->files_ = std::move(files);
  stream->read_ = std::move(read);
  stream->shuffle_buffer_ = std::max<int64_t>(1, shuffle_buffer);
  return stream;
}

absl::StatusOr<data::Example> CriteoStream::Get(int64_t, data::SampleRng&) const {
  return absl::FailedPreconditionError(
      "data.stream=true reads the rows in order, not by index: this use (overfit_batches, a "
      "subset) needs data.stream=false");
}

std::shared_ptr<data::Sampler> CriteoStream::StreamSampler(bool shuffle, uint64_t seed,
                                                           int64_t rank, int64_t world_size) const {
  return std::make_shared<StreamPositions>(total_, shuffle, seed, rank, world_size);
}

absl::StatusOr<std::unique_ptr<data::EpochSource>> CriteoStream::OpenEpoch(
    const data::Sampler& sampler, int64_t epoch, const std::vector<int64_t>&, size_t first,
    size_t ahead) const {
  const auto* positions = dynamic_cast<const StreamPositions*>(&sampler);
  if (positions == nullptr) {
    return absl::FailedPreconditionError(
        "a Criteo stream is read in its own order (CriteoStream::StreamSampler)");
  }
  return std::unique_ptr<data::EpochSource>(
      new CriteoEpoch(files_, rows_, read_, shuffle_buffer_, *positions, epoch, first, ahead));
}

}  // namespace kiln::recsys
