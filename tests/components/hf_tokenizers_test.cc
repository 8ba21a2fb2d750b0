// Hugging Face tokenizers into kiln: tokenizers trained and saved by the `tokenizers` library and
// transformers (tests/components/hf/make_tokenizers.py) give in kiln the library's ids, with and
// without special tokens, and its decodes, for every test text (Moby Dick, State of the Union,
// spam, a Unicode text); a folder kiln cannot read is refused in one line. Skipped, with a
// message, only where the .venv has no tokenizers/transformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "components/text/hf_tokenizer.h"
#include "components/text/tokenizer.h"
#include "lib/config/yaml_io.h"
#include "lib/data/datamodule.h"
#include "lib/registry/registry.h"
#include "tests/components/instantiate.h"
#include "tests/support/process.h"

namespace kiln {
namespace hf_tokenizers_test {

using text::HfTokenizer;

const char kPython[] = KILN_PYTHON_EXE;
const std::string kScript =
    std::string(KILN_SOURCE_DIR) + "/tests/components/hf/make_tokenizers.py";

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// `ids` from a little before where they first differ from `other`.
std::string Around(const std::vector<int64_t>& ids, const std::vector<int64_t>& other) {
  size_t first = 0;
  while (first < ids.size() && first < other.size() && ids[first] == other[first]) ++first;
  const size_t from = first > 5 ? first - 5 : 0;
  return "@" + std::to_string(from) + " " +
         nlohmann::json(std::vector<int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(from),
                                             ids.begin() + static_cast<std::ptrdiff_t>(
                                                               std::min(ids.size(), from + 20))))
             .dump();
}

std::shared_ptr<text::Tokenizer> Instantiate(const std::string& yaml) {
  return testing::InstantiateOk<text::Tokenizer>(yaml, "tokenizer");
}

// Made once per process (training eight tokenizers takes half a minute on two cores; ctest runs
// each test in a process of its own, so the tests that need them are one test).
class HfTokenizers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    auto probe = testing::RunProcess({kPython, "-c", "import tokenizers, transformers"});
    if (probe.exit_code != 0) {
      skip_ = "Python tokenizers/transformers not installed: " + probe.err;
      return;
    }
    auto made = testing::RunProcess(
        {kPython, kScript, dir_->path(), std::string(KILN_SOURCE_DIR) + "/data/text"});
    if (made.exit_code != 0) {
      error_ = "make_tokenizers.py failed: " + made.err;
      return;
    }
    texts_ = nlohmann::json::parse(ReadText(dir_->path() + "/texts.json"))
                 .get<std::vector<std::string>>();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(error_.empty()) << error_;
  }

  // Every text of texts.json encodes and decodes in kiln as the library did in `name`.
  void ExpectSameAsLibrary(const std::string& name) {
    const std::string folder = dir_->path() + "/" + name;
    const auto start = std::chrono::steady_clock::now();
    auto tok = HfTokenizer::LoadFolder(folder);
    ASSERT_TRUE(tok.ok()) << tok.status();
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto ref = nlohmann::json::parse(ReadText(folder + "/reference.json"));
    EXPECT_EQ((*tok)->vocab_size(), ref["vocab_size"].get<int64_t>());
    int mismatches = 0;
    size_t bytes = 0;
    double encode_s = 0;
    for (size_t i = 0; i < texts_.size(); ++i) {
      const std::string& text = texts_[i];
      bytes += text.size();
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<int64_t> ids = (*tok)->Encode(text, false);
      encode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::vector<int64_t> ids_special = (*tok)->Encode(text, true);
      const auto expected = ref["ids"][i].get<std::vector<int64_t>>();
      const auto expected_special = ref["ids_special"][i].get<std::vector<int64_t>>();
      bool same = ids == expected && ids_special == expected_special;
      // Decoding the library's ids, so that a difference shows in decoding alone.
      const std::string decoded = (*tok)->Decode(expected_special, true);
      const std::string decoded_special = (*tok)->Decode(expected_special, false);
      same = same && decoded == ref["decoded"][i].get<std::string>() &&
             decoded_special == ref["decoded_special"][i].get<std::string>();
      if (!same && ++mismatches <= 3) {
        ADD_FAILURE() << name << ": text " << i << " " << nlohmann::json(text.substr(0, 100)).dump()
                      << "\n  ids      " << Around(ids, expected) << "\n  expected "
                      << Around(expected, ids) << "\n  special  "
                      << Around(ids_special, expected_special) << "\n  expected "
                      << Around(expected_special, ids_special) << "\n  decoded  "
                      << nlohmann::json(decoded).dump().substr(0, 300) << "\n  expected "
                      << ref["decoded"][i].dump().substr(0, 300) << "\n  kept     "
                      << nlohmann::json(decoded_special).dump().substr(0, 300) << "\n  expected "
                      << ref["decoded_special"][i].dump().substr(0, 300);
      }
    }
    EXPECT_EQ(mismatches, 0) << name << ": of " << texts_.size() << " texts";
    std::cout << name << ": " << texts_.size() << " texts, " << (*tok)->vocab_size()
              << " ids; loaded in " << load_s * 1e3 << " ms, encoded "
              << bytes / 1e6 / std::max(encode_s, 1e-9) << " MB/s\n";
  }

  // kiln's own tokenizers (char; whitespace, lowercased and not), learned from the first half of
  // the test texts, write Hugging Face files (Tokenizer::HuggingFaceFiles, what `kiln export
  // format=hf` puts beside a model): transformers' AutoTokenizer reads them and gives kiln's ids
  // for every test text (but those that spell a special token), unseen characters and words (<unk>)
  // included, and kiln's decodes of the texts it knows whole.
  void ExpectKilnsOwnReadAlikeInTransformers() {
    const std::vector<std::string> half(
        texts_.begin(), texts_.begin() + static_cast<std::ptrdiff_t>(texts_.size() / 2));
    const std::vector<std::string> yamls = {
        "_target_: char\nvocab_size: 300\n",
        "_target_: whitespace\nvocab_size: 4000\nmin_frequency: 1\n",
        "_target_: whitespace\nvocab_size: 4000\nlowercase: false\n"};
    std::vector<std::shared_ptr<text::Tokenizer>> tokenizers;
    std::vector<std::string> argv = {
        kPython, std::string(KILN_SOURCE_DIR) + "/tests/components/hf/check_kiln_tokenizers.py",
        dir_->path() + "/texts.json"};
    for (size_t i = 0; i < yamls.size(); ++i) {
      auto tokenizer = Instantiate(yamls[i]);
      ASSERT_TRUE(tokenizer->Fit(half, "the first half").ok());
      auto files = tokenizer->HuggingFaceFiles();
      ASSERT_TRUE(files.ok()) << files.status();
      ASSERT_EQ(files->count("tokenizer.json"), 1u) << yamls[i];
      const std::string folder = dir_->path() + "/kiln_" + std::to_string(i);
      std::filesystem::create_directories(folder);
      for (const auto& [name, bytes] : *files) WriteText(folder + "/" + name, bytes);
      tokenizers.push_back(tokenizer);
      argv.push_back(folder);
    }
    auto read = testing::RunProcess(argv);
    ASSERT_EQ(read.exit_code, 0) << read.err;
    for (size_t t = 0; t < tokenizers.size(); ++t) {
      SCOPED_TRACE(yamls[t]);
      const auto ref = nlohmann::json::parse(
          ReadText(dir_->path() + "/kiln_" + std::to_string(t) + "/transformers.json"));
      ASSERT_EQ(ref["ids"].size(), texts_.size());
      // kiln reads the files back itself (tokenizer=pretrained): the library's ids for every text,
      // those that spell a special token included.
      auto reread = HfTokenizer::LoadFolder(dir_->path() + "/kiln_" + std::to_string(t));
      ASSERT_TRUE(reread.ok()) << reread.status();
      int reread_mismatches = 0;
      for (size_t i = 0; i < texts_.size(); ++i) {
        const auto expected = ref["ids"][i].get<std::vector<int64_t>>();
        const std::vector<int64_t> ids = (*reread)->Encode(texts_[i], false);
        if (ids != expected && ++reread_mismatches <= 3) {
          ADD_FAILURE() << "read back: text " << i << " "
                        << nlohmann::json(texts_[i].substr(0, 100)).dump() << "\n  kiln         "
                        << Around(ids, expected) << "\n  transformers " << Around(expected, ids);
        }
      }
      EXPECT_EQ(reread_mismatches, 0);
      int mismatches = 0, unknown = 0, decoded = 0, left_out = 0;
      for (size_t i = 0; i < texts_.size(); ++i) {
        // A text that spells a special token ("<s>") gives the special's id in transformers, as
        // every Hugging Face tokenizer's added tokens do; kiln's tokenizers never make a special
        // from text. Those texts (3 of the Unicode set's) are left out.
        bool spells_special = false;
        for (int64_t id = 0; id < text::SpecialTokens::kCount; ++id)
          spells_special =
              spells_special || texts_[i].find(text::SpecialTokens::Name(id)) != std::string::npos;
        if (spells_special) {
          ++left_out;
          continue;
        }
        const std::vector<int64_t> ids = tokenizers[t]->Encode(texts_[i]);
        const auto expected = ref["ids"][i].get<std::vector<int64_t>>();
        bool same = ids == expected;
        const bool has_unknown =
            std::find(ids.begin(), ids.end(), text::SpecialTokens::kUnk) != ids.end();
        unknown += has_unknown;
        if (!has_unknown) {
          same = same && tokenizers[t]->Decode(ids) == ref["decoded"][i].get<std::string>();
          ++decoded;
        }
        if (!same && ++mismatches <= 3) {
          ADD_FAILURE() << "text " << i << " " << nlohmann::json(texts_[i].substr(0, 100)).dump()
                        << "\n  kiln         " << Around(ids, expected) << "\n  transformers "
                        << Around(expected, ids) << "\n  decoded      "
                        << ref["decoded"][i].dump().substr(0, 200);
        }
      }
      EXPECT_EQ(mismatches, 0) << "of " << texts_.size() << " texts";
      EXPECT_LE(left_out, 5);
      EXPECT_GT(unknown, 0);  // the second half has characters or words the first half lacks
      EXPECT_GT(decoded, 0);
    }
  }

  static testing::TempDir* dir_;
  static std::vector<std::string> texts_;
  static std::string skip_, error_;
};

testing::TempDir* HfTokenizers::dir_ = nullptr;
std::vector<std::string> HfTokenizers::texts_;
std::string HfTokenizers::skip_, HfTokenizers::error_;

// GPT-2 (ByteLevel's regex, "a b" merges, \\u escapes), Llama 3 and Qwen2 (Split regexes, NFC),
// Llama 2 (byte fallback), BERT uncased and cased (WordPiece), Unigram (Metaspace always, first);
// then `tokenizer=pretrained tokenizer.path=DIR` through the registry: the folder's own special ids
// (tokenizer_config.json), lossless round trips, Fit ignoring texts. Then the other way: kiln's own
// tokenizers' files read by transformers (in this test, which has the texts already made).
TEST_F(HfTokenizers, EveryTokenizerGivesTheLibrarysIdsAndSpecialIds) {
  for (const char* name :
       {"gpt2", "llama3", "qwen2", "llama2", "bert", "bert_cased", "unigram", "unigram_first"}) {
    ExpectSameAsLibrary(name);
  }

  auto build = [&](const std::string& name) {
    auto tok = Instantiate("_target_: pretrained\npath: '" + dir_->path() + "/" + name + "'\n");
    EXPECT_TRUE(tok->Fit({"ignored"}, "nothing").ok());
    return tok;
  };
  auto bert = build("bert");
  text::SpecialIds ids = bert->special_ids();
  EXPECT_EQ(ids.pad, 0);
  EXPECT_EQ(ids.unk, 1);
  EXPECT_EQ(ids.cls, 2);
  EXPECT_EQ(ids.sep, 3);  // [SEP]: what a BERT classifier's rows end with
  EXPECT_EQ(ids.bos, -1);
  EXPECT_EQ(ids.eos, -1);
  EXPECT_EQ(bert->Decode(bert->Encode("call me ishmael.")), "call me ishmael.");
  EXPECT_NE(bert->Describe().find("WordPiece"), std::string::npos) << bert->Describe();

  auto llama = build("llama3");
  ids = llama->special_ids();
  EXPECT_EQ(ids.bos, 0);  // <|begin_of_text|>
  EXPECT_EQ(ids.eos, 1);  // <|end_of_text|>
  EXPECT_EQ(ids.pad, -1);
  const std::string text = "Call me Ishmael.  Some years ago—never mind how long 🐳\n";
  EXPECT_EQ(llama->Decode(llama->Encode(text)), text);
  std::vector<int64_t> with_specials = {ids.bos};
  for (int64_t id : llama->Encode(text)) with_specials.push_back(id);
  with_specials.push_back(ids.eos);
  EXPECT_EQ(llama->Decode(with_specials), text);  // specials left out
  EXPECT_GT(llama->fingerprint(), 0u);
  EXPECT_NE(llama->fingerprint(), bert->fingerprint());
  // The 256 bytes and the merges learned (fewer where the text sets are not prepared: CI's clone
  // trains on the script's own Unicode text).
  EXPECT_GT(llama->vocab_size(), 256);

  // text_corpus puts the tokenizer's own </s> between documents: Llama 3's <|end_of_text|>.
  testing::TempDir corpus;
  corpus.Write("a.txt", "Call me Ishmael.");
  corpus.Write("b.txt", "Some years ago.");
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "Call me Ishmael. Some years ago. ";
  corpus.Write("train.txt", long_text);
  auto dm = testing::InstantiateOk<data::DataModule>(
      "_target_: text_corpus\ntrain: [" + corpus.path() + "/train.txt]\nval: [" + corpus.path() +
          "/a.txt, " + corpus.path() +
          "/b.txt]\nblock_size: 64\ntokenizer: {_target_: "
          "pretrained, path: '" +
          dir_->path() + "/llama3'}\n",
      "data");
  ASSERT_TRUE(dm);
  const absl::Status setup = dm->Setup(data::Stage::kFit);
  ASSERT_TRUE(setup.ok()) << setup;
  data::SampleRng rng(0, 0, 0);
  auto block = dm->val_dataset()->Get(0, rng);
  ASSERT_TRUE(block.ok()) << block.status();
  std::vector<int64_t> stream = llama->Encode("Call me Ishmael.");
  stream.push_back(1);  // <|end_of_text|>
  for (int64_t id : llama->Encode("Some years ago.")) stream.push_back(id);
  // The input holds all but the last token (a target only), then padding.
  const int64_t n = static_cast<int64_t>(stream.size()) - 1;
  const torch::Tensor input = block->input.narrow(0, 0, n).contiguous();
  stream.pop_back();
  EXPECT_EQ(std::vector<int64_t>(input.data_ptr<int64_t>(), input.data_ptr<int64_t>() + n), stream);

  auto unigram = build("unigram");
  ids = unigram->special_ids();
  EXPECT_EQ(ids.pad, 0);
  EXPECT_EQ(ids.unk, 1);
  EXPECT_EQ(ids.bos, 2);
  EXPECT_EQ(ids.eos, 3);

  ExpectKilnsOwnReadAlikeInTransformers();
}

// A folder with a SentencePiece tokenizer.model alone (Llama 2, XLM-R) reads through kiln's
// SentencePiece module: the ids that model gives, its own special ids.
TEST(PretrainedTokenizer, ReadsASentencePieceModelAlone) {
  testing::TempDir dir;
  auto trained = Instantiate("_target_: sentencepiece\nvocab_size: 200\ncache_dir: '" + dir.path() +
                             "/cache'\nnum_threads: 1\n");
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) {
    texts.push_back("Call me Ishmael. Some years ago, never mind how long precisely " +
                    std::to_string(i) + " whales and ships");
  }
  ASSERT_TRUE(trained->Fit(texts, "test texts").ok());
  std::string model;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() + "/cache")) {
    model = entry.path().string();
  }
  ASSERT_FALSE(model.empty());
  std::filesystem::create_directories(dir.path() + "/folder");
  std::filesystem::copy_file(model, dir.path() + "/folder/tokenizer.model");

  auto tok = Instantiate("_target_: pretrained\npath: '" + dir.path() + "/folder'\n");
  ASSERT_TRUE(tok->Fit({}, "nothing").ok());
  const std::string text = "Some whales, never mind how long.";
  EXPECT_EQ(tok->Encode(text), trained->Encode(text));
  EXPECT_EQ(tok->Decode(tok->Encode(text)), text);
  const text::SpecialIds ids = tok->special_ids();
  EXPECT_EQ(ids.pad, 0);
  EXPECT_EQ(ids.unk, 1);
  EXPECT_EQ(ids.bos, 2);
  EXPECT_EQ(ids.eos, 3);
  EXPECT_EQ(ids.cls, -1);
  EXPECT_NE(tok->Describe().find("tokenizer.model"), std::string::npos) << tok->Describe();

  // XLM-R's tokenizer.model alone: its ids are shifted in transformers' code, so it is refused.
  WriteText(dir.path() + "/folder/tokenizer_config.json",
            R"({"tokenizer_class": "XLMRobertaTokenizer"})");
  auto xlmr = Instantiate("_target_: pretrained\npath: '" + dir.path() + "/folder'\n");
  const absl::Status refused = xlmr->Fit({}, "nothing");
  EXPECT_NE(refused.message().find("fairseq's offset"), std::string::npos) << refused;
}

// A folder kiln cannot read: one line naming the file and what is wrong, never a crash.
TEST(PretrainedTokenizer, BadFoldersAreRefusedInOneLine) {
  testing::TempDir bad;
  auto refused = [&](const std::string& name, const std::string& json,
                     const std::string& expected) {
    const std::string folder = bad.path() + "/" + name;
    std::filesystem::create_directories(folder);
    if (!json.empty()) WriteText(folder + "/tokenizer.json", json);
    auto tok = HfTokenizer::LoadFolder(folder);
    ASSERT_FALSE(tok.ok()) << name;
    const std::string message(tok.status().message());
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_NE(message.find(folder), std::string::npos) << message;
  };
  refused("empty", "", "holds no tokenizer.json");
  refused("corrupt", "{\"model\": {\"type\": \"BPE\",\n \"vocab\": {\"a\": 0", "tokenizer.json: ");
  refused("not_an_object", "[1, 2]", "is not a JSON object");
  refused("wordlevel", R"({"model": {"type": "WordLevel", "vocab": {}, "unk_token": "x"}})",
          "model unk_token 'x' is not in the vocabulary");
  refused("charlevel", R"({"model": {"type": "CharLevel", "vocab": {}}})",
          "model type 'CharLevel' is not one kiln reads (it reads BPE, WordPiece, Unigram, "
          "WordLevel)");
  refused("precompiled",
          R"({"normalizer": {"type": "Precompiled", "precompiled_charsmap": ""},
              "model": {"type": "Unigram", "vocab": [["a", 0.0]]}})",
          "normalizer type 'Precompiled' is not one kiln reads");
  refused("other_regex",
          R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\w+"},
              "behavior": "Isolated", "invert": false},
              "model": {"type": "Unigram", "vocab": [["a", 0.0]]}})",
          "Split's regex \"\\\\w+\" is not one kiln reads");
  refused("whitespace_pre", R"({"pre_tokenizer": {"type": "Whitespace"},
              "model": {"type": "Unigram", "vocab": [["a", 0.0]]}})",
          "pre_tokenizer type 'Whitespace' is not one kiln reads");
  refused("bad_merge", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})",
          "model merge token 'b' is not in the vocabulary");
  refused("wrong_types", R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})",
          "tokenizer.json: not a tokenizer kiln can read");

  // A corrupt tokenizer_config.json names that file.
  const std::string folder = bad.path() + "/config";
  std::filesystem::create_directories(folder);
  WriteText(folder + "/tokenizer.json", R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})");
  WriteText(folder + "/tokenizer_config.json", "{\"bos_token\": ");
  auto tok = HfTokenizer::LoadFolder(folder);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find(folder + "/tokenizer_config.json: "), std::string::npos)
      << tok.status();
}

// The load and encode speed on a vocabulary of Llama 3's size (128k tokens, 280k merges, a 9 MB
// tokenizer.json) made up here: a one-line measure, kept well under a second.
TEST(PretrainedTokenizer, LoadsALargeTokenizerJsonQuickly) {
  // Every string of a..z by length, each merged from its prefix and its last letter.
  nlohmann::json vocab = nlohmann::json::object(), merges = nlohmann::json::array();
  std::vector<std::string> tokens;
  for (char c = 'a'; c <= 'z'; ++c) tokens.push_back(std::string(1, c));
  for (size_t i = 0; tokens.size() < 128000; ++i) {
    for (char c = 'a'; c <= 'z' && tokens.size() < 128000; ++c) {
      merges.push_back(nlohmann::json::array({tokens[i], std::string(1, c)}));
      tokens.push_back(tokens[i] + c);
    }
  }
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  nlohmann::json root = {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
                         {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}}};
  const std::string text = root.dump();
  const auto start = std::chrono::steady_clock::now();
  auto tok = HfTokenizer::FromJson(text, "", "big/tokenizer.json");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 128000);
  std::cout << "a " << text.size() / 1e6 << " MB tokenizer.json (" << tokens.size() << " tokens, "
            << merges.size() << " merges) loaded in " << seconds << " s\n";
  EXPECT_LT(seconds, 5.0);
}

}  // namespace hf_tokenizers_test
}  // namespace kiln
