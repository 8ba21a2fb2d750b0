// `kiln train/test/predict` on the NLP experiments with tiny text files the test writes: a text
// classifier trains, tests (macro-F1, confusion matrix) and classifies new texts; a language model
// reports bits per character and generates; bad text input (empty file, invalid UTF-8, a missing
// field, an unknown label, another tokenizer than the checkpoint's) ends in one line naming what
// and where, with a non-zero exit.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "components/models/model.h"
#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"
#include "lib/weights/checkpoint.h"
#include "lib/weights/safetensors.h"
#include "tests/support/process.h"

namespace kiln {
namespace {

using testing::FileExists;
using testing::ReadFile;
using testing::RunProcess;
using testing::TempDir;

std::string Jsonl(int n, int offset = 0) {
  std::string out;
  for (int i = offset; i < offset + n; ++i) {
    out += i % 2 ? "{\"text\": \"buy cheap pills now offer " + std::to_string(i % 5) +
                       "\", \"label\": \"spam\"}\n"
                 : "{\"text\": \"meeting notes for the team " + std::to_string(i % 5) +
                       "\", \"label\": \"ham\"}\n";
  }
  return out;
}

// The stderr line that says what went wrong ("kiln: error: ...").
std::string ErrorLine(const std::string& err) {
  size_t at = err.find("kiln: error: ");
  return at == std::string::npos ? "" : err.substr(at, err.find('\n', at) - at);
}

class NlpCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.Write("spam/train.jsonl", Jsonl(80));
    dir_.Write("spam/val.jsonl", Jsonl(10, 80));
    dir_.Write("spam/test.jsonl", Jsonl(10, 90));
    std::string text;
    for (int i = 0; i < 60; ++i)
      text += "Call me Ishmael. Some years ago, never mind how long precisely.\n";
    dir_.Write("book/train.txt", text);
    dir_.Write("book/val.txt", "Call me Ishmael. Some years ago.\n");
    dir_.Write("book/test.txt", "never mind how long precisely.\n");
  }

  testing::ProcessResult Classify(const std::string& command, std::vector<std::string> extra) {
    std::string d = dir_.path();
    std::vector<std::string> argv = {KILN_BINARY,
                                     command,
                                     "experiment=spam_bow",
                                     "data.train=" + d + "/spam/train.jsonl",
                                     "data.val=" + d + "/spam/val.jsonl",
                                     "data.test=" + d + "/spam/test.jsonl",
                                     "data.tokenizer.min_frequency=1",
                                     "data.batch_size=8",
                                     "model.dim=8",
                                     "model.ngram_buckets=64",
                                     "trainer.max_epochs=3",
                                     "trainer.num_threads=1",
                                     "hydra.run.dir=" + d + "/run_" + command};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunProcess(argv);
  }

  // `kiln export` of the run in RUN as format=hf and format=safetensors, into RUN_hf and
  // RUN_safetensors.
  // peft on the folder `base` with the adapter `run`_peft (kiln export format=peft) gives the
  // logits of the merged folder `run`_hf (format=hf) read by kiln's `model`, within 1e-5; the
  // merged folder differs from the base in the weights `trained` names only.
  // kiln's model `target` (gpt2, llama, bert) read from `folder` (pretrained=FOLDER) gives, on the
  // ids in `reference` (a safetensors file of ids and logits another library wrote), its logits
  // within 1e-5.
  static void ExpectKilnGivesTheLogits(const std::string& target, const std::string& folder,
                                       const std::string& reference) {
    auto node =
        config::ParseYaml("_target_: " + target + "\npretrained: '" + folder + "'\n", "model.yaml");
    ASSERT_TRUE(node.ok());
    auto model = Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
    ASSERT_TRUE(model.ok()) << model.status();
    auto expected = ReadSafetensors(reference);
    ASSERT_TRUE(expected.ok()) << expected.status();
    (*model)->eval();
    torch::NoGradGuard no_grad;
    EXPECT_LT(((*model)->forward(expected->at("ids")) - expected->at("logits"))
                  .abs()
                  .max()
                  .item<double>(),
              1e-5);
  }

  static void ExpectPeftGivesTheMergedLogits(
      const std::string& model, const std::string& base, const std::string& run,
      const std::function<bool(const std::string&)>& trained) {
    auto peft = RunProcess({KILN_PYTHON_EXE,
                            std::string(KILN_SOURCE_DIR) + "/tests/components/hf/check_lora.py",
                            base, run + "_peft"});
    ASSERT_EQ(peft.exit_code, 0) << peft.err;
    ASSERT_NO_FATAL_FAILURE(
        ExpectKilnGivesTheLogits(model, run + "_hf", run + "_peft/peft_logits.safetensors"));
    auto before = ReadSafetensors(base + "/model.safetensors");
    auto after = ReadSafetensors(run + "_hf/model.safetensors");
    ASSERT_TRUE(before.ok() && after.ok());
    for (const auto& [name, tensor] : *after)
      EXPECT_EQ(torch::equal(tensor, before->at(name)), !trained(name)) << name;
  }

  static void ExportHfAndSafetensors(const std::string& run) {
    for (const std::string format : {"hf", "safetensors"}) {
      auto e = RunProcess({KILN_BINARY, "export", "run_dir=" + run, "format=" + format,
                           "hydra.run.dir=" + run + "_" + format});
      ASSERT_EQ(e.exit_code, 0) << e.err;
    }
  }

  testing::ProcessResult Lm(const std::string& command, std::vector<std::string> extra,
                            const std::string& experiment = "mobydick_gpt") {
    std::string d = dir_.path();
    std::vector<std::string> argv = {KILN_BINARY,
                                     command,
                                     "experiment=" + experiment,
                                     "data.train=[" + d + "/book/train.txt]",
                                     "data.val=[" + d + "/book/val.txt]",
                                     "data.test=[" + d + "/book/test.txt]",
                                     "data.block_size=16",
                                     "data.batch_size=8",
                                     "model.dim=16",
                                     "model.depth=1",
                                     "model.heads=2",
                                     "model.mlp_dim=32",
                                     "trainer.max_steps=30",
                                     "trainer.val_check_interval=10",
                                     "trainer.num_threads=1",
                                     "scheduler.warmup_steps=5",
                                     "hydra.run.dir=" + d + "/lm_" + command};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunProcess(argv);
  }

  TempDir dir_;
};

TEST_F(NlpCliTest, ClassifierTrainsTestsAndClassifiesNewTexts) {
  auto r = Classify("train", {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run = dir_.path() + "/run_train";
  std::string metrics = ReadFile(run + "/test_metrics.yaml");
  EXPECT_NE(metrics.find("test/acc: 1"), std::string::npos)
      << metrics;  // the words give the label away
  EXPECT_NE(metrics.find("test/f1_macro: 1"), std::string::npos) << metrics;
  EXPECT_NE(ReadFile(run + "/test_confusion_matrix.csv")
                .find("true/predicted,ham,spam\nham,5,0\nspam,0,5\n"),
            std::string::npos);
  dir_.Write("new.txt", "buy cheap pills now\n\nmeeting notes for the team\n");
  auto p = Classify("predict", {"ckpt_path=" + run + "/checkpoints/last.ckpt",
                                "data.predict=" + dir_.path() + "/new.txt"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  std::string csv = ReadFile(dir_.path() + "/run_predict/predictions.csv");
  EXPECT_NE(csv.find("buy cheap pills now,1,spam,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("meeting notes for the team,0,ham,"), std::string::npos) << csv;
}

// `kiln predict run_dir=RUN data.predict=FILE` with nothing else: `data.predict` is a key of the
// run's dataset (labelled_text), not of the default one (fashion_mnist), so it applies to the run's
// stored config without `+`; a key in neither, or no run to start from, is the usual one line.
TEST_F(NlpCliTest, OverridesOfARunsOwnKeysNeedNoPlus) {
  ASSERT_EQ(Classify("train", {"test=false"}).exit_code, 0);
  const std::string d = dir_.path(), run = d + "/run_train";
  dir_.Write("new.txt", "buy cheap pills now\nmeeting notes for the team\n");
  auto p = RunProcess({KILN_BINARY, "predict", "run_dir=" + run, "data.predict=" + d + "/new.txt",
                       "hydra.run.dir=" + d + "/plain"});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  std::string csv = ReadFile(d + "/plain/predictions.csv");
  EXPECT_NE(csv.find("buy cheap pills now,1,spam,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("meeting notes for the team,0,ham,"), std::string::npos) << csv;

  auto typo = RunProcess({KILN_BINARY, "predict", "run_dir=" + run,
                          "data.predikt=" + d + "/new.txt", "hydra.run.dir=" + d + "/typo"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_EQ(
      ErrorLine(typo.err),
      "kiln: error: Could not override 'data.predikt': no such key in the config (did you mean "
      "'data.predict'?). To append to your config use +data.predikt=" +
          d + "/new.txt (on top of the config stored in " + run + "/.hydra/config.yaml)")
      << typo.err;
  auto no_run = RunProcess(
      {KILN_BINARY, "predict", "data.predict=" + d + "/new.txt", "hydra.run.dir=" + d + "/no_run"});
  EXPECT_EQ(no_run.exit_code, 2);
  EXPECT_EQ(
      ErrorLine(no_run.err),
      "kiln: error: Could not override 'data.predict': no such key in the config. To append to "
      "your config use +data.predict=" +
          d + "/new.txt")
      << no_run.err;
}

TEST_F(NlpCliTest, LanguageModelReportsBitsPerCharacterAndGenerates) {
  auto r = Lm("train", {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run = dir_.path() + "/lm_train";
  std::string metrics = ReadFile(run + "/test_metrics.yaml");
  for (const char* key : {"test/loss: ", "test/ppl: ", "test/bpc: "})
    EXPECT_NE(metrics.find(key), std::string::npos) << metrics;
  std::string csv = ReadFile(run + "/metrics.csv");
  EXPECT_NE(csv.find("val/bpc"), std::string::npos);
  auto g = Lm("predict", {"ckpt_path=" + run + "/checkpoints/last.ckpt", "task.prompt=Call me",
                          "task.max_tokens=20", "task.seed=3"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("Call me", 0), 0u) << g.out;
  EXPECT_GT(g.out.size(), std::string("Call me\n").size());
  EXPECT_EQ(ReadFile(dir_.path() + "/lm_predict/generated.txt"), g.out);
  auto again = Lm("predict", {"ckpt_path=" + run + "/checkpoints/last.ckpt", "task.prompt=Call me",
                              "task.max_tokens=20", "task.seed=3",
                              "hydra.run.dir=" + dir_.path() + "/lm_again"});
  EXPECT_EQ(again.out, g.out);  // the seed decides the sample

  // Greedy, then the same with a stop string taken from its continuation: the text ends before
  // the stop string's first appearance. top_p and repetition_penalty sample; a top_p above 1 is
  // refused in one line.
  const std::string ckpt = "ckpt_path=" + run + "/checkpoints/last.ckpt";
  auto greedy =
      Lm("predict", {ckpt, "task.prompt=Call me", "task.max_tokens=30", "task.temperature=0",
                     "hydra.run.dir=" + dir_.path() + "/lm_greedy"});
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  const std::string continuation = greedy.out.substr(std::string("Call me").size());
  ASSERT_GE(continuation.size(), 4u) << greedy.out;
  const std::string stop(1, continuation[2]);
  auto stopped =
      Lm("predict", {ckpt, "task.prompt=Call me", "task.max_tokens=30", "task.temperature=0",
                     "task.stop=['" + stop + "']", "hydra.run.dir=" + dir_.path() + "/lm_stop"});
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_EQ(stopped.out, "Call me" + continuation.substr(0, continuation.find(stop)) + "\n")
      << "stop '" << stop << "' after " << greedy.out;
  auto nucleus =
      Lm("predict", {ckpt, "task.prompt=Call me", "task.max_tokens=10", "task.top_p=0.5",
                     "task.repetition_penalty=1.3", "hydra.run.dir=" + dir_.path() + "/lm_top_p"});
  ASSERT_EQ(nucleus.exit_code, 0) << nucleus.err;
  EXPECT_EQ(nucleus.out.rfind("Call me", 0), 0u) << nucleus.out;
  auto refused = Lm("predict", {ckpt, "task.prompt=Call me", "task.top_p=1.5",
                                "hydra.run.dir=" + dir_.path() + "/lm_bad"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(ErrorLine(refused.err).find("top_p"), std::string::npos) << refused.err;
}

// Supervised fine-tuning (data=instructions): a GPT learns to answer prompts; the held-out
// responses' loss falls, the test split reports their bits per character, and generation from a
// training prompt gives its answer.
TEST_F(NlpCliTest, LanguageModelFineTunesOnInstructions) {
  std::string jsonl;
  const char* words[] = {"red", "blue", "cat", "dog"};
  for (int i = 0; i < 64; ++i) {
    std::string a = words[i % 4], b = words[(i / 4) % 4];
    jsonl += "{\"prompt\": \"join " + a + " " + b + ":\", \"response\": \"" + a + "-" + b + "\"}\n";
  }
  dir_.Write("sft/train.jsonl", jsonl);
  dir_.Write("sft/test.jsonl", "{\"prompt\": \"join cat dog:\", \"response\": \"cat-dog\"}\n");
  const std::string d = dir_.path();
  auto r = RunProcess({KILN_BINARY,
                       "train",
                       "experiment=mobydick_gpt",
                       "data=instructions",
                       "data.train=" + d + "/sft/train.jsonl",
                       "data.test=" + d + "/sft/test.jsonl",
                       "data.block_size=24",
                       "data.batch_size=8",
                       "model.dim=32",
                       "model.depth=2",
                       "model.heads=2",
                       "model.mlp_dim=64",
                       "trainer.max_steps=120",
                       "trainer.max_time=null",
                       "trainer.val_check_interval=1.0",
                       "trainer.num_threads=1",
                       "scheduler.warmup_steps=10",
                       "optimizer.lr=0.01",
                       "task.max_tokens=0",
                       "hydra.run.dir=" + d + "/sft_run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string csv = ReadFile(d + "/sft_run/metrics.csv");
  std::vector<double> val;
  std::istringstream lines(csv);
  std::string header, line;
  std::getline(lines, header);
  size_t column = 0;
  for (size_t at = 0, c = 0; at != std::string::npos; ++c) {
    size_t next = header.find(',', at);
    if (header.substr(at, next == std::string::npos ? std::string::npos : next - at) == "val/loss")
      column = c;
    at = next == std::string::npos ? next : next + 1;
  }
  ASSERT_GT(column, 0u) << header;
  while (std::getline(lines, line)) {
    std::vector<std::string> cells;
    for (size_t at = 0; at != std::string::npos;) {
      size_t next = line.find(',', at);
      cells.push_back(line.substr(at, next == std::string::npos ? std::string::npos : next - at));
      at = next == std::string::npos ? next : next + 1;
    }
    if (column < cells.size() && !cells[column].empty()) val.push_back(std::stod(cells[column]));
  }
  ASSERT_GE(val.size(), 3u) << csv;
  EXPECT_LT(val.back(), 0.5 * val.front()) << csv;
  EXPECT_NE(ReadFile(d + "/sft_run/test_metrics.yaml").find("test/bpc"), std::string::npos);
}

// bf16-true converts only floating tensors: the model's int64 tokenizer fingerprint survives, so
// the test after fit and a float32 `kiln predict` both load the (float32) checkpoint.
TEST_F(NlpCliTest, LanguageModelTrainsInBf16TrueAndItsCheckpointLoadsInFloat32) {
  auto r =
      Lm("train", {"trainer.precision=bf16-true", "hydra.run.dir=" + dir_.path() + "/lm_true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string metrics = ReadFile(dir_.path() + "/lm_true/test_metrics.yaml");
  EXPECT_NE(metrics.find("test/bpc: "), std::string::npos) << metrics;
  auto g = Lm("predict", {"ckpt_path=" + dir_.path() + "/lm_true/checkpoints/last.ckpt",
                          "trainer.precision=32", "task.prompt=Call me", "task.max_tokens=5"});
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("Call me", 0), 0u) << g.out;
}

// `kiln export format=hf` after 20 kiln training steps of a GPT and of a Llama: folders
// transformers' AutoModelForCausalLM loads with nothing missing or left over, whose tensors are
// the trained ones bit for bit (kiln's own format=safetensors export), and on whose logits kiln
// and transformers agree within 1e-5; a model with no Hugging Face layout in kiln is refused in
// one line, nothing written.
// BERT, RoBERTa and XLM-RoBERTa classifiers (tiny, random, with tokenizers of their kind, made by
// transformers and tokenizers: make_models.py bert) fine-tune for 20 steps in text_classification
// with model=bert model.pretrained=DIR and the folder's tokenizer, the rows framed as the family
// frames them; `kiln export format=hf` writes a folder that transformers loads as the family's
// *ForSequenceClassification with the data's labels, and whose logits on padded rows equal kiln's.
TEST_F(NlpCliTest, BertFamiliesFineTuneAndExportAFolderThatTransformersLoads) {
  auto probe = RunProcess({KILN_PYTHON_EXE, "-c", "import transformers"});
  if (probe.exit_code != 0) GTEST_SKIP() << "Python transformers not installed: " << probe.err;
  const std::string d = dir_.path();
  auto made = RunProcess({KILN_PYTHON_EXE,
                          std::string(KILN_SOURCE_DIR) + "/tests/components/hf/make_models.py",
                          "bert", d + "/pretrained"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  dir_.Write("texts.txt",
             "buy cheap pills now\nmeeting notes for the whale team\nwin a prize\n"
             "call me ishmael some years ago never mind how long\n");
  std::vector<std::string> check = {
      KILN_PYTHON_EXE, std::string(KILN_SOURCE_DIR) + "/tests/components/hf/check_export.py"};
  std::vector<std::string> bert_argv;
  for (const std::string family : {"bert", "roberta", "xlm-roberta"}) {
    SCOPED_TRACE(family);
    const std::string folder = d + "/pretrained/" + family + "/model";
    // roberta's head has three labels (negative, neutral, positive): the task takes three from
    // it (task.num_classes is written nowhere); a number written that disagrees is refused.
    std::vector<std::string> argv = {KILN_BINARY,
                                     "train",
                                     "task=text_classification",
                                     "data=spam",
                                     "model=bert",
                                     "model.pretrained=" + folder,
                                     "tokenizer@data.tokenizer=pretrained",
                                     "data.tokenizer.path=" + folder,
                                     "data.train=" + d + "/spam/train.jsonl",
                                     "data.val=" + d + "/spam/val.jsonl",
                                     "data.test=null",
                                     "data.max_length=16",
                                     "data.batch_size=8",
                                     "trainer.max_steps=20",
                                     "trainer.num_threads=1",
                                     "test=false",
                                     "hydra.run.dir=" + d + "/" + family};
    if (family == "roberta") {
      argv.push_back("data.labels=[ham,spam,other]");
      std::vector<std::string> two = argv;
      two.push_back("task.num_classes=2");
      auto refused = RunProcess(two);
      EXPECT_EQ(refused.exit_code, 2);
      EXPECT_NE(refused.err.find("task.num_classes is 2 but model 'bert' has a head for 3 classes"),
                std::string::npos)
          << refused.err;
    }
    if (family == "bert") bert_argv = argv;
    auto trained = RunProcess(argv);
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    if (family == "roberta") {
      EXPECT_NE(trained.err.find("task.num_classes=3: the classes of the model's head"),
                std::string::npos)
          << trained.err;
    }
    ASSERT_NO_FATAL_FAILURE(ExportHfAndSafetensors(d + "/" + family));
    check.push_back(d + "/" + family + "_hf");
    // kiln's predictions on texts of different lengths (one batch, padded) are transformers' on
    // the same texts framed by the folder's own tokenizer ([CLS] A [SEP], <s> A </s>), which the
    // export carries: AutoTokenizer reads it from the exported folder.
    auto predicted = RunProcess({KILN_BINARY, "predict", "run_dir=" + d + "/" + family,
                                 "data.predict=" + d + "/texts.txt", "data.max_length=38",
                                 "hydra.run.dir=" + d + "/" + family + "_predict"});
    ASSERT_EQ(predicted.exit_code, 0) << predicted.err;
    auto same =
        RunProcess({KILN_PYTHON_EXE,
                    std::string(KILN_SOURCE_DIR) + "/tests/components/hf/check_predictions.py",
                    d + "/" + family + "_hf", d + "/" + family + "_hf",
                    d + "/" + family + "_predict/predictions.csv", d + "/texts.txt"});
    EXPECT_EQ(same.exit_code, 0) << same.err;
    std::printf("%s", same.out.c_str());
  }
  std::string config = ReadFile(d + "/roberta_hf/config.json");
  EXPECT_NE(config.find("\"RobertaForSequenceClassification\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"2\": \"other\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"pad_token_id\": 1,"), std::string::npos) << config;
  auto loaded = RunProcess(check);
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_NE(loaded.out.find("XLMRobertaForSequenceClassification"), std::string::npos)
      << loaded.out;
  EXPECT_NE(loaded.out.find("'ham'"), std::string::npos) << loaded.out;
  for (const std::string family : {"bert", "roberta", "xlm-roberta"}) {
    SCOPED_TRACE(family);
    const std::string folder = d + "/" + family + "_hf";
    auto node = config::ParseYaml("_target_: bert\npretrained: '" + folder + "'\n", "model.yaml");
    ASSERT_TRUE(node.ok());
    auto model = Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
    ASSERT_TRUE(model.ok()) << model.status();
    // The folder holds the trained tensors bit for bit, and training moved them.
    auto trained = ReadSafetensors(d + "/" + family + "_safetensors/model.safetensors");
    ASSERT_TRUE(trained.ok()) << trained.status();
    auto original = ReadSafetensors(d + "/pretrained/" + family + "/model/model.safetensors");
    ASSERT_TRUE(original.ok()) << original.status();
    for (const auto& [name, tensor] : StateDict(**model)) {
      ASSERT_EQ(trained->count(name), 1u) << name;
      EXPECT_TRUE(torch::equal(tensor, trained->at(name))) << name;
    }
    const std::string head = family == "bert" ? "classifier.weight" : "classifier.dense.weight";
    EXPECT_FALSE(torch::equal(trained->at(head), original->at(head)));
    auto reference = ReadSafetensors(folder + "/transformers_logits.safetensors");
    ASSERT_TRUE(reference.ok()) << reference.status();
    (*model)->eval();
    torch::NoGradGuard no_grad;
    torch::Tensor logits = (*model)->forward(reference->at("ids"));
    const double diff = (logits - reference->at("logits")).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5);
    std::printf("%s: max |kiln - transformers| after 20 steps = %.3g\n", family.c_str(), diff);
  }
  // LoRA on the BERT (query and value), as PEFT's SEQ_CLS task: the head trains whole beside the
  // adapters and is saved with them. peft reads kiln's adapter folder and gives the logits kiln
  // gives from the merged export; the checkpoint holds the adapters and the head alone.
  {
    const std::string base = d + "/pretrained/bert/model";
    std::vector<std::string> argv = bert_argv;
    argv.back() = "hydra.run.dir=" + d + "/bert_lora";
    argv.insert(argv.end(),
                {"model.lora={r:4,alpha:8,target_modules:[query,value]}", "optimizer.lr=0.05"});
    auto lora = RunProcess(argv);
    ASSERT_EQ(lora.exit_code, 0) << lora.err;
    EXPECT_NE(lora.err.find("adapters of rank 4 on 4 layers, classifier trained whole"),
              std::string::npos)
        << lora.err;
    for (const std::string format : {"peft", "hf"}) {
      auto e = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/bert_lora", "format=" + format,
                           "hydra.run.dir=" + d + "/bert_lora_" + format});
      ASSERT_EQ(e.exit_code, 0) << e.err;
    }
    const std::string adapter_config = ReadFile(d + "/bert_lora_peft/adapter_config.json");
    EXPECT_NE(adapter_config.find("\"task_type\": \"SEQ_CLS\""), std::string::npos);
    EXPECT_NE(adapter_config.find("\"modules_to_save\": [\"classifier\"]"), std::string::npos);
    ASSERT_NO_FATAL_FAILURE(
        ExpectPeftGivesTheMergedLogits("bert", base, d + "/bert_lora", [](const std::string& n) {
          return n.find(".query.weight") != std::string::npos ||
                 n.find(".value.weight") != std::string::npos || n.rfind("classifier.", 0) == 0;
        }));
    torch::serialize::InputArchive archive;
    ASSERT_TRUE(ReadCheckpoint(d + "/bert_lora/checkpoints/last.ckpt", &archive).ok());
    auto stored = ReadModelState(archive, "last.ckpt");
    ASSERT_TRUE(stored.ok()) << stored.status();
    std::vector<std::string> names;
    for (const auto& [name, tensor] : *stored) names.push_back(name);
    EXPECT_EQ(names.size(), 8u + 2u + 1u) << absl::StrJoin(names, " ");  // + head, fingerprint
    EXPECT_EQ(stored->count("classifier.weight"), 1u);
    EXPECT_EQ(stored->count("bert.pooler.dense.weight"), 0u);
  }
  // From scratch on kiln's own tokenizer (pad 0; <cls> first and </s> last, as it has no sep):
  // the export loads in transformers as a BERT with kiln's logits.
  auto scratch =
      RunProcess({KILN_BINARY, "train", "task=text_classification", "data=spam", "model=bert",
                  "model.vocab_size=${data.tokenizer.vocab_size}", "model.dim=16", "model.depth=1",
                  "model.heads=2", "model.mlp_dim=32", "tokenizer@data.tokenizer=whitespace",
                  "data.train=" + d + "/spam/train.jsonl", "data.val=" + d + "/spam/val.jsonl",
                  "data.test=null", "trainer.max_steps=20", "trainer.num_threads=1", "test=false",
                  "hydra.run.dir=" + d + "/scratch"});
  ASSERT_EQ(scratch.exit_code, 0) << scratch.err;
  ASSERT_NO_FATAL_FAILURE(ExportHfAndSafetensors(d + "/scratch"));
  auto scratch_loaded = RunProcess({check[0], check[1], d + "/scratch_hf"});
  ASSERT_EQ(scratch_loaded.exit_code, 0) << scratch_loaded.err;
  EXPECT_NE(scratch_loaded.out.find("BertForSequenceClassification"), std::string::npos);
  ASSERT_NO_FATAL_FAILURE(ExpectKilnGivesTheLogits(
      "bert", d + "/scratch_hf", d + "/scratch_hf/transformers_logits.safetensors"));
  // A tokenizer that pads with another id than the one the model masks is refused in one line.
  auto mismatched = RunProcess(
      {KILN_BINARY, "train", "task=text_classification", "data=spam", "model=bert",
       "model.pretrained=" + d + "/pretrained/bert/model", "tokenizer@data.tokenizer=pretrained",
       "data.tokenizer.path=" + d + "/pretrained/xlm-roberta/model",
       "data.train=" + d + "/spam/train.jsonl", "data.val=" + d + "/spam/val.jsonl",
       "data.test=null", "hydra.run.dir=" + d + "/mismatched"});
  EXPECT_NE(mismatched.exit_code, 0);
  EXPECT_NE(ErrorLine(mismatched.err).find("the tokenizer pads with id 1"), std::string::npos)
      << mismatched.err;
  EXPECT_NE(ErrorLine(mismatched.err).find("model 'bert' masks id 0"), std::string::npos)
      << mismatched.err;
}

TEST_F(NlpCliTest, LanguageModelExportsAFolderThatTransformersLoads) {
  auto probe = RunProcess({KILN_PYTHON_EXE, "-c", "import transformers"});
  if (probe.exit_code != 0) GTEST_SKIP() << "Python transformers not installed: " << probe.err;
  const std::string d = dir_.path();
  std::vector<std::string> check = {
      KILN_PYTHON_EXE, std::string(KILN_SOURCE_DIR) + "/tests/components/hf/check_export.py"};
  for (const std::string family : {"gpt", "llama"}) {
    SCOPED_TRACE(family);
    std::vector<std::string> options = {"test=false", "trainer.max_steps=20",
                                        "hydra.run.dir=" + d + "/" + family};
    if (family == "llama") options.insert(options.end(), {"model.kv_heads=1", "model.mlp_dim=24"});
    auto trained = Lm("train", options, "mobydick_" + family);
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    ASSERT_NO_FATAL_FAILURE(ExportHfAndSafetensors(d + "/" + family));
    check.push_back(d + "/" + family + "_hf");
  }
  std::string config = ReadFile(d + "/gpt_hf/config.json");
  EXPECT_NE(config.find("\"model_type\": \"gpt2\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"n_embd\": 16,"), std::string::npos) << config;
  auto loaded = RunProcess(check);
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_NE(loaded.out.find("GPT2LMHeadModel"), std::string::npos) << loaded.out;
  EXPECT_NE(loaded.out.find("LlamaForCausalLM"), std::string::npos) << loaded.out;
  // Each folder read back into kiln (model=gpt2 or llama, pretrained=FOLDER) holds the trained
  // tensors bit for bit (kiln's own format=safetensors export of the run), and gives the logits
  // transformers gave from it.
  for (const std::string family : {"gpt", "llama"}) {
    SCOPED_TRACE(family);
    const std::string folder = d + "/" + family + "_hf";
    auto node = config::ParseYaml(
        "_target_: " + (family == "gpt" ? "gpt2" : family) + "\npretrained: '" + folder + "'\n",
        "model.yaml");
    ASSERT_TRUE(node.ok());
    auto model = Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
    ASSERT_TRUE(model.ok()) << model.status();
    auto trained = ReadSafetensors(d + "/" + family + "_safetensors/model.safetensors");
    ASSERT_TRUE(trained.ok()) << trained.status();
    for (const auto& [name, tensor] : StateDict(**model)) {
      ASSERT_EQ(trained->count(name), 1u) << name;
      EXPECT_TRUE(torch::equal(tensor, trained->at(name))) << name;
    }
    auto reference = ReadSafetensors(folder + "/transformers_logits.safetensors");
    ASSERT_TRUE(reference.ok()) << reference.status();
    (*model)->eval();
    torch::NoGradGuard no_grad;
    torch::Tensor logits = (*model)->forward(reference->at("ids"));
    EXPECT_LT((logits - reference->at("logits")).abs().max().item<double>(), 1e-5);
  }

  // The run's char tokenizer goes into the folder as tokenizer.json: transformers' AutoTokenizer
  // reads it, and greedy generate from the folder continues a prompt with the text `kiln predict`
  // gives from the run (end of text </s> = 3; padding, <s> and <cls> never produced, as in kiln).
  EXPECT_NE(ReadFile(d + "/llama_hf/tokenizer.json").find("\"WordLevel\""), std::string::npos);
  auto greedy = Lm("predict",
                   {"ckpt_path=" + d + "/llama/checkpoints/last.ckpt", "model.kv_heads=1",
                    "model.mlp_dim=24", "task.prompt=Call me", "task.max_tokens=24",
                    "task.temperature=0", "hydra.run.dir=" + d + "/llama_greedy"},
                   "mobydick_llama");
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  EXPECT_GT(greedy.out.size(), std::string("Call me\n").size() + 4) << greedy.out;
  auto generated = RunProcess(
      {KILN_PYTHON_EXE, std::string(KILN_SOURCE_DIR) + "/tests/components/hf/check_generate.py",
       d + "/llama_hf", "Call me", "24", "3", "0", "2", "4"});
  ASSERT_EQ(generated.exit_code, 0) << generated.err;
  const size_t ids_end = generated.out.find('\n');
  ASSERT_NE(ids_end, std::string::npos) << generated.out;
  EXPECT_EQ("Call me" + generated.out.substr(ids_end + 1), greedy.out)
      << "prompt ids " << generated.out.substr(0, ids_end);

  // LoRA on the exported Llama as a pretrained base: 10 steps train the adapters alone; format=peft
  // writes them for peft, format=hf merges them. transformers with peft (base + kiln's adapter)
  // gives the logits kiln gives from the merged folder, and the merged folder differs from the
  // base only in the adapted layers.
  const std::string base = d + "/llama_hf";
  // kiln test without a checkpoint evaluates a Hugging Face folder as it is.
  auto evaluated = RunProcess({KILN_BINARY, "test", "experiment=pretrained_lm",
                               "model.pretrained=" + base, "data.test=[" + d + "/book/test.txt]",
                               "data.block_size=16", "hydra.run.dir=" + d + "/eval_base"});
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.err;
  EXPECT_NE(evaluated.out.find("test/bpc: "), std::string::npos) << evaluated.out;
  EXPECT_NE(evaluated.err.find("as it is (no ckpt_path)"), std::string::npos) << evaluated.err;
  auto lora = Lm("train",
                 {"test=false", "trainer.max_steps=10", "model.pretrained=" + base,
                  "model.kv_heads=1", "model.mlp_dim=24",  // the base's sizes, as trained above
                  "model.lora={r:4,alpha:8,target_modules:[q_proj,v_proj]}", "optimizer.lr=0.05",
                  "hydra.run.dir=" + d + "/lora"},
                 "mobydick_llama");
  ASSERT_EQ(lora.exit_code, 0) << lora.err;
  EXPECT_NE(lora.err.find("model.lora: adapters of rank 4 on 2 layers"), std::string::npos)
      << lora.err;
  // torchscript: the adapters traced unmerged, and the trace takes any batch size (the export
  // checks it at batch sizes 1 and 3 against the model).
  for (const std::string format : {"peft", "hf", "torchscript"}) {
    auto e = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/lora", "format=" + format,
                         "hydra.run.dir=" + d + "/lora_" + format});
    ASSERT_EQ(e.exit_code, 0) << e.err;
  }
  EXPECT_NE(ReadFile(d + "/lora_peft/adapter_config.json").find("\"peft_type\": \"LORA\""),
            std::string::npos);
  ASSERT_NO_FATAL_FAILURE(
      ExpectPeftGivesTheMergedLogits("llama", base, d + "/lora", [](const std::string& n) {
        return n.find("q_proj") != std::string::npos || n.find("v_proj") != std::string::npos;
      }));
  // An adapter that trains a module whole (PEFT's modules_to_save, here the final norm, named in
  // its adapter_config.json only, by its full name: PEFT reads "norm" as a suffix, every norm)
  // goes on training from model.lora.from, and format=peft writes that module again, trained,
  // and names it so again.
  {
    const std::string saved = d + "/lora_norm";
    std::filesystem::create_directories(saved);
    std::string config = ReadFile(d + "/lora_peft/adapter_config.json");
    const std::string none = "\"modules_to_save\": null";
    ASSERT_NE(config.find(none), std::string::npos) << config;
    config.replace(config.find(none), none.size(), "\"modules_to_save\": [\"model.norm\"]");
    std::ofstream(saved + "/adapter_config.json") << config;
    auto adapter = ReadSafetensors(d + "/lora_peft/adapter_model.safetensors");
    ASSERT_TRUE(adapter.ok()) << adapter.status();
    const std::string norm = "base_model.model.model.norm.weight";
    std::vector<std::pair<std::string, torch::Tensor>> tensors(adapter->begin(), adapter->end());
    tensors.emplace_back(norm, torch::full({16}, 1.5));
    ASSERT_TRUE(WriteSafetensors(saved + "/adapter_model.safetensors", tensors).ok());
    auto resumed = Lm("train",
                      {"test=false", "trainer.max_steps=2", "model.pretrained=" + base,
                       "model.kv_heads=1", "model.mlp_dim=24", "model.lora={from:" + saved + "}",
                       "optimizer.lr=0.05", "hydra.run.dir=" + d + "/lora_norm_run"},
                      "mobydick_llama");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    EXPECT_NE(resumed.err.find("model.norm trained whole"), std::string::npos) << resumed.err;
    auto e = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/lora_norm_run", "format=peft",
                         "hydra.run.dir=" + d + "/lora_norm_run_peft"});
    ASSERT_EQ(e.exit_code, 0) << e.err;
    EXPECT_NE(ReadFile(d + "/lora_norm_run_peft/adapter_config.json")
                  .find("\"modules_to_save\": [\"model.norm\"]"),
              std::string::npos);
    auto exported = ReadSafetensors(d + "/lora_norm_run_peft/adapter_model.safetensors");
    ASSERT_TRUE(exported.ok()) << exported.status();
    ASSERT_EQ(exported->count(norm), 1u);
    EXPECT_EQ(exported->size(), adapter->size() + 1);
    const torch::Tensor trained_norm = exported->at(norm);
    EXPECT_FALSE(torch::equal(trained_norm, torch::full({16}, 1.5)));
    EXPECT_LT((trained_norm - 1.5).abs().max().item<double>(), 0.5);
    // peft reads that file as kiln wrote it (modules_to_save ["model.norm"]) and gives the merged
    // folder's logits, the trained final norm's part in them.
    auto merged = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/lora_norm_run", "format=hf",
                              "hydra.run.dir=" + d + "/lora_norm_run_hf"});
    ASSERT_EQ(merged.exit_code, 0) << merged.err;
    ASSERT_NO_FATAL_FAILURE(ExpectPeftGivesTheMergedLogits(
        "llama", base, d + "/lora_norm_run", [](const std::string& n) {
          return n == "model.norm.weight" || n.find("q_proj") != std::string::npos ||
                 n.find("v_proj") != std::string::npos;
        }));
  }
  // DoRA (use_dora) on the same base given as kiln's own checkpoint (model.init_from, loaded after
  // the adapters are added): the magnitudes start at that base's row norms, not the random
  // initialization's, so after 3 small steps they are still within 0.01 of |W + s B A|. peft reads
  // the adapter (use_dora true) and gives the logits of the merged folder.
  {
    auto dora = Lm("train",
                   {"test=false", "trainer.max_steps=3",
                    "+model.init_from=" + d + "/llama/checkpoints/last.ckpt", "model.kv_heads=1",
                    "model.mlp_dim=24",
                    "model.lora={r:4,alpha:8,target_modules:[q_proj,v_proj],use_dora:true}",
                    "optimizer.lr=0.001", "hydra.run.dir=" + d + "/dora"},
                   "mobydick_llama");
    ASSERT_EQ(dora.exit_code, 0) << dora.err;
    EXPECT_NE(dora.err.find("model.lora: DoRA adapters of rank 4 on 2 layers"), std::string::npos)
        << dora.err;
    for (const std::string format : {"peft", "hf"}) {
      auto e = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/dora", "format=" + format,
                           "hydra.run.dir=" + d + "/dora_" + format});
      ASSERT_EQ(e.exit_code, 0) << e.err;
    }
    EXPECT_NE(ReadFile(d + "/dora_peft/adapter_config.json").find("\"use_dora\": true"),
              std::string::npos);
    auto adapter = ReadSafetensors(d + "/dora_peft/adapter_model.safetensors");
    auto weights = ReadSafetensors(base + "/model.safetensors");
    ASSERT_TRUE(adapter.ok() && weights.ok());
    for (const std::string layer : {"q_proj", "v_proj"}) {
      const std::string name = "model.layers.0.self_attn." + layer;
      const std::string key = "base_model.model." + name;
      ASSERT_EQ(adapter->count(key + ".lora_magnitude_vector"), 1u) << key;
      torch::Tensor norm =
          (weights->at(name + ".weight") +
           2 * torch::mm(adapter->at(key + ".lora_B.weight"), adapter->at(key + ".lora_A.weight")))
              .norm(2, {1});
      EXPECT_LT((adapter->at(key + ".lora_magnitude_vector") - norm).abs().max().item<double>(),
                0.01)
          << key;
    }
    ASSERT_NO_FATAL_FAILURE(
        ExpectPeftGivesTheMergedLogits("llama", base, d + "/dora", [](const std::string& n) {
          return n.find("q_proj") != std::string::npos || n.find("v_proj") != std::string::npos;
        }));
    // kiln predict from the checkpoint (the adapters alone) takes the base from model.init_from,
    // as training did, and generates what the merged folder generates.
    auto from_checkpoint =
        RunProcess({KILN_BINARY, "predict", "ckpt_path=" + d + "/dora/checkpoints/last.ckpt",
                    "task.prompt=Call me", "task.max_tokens=12", "task.temperature=0",
                    "hydra.run.dir=" + d + "/dora_predict"});
    ASSERT_EQ(from_checkpoint.exit_code, 0) << from_checkpoint.err;
    auto from_merged = RunProcess({KILN_BINARY, "predict", "experiment=pretrained_lm",
                                   "model.pretrained=" + d + "/dora_hf", "task.prompt=Call me",
                                   "task.max_tokens=12", "task.temperature=0",
                                   "hydra.run.dir=" + d + "/dora_hf_predict"});
    ASSERT_EQ(from_merged.exit_code, 0) << from_merged.err;
    EXPECT_EQ(from_checkpoint.out, from_merged.out);
  }
  // The run's checkpoints hold the adapters alone (the base is the config's model.pretrained),
  // with the frozen weights' digest: the same adapters against another base are refused.
  {
    torch::serialize::InputArchive archive;
    ASSERT_TRUE(ReadCheckpoint(d + "/lora/checkpoints/last.ckpt", &archive).ok());
    auto stored = ReadModelState(archive, "last.ckpt");
    ASSERT_TRUE(stored.ok()) << stored.status();
    int adapters = 0;  // lora_A and lora_B of the two adapted layers, and kiln's buffer
    for (const auto& [name, tensor] : *stored) {
      adapters += name.find(".lora_") != std::string::npos;
      EXPECT_TRUE(name.find(".lora_") != std::string::npos || name == "tokenizer_fingerprint")
          << name;
    }
    EXPECT_EQ(adapters, 4);
    EXPECT_FALSE(StoredFrozenDigest(archive).empty());
  }
  // kiln average keeps the digest: the average of the adapters (here of one checkpoint with
  // itself: the same values) exports the same adapter bytes; adapters and a whole model are not
  // averaged.
  {
    const std::string last = d + "/lora/checkpoints/last.ckpt";
    auto average = RunProcess({KILN_BINARY, "average", "ckpt=[" + last + "," + last + "]",
                               "out=" + d + "/lora_avg.ckpt"});
    ASSERT_EQ(average.exit_code, 0) << average.err;
    auto e = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/lora",
                         "ckpt_path=" + d + "/lora_avg.ckpt", "format=peft",
                         "hydra.run.dir=" + d + "/lora_avg_peft"});
    ASSERT_EQ(e.exit_code, 0) << e.err;
    EXPECT_EQ(ReadFile(d + "/lora_avg_peft/adapter_model.safetensors"),
              ReadFile(d + "/lora_peft/adapter_model.safetensors"));
    auto mixed = RunProcess({KILN_BINARY, "average",
                             "ckpt=[" + last + "," + d + "/llama/checkpoints/last.ckpt]",
                             "out=" + d + "/mixed.ckpt"});
    EXPECT_NE(mixed.exit_code, 0);
    EXPECT_NE(mixed.err.find("adapters and a whole model"), std::string::npos) << mixed.err;
  }
  auto other_base =
      RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/lora", "format=hf",
                  "model.pretrained=" + d + "/lora_hf", "hydra.run.dir=" + d + "/lora_other"});
  EXPECT_NE(other_base.exit_code, 0);
  EXPECT_NE(other_base.err.find("holds LoRA adapters trained beside other frozen weights"),
            std::string::npos)
      << other_base.err;
  // An adapter on the embedding that gpt's tied head reads too (the head keeps the base's table,
  // as in PEFT): format=hf merges it into the table and writes the head untied, with the base's
  // table as its weight; format=peft writes the adapter, the embedding's as PEFT's
  // lora_embedding_A and _B. The run trains in bf16-mixed (the adapter's product under autocast,
  // added to the float32 table's rows), and format=torchscript traces the adapters unmerged.
  {
    auto tied = Lm("train", {"test=false", "trainer.max_steps=3", "trainer.precision=bf16-mixed",
                             "model.lora={r:2,alpha:4,target_modules:[wte,c_attn]}",
                             "hydra.run.dir=" + d + "/lora_wte"});
    ASSERT_EQ(tied.exit_code, 0) << tied.err;
    auto traced = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/lora_wte",
                              "format=torchscript", "hydra.run.dir=" + d + "/lora_wte_ts"});
    ASSERT_EQ(traced.exit_code, 0) << traced.err;
    EXPECT_TRUE(std::filesystem::is_regular_file(d + "/lora_wte_ts/model.pt"));
    auto merged = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/lora_wte", "format=hf",
                              "hydra.run.dir=" + d + "/lora_wte_hf"});
    ASSERT_EQ(merged.exit_code, 0) << merged.err;
    EXPECT_NE(ReadFile(d + "/lora_wte_hf/config.json").find("\"tie_word_embeddings\": false"),
              std::string::npos);
    auto folder = ReadSafetensors(d + "/lora_wte_hf/model.safetensors");
    ASSERT_TRUE(folder.ok()) << folder.status();
    ASSERT_EQ(folder->count("lm_head.weight"), 1u);
    EXPECT_FALSE(torch::equal(folder->at("lm_head.weight"), folder->at("transformer.wte.weight")));
    // transformers loads the untied folder as GPT-2, with kiln's logits from it.
    auto loaded = RunProcess({KILN_PYTHON_EXE,
                              std::string(KILN_SOURCE_DIR) + "/tests/components/hf/check_export.py",
                              d + "/lora_wte_hf"});
    ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
    ASSERT_NO_FATAL_FAILURE(ExpectKilnGivesTheLogits(
        "gpt2", d + "/lora_wte_hf", d + "/lora_wte_hf/transformers_logits.safetensors"));
    auto alone = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/lora_wte", "format=peft",
                             "hydra.run.dir=" + d + "/lora_wte_peft"});
    ASSERT_EQ(alone.exit_code, 0) << alone.err;
    auto adapter = ReadSafetensors(d + "/lora_wte_peft/adapter_model.safetensors");
    ASSERT_TRUE(adapter.ok()) << adapter.status();
    EXPECT_EQ(adapter->count("base_model.model.transformer.wte.lora_embedding_A"), 1u);
    EXPECT_EQ(adapter->count("base_model.model.transformer.wte.lora_embedding_B"), 1u);
    // A starts at zero (PEFT's); trained, it has moved.
    EXPECT_GT(
        adapter->at("base_model.model.transformer.wte.lora_embedding_A").abs().max().item<float>(),
        0.0f);
  }
  // PEFT's trainable tokens from the command line, as {MODULE: ids}: the rows of tokens 3 and 5
  // train beside an adapter on the position table, on the gpt trained above as the base
  // (model.init_from, loaded after the adapters are made: the rows start again from its rows, and
  // an adapter on embeddings alone is no "*.lora_A.*" for init_from to skip). At a rate of 1e-9
  // the rows stay the base's. format=peft writes them under PEFT's key and
  // trainable_token_indices, and format=hf merges them into the (still tied) table.
  {
    auto tokens = Lm("train", {"test=false", "trainer.max_steps=3", "optimizer.lr=1e-9",
                               "+model.init_from=" + d + "/gpt/checkpoints/last.ckpt",
                               "model.lora={r:2,alpha:4,target_modules:[wpe],"
                               "trainable_token_indices:{wte:[3,5]},dropout:0.0}",
                               "hydra.run.dir=" + d + "/lora_tokens"});
    ASSERT_EQ(tokens.exit_code, 0) << tokens.err;
    EXPECT_NE(tokens.err.find("adapters of rank 2 on 1 layers, 2 tokens of transformer.wte"),
              std::string::npos)
        << tokens.err;
    // torchscript: the rows traced in place, at any batch size.
    for (const std::string format : {"peft", "hf", "torchscript"}) {
      auto e = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/lora_tokens",
                           "format=" + format, "hydra.run.dir=" + d + "/lora_tokens_" + format});
      ASSERT_EQ(e.exit_code, 0) << e.err;
    }
    EXPECT_NE(ReadFile(d + "/lora_tokens_peft/adapter_config.json")
                  .find("\"trainable_token_indices\": [3, 5]"),
              std::string::npos);
    auto adapter = ReadSafetensors(d + "/lora_tokens_peft/adapter_model.safetensors");
    ASSERT_TRUE(adapter.ok()) << adapter.status();
    const std::string key = "base_model.model.transformer.wte.token_adapter.trainable_tokens_delta";
    ASSERT_EQ(adapter->count(key), 1u);
    auto base = ReadSafetensors(d + "/gpt_hf/model.safetensors");
    ASSERT_TRUE(base.ok()) << base.status();
    const torch::Tensor ids = torch::tensor({3, 5});
    EXPECT_LT((adapter->at(key) - base->at("transformer.wte.weight").index_select(0, ids))
                  .abs()
                  .max()
                  .item<double>(),
              1e-6);
    auto merged = ReadSafetensors(d + "/lora_tokens_hf/model.safetensors");
    ASSERT_TRUE(merged.ok()) << merged.status();
    EXPECT_EQ(merged->count("lm_head.weight"), 0u);
    EXPECT_TRUE(
        torch::equal(merged->at("transformer.wte.weight").index_select(0, ids), adapter->at(key)));
  }
  auto no_adapters = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/llama", "format=peft",
                                 "hydra.run.dir=" + d + "/no_peft"});
  EXPECT_NE(no_adapters.exit_code, 0);
  EXPECT_NE(no_adapters.err.find("has no LoRA adapters (model.lora)"), std::string::npos)
      << no_adapters.err;

  ASSERT_EQ(Classify("train", {"test=false", "trainer.max_epochs=1"}).exit_code, 0);
  auto refused = RunProcess({KILN_BINARY, "export", "run_dir=" + d + "/run_train", "format=hf",
                             "hydra.run.dir=" + d + "/bag_hf"});
  EXPECT_EQ(refused.exit_code, 2);  // a usage error
  EXPECT_NE(refused.err.find("kiln export format=hf: model 'bag_of_embeddings' has no Hugging Face "
                             "layout in kiln; these do: bert, gpt, gpt2, hf_vit, llama"),
            std::string::npos)
      << refused.err;
  EXPECT_FALSE(std::ifstream(d + "/bag_hf/config.json").good());
}

TEST_F(NlpCliTest, EmptyFileIsOneLine) {
  dir_.Write("spam/train.jsonl", "");
  auto r = Classify("train", {});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(ErrorLine(r.err).find("spam/train.jsonl: empty file"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate"), std::string::npos);
}

TEST_F(NlpCliTest, InvalidUtf8NamesTheLine) {
  dir_.Write("book/train.txt", "fine line\nbad \xFF byte\n");
  auto r = Lm("train", {});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(ErrorLine(r.err).find("book/train.txt:2: invalid UTF-8 (byte 0xFF at column 5)"),
            std::string::npos)
      << r.err;
}

TEST_F(NlpCliTest, MissingFieldNamesTheLine) {
  dir_.Write("spam/val.jsonl",
             "{\"text\": \"a\", \"label\": \"ham\"}\n{\"body\": \"b\", \"label\": \"ham\"}\n");
  auto r = Classify("train", {});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(ErrorLine(r.err).find("spam/val.jsonl:2: no text field 'text'"), std::string::npos)
      << r.err;
  auto label = Classify("train", {"data.label_field=category"});
  EXPECT_NE(ErrorLine(label.err).find("spam/train.jsonl:1: no label field 'category'"),
            std::string::npos)
      << label.err;
}

TEST_F(NlpCliTest, LabelOutsideTheLabelSetNamesTheLine) {
  dir_.Write("spam/test.jsonl",
             "{\"text\": \"a\", \"label\": \"ham\"}\n{\"text\": \"b\", \"label\": \"eggs\"}\n");
  auto r = Classify("train", {"trainer.max_epochs=1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(
      ErrorLine(r.err).find("spam/test.jsonl:2: label 'eggs' is not one of the labels [ham, spam]"),
      std::string::npos)
      << r.err;
}

TEST_F(NlpCliTest, TokenizerThatDoesNotMatchTheCheckpointIsRefused) {
  auto r = Lm("train", {"trainer.max_steps=5", "test=false"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Other training text: another character vocabulary, the same vocab_size.
  dir_.Write("other.txt", std::string(100, 'x') + std::string(50, 'y') + "zzz\n");
  auto t = Lm("test", {"ckpt_path=" + dir_.path() + "/lm_train/checkpoints/last.ckpt",
                       "data.train=[" + dir_.path() + "/other.txt]"});
  EXPECT_NE(t.exit_code, 0);
  EXPECT_NE(ErrorLine(t.err).find("trained with another tokenizer"), std::string::npos) << t.err;
  // Resuming training from it is refused too (the check reads the buffer again once a checkpoint
  // is loaded into it, though it skips the read at every step while nothing changes).
  auto resumed = Lm(
      "train", {"ckpt_path=" + dir_.path() + "/lm_train/checkpoints/last.ckpt",
                "trainer.max_steps=8", "test=false", "data.train=[" + dir_.path() + "/other.txt]",
                "hydra.run.dir=" + dir_.path() + "/lm_resumed"});
  EXPECT_NE(resumed.exit_code, 0);
  EXPECT_NE(ErrorLine(resumed.err).find("trained with another tokenizer"), std::string::npos)
      << resumed.err;
  // Another vocab_size is another embedding shape.
  auto v = Lm("test", {"ckpt_path=" + dir_.path() + "/lm_train/checkpoints/last.ckpt",
                       "data.tokenizer.vocab_size=64"});
  EXPECT_NE(v.exit_code, 0);
  EXPECT_NE(ErrorLine(v.err).find("checkpoint of another model"), std::string::npos) << v.err;
}

}  // namespace
}  // namespace kiln
