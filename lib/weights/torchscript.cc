#include "lib/weights/torchscript.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/fuse_linear.h>

#include <cctype>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/error_text.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/data/loader.h"
#include "lib/data/sampler.h"

namespace kiln {
namespace {

// A TorchScript class name from a C++ module's type name: "kiln::(anonymous namespace)::Cnn" ->
// "Cnn", "torch::nn::Conv2dImpl" -> "Conv2d".
std::string TypeName(const std::string& cpp_name) {
  std::string name = cpp_name;
  if (size_t colons = name.rfind("::"); colons != std::string::npos) name = name.substr(colons + 2);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0)
    name.resize(name.size() - 4);
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "Module" + out;
  return out;
}

// A jit module with the module tree, parameters and buffers of `module`: the very same tensors, so
// the tracer records reads of them as attribute reads (prim::GetAttr), not as constants.
torch::jit::Module Mirror(const torch::nn::Module& module, const std::string& type_name,
                          const std::shared_ptr<torch::jit::CompilationUnit>& cu) {
  torch::jit::Module out(c10::QualifiedName("__torch__.kiln." + type_name), cu,
                         /*shouldMangle=*/true);
  for (const auto& p : module.named_parameters(/*recurse=*/false))
    out.register_parameter(p.key(), p.value(), false);
  for (const auto& b : module.named_buffers(/*recurse=*/false))
    out.register_buffer(b.key(), b.value());
  for (const auto& child : module.named_children()) {
    out.register_module(child.key(), Mirror(*child.value(), TypeName(child.value()->name()), cu));
  }
  return out;
}

// The tensor a chain of prim::GetAttr from the forward's `self` leads to; nullopt otherwise.
std::optional<torch::Tensor> AttributeTensor(torch::jit::Module& root, torch::jit::Value* value) {
  std::vector<std::string> path;
  while (value->node()->kind() == c10::prim::GetAttr) {
    path.push_back(value->node()->s(c10::attr::name));
    value = value->node()->input(0);
  }
  if (path.empty() || value->node()->kind() != c10::prim::Param || value->offset() != 0)
    return std::nullopt;
  torch::jit::Module m = root;
  for (size_t i = path.size() - 1; i > 0; --i) m = m.attr(path[i]).toModule();
  c10::IValue leaf = m.attr(path[0]);
  if (!leaf.isTensor()) return std::nullopt;
  return leaf.toTensor();
}

}  // namespace

absl::StatusOr<torch::jit::Module> TraceModel(torch::nn::Module& model, const TensorFn& forward,
                                              const torch::Tensor& example,
                                              const std::string& class_name) {
  model.eval();
  torch::NoGradGuard no_grad;
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  torch::jit::Module traced = Mirror(model, TypeName(class_name), cu);
  std::shared_ptr<torch::jit::Graph> graph;
  try {
    auto result = torch::jit::tracer::trace(
        {example},
        [&](torch::jit::Stack inputs) -> torch::jit::Stack {
          return {forward(inputs[0].toTensor())};
        },
        [](const torch::autograd::Variable&) { return std::string(); }, /*strict=*/true,
        /*force_outplace=*/false, &traced, {"input"});
    graph = result.first->graph;
    // LibTorch's C++ Linear runs as t + addmm, or matmul (+ add_): back to aten::linear, as a
    // Python trace records it (ONNX Gemm/MatMul either way; dynamic quantization needs it).
    torch::jit::FuseLinear(graph);
  } catch (const std::exception& e) {
    torch::jit::tracer::abandon();
    return absl::FailedPreconditionError(
        absl::StrCat("model '", class_name, "' does not trace: ", ErrorLine(e.what())));
  }
  auto fn = traced._ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*traced.type()->name(), "forward"), graph);
  traced.type()->addMethod(fn);
  traced.eval();
  return traced;
}

absl::Status CheckTraceAgrees(torch::jit::Module& traced, const TensorFn& forward,
                              const std::vector<torch::Tensor>& inputs, double tolerance,
                              const std::string& what) {
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& input : inputs) {
    torch::Tensor expected = forward(input), got;
    try {
      got = traced.forward({input}).toTensor();
    } catch (const std::exception& e) {
      return absl::FailedPreconditionError(
          absl::StrCat(what,
                       " does not trace with a dynamic batch size: the trace fails at "
                       "batch size ",
                       input.size(0), " (", ErrorLine(e.what()), ")"));
    }
    if (!got.sizes().equals(expected.sizes())) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " does not trace with a dynamic batch size: at batch size ",
                       input.size(0), " the trace outputs ", c10::str(got.sizes()), ", the model ",
                       c10::str(expected.sizes())));
    }
    double diff = (got - expected).abs().max().item<double>();
    double scale = expected.abs().max().item<double>();
    if (!(diff <= tolerance * (1.0 + scale))) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s does not trace with a dynamic batch size: at batch size %d the trace differs from "
          "the model by %.3g (its forward bakes a size into the graph)",
          what, input.size(0), diff));
    }
  }
  return absl::OkStatus();
}

absl::Status SaveModule(const torch::jit::Module& module, const std::string& path) {
  std::stringstream bytes;
  try {
    module.save(bytes);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("writing ", path, ": ", ErrorLine(e.what())));
  }
  return WriteFileAtomically(path, bytes.str());
}

std::string SelectQuantizedEngine() {
  const auto& engines = at::globalContext().supportedQEngines();
  auto has = [&](at::QEngine e) {
    return std::find(engines.begin(), engines.end(), e) != engines.end();
  };
  for (auto [engine, name] :
       {std::pair{at::QEngine::FBGEMM, "fbgemm"}, std::pair{at::QEngine::ONEDNN, "onednn"},
        std::pair{at::QEngine::QNNPACK, "qnnpack"}}) {
    if (has(engine)) {
      at::globalContext().setQEngine(engine);
      return name;
    }
  }
  return "";
}

absl::StatusOr<int> QuantizeDynamicInt8(torch::jit::Module& traced) {
  std::string engine = SelectQuantizedEngine();
  if (engine.empty())
    return absl::FailedPreconditionError(
        "quantize=dynamic_int8: this LibTorch has no quantized engine");
  torch::NoGradGuard no_grad;
  std::shared_ptr<torch::jit::Graph> graph = traced.get_method("forward").graph();
  torch::jit::Value* self = graph->inputs()[0];
  const c10::OperatorHandle prepack =
      c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_prepack", "");
  std::vector<torch::jit::Node*> linears;
  for (torch::jit::Node* node : graph->nodes()) {
    if (node->kind() == c10::aten::linear) linears.push_back(node);
  }
  int quantized = 0;
  for (torch::jit::Node* node : linears) {
    std::optional<torch::Tensor> weight = AttributeTensor(traced, node->input(1));
    if (!weight.has_value() || weight->dim() != 2 || weight->scalar_type() != torch::kFloat32)
      continue;
    std::optional<torch::Tensor> bias;
    if (!node->input(2)->type()->cast<c10::NoneType>()) {
      bias = AttributeTensor(traced, node->input(2));
      if (!bias.has_value()) continue;
    }
    // Symmetric int8 over the whole matrix: zero point 0, the largest magnitude at 127.
    torch::Tensor w = weight->detach().contiguous();
    double scale = std::max(w.abs().max().item<double>() / 127.0, 1e-12);
    torch::Tensor qweight = torch::quantize_per_tensor(w, scale, 0, torch::kQInt8);
    torch::jit::Stack stack{
        qweight, bias.has_value() ? c10::IValue(bias->detach().contiguous()) : c10::IValue()};
    prepack.callBoxed(&stack);
    c10::IValue packed = stack.at(0);
    std::string name = absl::StrCat("_packed_params_", quantized);
    traced.register_attribute(name, packed.type(), packed);
    torch::jit::WithInsertPoint guard(node);
    torch::jit::Value* params = graph->insertGetAttr(self, name);
    torch::jit::Value* out = graph->insert(c10::Symbol::fromQualString("quantized::linear_dynamic"),
                                           {node->input(0), params, false});
    node->output()->replaceAllUsesWith(out);
    node->destroy();
    ++quantized;
  }
  if (quantized == 0) {
    return absl::FailedPreconditionError(
        "quantize=dynamic_int8: the model has no Linear layer to quantize");
  }
  torch::jit::EliminateDeadCode(graph);
  // A method that already ran keeps its optimized plan of the old graph: the module is written
  // and read back, which gives a fresh one (and proves the packed weights serialize).
  std::stringstream file;
  traced.save(file);
  traced = torch::jit::load(file);
  return quantized;
}

absl::StatusOr<torch::Tensor> TraceExampleBatch(data::DataModule& dm,
                                                std::optional<int64_t> length) {
  std::shared_ptr<const data::Dataset> ds;
  for (data::Stage stage : {data::Stage::kTest, data::Stage::kValidate, data::Stage::kPredict}) {
    KILN_RETURN_IF_ERROR(dm.Setup(stage));
    ds = stage == data::Stage::kTest       ? dm.test_dataset()
         : stage == data::Stage::kValidate ? dm.val_dataset()
                                           : dm.predict_dataset();
    if (ds != nullptr && ds->size() > 0) break;
  }
  if (ds == nullptr || ds->size() == 0) {
    return absl::FailedPreconditionError(
        "kiln export format=torchscript traces the model on data: the data module has no test, "
        "validation or predict examples");
  }
  data::LoaderOptions lo = dm.loader_options();
  lo.batch_size = 3;
  lo.num_workers = 0;
  lo.batch_order = nullptr;
  data::DataLoader loader(ds, data::SamplerFor(*ds, /*shuffle=*/false, 0), lo);
  torch::Tensor input;
  KILN_RETURN_IF_ERROR(loader.Run(0, 0, 1, [&](data::Batch& b) -> absl::StatusOr<bool> {
    input = b.input;
    return false;
  }));
  while (input.size(0) < 3)
    input = torch::cat({input, input}).narrow(0, 0, std::min<int64_t>(3, 2 * input.size(0)));
  if (input.scalar_type() == torch::kInt64 && input.dim() == 2 && length.has_value()) {
    if (input.size(1) >= *length) {
      input = input.narrow(1, 0, *length);
    } else {
      input = torch::constant_pad_nd(input, {0, *length - input.size(1)}, 0);
    }
  }
  return input.contiguous();
}

}  // namespace kiln
