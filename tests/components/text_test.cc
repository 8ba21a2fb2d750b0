// Text components: tokenizers (char, whitespace, sentencepiece with its cache and special ids),
// reading JSONL/CSV/TSV/folders with file:line errors, padding collation and length bucketing,
// the text data modules, and the text models' shapes, masking and causality.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <filesystem>
#include <numeric>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "components/models/causal_attention.h"
#include "components/models/gelu_tanh.h"
#include "components/models/generation.h"
#include "components/models/llama_kernels.h"
#include "components/models/model.h"
#include "components/models/text_transformer.h"
#include "components/text/text_data_module.h"
#include "components/text/text_files.h"
#include "components/text/tokenizer.h"
#include "components/text/utf8.h"
#include "lib/base/torch_compat.h"
#include "lib/data/padding.h"
#include "tests/components/instantiate.h"
#include "tests/support/process.h"

namespace kiln {
namespace text_test {

using testing::Instantiate;
using testing::InstantiateOk;
using text::SpecialTokens;
using text::Tokenizer;

std::vector<std::string> Corpus() {
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) {
    texts.push_back("the whale swam " + std::to_string(i % 7) +
                    " leagues; Ahab saw the white whale\nand the sea");
  }
  return texts;
}

TEST(CharTokenizer, RoundTripsAndReservesSpecialIds) {
  auto tok = InstantiateOk<Tokenizer>("_target_: char\nvocab_size: 64\n", "data.tokenizer");
  ASSERT_TRUE(tok->Fit({"héllo wörld", "hello"}, "test").ok());
  std::vector<int64_t> ids = tok->Encode("héllo");
  ASSERT_EQ(ids.size(), 5u);  // code points, not bytes
  for (int64_t id : ids) EXPECT_GE(id, SpecialTokens::kCount);
  EXPECT_EQ(tok->Decode(ids), "héllo");
  EXPECT_EQ(tok->Encode("z")[0], SpecialTokens::kUnk);  // never seen
  std::vector<int64_t> with_specials = {SpecialTokens::kBos, ids[0], SpecialTokens::kPad,
                                        SpecialTokens::kEos};
  EXPECT_EQ(tok->Decode(with_specials), "h");
  EXPECT_NE(tok->fingerprint(), 0u);
}

TEST(CharTokenizer, VocabSizeBoundsTheIds) {
  auto tok = InstantiateOk<Tokenizer>("_target_: char\nvocab_size: 8\n", "data.tokenizer");
  ASSERT_TRUE(tok->Fit({"aaaabbbccd"}, "test").ok());  // room for 3 characters after 5 specials
  for (int64_t id : tok->Encode("abcd")) EXPECT_LT(id, 8);
  EXPECT_EQ(tok->Encode("d")[0], SpecialTokens::kUnk);
  EXPECT_FALSE(Instantiate<Tokenizer>("_target_: char\nvocab_size: 5\n", "data.tokenizer").ok());
}

TEST(WhitespaceTokenizer, LowercasesCountsAndMapsRareWordsToUnk) {
  auto tok = InstantiateOk<Tokenizer>("_target_: whitespace\nvocab_size: 100\nmin_frequency: 2\n",
                                      "data.tokenizer");
  ASSERT_TRUE(tok->Fit({"The whale", "the WHALE swam", "once"}, "test").ok());
  std::vector<int64_t> ids = tok->Encode("the  whale\tonce");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], tok->Encode("THE")[0]);
  EXPECT_EQ(ids[2], SpecialTokens::kUnk);  // seen once
  EXPECT_EQ(tok->Decode({ids[0], ids[1]}), "the whale");
}

TEST(Tokenizer, EncodeAllMatchesEncodeInOrder) {
  auto tok = InstantiateOk<Tokenizer>("_target_: char\n", "data.tokenizer");
  std::vector<std::string> texts = Corpus();
  ASSERT_TRUE(tok->Fit(texts, "test").ok());
  auto all = tok->EncodeAll(texts);
  ASSERT_EQ(all.size(), texts.size());
  for (size_t i = 0; i < texts.size(); i += 37) EXPECT_EQ(all[i], tok->Encode(texts[i]));
}

TEST(SentencePiece, TrainsCachesAndKeepsTheSharedSpecialIds) {
  testing::TempDir dir;
  for (const char* type : {"unigram", "bpe"}) {
    std::string yaml = std::string("_target_: sentencepiece\nmodel_type: ") + type +
                       "\nvocab_size: 60\ncache_dir: " + dir.path() + "\n";
    auto tok = InstantiateOk<Tokenizer>(yaml, "data.tokenizer");
    ASSERT_TRUE(tok->Fit(Corpus(), "test").ok()) << type;
    std::vector<int64_t> ids = tok->Encode("the white whale");
    ASSERT_FALSE(ids.empty());
    for (int64_t id : ids)
      EXPECT_GE(id, SpecialTokens::kCount) << type;  // no <unk>: every character was seen
    EXPECT_EQ(tok->Decode(ids), "the white whale") << type;
    // A second tokenizer with the same options and corpus loads the cached model: same fingerprint.
    auto again = InstantiateOk<Tokenizer>(yaml, "data.tokenizer");
    ASSERT_TRUE(again->Fit(Corpus(), "test").ok());
    EXPECT_EQ(again->fingerprint(), tok->fingerprint()) << type;
  }
  size_t models = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    models += e.path().extension() == ".model";
  EXPECT_EQ(models, 2u);  // one per model type
  // Another corpus is another key.
  auto other = InstantiateOk<Tokenizer>(
      "_target_: sentencepiece\nvocab_size: 40\ncache_dir: " + dir.path() + "\n", "data.tokenizer");
  ASSERT_TRUE(other->Fit({"a different corpus entirely", "with other words"}, "test").ok());
  auto model_file = InstantiateOk<Tokenizer>(
      "_target_: sentencepiece\nmodel_file: " + dir.path() + "/nope.model\n", "data.tokenizer");
  absl::Status missing = model_file->Fit({}, "test");
  EXPECT_NE(std::string(missing.message()).find("nope.model"), std::string::npos) << missing;
}

// A training line longer than max_sentence_length bytes is left out, as SentencePiece itself would,
// but by kiln and with kiln's warning: SentencePiece's own warning crashed the process (its module
// cannot write to std::cerr).
TEST(SentencePiece, LeavesOutLinesLongerThanMaxSentenceLength) {
  testing::TempDir dir;
  auto tok = InstantiateOk<Tokenizer>(
      "_target_: sentencepiece\nvocab_size: 60\nmax_sentence_length: "
      "200\ncache_dir: " +
          dir.path() + "\n",
      "data.tokenizer");
  std::vector<std::string> texts = Corpus();
  std::string long_line;
  while (long_line.size() <= 200) long_line += "a line far longer than the limit ";
  texts.push_back(long_line + "\n" + long_line);
  ASSERT_TRUE(tok->Fit(texts, "test").ok());
  EXPECT_EQ(tok->Decode(tok->Encode("the white whale")), "the white whale");
}

TEST(Utf8, FindsTheFirstInvalidByte) {
  EXPECT_EQ(text::FindInvalidUtf8("plain ascii"), std::string::npos);
  EXPECT_EQ(text::FindInvalidUtf8("caf\xC3\xA9 \xF0\x9F\x90\xB3"), std::string::npos);
  EXPECT_EQ(text::FindInvalidUtf8("ab\xE9z"), 2u);        // Latin-1 é
  EXPECT_EQ(text::FindInvalidUtf8("\xC0\xAF"), 0u);       // overlong
  EXPECT_EQ(text::FindInvalidUtf8("x\xED\xA0\x80"), 1u);  // surrogate
  EXPECT_EQ(text::FindInvalidUtf8("end\xE2\x82"), 3u);    // truncated
  EXPECT_EQ(text::CountCodePoints("caf\xC3\xA9"), 4);
}

TEST(TextFiles, ReadsJsonlCsvTsvAndFolders) {
  testing::TempDir dir;
  dir.Write("a.jsonl", "{\"body\": \"hello\", \"y\": \"pos\"}\n\n{\"body\": \"bye\", \"y\": 3}\n");
  dir.Write("a.csv", "id,body,y\n1,\"hello, \"\"you\"\"\nthere\",pos\n2,bye,neg\n");
  dir.Write("a.tsv", "body\ty\nhello\tpos\n");
  dir.Write("folder/neg/1.txt", "bad");
  dir.Write("folder/pos/1.txt", "good");
  dir.Write("folder/pos/2.txt", "great");
  text::RecordFields f;
  f.text_field = "body";
  f.label_field = "y";
  auto jsonl = text::ReadLabelledTexts(dir.path() + "/a.jsonl", f, true);
  ASSERT_TRUE(jsonl.ok()) << jsonl.status();
  ASSERT_EQ(jsonl->size(), 2u);
  EXPECT_EQ((*jsonl)[1].label, "3");
  EXPECT_EQ((*jsonl)[1].where, dir.path() + "/a.jsonl:3");
  auto csv = text::ReadLabelledTexts(dir.path() + "/a.csv", f, true);
  ASSERT_TRUE(csv.ok()) << csv.status();
  ASSERT_EQ(csv->size(), 2u);
  EXPECT_EQ((*csv)[0].text, "hello, \"you\"\nthere");
  EXPECT_EQ((*csv)[1].where, dir.path() + "/a.csv:4");  // the quoted line break counts
  auto tsv = text::ReadLabelledTexts(dir.path() + "/a.tsv", f, true);
  ASSERT_TRUE(tsv.ok()) << tsv.status();
  EXPECT_EQ((*tsv)[0].label, "pos");
  auto folder = text::ReadLabelledTexts(dir.path() + "/folder", f, true);
  ASSERT_TRUE(folder.ok()) << folder.status();
  ASSERT_EQ(folder->size(), 3u);
  EXPECT_EQ((*folder)[0].label, "neg");
  EXPECT_EQ((*folder)[2].text, "great");
}

TEST(TextFiles, BadInputNamesFileAndLine) {
  testing::TempDir dir;
  dir.Write("empty.jsonl", "");
  dir.Write("utf8.jsonl",
            "{\"text\": \"ok\", \"label\": \"a\"}\n{\"text\": \"caf\xE9\", \"label\": \"a\"}\n");
  dir.Write("field.jsonl",
            "{\"text\": \"ok\", \"label\": \"a\"}\n{\"body\": \"x\", \"label\": \"a\"}\n");
  dir.Write("label.csv", "text,label\nok,a\nno label,\n");
  dir.Write("json.jsonl", "{\"text\": \"ok\", \"label\": \"a\"}\n{not json\n");
  auto message = [&](const std::string& file) {
    auto r = text::ReadLabelledTexts(dir.path() + "/" + file, {}, true);
    EXPECT_FALSE(r.ok()) << file;
    return r.ok() ? std::string() : std::string(r.status().message());
  };
  EXPECT_NE(message("empty.jsonl").find("empty.jsonl: empty file"), std::string::npos);
  EXPECT_NE(message("utf8.jsonl").find("utf8.jsonl:2: invalid UTF-8 (byte 0xE9"), std::string::npos)
      << message("utf8.jsonl");
  EXPECT_NE(message("field.jsonl")
                .find("field.jsonl:2: no text field 'text' (the line has: body, label)"),
            std::string::npos)
      << message("field.jsonl");
  EXPECT_NE(message("label.csv").find("label.csv:3: no label"), std::string::npos)
      << message("label.csv");
  EXPECT_NE(message("json.jsonl").find("json.jsonl:2: not a JSON object"), std::string::npos);
  EXPECT_NE(message("missing.jsonl").find("missing.jsonl: no such file"), std::string::npos);
}

TEST(PadCollate, PadsWithLengthsAndMask) {
  std::vector<data::Example> examples = {{torch::tensor({7, 8, 9}), torch::tensor(1)},
                                         {torch::tensor({5}), torch::tensor(0)}};
  auto batch = data::PadCollate(examples, 0);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(batch->input.equal(torch::tensor({{7, 8, 9}, {5, 0, 0}})));
  EXPECT_TRUE(batch->lengths.equal(torch::tensor({3, 1})));
  EXPECT_TRUE(batch->mask.equal(torch::tensor({{true, true, true}, {true, false, false}})));
  EXPECT_TRUE(batch->target.equal(torch::tensor({1, 0})));
}

class LengthDataset : public data::Dataset {
 public:
  explicit LengthDataset(std::vector<int64_t> lengths) : lengths_(std::move(lengths)) {}
  int64_t size() const override { return static_cast<int64_t>(lengths_.size()); }
  absl::StatusOr<data::Example> Get(int64_t i, data::SampleRng&) const override {
    return data::Example{torch::ones({lengths_[static_cast<size_t>(i)]}, torch::kInt64),
                         torch::tensor(i)};
  }
  int64_t Length(int64_t i) const override { return lengths_[static_cast<size_t>(i)]; }

 private:
  std::vector<int64_t> lengths_;
};

TEST(BucketByLength, KeepsEverySampleGroupsLengthsAndIsDeterministic) {
  std::vector<int64_t> lengths(103);
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = static_cast<int64_t>((i * 37) % 101);
  LengthDataset ds(lengths);
  std::vector<int64_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  auto a = data::BucketByLength(order, ds, 10, 100, 7, 0);
  auto b = data::BucketByLength(order, ds, 10, 100, 7, 0);
  auto c = data::BucketByLength(order, ds, 10, 100, 7, 1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, order);
  // Within one window every full batch spans a narrow length range.
  for (size_t batch = 0; batch + 1 < a.size() / 10; ++batch) {
    int64_t lo = 1000, hi = -1;
    for (size_t k = batch * 10; k < batch * 10 + 10; ++k) {
      lo = std::min(lo, lengths[static_cast<size_t>(a[k])]);
      hi = std::max(hi, lengths[static_cast<size_t>(a[k])]);
    }
    EXPECT_LE(hi - lo, 15) << "batch " << batch;
  }
  // The partial batch stays last.
  EXPECT_EQ(std::vector<int64_t>(a.end() - 3, a.end()).size(), 3u);
}

TEST(BucketByLength, SortaGradEpochsGoShortestFirstThenBucket) {
  std::vector<int64_t> lengths = {5, 3, 9, 3, 1, 7, 2, 8, 6, 4, 3, 0};
  LengthDataset ds(lengths);
  std::vector<int64_t> order = {11, 3, 0, 7, 1, 9, 4, 10, 2, 8, 6, 5};  // a shuffled epoch
  data::BatchOrderFn fn = data::SortaGrad(2, data::LengthBucketing(4, 100, 7));
  // Ties keep the sampler's order (3 before 1 before 10, all of length 3).
  const std::vector<int64_t> shortest_first = {11, 4, 6, 3, 1, 10, 9, 0, 8, 5, 7, 2};
  EXPECT_EQ(fn(order, 0, ds), shortest_first);
  EXPECT_EQ(fn(order, 1, ds), shortest_first);
  EXPECT_EQ(fn(order, 2, ds), data::BucketByLength(order, ds, 4, 100, 7, 2));
  EXPECT_EQ(data::LengthBucketing(4, 100, 7)(order, 0, ds),
            data::BucketByLength(order, ds, 4, 100, 7, 0));
}
TEST(TextDataModules, LabelledTextTokenizesPadsAndKeepsLabelOrder) {
  testing::TempDir dir;
  std::string train;
  for (int i = 0; i < 40; ++i)
    train += i % 2 ? "{\"text\": \"buy cheap pills now\", \"label\": \"spam\"}\n"
                   : "{\"text\": \"meeting at noon\", \"label\": \"ham\"}\n";
  dir.Write("train.jsonl", train);
  dir.Write(
      "test.jsonl",
      "{\"text\": \"cheap\", \"label\": \"spam\"}\n{\"text\": \"noon\", \"label\": \"eggs\"}\n");
  auto dm = InstantiateOk<data::DataModule>(
      "_target_: labelled_text\ntrain: " + dir.path() + "/train.jsonl\ntest: " + dir.path() +
          "/test.jsonl\nadd_cls: true\nbatch_size: 4\ntokenizer: {_target_: whitespace, "
          "min_frequency: 1}\n",
      "data");
  ASSERT_TRUE(dm);
  ASSERT_TRUE(dm->Setup(data::Stage::kFit).ok());
  EXPECT_EQ(dm->class_names(), (std::vector<std::string>{"ham", "spam"}));
  EXPECT_EQ(dm->train_dataset()->size(), 36);  // 10% held out
  EXPECT_EQ(dm->val_dataset()->size(), 4);
  data::SampleRng rng(0, 0, 0);
  auto example = dm->train_dataset()->Get(0, rng);
  ASSERT_TRUE(example.ok());
  EXPECT_EQ(example->input[0].item<int64_t>(), SpecialTokens::kCls);
  absl::Status test = dm->Setup(data::Stage::kTest);
  EXPECT_NE(std::string(test.message())
                .find("test.jsonl:2: label 'eggs' is not one of the labels [ham, spam]"),
            std::string::npos)
      << test;
}

// max_length cuts a long text at its end (right, the default) or at its start (left, keeping the
// last tokens), after <cls>; an unknown side is refused with the option's name.
TEST(TextDataModules, LabelledTextTruncatesOnTheConfiguredSide) {
  testing::TempDir dir;
  dir.Write("train.jsonl",
            "{\"text\": \"a b c d e f\", \"label\": \"x\"}\n{\"text\": \"b\", \"label\": \"y\"}\n");
  auto tokens = [&](const std::string& side) {
    auto dm = InstantiateOk<data::DataModule>(
        "_target_: labelled_text\ntrain: " + dir.path() +
            "/train.jsonl\nval_fraction: 0\nmax_length: 4\nadd_cls: true\ntruncation_side: " +
            side + "\ntokenizer: {_target_: char}\n",
        "data");
    absl::Status setup = dm ? dm->Setup(data::Stage::kFit) : absl::InternalError("no module");
    EXPECT_TRUE(setup.ok()) << setup;
    data::SampleRng rng(0, 0, 0);
    for (int64_t i = 0; i < dm->train_dataset()->size(); ++i) {
      torch::Tensor input = dm->train_dataset()->Get(i, rng)->input;
      if (input.numel() > 2)  // the long text
        return std::vector<int64_t>(input.data_ptr<int64_t>(),
                                    input.data_ptr<int64_t>() + input.numel());
    }
    return std::vector<int64_t>();
  };
  auto tok = InstantiateOk<Tokenizer>("_target_: char\n", "data.tokenizer");
  ASSERT_TRUE(tok->Fit({"a b c d e f", "b"}, "test").ok());
  std::vector<int64_t> ids = tok->Encode("a b c d e f");  // 11 ids
  std::vector<int64_t> first = {SpecialTokens::kCls, ids[0], ids[1], ids[2]};
  std::vector<int64_t> last = {SpecialTokens::kCls, ids[8], ids[9], ids[10]};
  EXPECT_EQ(tokens("right"), first);
  EXPECT_EQ(tokens("left"), last);
  auto bad = Instantiate<data::DataModule>(
      "_target_: labelled_text\ntrain: x.jsonl\ntruncation_side: middle\ntokenizer: {_target_: "
      "char}\n",
      "data");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      std::string(bad.status().message())
          .find("data.truncation_side' of datamodule 'labelled_text' must be one of: right, left"),
      std::string::npos)
      << bad.status();
}

TEST(TextDataModules, TextCorpusBlocksCoverTheEvaluationStreamOnce) {
  testing::TempDir dir;
  dir.Write("train.txt", std::string(200, 'a') + "bc\n");
  dir.Write("val.txt", "abcabcabcab");  // 11 characters: 10 predictions
  auto dm = InstantiateOk<data::DataModule>(
      "_target_: text_corpus\ntrain: [" + dir.path() + "/train.txt]\nval: [" + dir.path() +
          "/val.txt]\nblock_size: 4\nstride: 2\ntokenizer: {_target_: char}\n",
      "data");
  ASSERT_TRUE(dm);
  ASSERT_TRUE(dm->Setup(data::Stage::kFit).ok());
  EXPECT_EQ(dm->train_dataset()->size(), (203 - 1 - 4) / 2 + 1);
  EXPECT_EQ(dm->val_dataset()->size(), 3);  // 4 + 4 + 2 (padded) predictions
  data::SampleRng rng(0, 0, 0);
  auto last = dm->val_dataset()->Get(2, rng);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->target.ne(0).sum().item<int64_t>(), 2);
  auto first = dm->val_dataset()->Get(0, rng);
  EXPECT_TRUE(first->input.narrow(0, 1, 3).equal(first->target.narrow(0, 0, 3)));  // shifted by one
  auto* text_dm = dynamic_cast<text::TextDataModule*>(dm.get());
  ASSERT_NE(text_dm, nullptr);
  EXPECT_NEAR(text_dm->tokens_per_char("val"), 10.0 / 11.0, 1e-9);
  EXPECT_EQ(text_dm->block_size(), 4);  // what a language model generates within
}

// Supervised fine-tuning: the targets of an example are its next tokens with the prompt's
// predictions masked (SpecialTokens::kIgnore); the language-modeling loss (cross-entropy ignoring
// them, as the task computes it) of a padded batch is then the mean of -log p(token) over the
// response tokens alone, computed here term by term, and equals the examples' losses taken one at a
// time and weighted by their response tokens.
TEST(TextDataModules, InstructionTextLossIsTheResponsesMeanCrossEntropy) {
  testing::TempDir dir;
  dir.Write("sft.jsonl",
            "{\"prompt\": \"say hi\", \"response\": \"hi\"}\n"
            "{\"prompt\": \"count\", \"response\": \"one two three\"}\n"
            "{\"prompt\": \"\", \"response\": \"ok\"}\n");
  auto dm = InstantiateOk<data::DataModule>(
      "_target_: instruction_text\ntrain: " + dir.path() +
          "/sft.jsonl\nval_fraction: 0\nblock_size: 32\ntokenizer: {_target_: char}\n",
      "data");
  ASSERT_TRUE(dm);
  ASSERT_TRUE(dm->Setup(data::Stage::kFit).ok());
  ASSERT_EQ(dm->train_dataset()->size(), 3);
  auto* text_dm = dynamic_cast<text::TextDataModule*>(dm.get());
  auto tok = *text_dm->tokenizer();
  data::SampleRng rng(0, 0, 0);
  std::vector<data::Example> examples;
  std::vector<std::pair<size_t, size_t>> prompt_response;  // token counts
  const std::vector<std::pair<std::string, std::string>> records = {
      {"say hi", "hi"}, {"count", "one two three"}, {"", "ok"}};
  for (int64_t i = 0; i < 3; ++i) {
    // The split keeps every record (val_fraction 0), in an order of its own: find record i.
    int64_t index = 0;
    while (index < 3 &&
           dm->train_dataset()->Source(index) != dir.path() + "/sft.jsonl:" + std::to_string(i + 1))
      ++index;
    ASSERT_LT(index, 3) << i;
    examples.push_back(*dm->train_dataset()->Get(index, rng));
    auto [prompt, response] = records[static_cast<size_t>(i)];
    std::vector<int64_t> p = tok->Encode(prompt), r = tok->Encode(response);
    // input: <s> prompt response; target: response </s> at the prompt's last position on.
    std::vector<int64_t> input = {SpecialTokens::kBos}, target(p.size(), SpecialTokens::kIgnore);
    input.insert(input.end(), p.begin(), p.end());
    input.insert(input.end(), r.begin(), r.end());
    target.insert(target.end(), r.begin(), r.end());
    target.push_back(SpecialTokens::kEos);
    EXPECT_TRUE(examples.back().input.equal(torch::tensor(input))) << i;
    EXPECT_TRUE(examples.back().target.equal(torch::tensor(target))) << i;
    prompt_response.emplace_back(p.size(), r.size() + 1);
  }
  // Characters: one token each, and </s> counts for the end of a response.
  EXPECT_NEAR(text_dm->tokens_per_char("train"), 1.0, 1e-12);

  torch::manual_seed(0);
  auto model =
      InstantiateOk<Model>("_target_: gpt\nvocab_size: " + std::to_string(tok->vocab_size()) +
                               "\nblock_size: 32\ndim: 16\ndepth: 1\nheads: 2\nmlp_dim: 32\n",
                           "model");
  ASSERT_TRUE(model);
  model->eval();
  torch::NoGradGuard no_grad;
  auto loss_of = [&](std::vector<data::Example> batch_examples) {
    auto batch = dm->loader_options().collate(batch_examples);
    EXPECT_TRUE(batch.ok());
    torch::Tensor logits = model->forward(batch->input);
    return torch::nn::functional::cross_entropy(
               logits.reshape({-1, logits.size(2)}), batch->target.reshape({-1}),
               torch::nn::functional::CrossEntropyFuncOptions().ignore_index(
                   SpecialTokens::kIgnore))
        .item<double>();
  };
  const double batch_loss = loss_of(examples);
  // Term by term: the response positions of each example, alone in its own forward.
  double sum = 0, weighted = 0;
  int64_t count = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    torch::Tensor logp = torch::log_softmax(model->forward(examples[i].input.unsqueeze(0))[0], -1);
    const auto [prompt, response] = prompt_response[i];
    for (size_t t = prompt; t < prompt + response; ++t) {
      sum -=
          logp[static_cast<int64_t>(t)][examples[i].target[static_cast<int64_t>(t)].item<int64_t>()]
              .item<double>();
      ++count;
    }
    weighted += loss_of({examples[i]}) * static_cast<double>(response);
  }
  EXPECT_EQ(count, 3 + 14 + 3);
  EXPECT_NEAR(batch_loss, sum / static_cast<double>(count), 1e-5);
  EXPECT_NEAR(batch_loss, weighted / static_cast<double>(count), 1e-5);

  // A prompt that leaves no room for its response is refused, naming the record.
  auto tight = InstantiateOk<data::DataModule>(
      "_target_: instruction_text\ntrain: " + dir.path() +
          "/sft.jsonl\nval_fraction: 0\nblock_size: 4\ntokenizer: {_target_: char}\n",
      "data");
  absl::Status refused = tight->Setup(data::Stage::kFit);
  const std::string why(refused.message());
  EXPECT_TRUE(why.find("sft.jsonl:1: the prompt takes 6 tokens") != std::string::npos ||
              why.find("sft.jsonl:2: the prompt takes 5 tokens") != std::string::npos)
      << why;
  EXPECT_NE(why.find("data.block_size=4 leaves none of the response"), std::string::npos) << why;
}

// data.packing: short examples share rows of block_size tokens, and the models keep each to itself
// (its own causal attention and positions from 0), so a batch of packed rows gives every example
// the logits it has alone, and the loss and its gradients of the padded batch of the same examples.
TEST(TextDataModules, InstructionTextPackedRowsGiveThePaddedBatchsLoss) {
  // Positions count from each example's start; padding (-1) is a segment of its own.
  PackedRows unpacked = Unpack(torch::tensor({0, 0, 1, 1, 1, -1}, torch::kInt64).unsqueeze(0));
  EXPECT_TRUE(unpacked.positions.equal(torch::tensor({{0, 1, 0, 1, 2, 0}}, torch::kInt64)));
  EXPECT_TRUE(
      unpacked.allowed[0][0][3].equal(torch::tensor({false, false, true, true, false, false})));

  testing::TempDir dir;
  dir.Write("sft.jsonl",
            "{\"prompt\": \"say hi\", \"response\": \"hi\"}\n"
            "{\"prompt\": \"count\", \"response\": \"one two three\"}\n"
            "{\"prompt\": \"\", \"response\": \"ok\"}\n"
            "{\"prompt\": \"q\", \"response\": \"a\"}\n"
            "{\"prompt\": \"name it\", \"response\": \"kiln\"}\n");
  auto module = [&](bool packing) {
    auto dm = InstantiateOk<data::DataModule>(
        "_target_: instruction_text\ntrain: " + dir.path() +
            "/sft.jsonl\nval_fraction: 0\nblock_size: 24\npacking: " +
            (packing ? "true" : "false") + "\ntokenizer: {_target_: char}\n",
        "data");
    EXPECT_TRUE(dm && dm->Setup(data::Stage::kFit).ok());
    return dm;
  };
  auto padded = module(false), packed = module(true);
  ASSERT_TRUE(padded && packed);
  const int64_t examples = padded->train_dataset()->size(), rows = packed->train_dataset()->size();
  ASSERT_EQ(examples, 5);
  ASSERT_LT(rows, examples);
  data::SampleRng rng(0, 0, 0);
  auto all = [&](const data::DataModule& dm) {
    std::vector<data::Example> list;
    for (int64_t i = 0; i < dm.train_dataset()->size(); ++i)
      list.push_back(*dm.train_dataset()->Get(i, rng));
    auto batch = dm.loader_options().collate(list);
    EXPECT_TRUE(batch.ok()) << batch.status();
    return *batch;
  };
  data::Batch one_each = all(*padded), together = all(*packed);
  ASSERT_TRUE(together.segments.defined());
  EXPECT_FALSE(one_each.segments.defined());
  EXPECT_LE(together.input.size(1), 24);
  // The rows hold the examples, in order, whole: the same ids and targets.
  int64_t example = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const torch::Tensor seg = together.segments[r];
    for (int64_t s = 0; s <= seg.max().item<int64_t>(); ++s, ++example) {
      torch::Tensor at = seg.eq(s);
      const int64_t length = one_each.lengths[example].item<int64_t>();
      ASSERT_EQ(at.sum().item<int64_t>(), length) << r << " " << s;
      EXPECT_TRUE(
          together.input[r].masked_select(at).equal(one_each.input[example].narrow(0, 0, length)));
      EXPECT_TRUE(together.target[r].masked_select(at).equal(
          one_each.target[example].narrow(0, 0, length)));
    }
  }
  EXPECT_EQ(example, examples);

  auto* text_dm = dynamic_cast<text::TextDataModule*>(padded.get());
  const std::string vocab = std::to_string((*text_dm->tokenizer())->vocab_size());
  for (const std::string& config :
       {"_target_: gpt\nvocab_size: " + vocab +
            "\nblock_size: 32\ndim: 16\ndepth: 2\nheads: 2\nmlp_dim: 32\n",
        "_target_: llama\nvocab_size: " + vocab +
            "\nmax_positions: 32\ndim: 16\ndepth: 2\nheads: 4\nkv_heads: 2\nmlp_dim: 32\n"}) {
    SCOPED_TRACE(config);
    torch::manual_seed(0);
    auto model = InstantiateOk<Model>(config, "model");
    auto* lm = dynamic_cast<CausalLm*>(model.get());
    ASSERT_NE(lm, nullptr);
    auto loss = [](const torch::Tensor& logits, const torch::Tensor& target) {
      return torch::nn::functional::cross_entropy(
          logits.reshape({-1, logits.size(2)}), target.reshape({-1}),
          torch::nn::functional::CrossEntropyFuncOptions().ignore_index(SpecialTokens::kIgnore));
    };
    auto gradients = [&] {
      std::vector<torch::Tensor> grads;
      for (auto& p : model->parameters()) {
        grads.push_back(p.grad().clone());
        p.mutable_grad().zero_();
      }
      return grads;
    };
    torch::Tensor padded_logits = model->forward(one_each.input);
    torch::Tensor padded_loss = loss(padded_logits, one_each.target);
    padded_loss.backward();
    std::vector<torch::Tensor> padded_grads = gradients();
    torch::Tensor packed_logits = lm->forward_packed(together.input, together.segments);
    torch::Tensor packed_loss = loss(packed_logits, together.target);
    packed_loss.backward();
    std::vector<torch::Tensor> packed_grads = gradients();
    EXPECT_NEAR(packed_loss.item<double>(), padded_loss.item<double>(), 1e-5);
    for (size_t i = 0; i < padded_grads.size(); ++i)
      EXPECT_TRUE(torch::allclose(packed_grads[i], padded_grads[i], 1e-4, 1e-6)) << i;
    // Position by position: each example's logits in its row are those it has alone.
    example = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const torch::Tensor seg = together.segments[r];
      for (int64_t s = 0; s <= seg.max().item<int64_t>(); ++s, ++example) {
        torch::Tensor at = seg.eq(s).nonzero().squeeze(1);
        const int64_t length = at.size(0);
        EXPECT_LT(
            (packed_logits[r].index_select(0, at) - padded_logits[example].narrow(0, 0, length))
                .abs()
                .max()
                .item<double>(),
            1e-5)
            << r << " " << s;
      }
    }
    // bf16-mixed: llama's plain rows take kiln's causal kernel (q, k and v side by side, each
    // key/value head repeated for its query heads), packed rows SDPA with a mask; one packed
    // segment is the plain row, so the two agree as far as bf16 allows, values and gradients.
    if (config.find("llama") != std::string::npos) {
      compat::SetCpuAutocast(true, torch::kBFloat16);
      torch::Tensor kernel = model->forward(one_each.input);
      loss(kernel, one_each.target).backward();
      std::vector<torch::Tensor> kernel_grads = gradients();
      torch::Tensor sdpa = lm->forward_packed(one_each.input, torch::zeros_like(one_each.input));
      loss(sdpa, one_each.target).backward();
      std::vector<torch::Tensor> sdpa_grads = gradients();
      compat::SetCpuAutocast(false, torch::kBFloat16);
      EXPECT_LT((kernel.to(torch::kFloat32) - sdpa.to(torch::kFloat32)).abs().max().item<double>(),
                0.05);
      for (size_t i = 0; i < kernel_grads.size(); ++i) {
        const double scale = sdpa_grads[i].abs().max().item<double>();
        EXPECT_LT((kernel_grads[i] - sdpa_grads[i]).abs().max().item<double>(), 0.05 * scale + 1e-6)
            << i;
      }
    }
  }
}

// DIR/tok: a Hugging Face tokenizer of one id per character ("!" is 0, "a" 1, "b" 2, " " 3), with
// <unk> 4, <s> 5 (its start) and </s> 6 (its end) as special tokens.
void WriteCharTokenizer(testing::TempDir& dir) {
  dir.Write("tok/tokenizer.json", R"({"added_tokens": [
      {"id": 4, "content": "<unk>", "special": true, "normalized": false},
      {"id": 5, "content": "<s>", "special": true, "normalized": false},
      {"id": 6, "content": "</s>", "special": true, "normalized": false}],
    "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[\\s\\S]"}, "behavior": "Isolated",
      "invert": false},
    "decoder": {"type": "Fuse"},
    "model": {"type": "WordLevel", "unk_token": "<unk>",
      "vocab": {"!": 0, "a": 1, "b": 2, " ": 3, "<unk>": 4, "<s>": 5, "</s>": 6}}})");
  dir.Write("tok/tokenizer_config.json",
            R"({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})");
}

// instruction_text over DIR/FILE, tokenized by the character tokenizer WriteCharTokenizer wrote
// (as a pretrained folder), no validation share, blocks of `block` tokens.
std::shared_ptr<data::DataModule> PretrainedInstructions(const testing::TempDir& dir,
                                                         const std::string& file, int64_t block) {
  return InstantiateOk<data::DataModule>(
      absl::StrCat("_target_: instruction_text\ntrain: ", dir.path(), "/", file,
                   "\nval_fraction: 0\nblock_size: ", block,
                   "\ntokenizer: {_target_: pretrained, path: '", dir.path(), "/tok'}\n"),
      "data");
}

// The training split's two examples in the order of their records (lines 1 and 2; the split
// shuffles them); empty when one cannot be read.
std::vector<data::Example> ExamplesByRecord(const data::DataModule& dm) {
  if (dm.train_dataset()->size() != 2) return {};
  data::SampleRng rng(0, 0, 0);
  std::vector<data::Example> examples(2);
  for (int64_t index = 0; index < 2; ++index) {
    const std::string source = dm.train_dataset()->Source(index);
    auto example = dm.train_dataset()->Get(index, rng);
    if (!example.ok()) return {};
    examples[source.back() == '1' ? 0 : 1] = *std::move(example);
  }
  return examples;
}

// Each example's input ids and targets.
void ExpectIdsAndTargets(
    const std::vector<data::Example>& examples,
    const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>& expected) {
  ASSERT_EQ(examples.size(), expected.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    EXPECT_TRUE(examples[i].input.equal(torch::tensor(expected[i].first))) << examples[i].input;
    EXPECT_TRUE(examples[i].target.equal(torch::tensor(expected[i].second))) << examples[i].target;
  }
}

// With a pretrained tokenizer an example is framed with the tokenizer's own start and end ids, and
// a real token whose id is 0 (as GPT-2's "!") is a target like any other: only the prompt's
// predictions and the padding are SpecialTokens::kIgnore (they were <pad> = 0 before).
TEST(TextDataModules, InstructionTextFramesWithAPretrainedTokenizersIds) {
  testing::TempDir dir;
  WriteCharTokenizer(dir);
  dir.Write("sft.jsonl",
            "{\"prompt\": \"a!\", \"response\": \"b!\"}\n"
            "{\"prompt\": \"ab\", \"response\": \"!!!\"}\n");
  auto dm = PretrainedInstructions(dir, "sft.jsonl", 16);
  ASSERT_TRUE(dm);
  ASSERT_TRUE(dm->Setup(data::Stage::kFit).ok());
  const int64_t x = SpecialTokens::kIgnore;
  std::vector<data::Example> examples = ExamplesByRecord(*dm);
  ASSERT_EQ(examples.size(), 2u);
  ExpectIdsAndTargets(
      examples, {{{5, 1, 0, 2, 0}, {x, x, 2, 0, 6}}, {{5, 1, 2, 0, 0, 0}, {x, x, 0, 0, 0, 6}}});
  // Batched: the shorter example's target padded with kIgnore, its input with id 0 (the tokenizer
  // has no pad token; padding predicts nothing).
  auto batch = dm->loader_options().collate(examples);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(batch->target[0].equal(torch::tensor(std::vector<int64_t>{x, x, 2, 0, 6, x})))
      << batch->target;
  EXPECT_EQ(batch->input[0][5].item<int64_t>(), 0);
}

// A conversation rendered through a chat template (python -m kiln.chat: [text, trained] segments)
// is its segments' tokens as they are, with no start or end added (the template wrote them, and
// the tokenizer reads "<s>" and "</s>" in the text as its special ids); the targets are the
// trained segments' tokens alone. A prompt/response record beside it is framed as before. A
// `messages` record, bad segments and a block that leaves nothing to learn are one line each.
TEST(TextDataModules, InstructionTextLearnsTheAssistantTurnsOfARenderedConversation) {
  testing::TempDir dir;
  WriteCharTokenizer(dir);
  dir.Write("chat.jsonl",
            "{\"segments\": [[\"<s>a\", false], [\"b!</s>\", true], [\"a\", false], "
            "[\"!</s>\", true]]}\n"
            "{\"prompt\": \"ab\", \"response\": \"!\"}\n");
  auto dm = PretrainedInstructions(dir, "chat.jsonl", 16);
  ASSERT_TRUE(dm);
  ASSERT_TRUE(dm->Setup(data::Stage::kFit).ok());
  const int64_t x = SpecialTokens::kIgnore;
  std::vector<data::Example> examples = ExamplesByRecord(*dm);
  ASSERT_EQ(examples.size(), 2u);
  ExpectIdsAndTargets(
      examples, {{{5, 1, 2, 0, 6, 1, 0}, {x, 2, 0, 6, x, 0, 6}}, {{5, 1, 2, 0}, {x, x, 0, 6}}});
  // Each file's first line refused in one line: `content` in a file FILE.jsonl, read with a block
  // of `block` tokens.
  const std::vector<std::tuple<std::string, std::string, int64_t, std::string>> refusals = {
      // One token of block: the conversation's first trained token is never predicted.
      {"conversation", "{\"segments\": [[\"<s>a\", false], [\"b!</s>\", true]]}", 1,
       "data.block_size=1 leaves none of the conversation's trained turns"},
      {"messages", "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}", 16,
       "a conversation (messages): render it through the model's chat template first, python -m "
       "kiln.chat"},
      {"bad", "{\"segments\": [[\"a\", 1]]}", 16,
       "field 'segments' is not a non-empty list of [text, trained] pairs"}};
  for (const auto& [name, content, block, expected] : refusals) {
    dir.Write(name + ".jsonl", content + "\n");
    auto refused_module = PretrainedInstructions(dir, name + ".jsonl", block);
    ASSERT_TRUE(refused_module);
    absl::Status refused = refused_module->Setup(data::Stage::kFit);
    EXPECT_NE(refused.message().find(absl::StrCat(name, ".jsonl:1: ", expected)), std::string::npos)
        << refused;
  }
}

std::shared_ptr<Model> BuildModel(const std::string& yaml) {
  return InstantiateOk<Model>(yaml, "model");
}

TEST(TextModels, ClassifiersIgnorePaddingAndGiveClassLogits) {
  torch::manual_seed(0);
  for (const char* yaml :
       {"_target_: bag_of_embeddings\nvocab_size: 50\nnum_classes: 3\nngram_buckets: 100\n",
        "_target_: transformer_classifier\nvocab_size: 50\nnum_classes: 3\ndim: 16\nheads: "
        "2\nmlp_dim: 32\ndropout: 0.0\npool: mean\n",
        "_target_: lstm_classifier\nvocab_size: 50\nnum_classes: 3\ndim: 8\nhidden: 8\ndropout: "
        "0.0\n"}) {
    auto model = BuildModel(yaml);
    ASSERT_TRUE(model) << yaml;
    model->eval();
    torch::Tensor x = torch::tensor({{7, 8, 9, 0, 0}, {5, 6, 0, 0, 0}});
    torch::Tensor out = model->forward(x);
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 3})) << yaml;
    // More padding changes nothing.
    torch::Tensor longer = torch::cat({x, torch::zeros({2, 3}, torch::kInt64)}, 1);
    EXPECT_TRUE(torch::allclose(model->forward(longer), out, 1e-5, 1e-5)) << yaml;
  }
}

// softmax(q k^T / sqrt(hd) + bias) v per head, by the book: qkv [B, T, 3D] -> [B, T, D].
torch::Tensor TextbookAttention(const torch::Tensor& qkv, int64_t heads,
                                const torch::Tensor& bias) {
  const int64_t b = qkv.size(0), t = qkv.size(1), d = qkv.size(2) / 3, hd = d / heads;
  auto parts = qkv.view({b, t, 3, heads, hd}).permute({2, 0, 3, 1, 4});
  torch::Tensor scores =
      torch::matmul(parts[0], parts[1].transpose(-2, -1)) / std::sqrt(double(hd));
  if (bias.defined()) scores = scores + bias;
  return torch::matmul(torch::softmax(scores, -1), parts[2]).transpose(1, 2).reshape({b, t, d});
}

// Both attention paths (the fused causal kernel, and scale and bias inside baddbmm) compute the
// textbook formula with the same gradients: causal, padding [B, 1, 1, T], causal and padding
// together, and no mask.
TEST(TextModels, SelfAttentionMatchesTheTextbookFormula) {
  torch::manual_seed(0);
  const int64_t b = 3, t = 7, d = 12, heads = 3;
  SelfAttention attn(d, heads, 0.0);
  torch::Tensor tokens = torch::randint(1, 9, {b, t}, torch::kInt64);
  tokens.index_put_({0, torch::indexing::Slice(4, torch::indexing::None)}, 0);  // padded row
  torch::Tensor causal = CausalBias(t, torch::kFloat32),
                padding = PaddingBias(tokens, torch::kFloat32);
  const std::vector<std::pair<AttentionMask, torch::Tensor>> cases = {
      {{true, {}}, causal},
      {{false, padding}, padding},
      {{true, padding}, causal + padding},
      {{false, {}}, torch::Tensor()}};
  for (const auto& [mask, bias] : cases) {
    torch::Tensor x = torch::randn({b, t, d}, torch::requires_grad());
    torch::Tensor got = attn->forward(x, mask);
    auto got_grads = torch::autograd::grad({got.pow(2).sum()}, {x, attn->c_attn->weight});

    torch::Tensor want =
        attn->c_proj->forward(TextbookAttention(attn->c_attn->forward(x), heads, bias));
    auto want_grads = torch::autograd::grad({want.pow(2).sum()}, {x, attn->c_attn->weight});

    // Rows of the padded sequence whose keys are all masked are NaN on both sides.
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-6, /*equal_nan=*/true))
        << mask.causal << mask.bias.defined() << " " << (got - want).abs().max();
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(torch::allclose(got_grads[i], want_grads[i], 1e-4, 1e-6, true))
          << mask.causal << mask.bias.defined() << " " << i << ": "
          << (got_grads[i] - want_grads[i]).abs().max();
    }
  }
}

// The fused kernel takes rows 32 at a time: lengths below, at and across block edges, one head and
// several, batches of one and more, all match the textbook in value and gradient; without grad it
// keeps no probabilities and gives the same values.
TEST(CausalAttention, MatchesTheTextbookAcrossRowBlocks) {
  torch::manual_seed(1);
  for (auto [b, t, heads, hd] : std::vector<std::array<int64_t, 4>>{{1, 1, 1, 4},
                                                                    {2, 5, 2, 3},
                                                                    {1, 32, 1, 8},
                                                                    {3, 33, 4, 8},
                                                                    {2, 70, 2, 16},
                                                                    {1, 128, 4, 32}}) {
    SCOPED_TRACE(::testing::Message()
                 << "B " << b << " T " << t << " heads " << heads << " hd " << hd);
    const int64_t d = heads * hd;
    ASSERT_TRUE(CausalAttentionSupports(torch::zeros({b, t, 3 * d}), heads));
    torch::Tensor qkv = (2 * torch::randn({b, t, 3 * d})).requires_grad_();
    torch::Tensor weight = torch::randn({b, t, d});  // a loss that weighs every output differently
    torch::Tensor got = CausalAttention(qkv, heads);
    torch::Tensor got_grad = torch::autograd::grad({(got * weight).sum()}, {qkv})[0];
    torch::Tensor want = TextbookAttention(qkv, heads, CausalBias(t, torch::kFloat32));
    torch::Tensor want_grad = torch::autograd::grad({(want * weight).sum()}, {qkv})[0];
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max();
    EXPECT_TRUE(torch::allclose(got_grad, want_grad, 1e-4, 1e-5))
        << (got_grad - want_grad).abs().max();
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(CausalAttention(qkv.detach(), heads), got.detach()));
  }
  // A view (not contiguous) is read as its values.
  torch::Tensor wide = torch::randn({2, 9, 2 * 3 * 8});
  torch::Tensor view = wide.narrow(2, 0, 3 * 8);
  EXPECT_TRUE(torch::allclose(CausalAttention(view, 2), CausalAttention(view.contiguous(), 2)));
  // What it does not take goes through ATen instead.
  EXPECT_FALSE(CausalAttentionSupports(torch::zeros({1, 4, 24}, torch::kFloat64), 2));
  EXPECT_FALSE(CausalAttentionSupports(torch::zeros({1, 4, 24}), 5));
  EXPECT_FALSE(CausalAttentionSupports(torch::zeros({4, 24}), 2));
}

// Grouped-query attention: query head h reads key/value head h / (heads / kv_heads) in place. The
// same values and gradients as the textbook on q with each key/value head repeated for its query
// heads (the repeat's backward adds the group's gradients), at several group sizes and lengths
// across row blocks; one key/value head per query head is the plain kernel.
TEST(CausalAttention, GroupedQueryHeadsShareKeysAndValues) {
  torch::manual_seed(4);
  for (auto [b, t, heads, kv_heads, hd] :
       std::vector<std::array<int64_t, 5>>{{2, 5, 4, 1, 4}, {2, 33, 4, 2, 8}, {1, 70, 6, 2, 16}}) {
    SCOPED_TRACE(::testing::Message() << "T " << t << " heads " << heads << "/" << kv_heads);
    const int64_t group = heads / kv_heads, d = heads * hd, kd = kv_heads * hd;
    ASSERT_TRUE(CausalAttentionSupports(torch::zeros({b, t, d + 2 * kd}), heads, kv_heads));
    torch::Tensor qkv = (2 * torch::randn({b, t, d + 2 * kd})).requires_grad_();
    torch::Tensor weight = torch::randn({b, t, d});
    torch::Tensor got = CausalAttention(qkv, heads, kv_heads);
    torch::Tensor got_grad = torch::autograd::grad({(got * weight).sum()}, {qkv})[0];
    auto repeated = [&](int64_t at) {
      return qkv.narrow(2, at, kd)
          .reshape({b, t, kv_heads, hd})
          .repeat_interleave(group, 2)
          .reshape({b, t, d});
    };
    torch::Tensor wide = torch::cat({qkv.narrow(2, 0, d), repeated(d), repeated(d + kd)}, -1);
    torch::Tensor want = TextbookAttention(wide, heads, CausalBias(t, torch::kFloat32));
    torch::Tensor want_grad = torch::autograd::grad({(want * weight).sum()}, {qkv})[0];
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max();
    EXPECT_TRUE(torch::allclose(got_grad, want_grad, 1e-4, 1e-5))
        << (got_grad - want_grad).abs().max();
  }
  torch::Tensor qkv = torch::randn({2, 9, 3 * 16});
  EXPECT_TRUE(torch::equal(CausalAttention(qkv, 2, 2), CausalAttention(qkv, 2)));
  EXPECT_FALSE(CausalAttentionSupports(torch::zeros({1, 4, 40}), 3, 2));  // 3 heads over 2
  EXPECT_FALSE(CausalAttentionSupports(torch::zeros({1, 4, 42}), 4, 2));  // not (4 + 4) hd wide
}

// RMSNorm's loops against Hugging Face's formula in ATen: in training (float32, autograd) the
// value and both gradients within float32's rounding, at widths that are and are not multiples of
// 8 and row counts across parallel blocks (parallel_test: the same bits on one thread and two);
// without autograd the bf16 rows rounded as the composite rounds them.
TEST(LlamaKernels, RmsNormMatchesTheCompositeInValuesAndGradients) {
  torch::manual_seed(5);
  auto composite = [](const torch::Tensor& x, const torch::Tensor& w, double eps) {
    torch::Tensor h = x.to(torch::kFloat32);
    h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return w * h.to(x.scalar_type());
  };
  for (auto [rows, dim] :
       std::vector<std::array<int64_t, 2>>{{1, 3}, {5, 8}, {300, 128}, {129, 13}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << dim);
    torch::Tensor x = (3 * torch::randn({rows, dim})).requires_grad_();
    torch::Tensor w = (1 + torch::randn({dim})).requires_grad_();
    torch::Tensor dy = torch::randn({rows, dim});
    torch::Tensor got = RmsNormalize(x.view({1, rows, dim}), w, 1e-6);
    auto got_grads = torch::autograd::grad({(got.view({rows, dim}) * dy).sum()}, {x, w});
    torch::Tensor x64 = x.detach().to(torch::kFloat64).requires_grad_();
    torch::Tensor w64 = w.detach().to(torch::kFloat64).requires_grad_();
    torch::Tensor want = composite(x64, w64, 1e-6);
    auto want_grads = torch::autograd::grad({(want * dy.to(torch::kFloat64)).sum()}, {x64, w64});
    auto close = [](const torch::Tensor& a, const torch::Tensor& b) {
      return torch::allclose(a.to(torch::kFloat64), b, 1e-5, 1e-5);
    };
    EXPECT_TRUE(close(got.view({rows, dim}), want));
    EXPECT_TRUE(close(got_grads[0], want_grads[0]))
        << (got_grads[0].to(torch::kFloat64) - want_grads[0]).abs().max();
    EXPECT_TRUE(close(got_grads[1], want_grads[1]))
        << (got_grads[1].to(torch::kFloat64) - want_grads[1]).abs().max();
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(RmsNormalize(x, w, 1e-6), got.view({rows, dim})));
    torch::Tensor x16 = x.to(torch::kBFloat16), w16 = w.to(torch::kBFloat16);
    torch::Tensor got16 = RmsNormalize(x16, w16, 1e-6);
    EXPECT_EQ(got16.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::allclose(got16.to(torch::kFloat32),
                                composite(x16, w16, 1e-6).to(torch::kFloat32), 1e-2, 1e-2));
  }
}

// The rotary loops against x * cos + RotateHalf(x) * sin: the forward the same bits (each product
// rounded, then their sum, as ATen's kernels), with cos and sin [T, hd] shared by the batch or
// [B, T, 1, hd] per row, on a strided view of x; the float32 backward within rounding.
TEST(LlamaKernels, RotaryMatchesTheComposite) {
  torch::manual_seed(6);
  const int64_t b = 3, t = 70, n = 3, hd = 8;
  torch::Tensor wide = torch::randn({b, t, n + 2, hd});
  torch::Tensor angles = torch::rand({b, t, 1, hd}) * 6;
  for (bool per_row : {false, true}) {
    SCOPED_TRACE(per_row ? "[B, T, 1, hd]" : "[T, hd]");
    torch::Tensor cos = per_row ? angles.cos() : angles[0].squeeze(1).cos();
    torch::Tensor sin = per_row ? angles.sin() : angles[0].squeeze(1).sin();
    torch::Tensor x = wide.narrow(2, 1, n).detach().requires_grad_();  // heads hd * (n + 2) apart
    ASSERT_FALSE(x.is_contiguous());
    torch::Tensor c = per_row ? cos : cos.unsqueeze(1), s = per_row ? sin : sin.unsqueeze(1);
    torch::Tensor want = x * c + RotateHalf(x) * s;
    torch::Tensor got = Rotate(x, cos, sin);
    EXPECT_TRUE(torch::equal(got, want));
    torch::Tensor dy = torch::randn({b, t, n, hd});
    torch::Tensor got_grad = torch::autograd::grad({(got * dy).sum()}, {x})[0];
    torch::Tensor want_grad = torch::autograd::grad({(want * dy).sum()}, {x})[0];
    EXPECT_TRUE(torch::allclose(got_grad, want_grad, 1e-6, 1e-6))
        << (got_grad - want_grad).abs().max();
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(Rotate(x, cos, sin), want));
    torch::Tensor x16 = x.to(torch::kBFloat16);
    torch::Tensor c16 = c.to(torch::kBFloat16), s16 = s.to(torch::kBFloat16);
    EXPECT_TRUE(torch::equal(Rotate(x16, cos.to(torch::kBFloat16), sin.to(torch::kBFloat16)),
                             x16 * c16 + RotateHalf(x16) * s16));
    // bf16 x with float32 cos and sin (a projection under autocast): the composite's float32
    // result, the same bits, and without grad too; its gradient within bf16's rounding of the
    // exact one (the composite's within two roundings).
    torch::Tensor want_mixed = x16 * c + RotateHalf(x16) * s;
    EXPECT_EQ(want_mixed.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::equal(Rotate(x16, cos, sin), want_mixed));
    torch::AutoGradMode grad_mode(true);
    torch::Tensor y16 = x16.detach().requires_grad_();
    torch::Tensor got_mixed = Rotate(y16, cos, sin);
    EXPECT_TRUE(torch::equal(got_mixed, want_mixed));
    torch::Tensor g16 = torch::autograd::grad({(got_mixed * dy).sum()}, {y16})[0];
    EXPECT_EQ(g16.scalar_type(), torch::kBFloat16);
    torch::Tensor x64 = x16.to(torch::kFloat64).detach().requires_grad_();
    torch::Tensor exact = torch::autograd::grad(
        {(Rotate(x64, cos.to(torch::kFloat64), sin.to(torch::kFloat64)) * dy.to(torch::kFloat64))
             .sum()},
        {x64})[0];
    EXPECT_TRUE(torch::allclose(g16.to(torch::kFloat64), exact, 1e-2, 1e-2))
        << (g16.to(torch::kFloat64) - exact).abs().max();
  }
}

// RotateQkv against what it replaces, cat({Rotate(q).to(v's dtype), Rotate(k).to(..), v}): the
// same bits forward and the same gradients for q, k and v, in float32 and with bf16 projections
// (autocast) and float32 tables; grouped heads (4 query heads, 2 key/value heads, hd 8 and 32)
// over 70 positions; without autograd too; and the composite for what the loop does not take.
TEST(LlamaKernels, RotateQkvEqualsTheRotationsAndTheirConcatenation) {
  torch::manual_seed(7);
  for (int64_t hd : {8, 32}) {  // 32: on AVX2 lanes where the CPU has them
    SCOPED_TRACE(hd);
    const int64_t b = 3, t = 70, heads = 4, kv = 2;
    torch::Tensor angles = torch::rand({t, hd}) * 6;
    torch::Tensor cos = angles.cos(), sin = angles.sin();
    auto composite = [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
      auto rotated = [&](const torch::Tensor& p, int64_t n) {
        return Rotate(p.view({b, t, n, hd}), cos, sin).to(v.scalar_type()).reshape({b, t, n * hd});
      };
      return torch::cat({rotated(q, heads), rotated(k, kv), v}, -1);
    };
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      SCOPED_TRACE(c10::toString(dtype));
      std::vector<torch::Tensor> inputs;
      for (int64_t n : {heads, kv, kv}) inputs.push_back(torch::randn({b, t, n * hd}).to(dtype));
      torch::Tensor dy = torch::randn({b, t, (heads + 2 * kv) * hd}).to(dtype);
      std::vector<torch::Tensor> got_in, want_in;
      for (const torch::Tensor& x : inputs) {
        got_in.push_back(x.detach().clone().requires_grad_());
        want_in.push_back(x.detach().clone().requires_grad_());
      }
      torch::Tensor got = RotateQkv(got_in[0], got_in[1], got_in[2], cos, sin, heads, kv);
      torch::Tensor want = composite(want_in[0], want_in[1], want_in[2]);
      ASSERT_EQ(got.scalar_type(), dtype);
      EXPECT_TRUE(torch::equal(got, want));
      auto got_grads = torch::autograd::grad({got}, got_in, {dy});
      auto want_grads = torch::autograd::grad({want}, want_in, {dy});
      for (size_t i = 0; i < 3; ++i) {
        ASSERT_EQ(got_grads[i].scalar_type(), dtype) << i;
        EXPECT_TRUE(torch::equal(got_grads[i], want_grads[i])) << i;
      }
      torch::NoGradGuard no_grad;
      EXPECT_TRUE(torch::equal(RotateQkv(inputs[0], inputs[1], inputs[2], cos, sin, heads, kv),
                               composite(inputs[0], inputs[1], inputs[2])));
    }
    // bf16 tables (bf16-true): the composite's path, the same values.
    torch::Tensor q = torch::randn({b, t, heads * hd}), k = torch::randn({b, t, kv * hd});
    torch::Tensor v = torch::randn({b, t, kv * hd});
    torch::Tensor via =
        RotateQkv(q, k, v, cos.to(torch::kFloat64), sin.to(torch::kFloat64), heads, kv);
    EXPECT_EQ(via.sizes(), (std::vector<int64_t>{b, t, (heads + 2 * kv) * hd}));
    EXPECT_TRUE(torch::allclose(via, composite(q, k, v), 1e-6, 1e-6));
  }
}

// LayerNorm written as bf16 (a block's norm under autocast): within one bf16 rounding of ATen's
// layer_norm cast to bf16, its gradients within float32 rounding of ATen's for the same bf16
// output gradient, the same bits without autograd, and ATen's path for what the loop does not take.
TEST(LlamaKernels, LayerNormToBf16MatchesAtensNormThenCast) {
  torch::manual_seed(9);
  for (int64_t dim : {5, 8, 128, 133}) {
    SCOPED_TRACE(dim);
    torch::Tensor x = (torch::randn({3, 70, dim}) * 3 + 1).requires_grad_();
    torch::Tensor w = (torch::randn({dim}) * 0.5 + 1).requires_grad_();
    torch::Tensor b = torch::randn({dim}).requires_grad_();
    torch::Tensor got = LayerNormToBf16(x, w, b, 1e-5);
    ASSERT_EQ(got.scalar_type(), torch::kBFloat16);
    torch::Tensor exact = torch::layer_norm(x, {dim}, w, b, 1e-5);
    // One bf16 rounding apart at most: 2^-8 relative, plus float32's last bits near zero.
    torch::Tensor err = (got.to(torch::kFloat32) - exact).abs();
    EXPECT_TRUE((err <= exact.abs() * (1.0 / 256) + 1e-6).all().item<bool>()) << err.max();
    torch::Tensor dy = torch::randn(got.sizes()).to(torch::kBFloat16);
    auto got_grads = torch::autograd::grad({got}, {x, w, b}, {dy});
    auto want_grads = torch::autograd::grad({exact}, {x, w, b}, {dy.to(torch::kFloat32)});
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(torch::allclose(got_grads[i], want_grads[i], 1e-4, 1e-4))
          << i << ": " << (got_grads[i] - want_grads[i]).abs().max();
    }
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(LayerNormToBf16(x, w, b, 1e-5), got));
  }
  // A bf16 weight (fsdp's bf16 gathers) takes ATen's norm, then the cast.
  torch::Tensor x = torch::randn({4, 16});
  torch::Tensor w = torch::ones({16}, torch::kBFloat16), b = torch::zeros({16}, torch::kBFloat16);
  EXPECT_TRUE(
      torch::equal(LayerNormToBf16(x, w, b, 1e-5),
                   torch::layer_norm(x, {16}, w.to(torch::kFloat32), b.to(torch::kFloat32), 1e-5)
                       .to(torch::kBFloat16)));
}

// The residual add of a bf16 branch into the float32 stream: the promoted add's bits forward,
// and its gradients (x's passed through, y's rounded to bf16) bit for bit, at sizes with tails and
// over several parallel tasks; other dtypes take x + y.
TEST(ResidualAdd, EqualsThePromotedAddBothWays) {
  torch::manual_seed(8);
  for (int64_t n : {1, 7, 8, 9, 4096 * 33 + 5}) {
    SCOPED_TRACE(n);
    torch::Tensor x = torch::randn({n}).requires_grad_();
    torch::Tensor y = torch::randn({n}).to(torch::kBFloat16).requires_grad_();
    torch::Tensor got = ResidualAdd(x, y), want = x + y;
    ASSERT_EQ(got.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::equal(got, want));
    torch::Tensor g = torch::randn({n});
    auto got_grads = torch::autograd::grad({got}, {x, y}, {g});
    auto want_grads = torch::autograd::grad({want}, {x, y}, {g});
    EXPECT_TRUE(torch::equal(got_grads[0], want_grads[0]));
    ASSERT_EQ(got_grads[1].scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(got_grads[1], want_grads[1]));
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(ResidualAdd(x, y), want));
  }
  torch::Tensor a = torch::randn({5}), b = torch::randn({5});
  EXPECT_TRUE(torch::equal(ResidualAdd(a, b), a + b));
}

// The fused GELU matches ATen's tanh GELU in value and gradient, over the range where it bends and
// far out where tanh saturates, at sizes that leave tails of every length and span parallel tasks;
// NaN stays NaN, and without grad it gives the same values.
TEST(GeluTanh, MatchesAtenValuesAndGradients) {
  torch::manual_seed(2);
  for (int64_t n : {1, 7, 8, 13, 1000, 70001}) {
    SCOPED_TRACE(n);
    torch::Tensor x = (torch::randn({n}) * 3).requires_grad_();
    if (n > 8) {
      torch::NoGradGuard no_grad;
      x.index_put_({torch::indexing::Slice(0, 6)},
                   torch::tensor({0.0f, -1e-6f, 1e-6f, 20.0f, -20.0f, -5.5f}));
    }
    torch::Tensor g = torch::randn({n});
    torch::Tensor got = GeluTanh(x);
    torch::Tensor want = torch::gelu(x, "tanh");
    torch::Tensor got_grad = torch::autograd::grad({(got * g).sum()}, {x})[0];
    // The gradient against float64's: float32 loses digits in 1 - tanh^2 for large |x|, ATen's
    // more than this kernel's.
    torch::Tensor x64 = x.detach().to(torch::kFloat64).requires_grad_();
    torch::Tensor want_grad =
        torch::autograd::grad({(torch::gelu(x64, "tanh") * g.to(torch::kFloat64)).sum()}, {x64})[0];
    EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-6)) << (got - want).abs().max();
    torch::Tensor aten_grad = torch::autograd::grad({(want * g).sum()}, {x})[0];
    const double error = (got_grad.to(torch::kFloat64) - want_grad).abs().max().item<double>();
    const double aten_error =
        (aten_grad.to(torch::kFloat64) - want_grad).abs().max().item<double>();
    EXPECT_LE(error, std::max(1e-6, 1.5 * aten_error)) << "ATen's float32 error: " << aten_error;
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(GeluTanh(x.detach()), got.detach()));
  }
  torch::Tensor nan = GeluTanh(torch::tensor({std::nanf(""), 1.0f}));
  EXPECT_TRUE(std::isnan(nan[0].item<float>()));
  EXPECT_NEAR(nan[1].item<float>(), 0.841192f, 1e-6);
  // A view and a 2-D tensor: the same values as their contiguous copies.
  torch::Tensor m = torch::randn({5, 6});
  EXPECT_TRUE(torch::equal(GeluTanh(m.t()), GeluTanh(m.t().contiguous())));
  EXPECT_TRUE(
      torch::allclose(GeluTanh(m.to(torch::kFloat64)), torch::gelu(m.to(torch::kFloat64), "tanh")));
}

// The fused SwiGLU gate matches float64's silu(gate) * up in value and in both gradients, within
// float32's rounding, at sizes that leave tails of every length and span parallel tasks, far out
// where the sigmoid saturates too; bf16 within bf16's rounding; without autograd it is ATen's.
TEST(SiluMul, MatchesTheCompositeInValuesAndGradients) {
  torch::manual_seed(3);
  for (int64_t n : {1, 7, 8, 13, 1000, 70001}) {
    SCOPED_TRACE(n);
    torch::Tensor gate = (torch::randn({n}) * 3).requires_grad_();
    torch::Tensor up = torch::randn({n}).requires_grad_();
    if (n > 8) {
      torch::NoGradGuard no_grad;
      gate.index_put_({torch::indexing::Slice(0, 6)},
                      torch::tensor({0.0f, -1e-6f, 30.0f, -30.0f, -100.0f, 100.0f}));
    }
    torch::Tensor dy = torch::randn({n});
    torch::Tensor got = SiluMul(gate, up);
    auto got_grads = torch::autograd::grad({(got * dy).sum()}, {gate, up});
    torch::Tensor g64 = gate.detach().to(torch::kFloat64).requires_grad_();
    torch::Tensor u64 = up.detach().to(torch::kFloat64).requires_grad_();
    torch::Tensor want = torch::silu(g64) * u64;
    auto want_grads = torch::autograd::grad({(want * dy.to(torch::kFloat64)).sum()}, {g64, u64});
    auto close = [](const torch::Tensor& a, const torch::Tensor& b) {
      return torch::allclose(a.to(torch::kFloat64), b, 1e-5, 1e-6);
    };
    EXPECT_TRUE(close(got, want)) << (got.to(torch::kFloat64) - want).abs().max();
    EXPECT_TRUE(close(got_grads[0], want_grads[0]));
    EXPECT_TRUE(close(got_grads[1], want_grads[1]));
    // bf16: computed in float32, rounded once.
    torch::Tensor gate16 = gate.detach().to(torch::kBFloat16).requires_grad_();
    torch::Tensor up16 = up.detach().to(torch::kBFloat16).requires_grad_();
    torch::Tensor got16 = SiluMul(gate16, up16);
    auto grads16 = torch::autograd::grad({(got16 * dy.to(torch::kBFloat16)).sum()}, {gate16, up16});
    EXPECT_EQ(got16.scalar_type(), torch::kBFloat16);
    torch::Tensor want16 =
        torch::silu(gate16.detach().to(torch::kFloat64)) * up16.detach().to(torch::kFloat64);
    EXPECT_TRUE(torch::allclose(got16.to(torch::kFloat64), want16, 1e-2, 1e-2));
    EXPECT_TRUE(torch::allclose(grads16[1].to(torch::kFloat64), want_grads[1], 2e-2, 2e-2));
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(SiluMul(gate.detach(), up.detach()),
                             torch::silu(gate.detach()) * up.detach()));
  }
}

TEST(TextModels, GptIsCausalTiedAndNamedLikeNanoGpt) {
  torch::manual_seed(0);
  auto model = BuildModel(
      "_target_: gpt\nvocab_size: 40\nblock_size: 8\ndim: 16\ndepth: 2\nheads: 2\nmlp_dim: 32\n");
  ASSERT_TRUE(model);
  model->eval();
  torch::Tensor x = torch::randint(5, 40, {2, 8}, torch::kInt64);
  torch::Tensor out = model->forward(x);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 8, 40}));
  torch::Tensor changed = x.clone();
  changed.index_put_({torch::indexing::Slice(), 5}, (x.select(1, 5) + 1) % 40);
  torch::Tensor out2 = model->forward(changed);
  EXPECT_TRUE(torch::allclose(out.narrow(1, 0, 5), out2.narrow(1, 0, 5), 1e-5,
                              1e-5));  // the past ignores the future
  EXPECT_FALSE(torch::allclose(out.narrow(1, 5, 3), out2.narrow(1, 5, 3)));
  auto names = model->named_parameters().keys();
  EXPECT_EQ(names.front(), "transformer.wte.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "transformer.h.1.attn.c_attn.weight"),
            names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "lm_head.weight"), names.end());  // tied
  auto bad = Instantiate<Model>("_target_: gpt\nvocab_size: 40\ndim: 10\nheads: 4\n", "model");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("model.dim"), std::string::npos);
}

// What tasks ask of a model comes from the model (Model::token_ids, max_positions), not from
// reading its options by name: the ids a tokenizer must fit and the option that sets them.
TEST(TextModels, DeclareTheirTokenIdsAndPositions) {
  struct Case {
    std::string yaml;
    int64_t ids;
    std::string option;
    int64_t positions;
  };
  const std::vector<Case> cases = {
      {"_target_: gpt\nvocab_size: 40\nblock_size: 8\ndim: 16\ndepth: 1\nheads: 2\nmlp_dim: 32\n",
       40, "vocab_size", 8},
      {"_target_: lstm_lm\nvocab_size: 30\ndim: 8\nhidden: 8\n", 30, "vocab_size", 0},
      {"_target_: lstm_classifier\nvocab_size: 31\nnum_classes: 3\ndim: 8\nhidden: 8\n", 31,
       "vocab_size", 0},
      {"_target_: bag_of_embeddings\nvocab_size: 32\nnum_classes: 3\n", 32, "vocab_size", 0},
      {"_target_: transformer_classifier\nvocab_size: 33\nnum_classes: 3\nmax_length: 12\ndim: 16\n"
       "depth: 1\nheads: 2\nmlp_dim: 32\n",
       33, "vocab_size", 0},  // longer inputs are cut, so any length goes in
      {"_target_: conv_bilstm\nfeatures: 8\nchannels: 4\nhidden: 8\nlayers: 1\nnum_classes: 29\n",
       29, "num_classes", 0},
      {"_target_: mlp\nin_features: 4\nhidden: [4]\nnum_classes: 2\n", 0, "", 0},
  };
  for (const auto& c : cases) {
    auto model = BuildModel(c.yaml);
    ASSERT_TRUE(model) << c.yaml;
    EXPECT_EQ(model->token_ids().size, c.ids) << c.yaml;
    EXPECT_EQ(model->token_ids().option, c.option) << c.yaml;
    EXPECT_EQ(model->max_positions(), c.positions) << c.yaml;
  }
}

TEST(TextModels, LstmLmGivesNextTokenLogits) {
  auto model =
      BuildModel("_target_: lstm_lm\nvocab_size: 30\ndim: 8\nhidden: 8\ntie_weights: true\n");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->forward(torch::randint(0, 30, {3, 6}, torch::kInt64)).sizes(),
            (std::vector<int64_t>{3, 6, 30}));
}

}  // namespace text_test
}  // namespace kiln

namespace kiln {
namespace text_test {

// FusedAttention (at::scaled_dot_product_attention, what SelfAttention takes on a GPU) computes
// the function of the CPU paths: causal (kiln's kernel), causal with padding and a padding bias
// alone (the explicit bmm and softmax), forward and gradient, within float32 rounding.
TEST(FusedAttention, EqualsTheCpuPathsCausalPaddedAndPlain) {
  torch::manual_seed(7);
  const int64_t b = 2, t = 9, d = 16, heads = 4;
  SelfAttention attention(d, heads, 0.0);
  torch::Tensor x = torch::randn({b, t, d});
  torch::Tensor tokens = torch::randint(1, 50, {b, t}, torch::kInt64);
  tokens.index_put_({1, torch::indexing::Slice(6, torch::indexing::None)},
                    0);  // padding at the end of row 1
  torch::Tensor padding = PaddingBias(tokens, x.options());
  for (const AttentionMask& mask :
       {AttentionMask{true, {}}, AttentionMask{true, padding}, AttentionMask{false, padding}}) {
    SCOPED_TRACE(std::string(mask.causal ? "causal" : "plain") +
                 (mask.bias.defined() ? " + padding" : ""));
    torch::Tensor in1 = x.clone().requires_grad_(true), in2 = x.clone().requires_grad_(true);
    torch::Tensor expected = attention->forward(in1, mask);
    torch::Tensor got = attention->c_proj->forward(
        FusedAttention(attention->c_attn->forward(in2), heads, mask, 0.0));
    // Rows whose every key is masked are nan in both; the padded queries of a causal padded row are
    // not.
    torch::Tensor finite = torch::isfinite(expected);
    EXPECT_TRUE(torch::equal(finite, torch::isfinite(got)));
    EXPECT_TRUE(
        torch::allclose(got.masked_select(finite), expected.masked_select(finite), 1e-5, 1e-6));
    torch::Tensor weight = torch::randn_like(expected).masked_fill(~finite, 0);
    (expected.nan_to_num() * weight).sum().backward();
    (got.nan_to_num() * weight).sum().backward();
    EXPECT_TRUE(torch::allclose(in2.grad().nan_to_num(), in1.grad().nan_to_num(), 1e-4, 1e-5));
  }
}

}  // namespace text_test
}  // namespace kiln
