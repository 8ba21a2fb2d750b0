// Hugging Face checkpoints into kiln: a tiny random model made and save_pretrained()ed by
// transformers itself (tests/components/hf/make_models.py) gives kiln the logits transformers
// gives, tied or untied, in one file or in shards. Skipped, with a message, only where the .venv
// has no transformers.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "components/models/autocast_linear.h"
#include "components/models/generation.h"
#include "components/models/lora_embedding.h"
#include "components/models/model.h"
#include "lib/config/yaml_io.h"
#include "lib/distributed/sharding_units.h"
#include "lib/registry/registry.h"
#include "lib/trainer/lora.h"
#include "lib/weights/hf_export.h"
#include "lib/weights/safetensors.h"
#include "tests/support/process.h"

namespace kiln {
namespace hf_models_test {

const char kPython[] = KILN_PYTHON_EXE;
const std::string kScript = std::string(KILN_SOURCE_DIR) + "/tests/components/hf/make_models.py";
const std::string kCheckExport =
    std::string(KILN_SOURCE_DIR) + "/tests/components/hf/check_export.py";

absl::StatusOr<std::shared_ptr<Model>> Pretrained(const std::string& family,
                                                  const std::string& dir) {
  auto node =
      config::ParseYaml("_target_: " + family + "\npretrained: '" + dir + "'\n", "model.yaml");
  if (!node.ok()) return node.status();
  return Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
}

// check_export.py's argv (python, script, folders...) after it ran: models[i] gives, on the ids
// transformers saw, the logits transformers computed from folder i.
void ExpectSameLogitsAsTransformers(const std::vector<std::shared_ptr<Model>>& models,
                                    const std::vector<std::string>& argv) {
  for (size_t i = 0; i < models.size(); ++i) {
    auto reference = ReadSafetensors(argv[2 + i] + "/transformers_logits.safetensors");
    ASSERT_TRUE(reference.ok()) << reference.status();
    models[i]->eval();
    torch::NoGradGuard no_grad;
    // An image classifier's reference holds the images it saw (pixels) instead of ids.
    torch::Tensor logits =
        models[i]->forward(reference->at(reference->count("pixels") ? "pixels" : "ids"));
    const double diff = (logits - reference->at("logits")).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5) << argv[2 + i];
    std::printf("%s: max |kiln - transformers| = %.3g\n", argv[2 + i].c_str(), diff);
  }
}

// transformers' greedy generation in `dir`/generated.safetensors (make_models.py's
// greedy_reference) equals kiln's Generate on the same prompts, token for token, each row ending
// at `eos` where transformers' did.
void ExpectSameGreedy(Model& model, const std::string& dir, int64_t eos) {
  auto reference = ReadSafetensors(dir + "/generated.safetensors");
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto* lm = dynamic_cast<CausalLm*>(&model);
  ASSERT_NE(lm, nullptr);
  const torch::Tensor& ids = reference->at("ids");
  const torch::Tensor& mask = reference->at("mask");
  const torch::Tensor& out = reference->at("out");
  std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(ids.size(0)));
  for (int64_t r = 0; r < ids.size(0); ++r) {
    for (int64_t i = 0; i < ids.size(1); ++i) {
      if (mask[r][i].item<int64_t>() == 1) prompts[r].push_back(ids[r][i].item<int64_t>());
    }
  }
  SamplingOptions options;
  options.max_new_tokens = out.size(1);
  options.eos_token_ids = {eos};
  model.eval();
  std::vector<std::vector<int64_t>> generated = Generate(*lm, prompts, options);
  for (size_t r = 0; r < prompts.size(); ++r) {
    std::vector<int64_t> expected;
    for (int64_t i = 0; i < out.size(1); ++i) {
      const int64_t id = out[static_cast<int64_t>(r)][i].item<int64_t>();
      if (id == eos) break;
      expected.push_back(id);
    }
    EXPECT_EQ(generated[r], expected) << dir << " row " << r;
  }
}

// LoRA adapters both ways with peft on the folder `base` of `family`, on `targets` (each
// matching `layers` layers): kiln's adapter (written in PEFT's format) loads with
// PeftModel.from_pretrained and gives kiln's logits; an adapter peft made and saved loads into
// kiln (model.lora.from) and gives peft's logits; merging the adapter into the weights keeps the
// logits and leaves no adapter tensor. Only the adapters train, and a classifier's head
// (`head_tensors` of them), whole, as PEFT's SEQ_CLS task trains it: both sides change it, and
// the other side's logits show the change loaded. With `variant` "rslora", both sides' adapters are
// rsLoRA's (scaled by alpha / sqrt(r), which at r 4 is twice alpha / r); with "dora", DoRA's, whose
// magnitudes both sides move off the row norms they start at (a third trained tensor a layer); with
// "patterns" (a Llama's q_proj and v_proj), PEFT's rank_pattern and alpha_pattern; with "layers",
// PEFT's layers_to_transform [1] and layers_pattern "layers"; with "regex", `targets` is one
// regular expression (PEFT's target_modules as a string), beside exclude_modules as one and a
// rank_pattern key that is one; with "bias_all" or "bias_lora_only", PEFT's bias: every bias
// trains beside the adapters, or the adapted layers' (changed on both sides, so that loading them
// shows in the logits); "+lora_bias" after either, PEFT's lora_bias too. A target that is a token
// embedding gets PEFT's lora_embedding_A and _B; with "tied", the base's head reads that table, so
// both sides' heads keep the base's, and merging gives the head that table as its own (lm_head).
void ExpectLoraBothWays(const std::string& family, const std::string& base,
                        const std::vector<std::string>& targets, size_t layers,
                        const std::string& scratch, size_t head_tensors = 0,
                        const std::string& variant = "") {
  auto model = Pretrained(family, base);
  ASSERT_TRUE(model.ok()) << model.status();
  LoraOptions options;
  options.r = 4;
  options.alpha = 8;
  options.target_modules = targets;
  if (variant == "regex") {
    // The second block's layers but o_proj and k_proj, at r 2 in its MLP.
    options.target_modules.clear();
    options.target_regex = targets.at(0);
    options.exclude_regex = ".*\\.(o|k)_proj";
    options.rank_pattern = *config::ParseYaml("{'layers\\.1\\.mlp\\..*': 2}", "rank_pattern");
  }
  options.use_rslora = variant == "rslora";
  options.use_dora = variant == "dora";
  if (absl::StartsWith(variant, "bias_")) options.bias = variant.substr(5, variant.find('+') - 5);
  options.lora_bias = absl::StrContains(variant, "+lora_bias");
  if (variant == "layers") {
    // PEFT's layers_to_transform: the second block's layers only.
    options.layers_to_transform = {1};
    options.layers_pattern = {"layers"};
  }
  if (variant == "patterns") {
    // PEFT's per-layer ranks and alphas: v_proj's adapters at r 2, layer 0's q_proj at alpha 16.
    options.rank_pattern = *config::ParseYaml("{v_proj: 2}", "rank_pattern");
    options.alpha_pattern =
        *config::ParseYaml("{model.layers.0.self_attn.q_proj: 16}", "alpha_pattern");
  }
  // PEFT's trainable tokens: 3 rows of the token table (the ids check_lora.py puts in every row).
  if (variant == "tokens") options.trainable_token_indices = {3, 5, 7};
  // Both ends of an untied Llama: the table's rows and the head's (PEFT's {MODULE: ids}).
  if (variant == "tokens_head")
    options.trainable_tokens_named = {{"embed_tokens", {3, 5, 7}}, {"lm_head", {3, 5, 7}}};
  auto adapted = AddLora(**model, options);
  ASSERT_TRUE(adapted.ok()) << adapted.status();
  EXPECT_EQ(adapted->size(), layers);
  size_t trained = 0, biases = 0;
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(4);
    for (auto& p : (*model)->named_parameters()) {
      const bool head = p.key().rfind("classifier.", 0) == 0;
      // The biases that train: all but the head's (bias_all), or the adapted layers'.
      const bool lora = p.key().find(".lora_") != std::string::npos;
      const bool tokens = absl::EndsWith(p.key(), ".trainable_tokens_delta");
      const bool bias = absl::EndsWith(p.key(), ".bias") && !head && !lora &&
                        (options.bias == "all" ||
                         (options.bias == "lora_only" &&
                          std::any_of(adapted->begin(), adapted->end(), [&](const std::string& a) {
                            return p.key() == a + ".bias";
                          })));
      biases += bias;
      EXPECT_EQ(p.value().requires_grad(), lora || head || bias || tokens) << p.key();
      trained += p.value().requires_grad();
      if (tokens) {
        EXPECT_EQ(p.value().size(0), 3);
        p.value().add_(torch::randn_like(p.value()) * 0.3);
      }
      if (bias) p.value().add_(torch::randn_like(p.value()) * 0.3);
      if (p.key().find("lora_B") != std::string::npos || head) p.value().normal_(0, 0.3);
      // An embedding's adapter starts with A at zero (PEFT's), B drawn.
      if (p.key().find("lora_embedding_") != std::string::npos) p.value().normal_(0, 0.3);
      if (p.key().find("lora_magnitude_vector") != std::string::npos)
        p.value().mul_(1 + 0.2 * torch::randn_like(p.value()));
    }
  }
  EXPECT_EQ(trained, (variant == "dora" || options.lora_bias ? 3 : 2) * layers + head_tensors +
                         biases + (variant == "tokens") + 2 * (variant == "tokens_head"));
  if (absl::StartsWith(variant, "bias_")) EXPECT_GT(biases, 0u);
  const std::string kiln_adapter = scratch + "/kiln_adapter";
  PeftAdapterInfo info;
  info.base_model = base;
  info.fan_in_fan_out = family == "gpt2";
  info.bias = options.bias;
  if (family == "bert") info.task_type = "SEQ_CLS";
  ASSERT_TRUE(WritePeftAdapter(**model, info, kiln_adapter).ok());
  const std::string peft_adapter = scratch + "/peft_adapter";
  auto checked = testing::RunProcess(
      {kPython, std::string(KILN_SOURCE_DIR) + "/tests/components/hf/check_lora.py", base,
       kiln_adapter, peft_adapter, absl::StrJoin(targets, ","), variant});
  ASSERT_EQ(checked.exit_code, 0) << checked.err;
  auto logits_of = [](Model& m, const torch::Tensor& ids) {
    m.eval();
    torch::NoGradGuard no_grad;
    return m.forward(ids);
  };
  auto reference = ReadSafetensors(kiln_adapter + "/peft_logits.safetensors");
  ASSERT_TRUE(reference.ok()) << reference.status();
  const torch::Tensor ids = reference->at("ids");
  torch::Tensor adapted_logits = logits_of(**model, ids);
  EXPECT_LT((adapted_logits - reference->at("logits")).abs().max().item<double>(), 1e-5);

  MergeLora(**model);
  EXPECT_FALSE(HasLora(**model));
  const auto merged_state = StateDict(**model);
  for (const auto& [name, tensor] : merged_state) {
    EXPECT_EQ(name.find("lora_"), std::string::npos) << name;
    EXPECT_EQ(name.find("trainable_tokens"), std::string::npos) << name;
  }
  if (variant == "tied") {
    const auto head = std::find_if(merged_state.begin(), merged_state.end(),
                                   [](const auto& item) { return item.first == "lm_head.weight"; });
    ASSERT_NE(head, merged_state.end()) << "the merged table's head is still the table";
  }
  EXPECT_LT((logits_of(**model, ids) - adapted_logits).abs().max().item<double>(), 1e-5);

  auto from_peft = Pretrained(family, base);
  ASSERT_TRUE(from_peft.ok()) << from_peft.status();
  LoraOptions from;
  from.from = peft_adapter;
  auto loaded = AddLora(**from_peft, from);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto peft_reference = ReadSafetensors(peft_adapter + "/peft_logits.safetensors");
  ASSERT_TRUE(peft_reference.ok()) << peft_reference.status();
  torch::Tensor peft_logits = logits_of(**from_peft, peft_reference->at("ids"));
  EXPECT_LT((peft_logits - peft_reference->at("logits")).abs().max().item<double>(), 1e-5);
  auto plain = Pretrained(family, base);
  ASSERT_TRUE(plain.ok());
  EXPECT_GT(
      (logits_of(**plain, peft_reference->at("ids")) - peft_logits).abs().max().item<double>(),
      1e-3)
      << "peft's adapter changes nothing: the comparison would pass without it";
}

class HfModels : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // transformers makes every variant of `family` once per process (its import takes seconds).
  void Make(const std::string& family) {
    auto probe = testing::RunProcess({kPython, "-c", "import transformers"});
    if (probe.exit_code != 0) GTEST_SKIP() << "Python transformers not installed: " << probe.err;
    dir_ = new testing::TempDir();
    auto made = testing::RunProcess({kPython, kScript, family, dir_->path()});
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  // kiln's logits on the ids transformers' model saw, for the variant `how`; the model.
  std::shared_ptr<Model> ExpectSameLogits(const std::string& family, const std::string& how) {
    const std::string dir = dir_->path() + "/" + how;
    auto reference = ReadSafetensors(dir + "/logits.safetensors");
    EXPECT_TRUE(reference.ok()) << reference.status();
    auto model = Pretrained(family, dir + "/model");
    EXPECT_TRUE(model.ok()) << model.status();
    if (!reference.ok() || !model.ok()) return nullptr;
    (*model)->eval();
    torch::NoGradGuard no_grad;
    torch::Tensor logits = (*model)->forward(reference->at("ids"));
    const torch::Tensor& expected = reference->at("logits");
    EXPECT_EQ(logits.sizes(), expected.sizes());
    if (logits.sizes() == expected.sizes())
      EXPECT_LT((logits - expected).abs().max().item<double>(), 1e-5) << family << " " << how;
    EXPECT_EQ((*model)->token_ids().size, expected.size(-1));
    return *model;
  }
  static inline testing::TempDir* dir_ = nullptr;
};

// One test per family for all its variants: ctest runs each test in a process of its own, and
// each would import transformers again.
TEST_F(HfModels, Gpt2GivesTransformersLogitsAndGeneratesAndAdaptsAsTransformers) {
  ASSERT_NO_FATAL_FAILURE(Make("gpt2"));
  if (IsSkipped()) return;
  std::shared_ptr<Model> tied = ExpectSameLogits("gpt2", "tied");
  ASSERT_NE(tied, nullptr);
  ExpectSameGreedy(*tied, dir_->path() + "/tied", 96);
  ExpectSameLogits("gpt2", "untied");
  std::ifstream index(dir_->path() + "/sharded/model/model.safetensors.index.json");
  EXPECT_TRUE(index.good()) << "transformers wrote one file; the shard size is too large";
  ExpectSameLogits("gpt2", "sharded");
  // LoRA on GPT-2's fused attention input (Conv1D in transformers: fan_in_fan_out), and DoRA there
  // (its magnitudes are per output, with a bias beside them).
  ExpectLoraBothWays("gpt2", dir_->path() + "/untied/model", {"c_attn"}, 2, dir_->path());
  // PEFT's bias="all": every bias trains (the norms', c_proj's, c_fc's; c_attn's saved as its
  // base layer's); and lora_bias, lora_B with a bias.
  ExpectLoraBothWays("gpt2", dir_->path() + "/untied/model", {"c_attn"}, 2,
                     dir_->path() + "/bias_all", 0, "bias_all+lora_bias");
  ExpectLoraBothWays("gpt2", dir_->path() + "/untied/model", {"c_attn"}, 2, dir_->path() + "/dora",
                     0, "dora");
  // Adapters on both embeddings (token and position), GPT-2's head tied to the first.
  ExpectLoraBothWays("gpt2", dir_->path() + "/tied/model", {"wte", "wpe", "c_attn"}, 4,
                     dir_->path() + "/embeddings", 0, "tied");
  // Trainable tokens of wte, which the tied head reads too.
  ExpectLoraBothWays("gpt2", dir_->path() + "/tied/model", {"c_attn"}, 2, dir_->path() + "/tokens",
                     0, "tokens");
}

// Llama (grouped-query attention, Llama 3's rope scaling, biases; transformers 4's rope keys
// with linear scaling), Mistral (a sliding window shorter than the rows), Qwen2 (q, k, v
// biases) and Qwen3 (each query and key head RMS-normalized; a window on one layer), all through
// model=llama; then each written back by kiln's exporter loads in transformers as its own family
// with kiln's logits.
TEST_F(HfModels, LlamaMistralAndQwenGiveTransformersLogitsAndExportBack) {
  ASSERT_NO_FATAL_FAILURE(Make("llama"));
  if (IsSkipped()) return;
  std::vector<std::shared_ptr<Model>> models;
  std::vector<std::string> argv = {kPython, kCheckExport};
  const HfExporter* exporter = FindHfExporter("llama");
  ASSERT_NE(exporter, nullptr);
  for (const std::string how : {"tied", "untied", "mistral", "qwen2", "qwen3", "sharded"}) {
    std::shared_ptr<Model> model = ExpectSameLogits("llama", how);
    if (model == nullptr) continue;
    if (how == "tied" || how == "mistral" || how == "qwen2" || how == "qwen3")
      ExpectSameGreedy(*model, dir_->path() + "/" + how, 2);
    auto folder = (*exporter)(*model);
    ASSERT_TRUE(folder.ok()) << folder.status();
    argv.push_back(dir_->path() + "/export_" + how);
    ASSERT_TRUE(WriteHfFolder(*folder, argv.back()).ok());
    models.push_back(model);
  }
  ASSERT_EQ(models.size(), 6u);
  auto checked = testing::RunProcess(argv);
  ASSERT_EQ(checked.exit_code, 0) << checked.err;
  for (const char* family :
       {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"})
    EXPECT_NE(checked.out.find(family), std::string::npos) << checked.out;
  ExpectSameLogitsAsTransformers(models, argv);

  // The sampling processors on fixed scores equal transformers' (make_models.py's
  // processors_reference): repetition penalty, temperature, top-k, top-p, alone and chained.
  auto processors = ReadSafetensors(dir_->path() + "/processors.safetensors");
  ASSERT_TRUE(processors.ok()) << processors.status();
  struct Case {
    const char* name;
    double penalty, temperature;
    int64_t top_k;
    double top_p;
  };
  for (const Case& c :
       {Case{"rp1.3", 1.3, 0, 0, 1}, Case{"t0.7_k5", 1, 0.7, 5, 1}, Case{"t1_p0.8", 1, 1, 0, 0.8},
        Case{"rp1.2_t0.9_k10_p0.9", 1.2, 0.9, 10, 0.9}}) {
    SamplingOptions o;
    o.repetition_penalty = c.penalty;
    o.temperature = c.temperature;
    o.top_k = c.top_k;
    o.top_p = c.top_p;
    torch::Tensor got = ProcessLogits(processors->at("scores"), processors->at("seen"), o);
    const torch::Tensor& want = processors->at(c.name);
    EXPECT_TRUE(torch::equal(torch::isinf(got), torch::isinf(want))) << c.name;
    torch::Tensor finite = torch::isfinite(want);
    EXPECT_LT((got.masked_select(finite) - want.masked_select(finite)).abs().max().item<double>(),
              1e-6)
        << c.name;
  }
}

// BERT, RoBERTa (three labels with names) and XLM-RoBERTa (gelu_new) sequence classifiers through
// model=bert: on 8 rows of different lengths padded with the pad id, kiln's logits are those
// transformers gives with the attention mask (make_models.py checks that the mask moves them);
// each written back by kiln's exporter loads in transformers as its own *ForSequenceClassification
// with kiln's logits.
TEST_F(HfModels, BertRobertaAndXlmRobertaClassifyAsTransformersAndExportBack) {
  ASSERT_NO_FATAL_FAILURE(Make("bert"));
  if (IsSkipped()) return;
  std::vector<std::shared_ptr<Model>> models;
  std::vector<std::string> argv = {kPython, kCheckExport};
  const HfExporter* exporter = FindHfExporter("bert");
  ASSERT_NE(exporter, nullptr);
  for (const std::string how : {"bert", "roberta", "xlm-roberta"}) {
    SCOPED_TRACE(how);
    const std::string dir = dir_->path() + "/" + how;
    auto reference = ReadSafetensors(dir + "/logits.safetensors");
    ASSERT_TRUE(reference.ok()) << reference.status();
    auto model = Pretrained("bert", dir + "/model");
    ASSERT_TRUE(model.ok()) << model.status();
    (*model)->eval();
    {
      torch::NoGradGuard no_grad;
      torch::Tensor logits = (*model)->forward(reference->at("ids"));
      const torch::Tensor& expected = reference->at("logits");
      ASSERT_EQ(logits.sizes(), expected.sizes());
      const double diff = (logits - expected).abs().max().item<double>();
      EXPECT_LT(diff, 1e-5);
      std::printf("%s: max |kiln - transformers| = %.3g\n", how.c_str(), diff);
    }
    const std::vector<std::string> labels = (*model)->class_names();
    EXPECT_EQ(labels.size(), static_cast<size_t>(reference->at("logits").size(1)));
    if (how == "roberta") {
      EXPECT_EQ(labels, (std::vector<std::string>{"negative", "neutral", "positive"}));
    }
    auto folder = (*exporter)(**model);
    ASSERT_TRUE(folder.ok()) << folder.status();
    argv.push_back(dir_->path() + "/export_" + how);
    ASSERT_TRUE(WriteHfFolder(*folder, argv.back()).ok());
    models.push_back(*model);
  }
  auto checked = testing::RunProcess(argv);
  ASSERT_EQ(checked.exit_code, 0) << checked.err;
  for (const char* family : {"BertForSequenceClassification", "RobertaForSequenceClassification",
                             "XLMRobertaForSequenceClassification"})
    EXPECT_NE(checked.out.find(family), std::string::npos) << checked.out;
  EXPECT_NE(checked.out.find("'positive'"), std::string::npos) << checked.out;
  ExpectSameLogitsAsTransformers(models, argv);
  // DoRA on the encoder's query and value (2 layers), the head (classifier.dense and out_proj,
  // weights and biases) trained whole and saved with the adapters.
  ExpectLoraBothWays("bert", dir_->path() + "/roberta/model", {"query", "value"}, 4, dir_->path(),
                     4, "dora");
  // all-linear: each layer's query, key, value and three dense layers, the head's left whole, as
  // PEFT's SEQ_CLS leaves it; BERT's pooler is a layer too (6 per layer, and 1). On the RoBERTa,
  // with PEFT's bias="lora_only": the adapted layers' biases train too.
  ExpectLoraBothWays("bert", dir_->path() + "/roberta/model", {kAllLinear}, 12,
                     dir_->path() + "/roberta_all_linear", 4, "bias_lora_only");
  ExpectLoraBothWays("bert", dir_->path() + "/bert/model", {kAllLinear}, 13,
                     dir_->path() + "/bert_all_linear", 2);
  // Adapters on the word and position embeddings (PEFT's lora.Embedding) beside each query.
  ExpectLoraBothWays("bert", dir_->path() + "/bert/model",
                     {"word_embeddings", "position_embeddings", "query"}, 4,
                     dir_->path() + "/bert_embeddings", 2);
  // Trainable tokens of word_embeddings beside each query's adapter.
  ExpectLoraBothWays("bert", dir_->path() + "/bert/model", {"query"}, 2,
                     dir_->path() + "/bert_tokens", 2, "tokens");
}

absl::StatusOr<std::shared_ptr<Model>> Instantiate(const std::string& yaml);

// Two ViTForImageClassification folders through model=hf_vit: Fashion-MNIST-shaped (1 channel,
// 28x28, ten labels) and RGB 16x16 with no query/key/value bias and LayerNorm 1e-6. On
// 8 images kiln's logits are transformers'; each written back by kiln's exporter, and one built
// from the sizes, loads in transformers as a ViTForImageClassification with kiln's logits. Images
// of another size or channel count are refused in one line.
TEST_F(HfModels, VitClassifiesAsTransformersAndExportsBack) {
  ASSERT_NO_FATAL_FAILURE(Make("vit"));
  if (IsSkipped()) return;
  std::vector<std::shared_ptr<Model>> models;
  std::vector<std::string> argv = {kPython, kCheckExport};
  const HfExporter* exporter = FindHfExporter("hf_vit");
  ASSERT_NE(exporter, nullptr);
  for (const std::string how : {"fashion", "rgb"}) {
    SCOPED_TRACE(how);
    const std::string dir = dir_->path() + "/" + how;
    auto reference = ReadSafetensors(dir + "/logits.safetensors");
    ASSERT_TRUE(reference.ok()) << reference.status();
    auto model = Pretrained("hf_vit", dir + "/model");
    ASSERT_TRUE(model.ok()) << model.status();
    (*model)->eval();
    {
      torch::NoGradGuard no_grad;
      const torch::Tensor& pixels = reference->at("pixels");
      ASSERT_EQ(pixels.size(0), 8);
      torch::Tensor logits = (*model)->forward(pixels);
      const torch::Tensor& expected = reference->at("logits");
      ASSERT_EQ(logits.sizes(), expected.sizes());
      const double diff = (logits - expected).abs().max().item<double>();
      EXPECT_LT(diff, 1e-5);
      EXPECT_GT(expected.abs().max().item<double>(), 0.1);  // logits that say something
      std::printf("vit %s: max |kiln - transformers| = %.3g\n", how.c_str(), diff);
      // Another size, or another number of channels: one line naming what the model takes.
      for (const torch::Tensor& wrong : {torch::zeros({2, pixels.size(1), 8, 8}),
                                         torch::zeros({2, 2, pixels.size(2), pixels.size(3)})}) {
        try {
          (*model)->forward(wrong);
          ADD_FAILURE() << "images " << wrong.sizes() << " were taken";
        } catch (const c10::Error& e) {
          const std::string message = e.what_without_backtrace();
          EXPECT_NE(message.find("hf_vit takes images [batch, " + std::to_string(pixels.size(1)) +
                                 ", " + std::to_string(pixels.size(2))),
                    std::string::npos)
              << message;
          EXPECT_EQ(message.find('\n'), std::string::npos) << message;
        }
      }
    }
    if (how == "fashion") {
      const std::vector<std::string> labels = (*model)->class_names();
      ASSERT_EQ(labels.size(), 10u);
      EXPECT_EQ(labels[9], "LABEL_9");
    }
    auto folder = (*exporter)(**model);
    ASSERT_TRUE(folder.ok()) << folder.status();
    argv.push_back(dir_->path() + "/export_" + how);
    ASSERT_TRUE(WriteHfFolder(*folder, argv.back()).ok());
    models.push_back(*model);
  }
  // From scratch (the sizes as options, weights drawn as transformers draws them): 2 channels, 8x8.
  auto scratch = Instantiate(
      "_target_: hf_vit\nimage_size: 8\npatch_size: 4\nnum_channels: 2\ndim: 8\ndepth: 1\n"
      "heads: 2\nmlp_dim: 16\nnum_labels: 3\n");
  ASSERT_TRUE(scratch.ok()) << scratch.status();
  auto scratch_folder = (*exporter)(**scratch);
  ASSERT_TRUE(scratch_folder.ok()) << scratch_folder.status();
  argv.push_back(dir_->path() + "/export_scratch");
  ASSERT_TRUE(WriteHfFolder(*scratch_folder, argv.back()).ok());
  models.push_back(*scratch);
  auto checked = testing::RunProcess(argv);
  ASSERT_EQ(checked.exit_code, 0) << checked.err;
  EXPECT_NE(checked.out.find("ViTForImageClassification"), std::string::npos) << checked.out;
  EXPECT_NE(checked.out.find("'LABEL_9'"), std::string::npos) << checked.out;
  EXPECT_NE(checked.out.find("'bird'"), std::string::npos) << checked.out;
  ExpectSameLogitsAsTransformers(models, argv);
}

absl::StatusOr<std::shared_ptr<Model>> Instantiate(const std::string& yaml) {
  auto node = config::ParseYaml(yaml, "model.yaml");
  if (!node.ok()) return node.status();
  return Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
}

// kiln's own gpt, random, written by its exporter (what `kiln export format=hf` writes):
// transformers loads it with nothing missing or left over, and its logits are kiln's, tied and
// untied.
TEST_F(HfModels, LoraAdaptersGoBothWaysWithPeft) {
  ASSERT_NO_FATAL_FAILURE(Make("llama"));
  if (IsSkipped()) return;
  ExpectLoraBothWays("llama", dir_->path() + "/untied/model", {"q_proj", "v_proj"}, 4, dir_->path(),
                     0, "patterns");
  // PEFT's all-linear: the 7 projections of both layers, not lm_head, on both sides; peft saves
  // the layers' full names as its targets, which kiln reads back. With rsLoRA's scaling.
  ExpectLoraBothWays("llama", dir_->path() + "/untied/model", {kAllLinear}, 14,
                     dir_->path() + "/all_linear", 0, "rslora");
  // The 7 projections of the second block only (layers_to_transform; PEFT takes it with a list of
  // targets, not with all-linear).
  ExpectLoraBothWays("llama", dir_->path() + "/untied/model",
                     {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
                     7, dir_->path() + "/second_block", 0, "layers");
  // PEFT's regular expressions: target_modules and exclude_modules as strings, a rank_pattern key.
  ExpectLoraBothWays("llama", dir_->path() + "/untied/model", {"model\\.layers\\.1\\..*_proj"}, 5,
                     dir_->path() + "/regex", 0, "regex");
  // An adapter on the token embedding (PEFT's lora.Embedding; peft saves the table beside it,
  // which kiln loads back), untied and tied (the head keeps the base's table on both sides).
  ExpectLoraBothWays("llama", dir_->path() + "/untied/model", {"embed_tokens", "q_proj"}, 3,
                     dir_->path() + "/embedding");
  ExpectLoraBothWays("llama", dir_->path() + "/tied/model", {"embed_tokens", "v_proj"}, 3,
                     dir_->path() + "/embedding_tied", 0, "tied");
  // PEFT's trainable tokens (trainable_token_indices) beside the adapters: the rows of 3 tokens
  // train; a tied head reads them too, on both sides, and merged.
  ExpectLoraBothWays("llama", dir_->path() + "/untied/model", {"q_proj"}, 2,
                     dir_->path() + "/tokens", 0, "tokens");
  ExpectLoraBothWays("llama", dir_->path() + "/tied/model", {"v_proj"}, 2,
                     dir_->path() + "/tokens_tied", 0, "tokens");
  // An untied Llama's table and head, as PEFT's {embed_tokens: ids, lm_head: ids}.
  ExpectLoraBothWays("llama", dir_->path() + "/untied/model", {"q_proj"}, 2,
                     dir_->path() + "/tokens_head", 0, "tokens_head");
  // Qwen3 (its heads' norms between q_proj or k_proj and the attention; biases on q, k, v and o):
  // PEFT's all-linear, the 7 projections of both layers.
  ExpectLoraBothWays("llama", dir_->path() + "/qwen3/model", {kAllLinear}, 14,
                     dir_->path() + "/qwen3_all_linear");
}

TEST(HfExport, KilnsGptAndLlamaLoadInTransformersWithKilnsLogits) {
  auto probe = testing::RunProcess({kPython, "-c", "import transformers"});
  if (probe.exit_code != 0) GTEST_SKIP() << "Python transformers not installed: " << probe.err;
  testing::TempDir tmp;
  std::vector<std::shared_ptr<Model>> models;
  std::vector<std::string> argv = {kPython, kCheckExport};
  const std::string gpt =
      "_target_: gpt\nvocab_size: 41\nblock_size: 16\ndim: 16\ndepth: 2\nheads: 2\nmlp_dim: 24\n";
  const std::string llama =
      "_target_: llama\nvocab_size: 41\ndim: 16\ndepth: 2\nheads: 4\nkv_heads: 2\nmlp_dim: 24\n"
      "max_positions: 32\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"gpt", gpt + "tie_weights: true\n"},
      {"gpt", gpt + "tie_weights: false\n"},
      {"llama", llama + "tie_weights: true\n"},
      {"llama", llama + "tie_weights: false\nrope_theta: 500.0\n"},
      // Qwen3's heads' norms, from scratch: exported as Qwen3ForCausalLM.
      {"llama", llama + "tie_weights: true\nqk_norm: true\n"}};
  for (const auto& [target, yaml] : cases) {
    torch::manual_seed(7);
    auto model = Instantiate(yaml);
    ASSERT_TRUE(model.ok()) << model.status();
    const HfExporter* exporter = FindHfExporter(target);
    ASSERT_NE(exporter, nullptr);
    auto folder = (*exporter)(**model);
    ASSERT_TRUE(folder.ok()) << folder.status();
    const std::string dir = tmp.path() + "/export_" + std::to_string(models.size());
    ASSERT_TRUE(WriteHfFolder(*folder, dir).ok());
    models.push_back(*model);
    argv.push_back(dir);
  }
  auto checked = testing::RunProcess(argv);
  ASSERT_EQ(checked.exit_code, 0) << checked.err;
  EXPECT_NE(checked.out.find("export_4: Qwen3ForCausalLM"), std::string::npos) << checked.out;
  ExpectSameLogitsAsTransformers(models, argv);
}

// The cache gives the logits a full forward gives: prompts of different lengths padded on the
// left, then three tokens one at a time, for kiln's gpt (learned positions) and llama (rotary,
// grouped-query attention). Mistral's sliding window is checked by generation against
// transformers (HfModels.LlamaMistralAndQwen...).
// trainer.strategy=fsdp on several workers builds a model in pieces (job.cc's PlaceBlocks): each
// worker keeps its rows of each block as the block is built. Every piece must be the rows of the
// model built whole from the same seed, bit for bit (the same draws from the generator, which
// is where it was after a whole build), and what is not in a block stays whole. Three ranks, so
// that some pieces end in padding (16 rows: 6, 6 and 4).
TEST(ShardedBuild, EachPieceIsTheWholeModelsRowsBitForBit) {
  const std::vector<std::string> cases = {
      "_target_: gpt\nvocab_size: 41\nblock_size: 16\ndim: 16\ndepth: 2\nheads: 2\nmlp_dim: 24\n"
      "tie_weights: false\n",
      "_target_: transformer_classifier\nvocab_size: 41\nmax_length: 16\nnum_classes: 2\ndim: 16\n"
      "depth: 2\nheads: 2\nmlp_dim: 24\n",
      "_target_: llama\nvocab_size: 41\ndim: 16\ndepth: 2\nheads: 4\nkv_heads: 2\nmlp_dim: 24\n"
      "max_positions: 32\nqk_norm: true\n"};
  constexpr int kWorld = 3;
  for (const std::string& yaml : cases) {
    torch::manual_seed(7);
    auto whole = Instantiate(yaml);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const torch::Tensor after_whole = torch::randn({8});
    std::map<std::string, torch::Tensor> values;
    for (const auto& p : (*whole)->named_parameters()) values[p.key()] = p.value();
    for (int rank = 0; rank < kWorld; ++rank) {
      distributed::SetBuildPlacement(distributed::BuildPlacement{rank, kWorld});
      torch::manual_seed(7);
      auto pieces = Instantiate(yaml);
      distributed::SetBuildPlacement(std::nullopt);
      ASSERT_TRUE(pieces.ok()) << pieces.status();
      EXPECT_TRUE(torch::equal(torch::randn({8}), after_whole)) << yaml;
      int cut = 0, kept = 0;
      for (const auto& p : (*pieces)->named_parameters()) {
        const torch::Tensor& want = values.at(p.key());
        std::optional<distributed::BuiltPiece> piece = distributed::BuiltPieceOf(p.value());
        if (!piece.has_value()) {
          EXPECT_TRUE(torch::equal(p.value(), want)) << p.key();
          ++kept;
          continue;
        }
        ++cut;
        EXPECT_EQ(piece->shape, want.sizes().vec()) << p.key();
        EXPECT_EQ(piece->count, (want.size(0) + kWorld - 1) / kWorld) << p.key();
        EXPECT_EQ(piece->first, rank * piece->count) << p.key();
        EXPECT_EQ(p.value().size(0), piece->count) << p.key();
        EXPECT_TRUE(torch::equal(p.value(), distributed::RowsOfRank(want, rank, kWorld)))
            << p.key() << " rank " << rank;
        // The rows past the whole's end are zero: the whole's own rows and nothing else.
        const int64_t real =
            std::max<int64_t>(0, std::min(piece->count, want.size(0) - piece->first));
        if (real > 0) {
          EXPECT_TRUE(
              torch::equal(p.value().narrow(0, 0, real), want.narrow(0, piece->first, real)));
        }
        EXPECT_EQ(p.value().narrow(0, real, piece->count - real).abs().sum().item<double>(), 0.0);
      }
      // The blocks are cut (12 tensors a GPT block, 9 a Llama layer); the embeddings, the final
      // norm and the head are not.
      EXPECT_GE(cut, 18) << yaml;
      EXPECT_GE(kept, 2) << yaml;
    }
  }
}

TEST(Generation, CachedLogitsEqualTheFullForwardWithLeftPadding) {
  for (const std::string yaml :
       {"_target_: gpt\nvocab_size: 41\nblock_size: 32\ndim: 16\ndepth: 2\nheads: 2\n"
        "mlp_dim: 24\n",
        "_target_: llama\nvocab_size: 41\ndim: 16\ndepth: 2\nheads: 4\nkv_heads: 2\n"
        "mlp_dim: 24\n"}) {
    torch::manual_seed(3);
    auto model = Instantiate(yaml);
    ASSERT_TRUE(model.ok()) << model.status();
    auto* lm = dynamic_cast<CausalLm*>(model->get());
    ASSERT_NE(lm, nullptr);
    lm->eval();
    torch::NoGradGuard no_grad;
    const std::vector<std::vector<int64_t>> rows = {{5, 9, 2, 7, 30, 11}, {3, 8}, {40, 1, 17, 6}};
    const std::vector<int64_t> more = {12, 4, 33};
    // [3, 6] left-padded prompts, then three steps of one token.
    torch::Tensor ids = torch::zeros({3, 6}, torch::kInt64);
    torch::Tensor real = torch::zeros({3, 6}, torch::kBool);
    torch::Tensor positions = torch::zeros({3, 6}, torch::kInt64);
    for (int64_t r = 0; r < 3; ++r) {
      const auto& row = rows[r];
      for (size_t i = 0; i < row.size(); ++i) {
        const int64_t at = 6 - static_cast<int64_t>(row.size()) + static_cast<int64_t>(i);
        ids[r][at] = row[i];
        real[r][at] = true;
        positions[r][at] = static_cast<int64_t>(i);
      }
    }
    KvCache cache(0);
    cache.Extend(real);
    torch::Tensor logits = lm->forward_cached(ids, positions, cache);
    std::vector<torch::Tensor> steps;
    torch::Tensor last = positions.narrow(1, 5, 1);
    for (int64_t id : more) {
      last = last + 1;
      cache.Extend(torch::ones({3, 1}, torch::kBool));
      steps.push_back(lm->forward_cached(torch::full({3, 1}, id, torch::kInt64), last, cache));
    }
    for (int64_t r = 0; r < 3; ++r) {
      std::vector<int64_t> whole = rows[r];
      whole.insert(whole.end(), more.begin(), more.end());
      torch::Tensor full = lm->forward(torch::tensor(whole).unsqueeze(0))[0];
      const int64_t n = static_cast<int64_t>(rows[r].size());
      EXPECT_LT((logits[r].narrow(0, 6 - n, n) - full.narrow(0, 0, n)).abs().max().item<double>(),
                1e-5)
          << yaml << " row " << r;
      for (size_t s = 0; s < steps.size(); ++s) {
        EXPECT_LT((steps[s][r][0] - full[n + static_cast<int64_t>(s)]).abs().max().item<double>(),
                  1e-5)
            << yaml << " row " << r << " step " << s;
      }
    }
  }
}

// Generation fuses a small llama's q/k/v and gate/up products (components/models/autocast_linear.h
// FusedLinears): the fused weights follow every change of the layers' own, an in-place update (an
// optimizer step) and a LoRA adapter added and trained, so one new token's cached logits always
// equal a full forward's.
TEST(Generation, FusedProjectionsFollowTheLayersWeightsAndAdapters) {
  torch::manual_seed(5);
  auto model = Instantiate(
      "_target_: llama\nvocab_size: 41\ndim: 16\ndepth: 2\nheads: 4\nkv_heads: 2\nmlp_dim: 24\n");
  ASSERT_TRUE(model.ok()) << model.status();
  auto* lm = dynamic_cast<CausalLm*>(model->get());
  ASSERT_NE(lm, nullptr);
  lm->eval();
  const std::vector<int64_t> prompt = {5, 9, 2, 7};
  // The last position's logits from the cache (the prompt, then one token) and from a full
  // forward of the same five ids.
  auto both = [&]() {
    torch::NoGradGuard no_grad;
    KvCache cache(8);
    cache.Extend(torch::ones({1, 4}, torch::kBool));
    lm->forward_cached(torch::tensor(prompt).unsqueeze(0), torch::arange(4).unsqueeze(0), cache);
    cache.Extend(torch::ones({1, 1}, torch::kBool));
    torch::Tensor cached =
        lm->forward_cached(torch::full({1, 1}, 11, torch::kInt64), torch::full({1, 1}, 4), cache);
    torch::Tensor full = lm->forward(torch::tensor({5, 9, 2, 7, 11}).unsqueeze(0));
    return std::make_pair(cached[0][0], full[0][4]);
  };
  auto [before, full_before] = both();
  EXPECT_LT((before - full_before).abs().max().item<double>(), 1e-5);
  auto params = (*model)->named_parameters();
  {
    torch::NoGradGuard no_grad;
    params["model.layers.0.self_attn.k_proj.weight"].mul_(1.5);
    params["model.layers.1.mlp.up_proj.weight"].add_(0.1);
  }
  auto [updated, full_updated] = both();
  EXPECT_GT((updated - before).abs().max().item<double>(), 1e-3);
  EXPECT_LT((updated - full_updated).abs().max().item<double>(), 1e-5);
  LoraOptions lora;
  lora.r = 2;
  lora.target_modules = {"v_proj", "gate_proj"};
  auto adapted = AddLora(**model, lora);
  ASSERT_TRUE(adapted.ok()) << adapted.status();
  {
    torch::NoGradGuard no_grad;
    for (auto& item : (*model)->named_parameters()) {
      if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0, 0.5);
    }
  }
  auto [with_lora, full_with_lora] = both();
  EXPECT_GT((with_lora - updated).abs().max().item<double>(), 1e-3);
  EXPECT_LT((with_lora - full_with_lora).abs().max().item<double>(), 1e-5);
  // In bf16 (the one-pass RMSNorm and rotation have bf16 loops): the cached logits are the full
  // forward's within bf16's rounding, and near float32's.
  (*model)->to(torch::kBFloat16);
  auto [bf16, full_bf16] = both();
  EXPECT_LT((bf16.to(torch::kFloat32) - full_bf16.to(torch::kFloat32)).abs().max().item<double>(),
            0.05);
  EXPECT_LT((bf16.to(torch::kFloat32) - with_lora).abs().max().item<double>(), 0.1);
}

// model.lora.base_dtype=bfloat16: the frozen Linear weights are held in bf16 (half their memory)
// while the adapters, embeddings and norms stay float32; the layers compute in their weight's dtype
// and hand back float32, so the logits are the float32 base's within bf16's rounding, only the
// adapters get (float32) gradients, generation's cache agrees with a full forward, and merging
// gives float32 weights.
TEST(Lora, BaseHeldInBf16TrainsFloat32Adapters) {
  const std::string yaml =
      "_target_: llama\nvocab_size: 41\ndim: 16\ndepth: 2\nheads: 4\nkv_heads: 2\nmlp_dim: 24\n";
  LoraOptions lora;
  lora.r = 2;
  lora.target_modules = {"q_proj", "v_proj", "down_proj"};
  auto build = [&](const std::string& dtype) {
    torch::manual_seed(5);
    auto model = Instantiate(yaml);
    EXPECT_TRUE(model.ok()) << model.status();
    LoraOptions o = lora;
    o.base_dtype = dtype;
    EXPECT_TRUE(AddLora(**model, o).ok());
    torch::manual_seed(6);
    torch::NoGradGuard no_grad;
    for (auto& item : (*model)->named_parameters())
      if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0, 0.5);
    return *model;
  };
  auto f32 = build("float32"), half = build("bfloat16");
  auto params = half->named_parameters();
  EXPECT_EQ(params["model.layers.0.self_attn.q_proj.weight"].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(params["model.layers.0.mlp.gate_proj.weight"].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(params["model.layers.0.self_attn.q_proj.lora_A.weight"].scalar_type(), torch::kFloat32);
  EXPECT_EQ(params["model.embed_tokens.weight"].scalar_type(), torch::kFloat32);
  EXPECT_EQ(params["model.norm.weight"].scalar_type(), torch::kFloat32);
  torch::Tensor ids = torch::tensor({{5, 9, 2, 7, 11, 3}});
  torch::Tensor want = f32->forward(ids), got = half->forward(ids);
  EXPECT_EQ(got.scalar_type(), torch::kFloat32);
  EXPECT_LT((got - want).abs().max().item<double>(), 0.05);
  EXPECT_GT((got - want).abs().max().item<double>(), 0);  // the base is rounded
  got.logsumexp(-1).sum().backward();
  for (auto& item : half->named_parameters()) {
    const bool adapter = item.key().find(".lora_") != std::string::npos;
    EXPECT_EQ(item.value().grad().defined(), adapter) << item.key();
    if (adapter) EXPECT_EQ(item.value().grad().scalar_type(), torch::kFloat32) << item.key();
  }
  half->eval();
  auto* lm = dynamic_cast<CausalLm*>(half.get());
  torch::NoGradGuard no_grad;
  KvCache cache(8);
  cache.Extend(torch::ones({1, 6}, torch::kBool));
  torch::Tensor cached = lm->forward_cached(ids, torch::arange(6).unsqueeze(0), cache);
  EXPECT_LT((cached - half->forward(ids)).abs().max().item<double>(), 1e-5);
  MergeLora(*half);
  EXPECT_EQ(half->named_parameters()["model.layers.0.self_attn.q_proj.weight"].scalar_type(),
            torch::kFloat32);
  // Merged, the adapted layers compute in float32 from inputs no longer rounded to bf16.
  EXPECT_LT((half->forward(ids) - cached).abs().max().item<double>(), 0.01);
}

// AutocastLinear with an adapter, outside autocast, adds (alpha / r) B (A x) into the base's
// product in one addmm_: its output and the gradients of the input, the adapter and (when it
// trains) the base equal PEFT's composite, W x + b + (B (A x)) * (alpha / r), in float32; with a
// bias and without (with one, PEFT's lora_bias: B's own bias b_B, + (alpha / r) b_B), on
// [B, T, in] and [in] inputs; the base's weight gets no gradient when frozen; merged, the same
// output.
TEST(Lora, TheFoldedAdapterEqualsItsComposite) {
  for (bool bias : {false, true}) {
    for (bool frozen : {true, false}) {
      SCOPED_TRACE(std::string(bias ? "bias" : "no bias") + (frozen ? ", frozen" : ", trained"));
      torch::manual_seed(11);
      AutocastLinear layer(torch::nn::LinearOptions(24, 10).bias(bias));
      LoraOptions o;
      o.r = 4;
      o.lora_bias = bias;  // PEFT's lora_bias: B with a bias of its own, where the layer has one
      layer->AddLora(o);
      {
        torch::NoGradGuard no_grad;
        layer->lora_B->weight.normal_(0, 0.5);  // PEFT starts B at zero; a trained one is not
        if (bias) layer->lora_B->bias.normal_(0, 0.5);
      }
      layer->weight.requires_grad_(!frozen);
      if (bias) layer->bias.requires_grad_(!frozen);
      for (const std::vector<int64_t>& shape : {std::vector<int64_t>{3, 5, 24}, {24}}) {
        torch::Tensor x = torch::randn(shape).requires_grad_();
        torch::Tensor dy = torch::randn(layer->forward(x).sizes());
        std::vector<torch::Tensor> inputs = {x, layer->lora_A->weight, layer->lora_B->weight};
        if (!frozen) inputs.push_back(layer->weight);
        if (bias) inputs.push_back(layer->lora_B->bias);
        torch::Tensor got = layer->forward(x);
        torch::Tensor base = torch::matmul(x, layer->weight.t());
        if (bias) base = base + layer->bias;
        torch::Tensor adapter =
            torch::matmul(torch::matmul(x, layer->lora_A->weight.t()), layer->lora_B->weight.t());
        if (bias) adapter = adapter + layer->lora_B->bias;
        torch::Tensor want = base + adapter * 4.0;
        ASSERT_EQ(got.sizes(), want.sizes());
        EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-5)) << (got - want).abs().max();
        auto got_grads = torch::autograd::grad({got}, inputs, {dy});
        auto want_grads = torch::autograd::grad({want}, inputs, {dy});
        for (size_t i = 0; i < inputs.size(); ++i) {
          EXPECT_TRUE(torch::allclose(got_grads[i], want_grads[i], 1e-6, 1e-5))
              << i << ": " << (got_grads[i] - want_grads[i]).abs().max();
        }
        if (frozen) EXPECT_FALSE(layer->weight.requires_grad());
      }
      // Merged: lora_B's bias, scaled, in the layer's bias.
      torch::Tensor x = torch::randn({3, 24});
      torch::Tensor adapted = layer->forward(x).detach();
      layer->MergeLora();
      EXPECT_TRUE(torch::allclose(layer->forward(x), adapted, 1e-6, 1e-5));
    }
  }
}

// An embedding's adapter against PEFT's lora.Embedding written out here: W[id] + s (A^T[id] B^T),
// its gradients (none for the padding row's column of A, as F.embedding's padding_idx), the merged
// table W + s (B A)^T. In a model: all-linear leaves embeddings out, DoRA on one is refused, and a
// tied head gets the base table as its own weight when the adapter is merged.
TEST(Lora, AnEmbeddingsAdapterIsPeftsComposite) {
  torch::manual_seed(3);
  LoraEmbedding table(torch::nn::EmbeddingOptions(10, 6).padding_idx(0));
  LoraOptions o;
  o.r = 3;
  o.alpha = 6;
  table->AddLora(o);
  EXPECT_EQ(table->lora_embedding_A.abs().sum().item<float>(), 0.0f);  // PEFT's start: A zero
  EXPECT_GT(table->lora_embedding_B.abs().sum().item<float>(), 0.0f);
  {
    torch::NoGradGuard no_grad;
    table->lora_embedding_A.normal_();
  }
  const torch::Tensor ids = torch::tensor({{0, 3, 9}, {3, 1, 0}});
  torch::Tensor got = table->forward(ids);
  torch::Tensor want =
      table->weight.index_select(0, ids.flatten()).view({2, 3, 6}) +
      torch::matmul(table->lora_embedding_A.t().index_select(0, ids.flatten()).view({2, 3, 3}),
                    table->lora_embedding_B.t()) *
          2.0;
  EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-5)) << (got - want).abs().max();
  const torch::Tensor dy = torch::randn(got.sizes());
  const std::vector<torch::Tensor> adapters = {table->lora_embedding_A, table->lora_embedding_B};
  auto got_grads = torch::autograd::grad({got}, adapters, {dy});
  auto want_grads = torch::autograd::grad({want}, adapters, {dy});
  EXPECT_TRUE(torch::allclose(got_grads[1], want_grads[1], 1e-6, 1e-5));
  // The padding row's column of A has none; the others are the composite's.
  EXPECT_EQ(got_grads[0].select(1, 0).abs().sum().item<float>(), 0.0f);
  EXPECT_GT(want_grads[0].select(1, 0).abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(
      torch::allclose(got_grads[0].narrow(1, 1, 9), want_grads[0].narrow(1, 1, 9), 1e-6, 1e-5));
  torch::Tensor adapted = table->forward(ids).detach();
  table->MergeLora();
  EXPECT_FALSE(table->has_lora());
  EXPECT_TRUE(torch::allclose(table->forward(ids), adapted, 1e-6, 1e-5));
  EXPECT_EQ(table->named_parameters().size(), 1u);

  const std::string llama = "_target_: llama\nvocab_size: 8\ndim: 8\ndepth: 1\nheads: 2\n";
  LoraOptions dora;
  dora.target_modules = {"embed_tokens", "q_proj"};
  dora.use_dora = true;
  auto model = Instantiate(llama);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::Status refused = AddLora(**model, dora).status();
  EXPECT_EQ(refused.message(),
            "model.lora.use_dora: model.embed_tokens is an embedding; kiln's embedding adapters "
            "are plain LoRA (PEFT takes no lora_bias there either); leave it out of "
            "target_modules or set use_dora=false");
  for (const bool tied : {false, true}) {
    auto m = Instantiate(llama + (tied ? "tie_weights: true\n" : ""));
    ASSERT_TRUE(m.ok()) << m.status();
    LoraOptions plain;
    plain.target_modules = {"embed_tokens"};
    ASSERT_TRUE(AddLora(**m, plain).ok());
    {
      torch::NoGradGuard no_grad;
      for (auto& p : (*m)->named_parameters())
        if (p.key().find("lora_embedding_A") != std::string::npos) p.value().normal_();
    }
    if (tied) {
      const torch::Tensor ids = torch::tensor({{1, 5, 7}});
      (*m)->eval();
      torch::NoGradGuard no_grad;
      const torch::Tensor adapted_logits = (*m)->forward(ids);
      const torch::Tensor base = (*m)->named_parameters()["model.embed_tokens.weight"].clone();
      MergeLora(**m);
      auto merged = (*m)->named_parameters();
      ASSERT_EQ(merged.find("lm_head.weight") != nullptr, true);
      EXPECT_TRUE(torch::equal(merged["lm_head.weight"], base));
      EXPECT_FALSE(torch::equal(merged["model.embed_tokens.weight"], base));
      EXPECT_TRUE(torch::allclose((*m)->forward(ids), adapted_logits, 1e-6, 1e-5));
    } else {
      // PEFT's file may carry the table itself (a vocabulary resized in fine-tuning): loaded at
      // the base's size, refused at another.
      testing::TempDir dir;
      ASSERT_TRUE(WritePeftAdapter(**m, PeftAdapterInfo{}, dir.path()).ok());
      auto tensors = ReadSafetensors(dir.path() + "/adapter_model.safetensors");
      ASSERT_TRUE(tensors.ok()) << tensors.status();
      std::vector<std::pair<std::string, torch::Tensor>> grown(tensors->begin(), tensors->end());
      grown.emplace_back("base_model.model.model.embed_tokens.base_layer.weight",
                         torch::zeros({9, 8}));
      ASSERT_TRUE(WriteSafetensors(dir.path() + "/adapter_model.safetensors", grown).ok());
      auto other = Instantiate(llama);
      ASSERT_TRUE(other.ok());
      LoraOptions from;
      from.from = dir.path();
      EXPECT_EQ(AddLora(**other, from).status().message(),
                "model.lora.from: base_model.model.model.embed_tokens.base_layer.weight is [9, 8] "
                "in the file and [8, 8] in the model (a vocabulary resized in fine-tuning; kiln "
                "loads the base's size)");
    }
  }
}

// PEFT's trainable tokens on a token table: the listed rows are a parameter of their own that
// starts as the base's rows and replaces them in the forward (the padding row's gets no gradient,
// as the table's own), in table() for a tied head, and in the table when merged. The config takes a
// list or {MODULE: ids}; ids out of the table, repeated, a module that is not the token table, and
// a table that also carries a LoRA adapter are refused in one line each.
TEST(Lora, TrainableTokensReplaceTheirRows) {
  torch::manual_seed(5);
  LoraEmbedding table(torch::nn::EmbeddingOptions(10, 6).padding_idx(0));
  table->weight.set_requires_grad(false);
  table->AddTrainableTokens({4, 0});
  ASSERT_TRUE(table->trainable_tokens_delta().requires_grad());
  EXPECT_TRUE(torch::equal(table->trainable_tokens_delta(),
                           table->weight.index_select(0, torch::tensor({4, 0}))));
  {
    torch::NoGradGuard no_grad;
    table->trainable_tokens_delta().add_(torch::randn({2, 6}));
  }
  const torch::Tensor ids = torch::tensor({{0, 4, 9}, {4, 1, 4}});
  const torch::Tensor replaced =
      table->weight.index_copy(0, torch::tensor({4, 0}), table->trainable_tokens_delta().detach());
  EXPECT_TRUE(torch::equal(table->table(), replaced));
  torch::Tensor got = table->forward(ids);
  EXPECT_TRUE(torch::equal(got, replaced.index_select(0, ids.flatten()).view({2, 3, 6})));
  const torch::Tensor dy = torch::randn(got.sizes());
  torch::Tensor grad = torch::autograd::grad({got}, {table->trainable_tokens_delta()}, {dy})[0];
  // Token 4's row: the sum of its three positions' gradients; the padding token's: none.
  EXPECT_TRUE(torch::allclose(grad[0], dy[0][1] + dy[1][0] + dy[1][2], 1e-6, 1e-6));
  EXPECT_EQ(grad[1].abs().sum().item<float>(), 0.0f);
  const torch::Tensor before = table->forward(ids).detach();
  table->MergeLora();
  EXPECT_TRUE(table->trainable_tokens().empty());
  EXPECT_EQ(table->named_parameters().size(), 1u);
  EXPECT_TRUE(torch::equal(table->weight, replaced));
  EXPECT_TRUE(torch::equal(table->forward(ids), before));

  // An output head's rows: those tokens' logits are x . row, the others the base's.
  AutocastLinear head(torch::nn::LinearOptions(6, 10).bias(false));
  head->weight.set_requires_grad(false);
  head->token_head = true;
  head->AddTrainableTokens({7, 2});
  {
    torch::NoGradGuard no_grad;
    head->trainable_tokens_delta().add_(torch::randn({2, 6}));
  }
  const torch::Tensor x = torch::randn({2, 3, 6});
  const torch::Tensor head_rows =
      head->weight.index_copy(0, torch::tensor({7, 2}), head->trainable_tokens_delta().detach());
  torch::Tensor logits = head->forward(x);
  EXPECT_TRUE(torch::allclose(logits, torch::matmul(x, head_rows.t()), 1e-6, 1e-6));
  const torch::Tensor dlogits = torch::randn(logits.sizes());
  torch::Tensor head_grad =
      torch::autograd::grad({logits}, {head->trainable_tokens_delta()}, {dlogits})[0];
  const torch::Tensor want_grad = torch::matmul(dlogits.reshape({-1, 10}).t(), x.reshape({-1, 6}));
  EXPECT_TRUE(torch::allclose(head_grad[0], want_grad[7], 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(head_grad[1], want_grad[2], 1e-5, 1e-5));
  head->MergeLora();
  EXPECT_TRUE(torch::equal(head->weight, head_rows));
  EXPECT_EQ(head->named_parameters().size(), 1u);

  auto read = [](const std::string& lora) {
    auto node = config::ParseYaml("model:\n  lora: " + lora, "job.yaml");
    EXPECT_TRUE(node.ok()) << node.status();
    return ReadLoraOptions(config::Config(*node));
  };
  auto listed = read("{target_modules: [q_proj], trainable_token_indices: [1, 2]}");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_EQ((*listed)->trainable_token_indices, (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE((*listed)->trainable_tokens_named.empty());
  auto named = read(
      "{target_modules: [q_proj], trainable_token_indices: {embed_tokens: [6], lm_head: [6, 1]}}");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_TRUE((*named)->trainable_token_indices.empty());
  using Named = std::vector<std::pair<std::string, std::vector<int64_t>>>;
  EXPECT_EQ((*named)->trainable_tokens_named, (Named{{"embed_tokens", {6}}, {"lm_head", {6, 1}}}));
  EXPECT_EQ(read("{target_modules: [q_proj], trainable_token_indices: [2, 2]}").status().message(),
            "model.lora.trainable_token_indices: token 2 is listed twice");
  EXPECT_EQ(read("{target_modules: [q_proj], trainable_token_indices: [-1]}").status().message(),
            "model.lora.trainable_token_indices: -1 is not a token id (a non-negative integer)");
  EXPECT_EQ(read("{target_modules: [q_proj], trainable_token_indices: {a: [1], b: [-2]}}")
                .status()
                .message(),
            "model.lora.trainable_token_indices.b: -2 is not a token id (a non-negative integer)");
  EXPECT_EQ(
      read("{target_modules: [q_proj], trainable_token_indices: {lm_head: []}}").status().message(),
      "model.lora.trainable_token_indices.lm_head lists no token");

  const std::string llama = "_target_: llama\nvocab_size: 8\ndim: 8\ndepth: 1\nheads: 2\n";
  auto refusal = [&](std::vector<std::string> targets, std::vector<int64_t> tokens,
                     const std::string& module) {
    auto model = Instantiate(llama);
    EXPECT_TRUE(model.ok()) << model.status();
    LoraOptions o;
    o.target_modules = std::move(targets);
    if (module.empty()) {
      o.trainable_token_indices = std::move(tokens);
    } else {
      o.trainable_tokens_named = {{module, std::move(tokens)}};
    }
    return std::string(AddLora(**model, o).status().message());
  };
  EXPECT_EQ(refusal({"q_proj"}, {7}, "embed_tokens"), "");
  EXPECT_EQ(refusal({"q_proj"}, {7, 0}, "lm_head"), "");  // the untied head's rows
  EXPECT_EQ(refusal({"q_proj"}, {8}, ""),
            "model.lora.trainable_token_indices: token 8 is outside model.embed_tokens's 8 rows");
  const std::string which =
      " (a token table can: llama's embed_tokens, GPT-2's wte, BERT's word_embeddings; and an "
      "untied output head: llama's lm_head; a tied head reads the table's trained rows)";
  EXPECT_EQ(refusal({"q_proj"}, {1}, "o_proj"),
            "model.lora.trainable_token_indices.o_proj: model.layers.0.self_attn.o_proj cannot "
            "train tokens" +
                which);
  EXPECT_EQ(refusal({"q_proj"}, {1}, "wte"),
            "model.lora.trainable_token_indices.wte: 'wte' names no module of the model" + which);
  EXPECT_EQ(refusal({"embed_tokens"}, {1}, ""),
            "model.lora.trainable_token_indices: model.embed_tokens carries a LoRA adapter too "
            "(target_modules); train its tokens or adapt it, not both");
}

// DoRA in AutocastLinear against PEFT's DoraLinearLayer written out here: with n = |W + s B A| per
// output row (no gradient through it), W x + b + (m / n - 1) W x' + (m / n) s B A x', x' the
// dropped-out input. The output and the gradients of x, A, B and m, in float32, with a bias and
// without, with dropout in training (the same mask drawn from the same seed) and without. The
// magnitudes start at the base's row norms (B is zero at the start); merged, the weight
// m / n (W + s B A) gives the same output and no adapter tensor is left; ResetDoraMagnitude sets
// them to the norms of a weight changed after the adapter was added.
TEST(Lora, DoraEqualsPeftsDecompositionWithItsGradients) {
  for (bool bias : {false, true}) {
    for (double dropout : {0.0, 0.25}) {
      SCOPED_TRACE(std::string(bias ? "bias" : "no bias") + ", dropout " + std::to_string(dropout));
      torch::manual_seed(12);
      AutocastLinear layer(torch::nn::LinearOptions(24, 10).bias(bias));
      LoraOptions o;
      o.r = 4;
      o.alpha = 8;
      o.dropout = dropout;
      o.use_dora = true;
      layer->AddLora(o);
      ASSERT_TRUE(layer->lora_magnitude_vector.defined());
      EXPECT_TRUE(
          torch::allclose(layer->lora_magnitude_vector, layer->weight.norm(2, {1}), 1e-6, 1e-6));
      EXPECT_TRUE(layer->named_parameters().contains("lora_magnitude_vector"));
      {
        torch::NoGradGuard no_grad;
        layer->lora_B->weight.normal_(0, 0.5);
        layer->lora_magnitude_vector.mul_(1 + 0.2 * torch::randn({10}));
      }
      layer->weight.requires_grad_(false);
      if (bias) layer->bias.requires_grad_(false);
      layer->train();
      torch::Tensor x = torch::randn({3, 5, 24}).requires_grad_();
      const torch::Tensor &w = layer->weight, &a = layer->lora_A->weight,
                          &b = layer->lora_B->weight, &m = layer->lora_magnitude_vector;
      torch::manual_seed(3);
      torch::Tensor got = layer->forward(x);
      torch::manual_seed(3);
      torch::Tensor dropped = dropout > 0 ? torch::dropout(x, dropout, true) : x;
      const double s = 2.0;  // alpha / r
      torch::Tensor norm = (w + s * torch::mm(b, a)).norm(2, {1}).detach();
      torch::Tensor scale = m / norm;
      torch::Tensor base = torch::matmul(x, w.t());
      if (bias) base = base + layer->bias;
      torch::Tensor want = base + (scale - 1) * torch::matmul(dropped, w.t()) +
                           scale * torch::matmul(torch::matmul(dropped, a.t()), b.t()) * s;
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_TRUE(torch::allclose(got, want, 1e-5, 1e-5)) << (got - want).abs().max();
      torch::Tensor dy = torch::randn(got.sizes());
      std::vector<torch::Tensor> inputs = {x, a, b, m};
      auto got_grads = torch::autograd::grad({got}, inputs, {dy});
      auto want_grads = torch::autograd::grad({want}, inputs, {dy});
      for (size_t i = 0; i < inputs.size(); ++i) {
        EXPECT_TRUE(torch::allclose(got_grads[i], want_grads[i], 1e-5, 1e-5))
            << i << ": " << (got_grads[i] - want_grads[i]).abs().max();
      }
      layer->eval();
      torch::NoGradGuard no_grad;
      torch::Tensor adapted = layer->forward(x);
      layer->MergeLora();
      EXPECT_FALSE(layer->has_lora());
      EXPECT_FALSE(layer->named_parameters().contains("lora_magnitude_vector"));
      EXPECT_LT((layer->forward(x) - adapted).abs().max().item<double>(), 1e-5);
    }
  }
  AutocastLinear layer(torch::nn::LinearOptions(6, 3));
  LoraOptions o;
  o.use_dora = true;
  layer->AddLora(o);
  torch::NoGradGuard no_grad;
  layer->weight.mul_(3);  // a base loaded after the adapter was added (model.init_from)
  EXPECT_FALSE(torch::allclose(layer->lora_magnitude_vector, layer->weight.norm(2, {1})));
  layer->ResetDoraMagnitude();
  EXPECT_TRUE(torch::allclose(layer->lora_magnitude_vector, layer->weight.norm(2, {1})));
}

// activation_checkpointing recomputes each block in the backward: the gradients equal those of
// the plain backward, with dropout (the recompute draws the same masks) and under LoRA (frozen
// embeddings: the blocks' input needs no gradient, their adapters do).
TEST(ActivationCheckpointing, GivesThePlainBackwardsGradients) {
  const std::vector<std::string> models = {
      "_target_: gpt\nvocab_size: 41\nblock_size: 16\ndim: 16\ndepth: 3\nheads: 2\n"
      "mlp_dim: 24\ndropout: 0.1\n",
      "_target_: llama\nvocab_size: 41\ndim: 16\ndepth: 3\nheads: 4\nkv_heads: 2\n"
      "mlp_dim: 24\ndropout: 0.1\n"};
  for (const std::string& yaml : models) {
    for (bool lora : {false, true}) {
      std::map<std::string, torch::Tensor> grads[2];
      for (int checkpointing = 0; checkpointing < 2; ++checkpointing) {
        torch::manual_seed(5);
        auto model = Instantiate(
            yaml + "activation_checkpointing: " + (checkpointing ? "true" : "false") + "\n");
        ASSERT_TRUE(model.ok()) << model.status();
        if (lora) {
          LoraOptions o;
          o.r = 2;
          o.target_modules = {yaml.find("gpt") != std::string::npos ? "c_attn" : "v_proj"};
          ASSERT_TRUE(AddLora(**model, o).ok());
          torch::NoGradGuard no_grad;
          for (auto& p : (*model)->named_parameters()) {
            if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0, 0.1);
          }
        }
        (*model)->train();
        torch::manual_seed(6);
        torch::Tensor ids = torch::randint(1, 41, {4, 12}, torch::kInt64);
        torch::Tensor logits = (*model)->forward(ids);
        torch::nn::functional::cross_entropy(logits.reshape({-1, 41}), ids.reshape({-1}))
            .backward();
        for (const auto& p : (*model)->named_parameters()) {
          if (p.value().requires_grad()) grads[checkpointing][p.key()] = p.value().grad();
        }
      }
      ASSERT_EQ(grads[0].size(), grads[1].size());
      ASSERT_FALSE(grads[0].empty());
      for (const auto& [name, grad] : grads[0]) {
        ASSERT_TRUE(grads[1][name].defined()) << name;
        EXPECT_LT((grad - grads[1][name]).abs().max().item<double>(), 1e-6)
            << yaml << " lora " << lora << " " << name;
      }
    }
  }
}

TEST(HfModelsErrors, WhatCannotCarryALoraAdapterIsOneLine) {
  auto model = Instantiate("_target_: llama\nvocab_size: 8\ndim: 8\ndepth: 1\nheads: 2\n");
  ASSERT_TRUE(model.ok()) << model.status();
  auto refused = [&](LoraOptions o, const std::string& expected) {
    auto added = AddLora(**model, o);
    ASSERT_FALSE(added.ok());
    EXPECT_NE(std::string(added.status().message()).find(expected), std::string::npos)
        << added.status();
  };
  LoraOptions o;
  o.target_modules = {"q_proj", "w_q"};
  refused(o, "model.lora.target_modules: 'w_q' names no layer of the model");
  o.target_modules = {"input_layernorm"};
  refused(o, "model.layers.0.input_layernorm is not a layer that can carry an adapter");
  o.target_modules = {"q_proj"};
  o.bias = "all";
  o.base_dtype = "bfloat16";
  refused(
      o,
      "model.lora.bias=all trains biases of layers whose weights model.lora.base_dtype=bfloat16 "
      "holds in bf16");
  o.bias = "none";
  o.base_dtype = "float32";
  o.lora_bias = true;  // a Llama's projections have no bias to merge B's into
  refused(
      o,
      "model.lora.lora_bias: model.layers.0.self_attn.q_proj has no bias to merge lora_B's into");
  o.use_dora = true;
  refused(o, "model.lora.lora_bias: kiln's DoRA layers take no bias on lora_B");
  o = LoraOptions();
  testing::TempDir dir;
  o.from = dir.path();
  refused(o, "holds no adapter_config.json");
  // A setting that changes what the adapter computes, where kiln would load something else:
  // refused by name. PEFT's defaults for them (null, false, {}) load, as every adapter peft saves
  // in the tests above shows.
  for (const std::string setting :
       {"\"alora_invocation_tokens\": [3, 5]", "\"layer_replication\": [[0, 1]]",
        "\"some_future_option\": \"on\""}) {
    std::ofstream(dir.path() + "/adapter_config.json")
        << "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": "
           "[\"q_proj\"], \"megatron_config\": null, \"target_parameters\": [], \"use_qalora\": "
           "false, "
        << setting << "}";
    const std::string key = setting.substr(1, setting.find('"', 1) - 1);
    refused(o,
            "adapter_config.json: " + key + " is set; kiln reads LoRA, rsLoRA and DoRA adapters");
  }
  // rank_pattern's keys and string targets are PEFT's regular expressions: Python's own syntax and
  // what does not compile are refused, and so are a rank that is not a positive integer, an alpha
  // that is not a positive number, layers_to_transform beside a regular expression's targets.
  for (const auto& [pattern, expected] : std::vector<std::pair<std::string, std::string>>{
           {"\"rank_pattern\": {\"(?P<p>q)_proj\": 8}",
            "rank_pattern: '(?P<p>q)_proj' uses (?P, which Python's re reads and kiln's regular "
            "expressions (ECMAScript's grammar) read otherwise or not at all"},
           {"\"rank_pattern\": {\"q{1,123456}\": 8}",
            "rank_pattern: 'q{1,123456}' repeats something more than 9999 times (,12345...)"},
           {"\"bias\": \"boft_only\"",
            "bias is 'boft_only'; kiln reads PEFT's none, all and lora_only"},
           {"\"exclude_modules\": \"q_proj(\"",
            "exclude_modules: 'q_proj(' is not a regular expression ("},
           {"\"rank_pattern\": {\"\\\\Aq_proj\": 8}", "rank_pattern: '\\Aq_proj' uses \\A"},
           {"\"rank_pattern\": {\"q_proj\": 2.5}",
            "rank_pattern.q_proj: 2.5 is not a positive integer"},
           {"\"alpha_pattern\": {\"q_proj\": 0}",
            "alpha_pattern.q_proj: 0 is not a positive alpha"},
           {"\"alpha_pattern\": [1]", "alpha_pattern must be a mapping"},
           {"\"layers_to_transform\": [\"0\"]", "layers_to_transform must be a block index"},
           {"\"layers_to_transform\": 0, \"layers_pattern\": \"layers|h\"",
            "layers_pattern 'layers|h' is a regular expression to PEFT"}}) {
    std::ofstream(dir.path() + "/adapter_config.json")
        << "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": "
           "[\"q_proj\"], "
        << pattern << "}";
    refused(o, "adapter_config.json: " + expected);
  }
  // A rank that is no whole number, or beyond any layer's width (a JSON number past int64_t once
  // read as one: the fuzzer's find).
  for (const std::string r : {"2.5", "130001660160000030000000166016000006300166330000000"}) {
    std::ofstream(dir.path() + "/adapter_config.json")
        << "{\"peft_type\": \"LORA\", \"r\": " << r
        << ", \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"]}";
    refused(o, "adapter_config.json: r is ");
    refused(o, "; kiln reads ranks from 1 to 1048576");
  }
  std::ofstream(dir.path() + "/adapter_config.json")
      << "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": "
         "\".*q_proj\", \"layers_to_transform\": [0]}";
  refused(o,
          "adapter_config.json: layers_to_transform and layers_pattern need target_modules as a "
          "list of names, not a regular expression (as PEFT)");
  std::ofstream(dir.path() + "/adapter_config.json")
      << "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": "
         "[\"q_proj\"], \"modules_to_save\": \"lm_head\"}";
  refused(o,
          "adapter_config.json: modules_to_save is the string 'lm_head'; kiln reads a list of "
          "module names");
  EXPECT_FALSE(HasLora(**model));  // nothing was added by the refusals
}

// target_modules as PEFT reads it: a name is a layer's last name or its full name, the string
// all-linear (any case) is every layer that can carry an adapter, so not the output head, and
// another string is a regular expression that a layer's full name matches whole. exclude_modules
// alike; rank_pattern's and alpha_pattern's keys are regular expressions matched after a dot.
TEST(Lora, TargetModulesTakePeftsFullNamesAllLinearAndExclusions) {
  const std::string llama = "_target_: llama\nvocab_size: 8\ndim: 8\ndepth: 2\nheads: 2\n";
  auto options = [](const std::string& targets) {
    auto node =
        config::ParseYaml("model:\n  lora:\n    r: 2\n    target_modules: " + targets, "job.yaml");
    EXPECT_TRUE(node.ok()) << node.status();
    return ReadLoraOptions(config::Config(*node));
  };
  for (const std::string spelling : {"all-linear", "ALL-Linear", "[all-linear]"}) {
    auto o = options(spelling);
    ASSERT_TRUE(o.ok()) << spelling << ": " << o.status();
    ASSERT_TRUE(o->has_value());
    EXPECT_EQ((*o)->target_modules, std::vector<std::string>{kAllLinear}) << spelling;
  }
  auto model = Instantiate(llama);
  ASSERT_TRUE(model.ok()) << model.status();
  auto all = AddLora(**model, **options("all-linear"));
  ASSERT_TRUE(all.ok()) << all.status();
  std::multiset<std::string> last;
  for (const std::string& name : *all) last.insert(name.substr(name.rfind('.') + 1));
  EXPECT_EQ(last,
            (std::multiset<std::string>{"q_proj", "q_proj", "k_proj", "k_proj", "v_proj", "v_proj",
                                        "o_proj", "o_proj", "gate_proj", "gate_proj", "up_proj",
                                        "up_proj", "down_proj", "down_proj"}));

  auto one = Instantiate(llama);
  ASSERT_TRUE(one.ok());
  auto full = AddLora(**one, **options("[model.layers.1.self_attn.q_proj, down_proj]"));
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(*full, (std::vector<std::string>{"model.layers.0.mlp.down_proj",
                                             "model.layers.1.self_attn.q_proj",
                                             "model.layers.1.mlp.down_proj"}));

  // exclude_modules, named alike, takes layers out; PEFT's targets written on export name the
  // same layers: a last name where all its layers are adapted, else the full names.
  auto excluding = Instantiate(llama);
  ASSERT_TRUE(excluding.ok());
  auto kept = AddLora(**excluding, **options("all-linear\n    exclude_modules: [down_proj, "
                                             "model.layers.0.self_attn.q_proj]"));
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->size(), 11u);
  for (const std::string& name : *kept) {
    EXPECT_EQ(name.find("down_proj"), std::string::npos) << name;
    EXPECT_NE(name, "model.layers.0.self_attn.q_proj");
  }
  testing::TempDir written;
  ASSERT_TRUE(WritePeftAdapter(**excluding, PeftAdapterInfo{}, written.path()).ok());
  auto adapter_config = config::LoadYamlFile(written.path() + "/adapter_config.json");
  ASSERT_TRUE(adapter_config.ok()) << adapter_config.status();
  std::vector<std::string> targets;
  for (const auto& t : (*adapter_config)->Find("target_modules")->items())
    targets.push_back(t->as_string());
  EXPECT_EQ(targets,
            (std::vector<std::string>{"gate_proj", "k_proj", "model.layers.1.self_attn.q_proj",
                                      "o_proj", "up_proj", "v_proj"}));

  // rank_pattern and alpha_pattern from the config, in PEFT's order (the first key that matches):
  // ^ before a full name is that layer only. Written back as r and lora_alpha (the most common
  // values) with patterns for the rest, which read back to the same layers' ranks and alphas.
  // The llama with the adapters `yaml` gives (model.lora's keys after target_modules).
  auto adapted_llama = [&](const std::string& yaml) {
    auto m = Instantiate(llama);
    EXPECT_TRUE(m.ok()) << m.status();
    auto o = options(yaml);
    EXPECT_TRUE(o.ok()) << yaml << ": " << o.status();
    auto added = AddLora(**m, **o);
    EXPECT_TRUE(added.ok()) << yaml << ": " << added.status();
    return std::make_pair(*m, added.value_or(std::vector<std::string>{}));
  };
  auto patterned = adapted_llama(
                       "[q_proj, v_proj]\n    rank_pattern: {^model.layers.1.self_attn.q_proj: 3, "
                       "q_proj: 5}\n    alpha_pattern: {v_proj: 1.5}")
                       .first;
  auto rank_and_alpha = [](Model& m) {
    std::map<std::string, std::pair<int64_t, double>> out;
    for (const auto& item : m.named_modules("", false)) {
      auto* layer = dynamic_cast<LoraLayer*>(item.value().get());
      if (layer != nullptr && layer->has_lora())
        out[item.key()] = {layer->lora_r(), layer->lora_alpha()};
    }
    return out;
  };
  const std::map<std::string, std::pair<int64_t, double>> expected_ranks = {
      {"model.layers.0.self_attn.q_proj", {5, 16}},
      {"model.layers.0.self_attn.v_proj", {2, 1.5}},
      {"model.layers.1.self_attn.q_proj", {3, 16}},
      {"model.layers.1.self_attn.v_proj", {2, 1.5}}};
  EXPECT_EQ(rank_and_alpha(*patterned), expected_ranks);
  EXPECT_EQ(patterned->named_parameters()["model.layers.1.self_attn.q_proj.lora_A.weight"].size(0),
            3);
  testing::TempDir patterns_written;
  ASSERT_TRUE(WritePeftAdapter(*patterned, PeftAdapterInfo{}, patterns_written.path()).ok());
  const std::string written_config =
      testing::ReadFile(patterns_written.path() + "/adapter_config.json");
  EXPECT_NE(written_config.find("\"rank_pattern\": {\"model.layers.0.self_attn.q_proj\": 5, "
                                "\"model.layers.1.self_attn.q_proj\": 3}"),
            std::string::npos)
      << written_config;
  EXPECT_NE(written_config.find("\"alpha_pattern\": {\"v_proj\": 1.5}"), std::string::npos)
      << written_config;
  auto reread = Instantiate(llama);
  ASSERT_TRUE(reread.ok());
  LoraOptions from_written;
  from_written.from = patterns_written.path();
  ASSERT_TRUE(AddLora(**reread, from_written).ok());
  EXPECT_EQ(rank_and_alpha(**reread), expected_ranks);

  // layers_to_transform as PEFT: a block's number found after layers_pattern, or without one, the
  // first number after the name's second segment; a target named by its full name is kept.
  for (const auto& [yaml, expected] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"[q_proj, down_proj]\n    layers_to_transform: [1]",
            {"model.layers.1.self_attn.q_proj", "model.layers.1.mlp.down_proj"}},
           {"[model.layers.0.self_attn.q_proj, v_proj]\n    layers_to_transform: [1]\n"
            "    layers_pattern: [h, layers]",
            {"model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.v_proj"}},
           {"[q_proj]\n    layers_to_transform: [0, 1]\n    layers_pattern: [model.layers]",
            {"model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj"}}}) {
    auto blocks = Instantiate(llama);
    ASSERT_TRUE(blocks.ok());
    auto o = options(yaml);
    ASSERT_TRUE(o.ok()) << o.status();
    auto added = AddLora(**blocks, **o);
    ASSERT_TRUE(added.ok()) << yaml << ": " << added.status();
    EXPECT_EQ(*added, expected) << yaml;
  }

  auto refused = [](const absl::Status& status, const std::string& expected) {
    EXPECT_NE(std::string(status.message()).find(expected), std::string::npos) << status;
  };
  {
    auto blocks = Instantiate(llama);
    ASSERT_TRUE(blocks.ok());
    refused(AddLora(**blocks, **options("[q_proj]\n    layers_to_transform: [1]\n"
                                        "    layers_pattern: [h]"))
                .status(),
            "model.lora.layers_to_transform: [1] leaves out every layer that target_modules "
            "names (no block of those numbers after h); no adapter would train");
  }
  // Regular expressions: targets and exclusions matched whole, pattern keys after a dot.
  for (const auto& [yaml, expected] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"'.*\\.(q|v)_proj'",
            {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj",
             "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"}},
           {"'model\\.layers\\.1\\.(self_attn|mlp)\\.(?!o_)[a-z]+_proj'\n"
            "    exclude_modules: '.*(gate|k)_proj'",
            {"model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj",
             "model.layers.1.mlp.up_proj", "model.layers.1.mlp.down_proj"}},
           {"all-linear\n    exclude_modules: '.*\\.0\\..*|.*mlp.*'",
            {"model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.k_proj",
             "model.layers.1.self_attn.v_proj", "model.layers.1.self_attn.o_proj"}}}) {
    EXPECT_EQ(adapted_llama(yaml).second, expected) << yaml;
  }
  {
    auto ranks =
        rank_and_alpha(*adapted_llama("[q_proj, v_proj]\n    rank_pattern: "
                                      "{'layers\\.1\\.self_attn\\.[qv]_proj': 3, 'q_pr.j': 5, "
                                      "'proj': 7}")
                            .first);
    EXPECT_EQ(ranks["model.layers.0.self_attn.q_proj"].first, 5);
    EXPECT_EQ(ranks["model.layers.0.self_attn.v_proj"].first, 2);  // 'proj' is no whole segment
    EXPECT_EQ(ranks["model.layers.1.self_attn.q_proj"].first, 3);
    EXPECT_EQ(ranks["model.layers.1.self_attn.v_proj"].first, 3);
  }
  refused(options("'(?i)Q_PROJ'").status(),
          "model.lora.target_modules: '(?i)Q_PROJ' uses (?i, which Python's re reads");
  refused(options("'.*\\.(q|v)_proj'\n    layers_to_transform: [1]").status(),
          "model.lora.layers_to_transform and layers_pattern need target_modules as a list");
  {
    auto regex = Instantiate(llama);
    ASSERT_TRUE(regex.ok());
    refused(AddLora(**regex, **options("'q_proj'")).status(),
            "model.lora.target_modules: 'q_proj' matches no layer's full name whole");
    refused(AddLora(**regex, **options("'.*layernorm'")).status(),
            "model.layers.0.input_layernorm is not a layer that can carry an adapter");
    refused(AddLora(**regex, **options("'.*_proj'\n    exclude_modules: '.*'")).status(),
            "model.lora.exclude_modules: '.*' leaves out every layer that target_modules names");
    EXPECT_FALSE(HasLora(**regex));
  }
  // modules_to_save as PEFT's suffixes of full names: model.norm is the final norm only, written
  // back by its full name, since PEFT would read its last name, norm, as every norm of the model
  // (which kiln reads the same way).
  {
    auto [saving, adapted] = adapted_llama("[q_proj]\n    modules_to_save: [model.norm]");
    std::vector<std::string> whole;
    for (const auto& p : saving->named_parameters())
      if (p.value().requires_grad() && p.key().find(".lora_") == std::string::npos)
        whole.push_back(p.key());
    EXPECT_EQ(whole, std::vector<std::string>{"model.norm.weight"});
    testing::TempDir saved;
    PeftAdapterInfo info;
    info.modules_to_save = {"model.norm"};
    ASSERT_TRUE(WritePeftAdapter(*saving, info, saved.path()).ok());
    const std::string written = testing::ReadFile(saved.path() + "/adapter_config.json");
    EXPECT_NE(written.find("\"modules_to_save\": [\"model.norm\"]"), std::string::npos) << written;
    auto every_norm = adapted_llama("[q_proj]\n    modules_to_save: [norm]").first;
    EXPECT_EQ(ModulesToSave(*every_norm, {"norm"}),
              (std::vector<std::string>{"model.layers.0.input_layernorm",
                                        "model.layers.0.post_attention_layernorm",
                                        "model.layers.1.input_layernorm",
                                        "model.layers.1.post_attention_layernorm", "model.norm"}));
  }
  auto partial = Instantiate(llama);
  ASSERT_TRUE(partial.ok());
  LoraOptions o;
  o.target_modules = {"layers.1.self_attn.q_proj", "layers.2.self_attn.q_proj"};
  refused(AddLora(**partial, o).status(),
          "'layers.2.self_attn.q_proj' names no layer of the model");
  o.target_modules = {"q_proj"};
  o.exclude_modules = {"model.layers.0.self_attn.q_proj", "layers.1.self_attn.q_proj"};
  refused(AddLora(**partial, o).status(),
          "model.lora.exclude_modules: [model.layers.0.self_attn.q_proj, "
          "layers.1.self_attn.q_proj] leaves out every layer that target_modules "
          "names; no adapter would train");
  o.exclude_modules.clear();
  testing::TempDir dir;
  std::ofstream(dir.path() + "/adapter_config.json")
      << "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": "
         "\"(?P<t>q)_proj\"}";
  o.from = dir.path();
  refused(AddLora(**partial, o).status(),
          "adapter_config.json: target_modules: '(?P<t>q)_proj' uses (?P, which Python's re "
          "reads");
  EXPECT_FALSE(HasLora(**partial));
}

// model=FAMILY on `dir` whose config.json is `json`: refused in one line that names the file and
// says `expected`.
void ExpectFolderRefused(const std::string& family, const std::string& dir, const std::string& json,
                         const std::string& expected) {
  std::ofstream(dir + "/config.json") << json;
  auto model = Pretrained(family, dir);
  ASSERT_FALSE(model.ok()) << json;
  const std::string message(model.status().message());
  EXPECT_NE(message.find(expected), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find(dir + "/config.json"), std::string::npos) << message;
}

TEST(HfModelsErrors, WhatModelBertCannotTakeIsOneLine) {
  testing::TempDir dir;
  auto expect_refused = [&dir](const std::string& json, const std::string& expected) {
    ExpectFolderRefused("bert", dir.path(), json, expected);
  };
  const std::string sizes =
      "\"vocab_size\": 20, \"hidden_size\": 8, \"num_hidden_layers\": 1, "
      "\"num_attention_heads\": 2, \"intermediate_size\": 16, \"max_position_embeddings\": 16";
  // A RoBERTa-style folder whose config says another model_type.
  expect_refused(
      "{\"architectures\": [\"RobertaForSequenceClassification\"], "
      "\"model_type\": \"deberta-v2\", " +
          sizes + "}",
      "model_type is \"deberta-v2\"; model=bert reads BERT, RoBERTa and XLM-RoBERTa "
      "checkpoints (model_type bert, roberta or xlm-roberta); kiln reads the model_types bert, "
      "gpt2, llama, mistral, qwen2, qwen3, roberta, vit, xlm-roberta");
  expect_refused("{\"model_type\": \"roberta\", " + sizes + ", \"hidden_act\": \"silu\"}",
                 "hidden_act is \"silu\"");
  expect_refused(
      "{\"model_type\": \"bert\", " + sizes + ", \"position_embedding_type\": \"relative_key\"}",
      "position_embedding_type is \"relative_key\"");
  expect_refused("{\"model_type\": \"roberta\", " + sizes + ", \"pad_token_id\": 20}",
                 "pad_token_id is 20");
  expect_refused(
      "{\"model_type\": \"bert\", " + sizes + ", \"id2label\": {\"0\": \"a\", \"2\": \"b\"}}",
      "id2label");
}

TEST(HfModelsErrors, WhatModelHfVitCannotTakeIsOneLine) {
  testing::TempDir dir;
  auto expect_refused = [&dir](const std::string& json, const std::string& expected) {
    ExpectFolderRefused("hf_vit", dir.path(), json, expected);
  };
  const std::string sizes =
      "\"hidden_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
      "\"intermediate_size\": 16, \"image_size\": 16, \"patch_size\": 4";
  // A DeiT folder: another model_type (distillation token, two heads).
  expect_refused(
      "{\"architectures\": [\"DeiTForImageClassification\"], "
      "\"model_type\": \"deit\", " +
          sizes + "}",
      "model_type is \"deit\"; model=hf_vit reads ViT checkpoints (model_type vit); kiln reads "
      "the model_types bert, gpt2, llama, mistral, qwen2, qwen3, roberta, vit, xlm-roberta");
  expect_refused("{\"model_type\": \"vit\", " + sizes + ", \"hidden_act\": \"gelu_new\"}",
                 "hidden_act is \"gelu_new\"");
  expect_refused("{\"model_type\": \"vit\", " + sizes + ", \"use_mask_token\": true}",
                 "use_mask_token is true");
  expect_refused(
      "{\"model_type\": \"vit\", \"hidden_size\": 8, \"num_hidden_layers\": 1, "
      "\"num_attention_heads\": 2, \"intermediate_size\": 16, \"image_size\": 18, "
      "\"patch_size\": 4}",
      "patch_size is 4; must divide image_size (18)");
  // A size option that says otherwise than the folder.
  std::ofstream(dir.path() + "/config.json") << "{\"model_type\": \"vit\", " + sizes + "}";
  auto node = config::ParseYaml(
      "_target_: hf_vit\npretrained: '" + dir.path() + "'\nimage_size: 32\n", "model.yaml");
  ASSERT_TRUE(node.ok());
  auto model = Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
  ASSERT_FALSE(model.ok());
  EXPECT_NE(std::string(model.status().message()).find("image_size"), std::string::npos)
      << model.status();
}

TEST(HfModelsErrors, WhatIsNotAGpt2FolderIsOneLine) {
  testing::TempDir dir;
  // config.json as `json` (none when empty): model=gpt2 on the folder fails with `expected`.
  auto expect_refused = [&dir](const std::string& json, const std::string& expected) {
    if (!json.empty()) std::ofstream(dir.path() + "/config.json") << json;
    auto model = Pretrained("gpt2", dir.path());
    ASSERT_FALSE(model.ok()) << json;
    EXPECT_NE(std::string(model.status().message()).find(expected), std::string::npos)
        << model.status();
  };
  // GPT-2's sizes with `heads` attention heads.
  auto sizes = [](int heads) {
    return "\"vocab_size\": 8, \"n_positions\": 4, \"n_embd\": 8, \"n_layer\": 1, \"n_head\": " +
           std::to_string(heads);
  };
  expect_refused("", "holds no config.json");
  expect_refused("{\"model_type\": \"llama\", \"vocab_size\": 8}",
                 "model_type is \"llama\"; model=gpt2 reads GPT-2 checkpoints (model_type gpt2); "
                 "model=llama reads this folder");
  expect_refused("{\"model_type\": \"gpt2\", " + sizes(2) + ", \"activation_function\": \"relu\"}",
                 "activation_function is \"relu\"");
  // A value with a newline in it is quoted as JSON writes it: the message stays one line
  // (hf_config_fuzzer's finding, fuzz/regressions/hf_config/).
  ExpectFolderRefused("gpt2", dir.path(), "{\"model_type\": \"gpt\\n2\"}",
                      "model_type is \"gpt\\n2\"; model=gpt2 reads GPT-2 checkpoints");
  expect_refused("{\"model_type\": \"gpt2\", " + sizes(3) + "}", "multiple of n_head");
  // 1e-05 without a dot: YAML 1.1 reads it as a string; it is still the number JSON means.
  expect_refused("{\"model_type\": \"gpt2\", " + sizes(2) + ", \"layer_norm_epsilon\": 1e-05}",
                 "neither model.safetensors");
  expect_refused("{\"model_type\": [1, ", "config.json");
}

TEST(HfModelsErrors, WhatModelLlamaCannotTakeIsOneLine) {
  testing::TempDir dir;
  const std::string sizes =
      "\"vocab_size\": 8, \"hidden_size\": 8, \"num_hidden_layers\": 1, "
      "\"num_attention_heads\": 2, \"intermediate_size\": 8";
  // config.json as `json`, `options` added to the model's: model=llama fails with `expected`.
  auto expect_refused = [&dir](const std::string& json, const std::string& expected,
                               const std::string& options = "") {
    std::ofstream(dir.path() + "/config.json") << json;
    auto model = Instantiate("_target_: llama\npretrained: '" + dir.path() + "'\n" + options);
    ASSERT_FALSE(model.ok()) << json;
    EXPECT_NE(std::string(model.status().message()).find(expected), std::string::npos)
        << model.status();
  };
  expect_refused("{\"model_type\": \"gpt2\"}",
                 "model_type is \"gpt2\"; model=llama reads Llama, Mistral, Qwen2 and Qwen3 "
                 "checkpoints (model_type llama, mistral, qwen2 or qwen3); model=gpt2 reads this "
                 "folder");
  expect_refused("{\"model_type\": \"llama\", " + sizes + ", \"hidden_act\": \"gelu\"}",
                 "hidden_act is \"gelu\"");
  expect_refused("{\"model_type\": \"llama\", " + sizes + ", \"num_key_value_heads\": 3}",
                 "num_attention_heads a multiple of num_key_value_heads");
  expect_refused("{\"model_type\": \"llama\", " + sizes +
                     ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
                 "rope_parameters.rope_type is \"yarn\"; kiln computes rope types default, "
                 "linear and llama3");
  expect_refused("{\"model_type\": \"llama\", " + sizes +
                     ", \"rope_scaling\": {\"type\": \"llama3\", \"factor\": 8}}",
                 "config.json: no rope_scaling.low_freq_factor");
  expect_refused("{\"model_type\": \"llama\", " + sizes + "}",
                 "option 'model.dim' of model 'llama' must be 8 as ", "dim: 16\n");
  expect_refused("{\"model_type\": \"llama\", " + sizes + "}",
                 "option 'model.qk_norm' of model 'llama' must be false as ", "qk_norm: true\n");
  expect_refused("{\"model_type\": \"llama\", " + sizes + "}",
                 "neither model.safetensors nor model.safetensors.index.json");
  // Sizes past any machine's memory (a 4 TB table), as a corrupt config.json can give: refused
  // while the model is built, naming the file, before its weights are looked for. (Where the
  // kernel grants any allocation, vm.overcommit_memory 1, the table would be touched instead.)
  std::ifstream overcommit("/proc/sys/vm/overcommit_memory");
  int mode = -1;
  overcommit >> mode;
  if (mode != 1) {
    expect_refused(
        "{\"model_type\": \"llama\", \"vocab_size\": 1000000, \"hidden_size\": 1000000, "
        "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"intermediate_size\": 8}",
        dir.path() +
            "/config.json describes llama, 1 layers, dim 1000000, 2 heads (2 key/value), "
            "vocab 1000000, rope default, which does not fit in this machine's memory");
  }

  // Without a folder, the sizes are options: vocab_size is required, heads divisible.
  auto scratch = Instantiate("_target_: llama\ndim: 16\n");
  ASSERT_FALSE(scratch.ok());
  EXPECT_NE(std::string(scratch.status().message()).find("vocab_size"), std::string::npos)
      << scratch.status();
  auto kv = Instantiate("_target_: llama\nvocab_size: 8\ndim: 16\nheads: 4\nkv_heads: 3\n");
  ASSERT_FALSE(kv.ok());
  EXPECT_NE(std::string(kv.status().message()).find("a divisor of heads (4)"), std::string::npos)
      << kv.status();
}

// A tensor of another shape in the folder names the tensor and both shapes.
TEST(HfModelsErrors, ATensorOfAnotherShapeNamesItAndBothShapes) {
  testing::TempDir dir;
  std::ofstream(dir.path() + "/config.json")
      << "{\"model_type\": \"llama\", \"vocab_size\": 8, \"hidden_size\": 8, "
         "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"intermediate_size\": 8, "
         "\"tie_word_embeddings\": true}";
  auto model = Instantiate(
      "_target_: llama\nvocab_size: 8\ndim: 8\ndepth: 1\nheads: 2\n"
      "mlp_dim: 8\ntie_weights: true\n");
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::pair<std::string, torch::Tensor>> tensors = StateDict(**model);
  for (auto& [name, tensor] : tensors) {
    if (name == "model.norm.weight") tensor = torch::ones({9});
  }
  ASSERT_TRUE(WriteSafetensors(dir.path() + "/model.safetensors", tensors).ok());
  auto loaded = Instantiate("_target_: llama\npretrained: '" + dir.path() + "'\n");
  ASSERT_FALSE(loaded.ok());
  const std::string message(loaded.status().message());
  EXPECT_NE(message.find("model.norm.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("[8]"), std::string::npos) << message;
  EXPECT_NE(message.find("[9]"), std::string::npos) << message;
}

}  // namespace hf_models_test
}  // namespace kiln
