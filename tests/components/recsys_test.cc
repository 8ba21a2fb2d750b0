// Recommendation (issue 56): the Criteo line parser and file reader (bad lines skipped or refused),
// the criteo data module's options, the dlrm model's shapes and sparse gradients, row-wise Adagrad
// against a plain reference, untouched table rows bitwise unchanged by training, and the click
// metrics against their definitions.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "components/optim/rowwise_adagrad_adam.h"
#include "components/recsys/click_data.h"
#include "components/recsys/click_model.h"
#include "components/recsys/criteo_file.h"
#include "components/recsys/criteo_line.h"
#include "components/recsys/criteo_stream.h"
#include "lib/config/yaml_io.h"
#include "lib/data/sample_rng.h"
#include "lib/data/sampler.h"
#include "lib/data/shards/shard_set.h"
#include "lib/distributed/sharded_tables.h"
#include "lib/inference/predictor.h"
#include "lib/registry/registry.h"
#include "lib/trainer/internal/cuda_graph_step.h"
#include "lib/trainer/metric.h"
#include "lib/trainer/optimization.h"
#include "tests/components/instantiate.h"
#include "tests/support/checkpoint_weights.h"
#include "tests/support/process.h"

namespace kiln {
namespace recsys_test {

using recsys::BadLines;
using recsys::CriteoReadOptions;
using recsys::CriteoRow;
using recsys::ParseCriteoLine;

// A Criteo line: label, 13 integers, 26 hashes (C1 = 0000000a, C2 = 0000000b, ...).
std::string Line(const std::string& label = "1") {
  std::string line = label;
  for (int i = 0; i < 13; ++i) line += "\t" + std::to_string(i);
  for (int j = 0; j < 26; ++j) {
    char hash[9];
    snprintf(hash, sizeof(hash), "%08x", 10 + j);
    line += "\t" + std::string(hash);
  }
  return line;
}

// `line` with field `index` (0: the label) replaced by `value`.
std::string WithField(std::string line, int index, const std::string& value) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string::npos ? tab : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  fields[static_cast<size_t>(index)] = value;
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) out += (i ? "\t" : "") + fields[i];
  return out;
}

TEST(CriteoLine, ParsesLabelCountsAndHashes) {
  CriteoRow row;
  ASSERT_EQ(ParseCriteoLine(Line("0") + "\r", false, &row), "");
  EXPECT_EQ(row.label, 0);
  EXPECT_EQ(row.dense[0], 0);
  EXPECT_EQ(row.dense[12], 12);
  EXPECT_EQ(row.sparse[0], 10u);
  EXPECT_EQ(row.sparse[25], 35u);
  // Empty fields: 0 and hash 0; negatives clamp to 0, huge counts to INT32_MAX; either case hex.
  std::string line = WithField(WithField(Line(), 1, ""), 14, "");
  line = WithField(WithField(line, 2, "-3"), 3, "99999999999999999999");
  line = WithField(line, 15, "FFFFFFFF");
  ASSERT_EQ(ParseCriteoLine(line, false, &row), "");
  EXPECT_EQ(row.dense[0], 0);
  EXPECT_EQ(row.dense[1], 0);
  EXPECT_EQ(row.dense[2], 2147483647);
  EXPECT_EQ(row.sparse[0], 0u);
  EXPECT_EQ(row.sparse[1], 0xffffffffu);
}

TEST(CriteoLine, SaysWhatIsWrong) {
  CriteoRow row;
  EXPECT_EQ(ParseCriteoLine("1\t2\t3", false, &row),
            "has 3 fields, expected 40 (label, 13 integer, 26 categorical, tab separated)");
  EXPECT_EQ(ParseCriteoLine("", false, &row).substr(0, 13), "has 1 fields,");
  EXPECT_EQ(ParseCriteoLine(WithField(Line(), 0, "2"), false, &row), "label '2' is not 0 or 1");
  EXPECT_EQ(ParseCriteoLine(WithField(Line(), 0, ""), false, &row), "label '' is not 0 or 1");
  EXPECT_EQ(ParseCriteoLine(WithField(Line(), 5, "4x"), false, &row),
            "integer feature I5 '4x' is not an integer");
  EXPECT_EQ(ParseCriteoLine(WithField(Line(), 5, "-"), false, &row),
            "integer feature I5 '-' is not an integer");
  EXPECT_EQ(ParseCriteoLine(WithField(Line(), 16, "xyz"), false, &row),
            "categorical feature C3 'xyz' is not a hex hash (1 to 8 hex digits)");
  EXPECT_EQ(ParseCriteoLine(WithField(Line(), 16, "123456789"), false, &row),
            "categorical feature C3 '123456789' is not a hex hash (1 to 8 hex digits)");
  // Control bytes are not echoed.
  EXPECT_EQ(ParseCriteoLine(WithField(Line(), 0, std::string("\x01\xff", 2)), false, &row),
            "label '\?\?' is not 0 or 1");
  // 39 fields: a prediction line without its label, when allowed.
  std::string unlabelled = Line().substr(2);
  EXPECT_NE(ParseCriteoLine(unlabelled, false, &row), "");
  ASSERT_EQ(ParseCriteoLine(unlabelled, true, &row), "");
  EXPECT_EQ(row.label, -1);
  EXPECT_EQ(row.sparse[25], 35u);
}

CriteoReadOptions ReadOptions(int64_t table, BadLines bad = BadLines::kError) {
  CriteoReadOptions o;
  o.num_embeddings.assign(26, table);
  o.bad_lines = bad;
  return o;
}

void WriteGzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
}

TEST(CriteoFile, ReadsTsvAndGzipAndHashesIntoTables) {
  testing::TempDir dir;
  std::string text = Line("1") + "\n\n" + Line("0") + "\r\n" + WithField(Line("0"), 14, "ff");
  dir.Write("a.tsv", text);
  WriteGzip(dir.path() + "/a.tsv.gz", text);
  for (const char* name : {"/a.tsv", "/a.tsv.gz"}) {
    auto rows = recsys::ReadCriteoFile(dir.path() + name, ReadOptions(7));
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(rows->features.sizes(), (std::vector<int64_t>{3, 39}));
    EXPECT_TRUE(torch::equal(rows->labels, torch::tensor({1.0f, 0.0f, 0.0f})));
    EXPECT_EQ(rows->line_numbers, (std::vector<int64_t>{1, 3, 4}));
    EXPECT_EQ(rows->features[0][12].item<int>(), 12);
    EXPECT_EQ(rows->features[0][13].item<int>(), 10 % 7);  // C1 = 0x0a
    EXPECT_EQ(rows->features[2][13].item<int>(), 255 % 7);
    EXPECT_EQ(rows->features[0][38].item<int>(), 35 % 7);
  }
}

TEST(CriteoFile, BadLinesSkippedAndCountedOrRefusedAtFileAndLine) {
  testing::TempDir dir;
  dir.Write("bad.tsv", Line() + "\n" + WithField(Line(), 0, "7") + "\n" + Line() + "\n" +
                           WithField(Line(), 20, "zz") + "\n1\t2\n");
  std::string path = dir.path() + "/bad.tsv";
  auto skipped = recsys::ReadCriteoFile(path, ReadOptions(100, BadLines::kSkip));
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  EXPECT_EQ(skipped->features.size(0), 2);
  EXPECT_EQ(skipped->skipped, 3);
  EXPECT_EQ(skipped->line_numbers, (std::vector<int64_t>{1, 3}));
  auto refused = recsys::ReadCriteoFile(path, ReadOptions(100));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            path +
                ":2: label '7' is not 0 or 1 (data.bad_lines=skip leaves such lines out and "
                "counts them)");
  auto missing = recsys::ReadCriteoFile(dir.path() + "/none.tsv", ReadOptions(100));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  // A gzip file cut short: an error naming the file, never a crash.
  std::string big;
  for (int i = 0; i < 2000; ++i) big += Line() + "\n";
  WriteGzip(dir.path() + "/cut.tsv.gz", big);
  std::string bytes = testing::ReadFile(dir.path() + "/cut.tsv.gz");
  dir.Write("cut.tsv.gz", bytes.substr(0, bytes.size() / 2));
  auto cut = recsys::ReadCriteoFile(dir.path() + "/cut.tsv.gz", ReadOptions(100));
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("cut.tsv.gz: corrupt or truncated gzip"), std::string::npos)
      << cut.status();
}

// A row whose first integer feature I1 is `id` (the test's way of telling rows apart).
std::string IdLine(int id, const std::string& label = "1") {
  return WithField(Line(label), 1, std::to_string(id));
}

// The I1 ids of `positions` [first, last) of one rank's epoch, read in batches of 4 as the loader
// asks; `skipped` adds up the rows a batch left out.
std::vector<int64_t> StreamIds(const recsys::CriteoStream& stream, bool shuffle, int64_t epoch,
                               int64_t rank, int64_t world, size_t first = 0,
                               int64_t* skipped = nullptr, absl::Status* status = nullptr) {
  auto sampler = stream.StreamSampler(shuffle, /*seed=*/7, rank, world);
  std::vector<int64_t> order = sampler->EpochOrder(epoch);
  auto source = stream.OpenEpoch(*sampler, epoch, order, first, /*ahead=*/4);
  EXPECT_TRUE(source.ok()) << source.status();
  std::vector<int64_t> ids;
  for (size_t b = first; b < order.size(); b += 4) {
    std::vector<int64_t> batch(
        order.begin() + static_cast<ptrdiff_t>(b),
        order.begin() + static_cast<ptrdiff_t>(std::min(b + 4, order.size())));
    int64_t left_out = 0;
    auto stacked = (*source)->GetStacked(batch, &left_out);
    if (!stacked.ok()) {
      if (status != nullptr) *status = stacked.status();
      return ids;
    }
    EXPECT_TRUE(stacked->has_value());
    EXPECT_EQ((*stacked)->input.scalar_type(), torch::kInt64);
    EXPECT_EQ((*stacked)->input.size(0) + left_out, static_cast<int64_t>(batch.size()));
    if (skipped != nullptr) *skipped += left_out;
    for (int64_t i = 0; i < (*stacked)->input.size(0); ++i)
      ids.push_back((*stacked)->input[i][0].item<int64_t>());
  }
  return ids;
}

// data.stream: the files' rows counted once, then each epoch read in order: storage order
// unshuffled; shuffled, every row once, another order each epoch and the same for the same
// epoch; ranks reading disjoint parts whose union is the epoch; a resume at position k giving
// exactly the uninterrupted epoch's rows from k on; bad lines skipped or refused at file:line; a
// file that lost rows since the count refused in one line.
TEST(CriteoStream, EpochsAreExactShuffledPerEpochSplitAcrossRanksAndResumeWhereTheyStopped) {
  testing::TempDir dir;
  std::string a, c;
  for (int id = 0; id < 7; ++id) a += IdLine(id) + (id == 3 ? "\n\n" : "\n");
  for (int id = 7; id < 19; ++id) c += IdLine(id, id % 2 ? "1" : "0") + "\n";
  dir.Write("part-0.tsv", a);
  dir.Write("part-1.tsv", "");
  WriteGzip(dir.path() + "/part-2.tsv.gz", c);
  auto files = data::shards::MatchFiles(dir.path() + "/part-{0..2}.tsv*", "data.train");
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 3u);
  auto stream = recsys::CriteoStream::Open(*files, ReadOptions(100), 5, "data.train");
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ((*stream)->size(), 19);
  EXPECT_EQ((*stream)->rows(), (std::vector<int64_t>{7, 0, 12}));
  std::vector<int64_t> storage(19);
  for (int64_t i = 0; i < 19; ++i) storage[static_cast<size_t>(i)] = i;
  EXPECT_EQ(StreamIds(**stream, false, 0, 0, 1), storage);

  std::vector<int64_t> epoch0 = StreamIds(**stream, true, 0, 0, 1);
  std::vector<int64_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, storage);
  EXPECT_NE(epoch0, storage);
  EXPECT_EQ(StreamIds(**stream, true, 0, 0, 1), epoch0);
  EXPECT_NE(StreamIds(**stream, true, 1, 0, 1), epoch0);
  // Resuming at position 9 (mid-batch included): the same rows from there on.
  for (size_t first : {8, 9}) {
    EXPECT_EQ(StreamIds(**stream, true, 0, 0, 1, first),
              std::vector<int64_t>(epoch0.begin() + static_cast<ptrdiff_t>(first), epoch0.end()));
  }
  // Two ranks: 10 rows each, the 20th wrapping round to the epoch's start.
  for (bool shuffle : {false, true}) {
    std::vector<int64_t> both = StreamIds(**stream, shuffle, 2, 0, 2);
    std::vector<int64_t> second = StreamIds(**stream, shuffle, 2, 1, 2);
    EXPECT_EQ(both.size(), 10u);
    EXPECT_EQ(second.size(), 10u);
    both.insert(both.end(), second.begin(), second.end());
    std::sort(both.begin(), both.end());
    both.erase(std::unique(both.begin(), both.end()), both.end());
    EXPECT_EQ(both, storage) << "shuffle " << shuffle;
  }
  EXPECT_EQ(StreamIds(**stream, false, 0, 1, 2).back(), 0);  // the padding: the stream's first row

  // A bad line: skipped (its batch one row smaller), or refused naming file:line.
  dir.Write("bad.tsv", IdLine(0) + "\n" + WithField(IdLine(1), 0, "7") + "\n" + IdLine(2) + "\n");
  auto skipping = recsys::CriteoStream::Open({dir.path() + "/bad.tsv"},
                                             ReadOptions(100, BadLines::kSkip), 1, "data.train");
  ASSERT_TRUE(skipping.ok()) << skipping.status();
  int64_t skipped = 0;
  EXPECT_EQ(StreamIds(**skipping, false, 0, 0, 1, 0, &skipped), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(skipped, 1);
  auto refusing =
      recsys::CriteoStream::Open({dir.path() + "/bad.tsv"}, ReadOptions(100), 1, "data.train");
  ASSERT_TRUE(refusing.ok()) << refusing.status();
  absl::Status status;
  StreamIds(**refusing, false, 0, 0, 1, 0, nullptr, &status);
  EXPECT_EQ(status.message(), dir.path() +
                                  "/bad.tsv:2: label '7' is not 0 or 1 (data.bad_lines=skip "
                                  "leaves such lines out and counts them)");
  // Rows lost since the count; a missing file; no rows at all.
  dir.Write("part-0.tsv", IdLine(0) + "\n");
  status = absl::OkStatus();
  StreamIds(**stream, false, 0, 0, 1, 0, nullptr, &status);
  EXPECT_EQ(status.message(),
            dir.path() + "/part-0.tsv: holds 1 rows, 7 when the run started (was it changed?)");
  auto missing = recsys::CriteoStream::Open({dir.path() + "/none.tsv"}, ReadOptions(100), 1, "x");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  auto empty =
      recsys::CriteoStream::Open({dir.path() + "/part-1.tsv"}, ReadOptions(100), 1, "data.train");
  EXPECT_EQ(empty.status().message(), "data.train: no rows in 1 files");
  // Random access is refused in one line.
  data::SampleRng rng(0, 0, 0);
  EXPECT_EQ((*stream)->Get(0, rng).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CriteoData, OptionsAreCheckedAndTheBatchIsCountsThenIndices) {
  testing::TempDir dir;
  dir.Write("t.tsv", Line("1") + "\n" + Line("0") + "\n");
  std::string train = "{_target_: criteo, train: " + dir.path() + "/t.tsv, val_fraction: 0, ";
  auto typo =
      testing::Instantiate<data::DataModule>(train + "num_embedings_per_feature: 5}", "data");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("did you mean 'num_embeddings_per_feature'"),
            std::string::npos)
      << typo.status();
  auto wrong =
      testing::Instantiate<data::DataModule>(train + "num_embeddings_per_feature: [5, 6]}", "data");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("one per categorical feature"), std::string::npos)
      << wrong.status();
  auto policy = testing::Instantiate<data::DataModule>(train + "bad_lines: ignore}", "data");
  EXPECT_FALSE(policy.ok());

  auto built = testing::InstantiateOk<data::DataModule>(
      train + "num_embeddings_per_feature: 4, batch_size: 2}", "data");
  ASSERT_NE(built, nullptr);
  auto* clicks = dynamic_cast<recsys::ClickDataModule*>(built.get());
  ASSERT_NE(clicks, nullptr);
  EXPECT_EQ(clicks->num_embeddings(), std::vector<int64_t>(26, 4));
  ASSERT_TRUE(built->Setup(data::Stage::kFit).ok());
  auto stacked = built->train_dataset()->GetStacked({0, 1});
  ASSERT_TRUE(stacked.has_value());
  EXPECT_EQ(stacked->input.scalar_type(), torch::kInt64);
  EXPECT_EQ(stacked->input.sizes(), (std::vector<int64_t>{2, 39}));
  EXPECT_EQ(stacked->input[1][13].item<int64_t>(), 10 % 4);
  EXPECT_EQ(stacked->target.sum().item<float>(), 1.0f);  // the two rows, in the split's order
  EXPECT_FALSE(built->Setup(data::Stage::kTest).ok());   // no test file set
  auto raw = built->RawExample(Line().substr(2) + "\n");
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_TRUE(torch::equal(raw->input, stacked->input[0]));
  auto bad_raw = built->RawExample("1\t2");
  ASSERT_FALSE(bad_raw.ok());
  EXPECT_EQ(bad_raw.status().message().substr(0, 29), "the input line has 2 fields, ");
}

std::shared_ptr<recsys::ClickModel> Dlrm(const std::string& extra = "") {
  auto model = testing::InstantiateOk<Model>(
      "{_target_: dlrm, embedding_dim: 4, num_embeddings_per_feature: 100, "
      "dense_arch_layer_sizes: [8, 4], over_arch_layer_sizes: [8, 1]" +
          extra + "}",
      "model");
  return std::dynamic_pointer_cast<recsys::ClickModel>(model);
}

// A batch of `rows` rows whose table indices are all below `below`.
torch::Tensor Batch(int64_t rows, int64_t below, int64_t seed) {
  torch::manual_seed(static_cast<uint64_t>(seed));
  return torch::cat({torch::randint(0, 50, {rows, 13}, torch::kInt64),
                     torch::randint(0, below, {rows, 26}, torch::kInt64)},
                    1);
}

TEST(DlrmModel, OneLogitPerRowAndSparseGradientsOfTheTouchedRows) {
  auto model = Dlrm();
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->num_dense(), 13);
  EXPECT_EQ(model->num_embeddings(), std::vector<int64_t>(26, 100));
  auto params = model->named_parameters();
  EXPECT_TRUE(params.contains("sparse_arch.t_cat_25.weight"));
  EXPECT_EQ(params["over_arch.0.weight"].size(1), 4 + 27 * 26 / 2);
  torch::Tensor input = Batch(5, 100, 1);
  input.index_put_({0, 13}, 42);
  torch::Tensor out = model->forward(input);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{5}));
  out.sum().backward();
  torch::Tensor grad = params["sparse_arch.t_cat_0.weight"].grad();
  ASSERT_TRUE(grad.is_sparse());
  torch::Tensor touched = std::get<0>(torch::_unique(input.select(1, 13)));
  torch::Tensor rows = std::get<0>(torch::_unique(grad.coalesce().indices()[0]));
  EXPECT_TRUE(torch::equal(rows, touched));
  // Option checks: the interaction needs the bottom MLP to end at embedding_dim.
  auto bad = testing::Instantiate<Model>(
      "{_target_: dlrm, embedding_dim: 4, dense_arch_layer_sizes: [8, 5]}", "model");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("must end with embedding_dim (4), not 5"),
            std::string::npos);
  auto dense = Dlrm(", sparse: false");
  dense->forward(input).sum().backward();
  EXPECT_FALSE(dense->named_parameters()["sparse_arch.t_cat_0.weight"].grad().is_sparse());
}

// The tables' rows gathered in one op (float32 sparse tables on the CPU) are each Embedding's own
// lookup, stacked, bitwise; so are the gradients (repeated ids summed); an id out of a table's
// range is an error naming the table, not a read out of bounds.
TEST(DlrmModel, TablesLookedUpInOneOpGiveEachEmbeddingsRowsAndGradients) {
  auto model = Dlrm();
  auto* owner = dynamic_cast<distributed::EmbeddingTables*>(model.get());
  ASSERT_NE(owner, nullptr);
  std::vector<torch::nn::Embedding> tables = owner->embedding_tables();
  torch::Tensor ids = Batch(7, 4, 2).narrow(1, 13, 26);  // ids below 4: rows repeat
  torch::manual_seed(5);
  torch::Tensor weight = torch::randn({7, 26, 4});
  torch::Tensor fused = distributed::LookupTables(*owner, ids);
  (fused * weight).sum().backward();
  std::vector<torch::Tensor> fused_grads;
  for (auto& t : tables) {
    ASSERT_TRUE(t->weight.grad().is_sparse());
    fused_grads.push_back(t->weight.grad().to_dense());
    t->weight.mutable_grad() = torch::Tensor();
  }
  std::vector<torch::Tensor> rows;
  for (size_t j = 0; j < tables.size(); ++j)
    rows.push_back(tables[j]->forward(ids.select(1, static_cast<int64_t>(j))));
  torch::Tensor reference = torch::stack(rows, 1);
  (reference * weight).sum().backward();
  EXPECT_TRUE(torch::equal(fused, reference));
  for (size_t j = 0; j < tables.size(); ++j)
    EXPECT_TRUE(torch::equal(fused_grads[j], tables[j]->weight.grad().to_dense())) << j;
  torch::Tensor wrong = ids.clone();
  wrong.index_put_({3, 2}, 100);
  try {
    distributed::LookupTables(*owner, wrong);
    ADD_FAILURE() << "an id out of range was looked up";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("table 2: index 100 out of range of its 100 rows"),
              std::string::npos)
        << e.what();
  }
}

// dcn_v2: with every cross layer's W_l and b_l zero, the cross network passes x0 through, so the
// logit is the top MLP over the bottom MLP's output and the 26 table rows, written out here.
TEST(DcnV2Model, CrossNetworkOverTheConcatenatedVectors) {
  auto model = testing::InstantiateOk<Model>(
      "{_target_: dcn_v2, embedding_dim: 4, num_embeddings_per_feature: 100, "
      "dense_arch_layer_sizes: [8, 4], over_arch_layer_sizes: [8, 1], dcn_num_layers: 2, "
      "dcn_low_rank_dim: 3}",
      "model");
  ASSERT_NE(model, nullptr);
  auto params = model->named_parameters();
  EXPECT_EQ(params["crossnet.V.1.weight"].sizes(), (std::vector<int64_t>{3, 27 * 4}));
  EXPECT_EQ(params["crossnet.W.1.weight"].sizes(), (std::vector<int64_t>{27 * 4, 3}));
  EXPECT_EQ(params["over_arch.0.weight"].sizes(), (std::vector<int64_t>{8, 27 * 4}));
  torch::Tensor input = Batch(5, 100, 2);
  torch::Tensor out = model->forward(input);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{5}));
  out.sum().backward();
  EXPECT_TRUE(params["sparse_arch.t_cat_3.weight"].grad().is_sparse());
  EXPECT_TRUE(params["crossnet.V.0.weight"].grad().abs().sum().item<double>() > 0);
  torch::NoGradGuard no_grad;
  for (const char* name :
       {"crossnet.W.0.weight", "crossnet.W.0.bias", "crossnet.W.1.weight", "crossnet.W.1.bias"})
    params[name].zero_();
  using torch::indexing::Slice;
  torch::Tensor dense = torch::log1p(input.index({Slice(), Slice(0, 13)}).to(torch::kFloat32));
  torch::Tensor x =
      torch::relu(torch::linear(dense, params["dense_arch.0.weight"], params["dense_arch.0.bias"]));
  x = torch::relu(torch::linear(x, params["dense_arch.2.weight"], params["dense_arch.2.bias"]));
  std::vector<torch::Tensor> parts{x};
  for (int j = 0; j < 26; ++j) {
    parts.push_back(params["sparse_arch.t_cat_" + std::to_string(j) + ".weight"].index_select(
        0, input.select(1, 13 + j)));
  }
  torch::Tensor h = torch::relu(torch::linear(torch::cat(parts, 1), params["over_arch.0.weight"],
                                              params["over_arch.0.bias"]));
  torch::Tensor expected =
      torch::linear(h, params["over_arch.2.weight"], params["over_arch.2.bias"]).squeeze(1);
  EXPECT_TRUE(torch::allclose(model->forward(input), expected, 1e-5, 1e-6));
}

std::unique_ptr<torch::optim::Optimizer> RowwiseOver(torch::nn::Module& module,
                                                     const std::string& yaml) {
  auto node = config::ParseYaml(yaml, "optimizer.yaml");
  EXPECT_TRUE(node.ok());
  auto factory = Registry<OptimizerFactory>::Get().Instantiate(config::Config(*node, "optimizer"));
  EXPECT_TRUE(factory.ok()) << factory.status();
  NamedParameters named;
  for (const auto& item : module.named_parameters()) named.emplace_back(item.key(), item.value());
  auto optimizer = (*factory)->Create(named);
  EXPECT_TRUE(optimizer.ok()) << optimizer.status();
  return std::move(*optimizer);
}

// Row-wise Adagrad, written out row by row in double: acc[r] += mean(g_r^2), w_r -= lr g_r /
// (sqrt(acc[r]) + eps). The loss is linear in the table, so each step's gradient is known.
// float32 tables on the CPU take the fused one-pass step, float64 ones ATen's op-by-op path: both
// match the plain reference.
TEST(RowwiseAdagradAdam, TablesMatchAPlainReferenceAndDenseParametersTakeAdam) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    SCOPED_TRACE(c10::toString(dtype));
    struct Net : torch::nn::Module {
      Net() {
        table = register_module(
            "table", torch::nn::Embedding(torch::nn::EmbeddingOptions(10, 3).sparse(true)));
        fc = register_module("fc", torch::nn::Linear(3, 1));
      }
      torch::nn::Embedding table{nullptr};
      torch::nn::Linear fc{nullptr};
    } net;
    net.to(dtype);
    torch::Tensor start = net.table->weight.detach().clone();
    torch::Tensor fc_start = net.fc->weight.detach().clone();
    auto optimizer = RowwiseOver(net,
                                 "{_target_: rowwise_adagrad_adam, lr: 0.01, sparse_lr: 0.3, "
                                 "sparse_eps: 0.001}");
    const std::vector<std::vector<int64_t>> steps = {{1, 3, 3, 7}, {3, 4}, {1, 1, 9}};
    std::vector<std::vector<double>> w(10, std::vector<double>(3));
    for (int r = 0; r < 10; ++r)
      for (int d = 0; d < 3; ++d) w[r][d] = start[r][d].item<double>();
    std::vector<double> acc(10, 0.0);
    for (size_t s = 0; s < steps.size(); ++s) {
      torch::Tensor idx = torch::tensor(steps[s], torch::kInt64);
      torch::manual_seed(s);
      torch::Tensor c = torch::randn({idx.size(0), 3}, dtype);
      optimizer->zero_grad();
      torch::Tensor loss = (net.table->forward(idx) * c).sum() + net.fc->forward(c).sum();
      loss.backward();
      optimizer->step();
      // The reference: the gradient of row r is the sum of c over its occurrences.
      std::map<int64_t, std::vector<double>> grads;
      for (int64_t i = 0; i < idx.size(0); ++i) {
        auto& g = grads.try_emplace(steps[s][static_cast<size_t>(i)], 3, 0.0).first->second;
        for (int d = 0; d < 3; ++d) g[d] += c[i][d].item<double>();
      }
      for (const auto& [row, g] : grads) {
        acc[row] += (g[0] * g[0] + g[1] * g[1] + g[2] * g[2]) / 3;
        for (int d = 0; d < 3; ++d) w[row][d] -= 0.3 * g[d] / (std::sqrt(acc[row]) + 0.001);
      }
    }
    torch::Tensor got = net.table->weight.detach();
    for (int r = 0; r < 10; ++r)
      for (int d = 0; d < 3; ++d) EXPECT_NEAR(got[r][d].item<double>(), w[r][d], 1e-6) << r;
    for (int r : {0, 2, 5, 6, 8}) EXPECT_TRUE(torch::equal(got[r], start[r])) << r;
    EXPECT_FALSE(torch::equal(net.fc->weight.detach(), fc_start));
    // The accumulator is one float per row, saved as Adam's own state.
    std::ostringstream saved;
    torch::serialize::OutputArchive archive;
    optimizer->save(archive);
    archive.save_to(saved);
    EXPECT_GT(saved.str().size(), 0u);
  }
}

TEST(RowwiseAdagradAdam, RowsNoBatchTouchedAreBitwiseUnchangedByTraining) {
  auto model = Dlrm();
  std::map<std::string, torch::Tensor> start;
  for (const auto& item : model->named_parameters())
    start[item.key()] = item.value().detach().clone();
  auto optimizer = RowwiseOver(*model, "{_target_: rowwise_adagrad_adam, lr: 0.01}");
  for (int step = 0; step < 20; ++step) {
    torch::Tensor input = Batch(32, 60, step);  // rows 60..99 of every table never touched
    torch::Tensor labels = torch::randint(0, 2, {32}).to(torch::kFloat32);
    optimizer->zero_grad();
    torch::binary_cross_entropy_with_logits(model->forward(input), labels).backward();
    optimizer->step();
  }
  using torch::indexing::Slice;
  for (const auto& item : model->named_parameters()) {
    const torch::Tensor& now = item.value();
    const torch::Tensor& before = start[item.key()];
    if (item.key().rfind("sparse_arch.", 0) == 0) {
      EXPECT_TRUE(torch::equal(now.index({Slice(60)}), before.index({Slice(60)}))) << item.key();
      EXPECT_FALSE(torch::equal(now.index({Slice(0, 60)}), before.index({Slice(0, 60)})))
          << item.key();
    } else {
      EXPECT_FALSE(torch::equal(now, before)) << item.key();
    }
  }
}

// trainer.gradient_clip_val on a table's sparse gradient: the same as clipping its dense form
// (duplicate rows summed first), by norm and by value.
TEST(RowwiseAdagradAdam, SparseGradientsClipAsTheirDenseForm) {
  for (bool by_norm : {true, false}) {
    auto sparse_table = torch::nn::Embedding(torch::nn::EmbeddingOptions(6, 2).sparse(true));
    auto dense_table = torch::nn::Embedding(torch::nn::EmbeddingOptions(6, 2));
    auto fc = torch::nn::Linear(2, 1);
    {
      torch::NoGradGuard no_grad;
      dense_table->weight.copy_(sparse_table->weight);
    }
    torch::Tensor idx = torch::tensor({1, 4, 1, 1}, torch::kInt64);
    torch::Tensor c = torch::tensor({{3.0f, -1.0f}, {0.5f, 2.0f}, {1.0f, 1.0f}, {2.0f, 0.0f}});
    (sparse_table->forward(idx) * c).sum().backward();
    (dense_table->forward(idx) * c).sum().backward();
    fc->forward(c).sum().backward();
    torch::Tensor fc_grad = fc->weight.grad().clone();
    ClipGradientsOnDevice({sparse_table->weight, fc->weight}, 0.5, by_norm);
    torch::Tensor clipped_fc = fc->weight.grad().clone();
    fc->weight.mutable_grad() = fc_grad;
    ClipGradientsOnDevice({dense_table->weight, fc->weight}, 0.5, by_norm);
    ASSERT_TRUE(sparse_table->weight.grad().is_sparse());
    EXPECT_TRUE(torch::allclose(sparse_table->weight.grad().to_dense(), dense_table->weight.grad()))
        << by_norm;
    EXPECT_TRUE(torch::allclose(clipped_fc, fc->weight.grad())) << by_norm;
  }
}

std::shared_ptr<Metric> ClickMetric(const std::string& name) {
  return testing::InstantiateOk<Metric>("{_target_: " + name + "}", "metric");
}

double Value(Metric& metric) {
  auto values = metric.Compute({});
  EXPECT_TRUE(values.ok() && values->count(""));
  return values.ok() && values->count("") ? values->at("") : NAN;
}

TEST(ClickMetrics, AucLogLossNormalizedEntropyAndCalibration) {
  // Probabilities 0.2, 0.4, 0.6, 0.8 with labels 0 1 0 1: 3 of 4 positive-negative pairs ordered.
  torch::Tensor p = torch::tensor({0.2, 0.4, 0.6, 0.8}, torch::kFloat64);
  MetricBatch batch;
  batch.preds = torch::log(p / (1 - p));
  batch.target = torch::tensor({0.0f, 1.0f, 0.0f, 1.0f});
  auto auc = ClickMetric("auc");
  ASSERT_TRUE(auc->Update(batch).ok());
  EXPECT_NEAR(Value(*auc), 0.75, 1e-12);
  double log_loss = -(std::log(0.8) + std::log(0.4) + std::log(0.4) + std::log(0.8)) / 4;
  auto ll = ClickMetric("log_loss");
  ASSERT_TRUE(ll->Update(batch).ok());
  EXPECT_NEAR(Value(*ll), log_loss, 1e-9);
  auto ne = ClickMetric("normalized_entropy");
  ASSERT_TRUE(ne->Update(batch).ok());
  EXPECT_NEAR(Value(*ne), log_loss / std::log(2.0), 1e-9);  // click rate 1/2: entropy ln 2
  auto calibration = ClickMetric("calibration");
  ASSERT_TRUE(calibration->Update(batch).ok());
  EXPECT_NEAR(Value(*calibration), 2.0 / 2.0, 1e-9);
  // A batch split over two "ranks": their states summed give the whole batch's value.
  auto whole = ClickMetric("auc");
  auto a = ClickMetric("auc");
  auto b = ClickMetric("auc");
  auto summed = ClickMetric("auc");
  torch::manual_seed(3);
  MetricBatch big;
  big.preds = torch::randn({1000});
  big.target = torch::rand({1000}).lt(torch::sigmoid(big.preds)).to(torch::kFloat32);
  ASSERT_TRUE(whole->Update(big).ok());
  MetricBatch first{big.preds.slice(0, 0, 400), big.target.slice(0, 0, 400)};
  MetricBatch second{big.preds.slice(0, 400), big.target.slice(0, 400)};
  ASSERT_TRUE(a->Update(first).ok());
  ASSERT_TRUE(b->Update(second).ok());
  std::map<std::string, torch::Tensor> state = a->StateDict();
  for (auto& item : b->StateDict()) state[item.first] += item.second;
  ASSERT_TRUE(summed->LoadStateDict(state).ok());
  EXPECT_DOUBLE_EQ(Value(*summed), Value(*whole));
  // The exact Mann-Whitney AUC: the histogram's differs by ties within a bin only.
  torch::Tensor pos = big.preds.index({big.target.eq(1)}),
                neg = big.preds.index({big.target.eq(0)});
  double ordered = pos.unsqueeze(1).gt(neg.unsqueeze(0)).sum().item<double>();
  double exact = ordered / static_cast<double>(pos.numel() * neg.numel());
  EXPECT_NEAR(Value(*whole), exact, 1e-3);
  MetricBatch mismatched{torch::zeros({3, 2}), torch::zeros({3})};
  EXPECT_FALSE(ClickMetric("auc")->Update(mismatched).ok());
}

// The first number after `key` in `text` (a YAML or JSON value); NaN when there is none.
double NumberAfter(const std::string& text, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(key + "\"?:\\s*([-0-9.eE]+)"))) return NAN;
  return std::stod(m[1].str());
}

// Writes `dir`/clicks from scripts/make_clicks_data.py's planted teacher; the script's exit code.
int MakeClicks(const std::string& dir, const std::string& rows, const std::string& test_rows,
               const std::string& vocab_scale) {
  auto made = testing::RunProcess(
      {KILN_PYTHON_EXE, std::string(KILN_SOURCE_DIR) + "/scripts/make_clicks_data.py", "--out",
       dir + "/clicks", "--rows", rows, "--test-rows", test_rows, "--vocab-scale", vocab_scale});
  EXPECT_EQ(made.exit_code, 0) << made.err;
  return made.exit_code;
}

// The experiment end to end on a small generated set: kiln train reaches near the teacher's AUC
// (measured: test AUC 0.767 against the teacher's 0.794 on these 300k rows, one epoch), kiln
// predict gives a probability per line, and a bad line stops training with one line naming it.
TEST(ClicksDlrm, TrainsNearTheTeachersAucPredictsAndRefusesABadLine) {
  testing::TempDir dir;
  ASSERT_EQ(MakeClicks(dir.path(), "300000", "50000", "0.02"), 0);
  double teacher =
      NumberAfter(testing::ReadFile(dir.path() + "/clicks/teacher.json"), "teacher_test_auc");
  ASSERT_GT(teacher, 0.75);
  std::string run = dir.path() + "/run";
  auto trained =
      testing::RunProcess({KILN_BINARY, "train", "experiment=clicks_dlrm",
                           "paths.data_dir=" + dir.path(), "data.num_embeddings_per_feature=5000",
                           "hydra.run.dir=" + run, "trainer.enable_progress_bar=false"});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  std::string metrics = testing::ReadFile(run + "/test_metrics.yaml");
  double auc = NumberAfter(metrics, "test/auc");
  EXPECT_GT(auc, teacher - 0.035) << metrics;
  EXPECT_LT(auc, teacher + 0.01) << metrics;
  EXPECT_LT(NumberAfter(metrics, "test/normalized_entropy"), 0.9) << metrics;
  EXPECT_NEAR(NumberAfter(metrics, "test/calibration"), 1.0, 0.1) << metrics;

  auto predicted = testing::RunProcess(
      {KILN_BINARY, "predict", "run_dir=" + run, "hydra.run.dir=" + dir.path() + "/predict"});
  ASSERT_EQ(predicted.exit_code, 0) << predicted.err;
  std::ifstream csv(dir.path() + "/predict/predictions.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "path,probability");
  int64_t rows = 0;
  while (std::getline(csv, line)) {
    double p = std::stod(line.substr(line.rfind(',') + 1));
    ASSERT_TRUE(p > 0 && p < 1) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 50000);

  // kiln::Predictor (what kiln serve answers with): a raw Criteo line, with or without its label.
  auto predictor = Predictor::Load(run);
  ASSERT_TRUE(predictor.ok()) << predictor.status();
  for (const std::string& input : {Line(), Line().substr(2) + "\n"}) {
    auto answer = (*predictor)->Predict(input);
    ASSERT_TRUE(answer.ok()) << answer.status();
    ASSERT_EQ(answer->fields.size(), 1u);
    EXPECT_EQ(answer->fields[0].first, "probability");
    double p = answer->fields[0].second->as_float();
    EXPECT_TRUE(p > 0 && p < 1) << p;
  }
  auto wrong = (*predictor)->Predict("1\t2");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("has 2 fields"), std::string::npos) << wrong.status();

  dir.Write("bad/clicks/train.tsv", Line() + "\n" + WithField(Line(), 0, "7") + "\n");
  auto refused = testing::RunProcess({KILN_BINARY, "train", "experiment=clicks_dlrm",
                                      "paths.data_dir=" + dir.path() + "/bad",
                                      "hydra.run.dir=" + dir.path() + "/bad_run"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("bad/clicks/train.tsv:2: label '7' is not 0 or 1"), std::string::npos)
      << refused.err;
  EXPECT_EQ(refused.err.find("terminate"), std::string::npos) << refused.err;
}

// Tables that cannot be allocated (26 of 2e9 x 64 floats, 512 GB each) stop the run in one line
// that says so in words, never an abort or LibTorch's message.
TEST(ClicksDlrm, TablesLargerThanMemoryStopInOneLine) {
  testing::TempDir dir;
  dir.Write("clicks/train.tsv", Line("1") + "\n" + Line("0") + "\n");
  auto r = testing::RunProcess(
      {KILN_BINARY, "train", "experiment=clicks_dlrm", "paths.data_dir=" + dir.path(),
       "data.num_embeddings_per_feature=2000000000", "model.embedding_dim=64",
       "model.dense_arch_layer_sizes=[64]", "hydra.run.dir=" + dir.path() + "/run", "test=false"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("kiln train ran out of memory (an allocation of 512000000000 bytes failed)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("c10::"), std::string::npos) << r.err;
}

// The row-wise accumulators and the rest of the optimizer state resume from a checkpoint: one
// epoch, then a second resumed from last.ckpt, ends where two epochs in one run end; read as a
// stream, a run stopped mid-epoch resumes bitwise too.
TEST(ClicksDlrm, ResumedRunEndsWhereAnUninterruptedOneEnds) {
  testing::TempDir dir;
  ASSERT_EQ(MakeClicks(dir.path(), "20000", "100", "0.01"), 0);
  auto train = [&](const std::string& run, const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {KILN_BINARY,
                                     "train",
                                     "experiment=clicks_dlrm",
                                     "paths.data_dir=" + dir.path(),
                                     "data.num_embeddings_per_feature=3000",
                                     "hydra.run.dir=" + dir.path() + "/" + run,
                                     "trainer.enable_progress_bar=false",
                                     "trainer.num_threads=1",
                                     "test=false"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = testing::RunProcess(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.err + r.out;
  };
  train("straight", {"trainer.max_epochs=2"});
  train("resumed", {"trainer.max_epochs=1"});
  std::string resumed = train("resumed", {"trainer.max_epochs=2", "ckpt_path=last"});
  EXPECT_NE(resumed.find("resumed from"), std::string::npos) << resumed;
  // The last line of each metrics.csv: epoch 1's values.
  auto last_line = [](const std::string& path) {
    std::string text = testing::ReadFile(path);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text.substr(text.rfind('\n') + 1);
  };
  std::string straight_metrics = last_line(dir.path() + "/straight/metrics.csv");
  EXPECT_NE(straight_metrics.find("0."), std::string::npos);
  EXPECT_EQ(last_line(dir.path() + "/resumed/metrics.csv"), straight_metrics);

  // data.stream: stopped mid-epoch (step 50 of 2 x 40) and resumed, the stream is read again up to
  // there and the run ends bitwise where the uninterrupted one ends.
  std::vector<std::string> stream = {"data.stream=true",
                                     "data.val=" + dir.path() + "/clicks/test.tsv",
                                     "data.shuffle_buffer=3000"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), stream.begin(), stream.end());
    return extra;
  };
  std::string log = train("stream_straight", with({"trainer.max_epochs=2"}));
  EXPECT_NE(log.find("criteo: data.train: 20000 rows in 1 files"), std::string::npos) << log;
  train("stream_resumed", with({"trainer.max_epochs=2", "trainer.max_steps=50"}));
  resumed = train("stream_resumed", with({"trainer.max_epochs=2", "ckpt_path=last"}));
  EXPECT_NE(resumed.find("resumed from"), std::string::npos) << resumed;
  // The line before the last: epoch 1's validation metrics (the last, the training loss's mean
  // over the epoch, counts only the resumed run's part of it, as Lightning's does).
  auto validation_line = [](const std::string& path) {
    std::string text = testing::ReadFile(path);
    while (!text.empty() && text.back() == '\n') text.pop_back();
    text = text.substr(0, text.rfind('\n'));
    return text.substr(text.rfind('\n') + 1);
  };
  std::string stream_metrics = validation_line(dir.path() + "/stream_straight/metrics.csv");
  EXPECT_NE(stream_metrics.find(",0.7"), std::string::npos) << stream_metrics;  // val/auc
  EXPECT_EQ(validation_line(dir.path() + "/stream_resumed/metrics.csv"), stream_metrics);
}

// The largest relative difference (by norm) between two models' tensors of the same names.
double WorstRelativeDifference(const std::map<std::string, torch::Tensor>& a,
                               const std::map<std::string, torch::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (const auto& [name, t] : b) {
    auto it = a.find(name);
    if (it == a.end() || it->second.sizes() != t.sizes()) {
      ADD_FAILURE() << name << " is missing or of another shape";
      return 1;
    }
    worst = std::max(
        worst, (it->second - t).norm().item<double>() / std::max(t.norm().item<double>(), 1e-12));
  }
  return worst;
}

// With several workers the tables are sharded across them (table-wise and row-wise, pooled rows
// exchanged all-to-all on Gloo) and the MLPs are data-parallel: 2 and 4 workers of 512 / N rows
// each train to the weights and test AUC of one worker of 512 rows, each worker holding about
// 1 / N of the tables; sharded checkpoints resume 4 -> 2 -> 1 workers on the uninterrupted run's
// curve.
TEST(ClicksDlrm, TablesShardedAcrossWorkersTrainAsOneWorkerAndResumeAtAnotherWorldSize) {
  testing::TempDir dir;
  ASSERT_EQ(MakeClicks(dir.path(), "12000", "1000", "0.01"), 0);
  auto train = [&](const std::string& run, int workers, std::vector<std::string> extra) {
    std::vector<std::string> argv = {KILN_BINARY,
                                     "train",
                                     "experiment=clicks_dlrm",
                                     "paths.data_dir=" + dir.path(),
                                     "data.num_embeddings_per_feature=2000",
                                     "data.batch_size=" + std::to_string(512 / workers),
                                     "trainer.devices=" + std::to_string(workers),
                                     "hydra.run.dir=" + dir.path() + "/" + run,
                                     "trainer.enable_progress_bar=false"};
    if (workers == 1) argv.push_back("trainer.num_threads=2");
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto r = testing::RunProcess(argv);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.err + r.out;
  };
  // test/auc from a run's log.
  auto test_auc = [](const std::string& log) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(log, m, std::regex("test/auc ([0-9.]+)"))) << log;
    return m.empty() ? 0.0 : std::stod(m[1]);
  };
  const std::string one = train("one", 1, {});
  const auto whole = testing::CheckpointWeights(dir.path() + "/one/checkpoints/last.ckpt");
  ASSERT_FALSE(whole.empty());
  for (int workers : {2, 4}) {
    for (std::string how : {"table_wise", "row_wise"}) {
      const std::string run = how + std::to_string(workers);
      const std::string log = train(run, workers, {"trainer.table_sharding=" + how});
      // What each rank holds: about 1 / N of the 26 tables of 2000 x 16 floats (3.17 MB).
      std::smatch m;
      ASSERT_TRUE(std::regex_search(
          log, m,
          std::regex("sharded tables: 26 tables over ([0-9]) ranks, ([0-9]+) table-wise and "
                     "([0-9]+) row-wise; rank 0 holds ([0-9.]+) MB of their ([0-9.]+) MB")))
          << log;
      EXPECT_EQ(std::stoi(m[1]), workers);
      EXPECT_EQ(std::stoi(m[how == "row_wise" ? 3 : 2]), 26);
      const double held = std::stod(m[4]), all = std::stod(m[5]);
      EXPECT_NEAR(all, 26 * 2000 * 16 * 4 / (1024.0 * 1024.0), 0.01);
      // Table-wise, 26 tables of one size make 7 on rank 0 of 4 (13 of 2); row-wise, 500 rows.
      EXPECT_LE(held, all / workers * (how == "row_wise" ? 1.0 : 28.0 / 26.0) + 0.01) << log;
      EXPECT_GE(held, all / workers - 0.01) << log;
      // The checkpoint is a folder of one piece per rank; joined, it is the one-worker model.
      EXPECT_TRUE(
          testing::FileExists(absl::StrCat(dir.path(), "/", run, "/checkpoints/last.ckpt/rank-",
                                           workers - 1, "-of-", workers, ".ckpt")));
      EXPECT_LT(
          WorstRelativeDifference(
              testing::CheckpointWeights(dir.path() + "/" + run + "/checkpoints/last.ckpt"), whole),
          1e-4)
          << run;
      EXPECT_NEAR(test_auc(log), test_auc(one), 0.002) << run;
    }
  }
  // 4 workers row-wise for 8 steps, 2 table-wise to step 16, then 1 to the end (23 steps).
  train("chain", 4, {"trainer.max_steps=8", "trainer.table_sharding=row_wise", "test=false"});
  train("chain", 2, {"trainer.max_steps=16", "ckpt_path=last", "test=false"});
  const std::string last = train("chain", 1, {"ckpt_path=last"});
  EXPECT_NE(last.find("resumed from"), std::string::npos) << last;
  EXPECT_LT(WorstRelativeDifference(
                testing::CheckpointWeights(dir.path() + "/chain/checkpoints/last.ckpt"), whole),
            1e-4);
  EXPECT_NEAR(test_auc(last), test_auc(one), 1e-4);

  // fsdp does not shard tables: refused in one line, up front.
  auto refused = testing::RunProcess(
      {KILN_BINARY, "train", "experiment=clicks_dlrm", "paths.data_dir=" + dir.path(),
       "data.num_embeddings_per_feature=2000", "hydra.run.dir=" + dir.path() + "/fsdp",
       "trainer.devices=2", "trainer.strategy=fsdp"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("kiln: error: trainer.strategy=fsdp: the model's table "
                             "sparse_arch.t_cat_0 gives sparse gradients"),
            std::string::npos)
      << refused.err;
}

}  // namespace recsys_test
}  // namespace kiln
