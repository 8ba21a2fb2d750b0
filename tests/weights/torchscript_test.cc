// TorchScript export as the people downstream use it: every model that traces is traced at batch
// size 2 and then, written as model.pt, gives the same outputs as kiln within 1e-5 at batch sizes
// 3 and 5 in LibTorch's torch::jit::load and in Python's torch.jit.load (the .venv's),
// and torch.onnx.export of the loaded module gives an ONNX file that onnx.checker accepts (when
// onnx is installed in the .venv). Models that cannot trace with a dynamic batch size are refused
// in one line. Dynamic int8 quantization swaps every Linear for quantized::linear_dynamic. The
// Python parts are skipped, with a message, only when Python torch is absent.
#include "lib/weights/torchscript.h"

#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <functional>

#include "components/models/model.h"
#include "lib/base/status_macros.h"
#include "lib/config/yaml_io.h"
#include "lib/registry/registry.h"
#include "lib/weights/safetensors.h"
#include "tests/support/process.h"

namespace kiln {
namespace torchscript_test {

const char kPython[] = KILN_PYTHON_EXE;
const std::string kScript = std::string(KILN_SOURCE_DIR) + "/tests/weights/torchscript_interop.py";

struct Case {
  std::string name;
  std::string yaml;
  std::function<torch::Tensor(int64_t batch)> input;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

torch::Tensor Images(int64_t batch, int64_t channels, int64_t size) {
  return torch::randn({batch, channels, size, size});
}

// Token ids 1..vocab-1 with the tail of every other row padded (0).
torch::Tensor Tokens(int64_t batch, int64_t length, int64_t vocab) {
  torch::Tensor t = torch::randint(1, vocab, {batch, length}, torch::kInt64);
  for (int64_t i = 1; i < batch; i += 2) t[i].narrow(0, length / 2, length - length / 2).zero_();
  return t;
}

const std::vector<Case>& TracingCases() {
  static const auto* cases = new std::vector<Case>{
      {"cnn", "_target_: cnn\nchannels: [4, 8]\nhidden: 16\nnum_classes: 3\n",
       [](int64_t b) { return Images(b, 1, 28); }},
      {"resnet18", "_target_: resnet\ndepth: 18\nin_channels: 1\nnum_classes: 4\n",
       [](int64_t b) { return Images(b, 1, 32); }},
      {"mlp", "_target_: mlp\nin_features: 64\nhidden: [32, 16]\nnum_classes: 3\n",
       [](int64_t b) {
         return torch::randn({b, 1, 8, 8});
       }},
      {"ds_cnn", "_target_: ds_cnn\nchannels: 8\nblocks: 2\nnum_classes: 4\n",
       [](int64_t b) {
         return torch::randn({b, 49, 10});
       }},
      {"gpt",
       "_target_: gpt\nvocab_size: 50\nblock_size: 16\ndim: 32\ndepth: 2\nheads: 4\nmlp_dim: 64\n",
       [](int64_t b) {
         return torch::randint(1, 50, {b, 16}, torch::kInt64);
       }},
      {"transformer_classifier",
       "_target_: transformer_classifier\nvocab_size: 50\nmax_length: 16\ndim: 32\ndepth: "
       "2\nheads: 4\nmlp_dim: 64\n"
       "num_classes: 2\npool: mean\ndropout: 0.0\n",
       [](int64_t b) { return Tokens(b, 16, 50); }},
      {"lstm_classifier",
       "_target_: lstm_classifier\nvocab_size: 50\nnum_classes: 2\ndim: 16\nhidden: 24\nlayers: "
       "2\n",
       [](int64_t b) { return Tokens(b, 12, 50); }},
      {"lstm_lm", "_target_: lstm_lm\nvocab_size: 50\ndim: 16\nhidden: 16\nlayers: 2\n",
       [](int64_t b) {
         return torch::randint(1, 50, {b, 12}, torch::kInt64);
       }},
  };
  return *cases;
}

std::shared_ptr<Model> Build(const std::string& yaml) {
  auto node = config::ParseYaml(yaml, "model.yaml");
  EXPECT_TRUE(node.ok()) << node.status();
  auto model = Registry<Model>::Get().Instantiate(config::Config(*node, "model"));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// Traces `model` at batch size 2 and checks it at 1 and 3, as `kiln export` does.
absl::StatusOr<torch::jit::Module> Trace(Model& model, const Case& c) {
  TensorFn forward = [&model](const torch::Tensor& x) { return model.forward(x); };
  KILN_ASSIGN_OR_RETURN(torch::jit::Module traced, TraceModel(model, forward, c.input(2), c.name));
  KILN_RETURN_IF_ERROR(
      CheckTraceAgrees(traced, forward, {c.input(1), c.input(3)}, 1e-4, "model '" + c.name + "'"));
  return traced;
}

bool PythonTorch() { return testing::RunProcess({kPython, "-c", "import torch"}).exit_code == 0; }

double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

class Traces : public ::testing::TestWithParam<Case> {};

TEST_P(Traces, PythonAndLibTorchGiveKilnsOutputsAtTwoBatchSizes) {
  const Case& c = GetParam();
  torch::manual_seed(7);
  auto model = Build(c.yaml);
  ASSERT_NE(model, nullptr);
  model->train();
  {
    torch::NoGradGuard no_grad;  // BatchNorm statistics away from their defaults
    if (c.input(2).is_floating_point()) model->forward(c.input(4));
  }
  model->eval();
  auto traced = Trace(*model, c);
  ASSERT_TRUE(traced.ok()) << traced.status();
  testing::TempDir dir;
  traced->save(dir.path() + "/model.pt");
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> inputs = {{"input_1", c.input(3)},
                                                               {"input_2", c.input(5)}};
  torch::jit::Module loaded = torch::jit::load(dir.path() + "/model.pt");
  for (const auto& [name, x] : inputs) {
    EXPECT_LE(MaxDiff(loaded.forward({x}).toTensor(), model->forward(x)), 1e-5) << name;
  }
  if (!PythonTorch())
    GTEST_SKIP() << "Python torch (the .venv's) not installed: the Python half is skipped";
  ASSERT_TRUE(WriteSafetensors(dir.path() + "/inputs.safetensors", inputs).ok());
  auto run = testing::RunProcess({kPython, kScript, dir.path(), "onnx"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto outputs = ReadSafetensors(dir.path() + "/outputs.safetensors");
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  for (const auto& [name, x] : inputs) {
    torch::Tensor ours = model->forward(x);
    torch::Tensor theirs = outputs->at("output" + name.substr(5));
    ASSERT_EQ(theirs.sizes(), ours.sizes()) << name;
    EXPECT_LE(MaxDiff(theirs, ours), 1e-5) << name;
  }
  EXPECT_TRUE(testing::FileExists(dir.path() + "/model.onnx"));
  bool onnx = testing::RunProcess({kPython, "-c", "import onnx"}).exit_code == 0;
  EXPECT_NE(run.out.find(onnx ? "onnx: checked" : "onnx: not checked"), std::string::npos)
      << run.out;
}

INSTANTIATE_TEST_SUITE_P(Models, Traces, ::testing::ValuesIn(TracingCases()),
                         [](const auto& info) { return info.param.name; });

// Models whose C++ forward bakes the batch size into the graph are refused, in one line.
TEST(TorchScript, ModelsThatBakeTheBatchSizeAreRefusedInOneLine) {
  std::vector<Case> cases = {
      {"vit",
       "_target_: vit\nimage_size: 8\npatch_size: 4\nin_channels: 1\ndim: 16\ndepth: 1\nheads: "
       "2\nmlp_dim: 16\nnum_classes: 3\n",
       [](int64_t b) { return Images(b, 1, 8); }},
      {"bag_of_embeddings", "_target_: bag_of_embeddings\nvocab_size: 50\nnum_classes: 2\ndim: 8\n",
       [](int64_t b) { return Tokens(b, 12, 50); }},
      {"conv_bilstm",
       "_target_: conv_bilstm\nfeatures: 8\nchannels: 4\ntime_strides: [2, 1]\nhidden: 8\nlayers: "
       "1\nnum_classes: 10\n",
       [](int64_t b) {
         return torch::randn({b, 20, 8});
       }},
  };
  for (const Case& c : cases) {
    torch::manual_seed(1);
    auto model = Build(c.yaml);
    ASSERT_NE(model, nullptr);
    auto traced = Trace(*model, c);
    ASSERT_FALSE(traced.ok()) << c.name;
    std::string message(traced.status().message());
    EXPECT_NE(message.find("model '" + c.name + "' does not trace with a dynamic batch size"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(TorchScript, DynamicInt8SwapsEveryLinearAndStaysClose) {
  for (const Case& c : TracingCases()) {
    if (c.name != "mlp" && c.name != "gpt") continue;
    torch::manual_seed(3);
    auto model = Build(c.yaml);
    ASSERT_NE(model, nullptr);
    model->eval();
    auto traced = Trace(*model, c);
    ASSERT_TRUE(traced.ok()) << traced.status();
    torch::NoGradGuard no_grad;
    torch::Tensor x = c.input(3), before = traced->forward({x}).toTensor();
    std::string float_graph = traced->get_method("forward").graph()->toString();
    auto layers = QuantizeDynamicInt8(*traced);
    ASSERT_TRUE(layers.ok()) << layers.status() << float_graph;
    EXPECT_EQ(*layers, c.name == "mlp" ? 3 : 2 * 4 + 1)
        << c.name;  // gpt: 4 per block and the tied output
    std::string graph = traced->get_method("forward").graph()->toString();
    EXPECT_EQ(graph.find("aten::linear"), std::string::npos) << graph;
    EXPECT_NE(graph.find("quantized::linear_dynamic"), std::string::npos);
    torch::Tensor after = traced->forward({x}).toTensor();
    EXPECT_LE(MaxDiff(after, before), 0.05 * (1.0 + before.abs().max().item<double>())) << c.name;
    EXPECT_GT(MaxDiff(after, before), 0.0) << c.name;  // it did change
    testing::TempDir dir;
    traced->save(dir.path() + "/model.pt");
    torch::jit::Module loaded = torch::jit::load(dir.path() + "/model.pt");
    EXPECT_TRUE(loaded.forward({x}).toTensor().equal(after)) << c.name;
  }
}

TEST(TorchScript, DynamicInt8RefusesAModelWithoutLinearLayers) {
  auto traced = [] {
    torch::jit::Module m(c10::QualifiedName("__torch__.kiln.Nothing"));
    m.define("def forward(self, x):\n  return x * 2\n");
    return m;
  }();
  auto layers = QuantizeDynamicInt8(traced);
  ASSERT_FALSE(layers.ok());
  EXPECT_EQ(layers.status().message(),
            "quantize=dynamic_int8: the model has no Linear layer to quantize");
}

}  // namespace torchscript_test
}  // namespace kiln
