// TorchScript export: a kiln model (a torch::nn C++ module) traced with LibTorch's tracer into a
// torch::jit::Module that Python's torch.jit.load and LibTorch's torch::jit::load run without kiln.
// The jit module mirrors the model's module tree (same names, the same parameter and buffer
// tensors as attributes), so its state_dict keys are the model's. Tracing records the ATen calls
// of one forward; a model whose forward bakes the batch size into a shape would give wrong
// results (or fail) at another batch size, so a trace is only accepted after it agreed with the
// model at two other batch sizes. `QuantizeDynamicInt8` turns the traced Linear layers into
// dynamically quantized int8 ones (quantized::linear_dynamic), as PyTorch's quantize_dynamic_jit.
#pragma once

#include <torch/script.h>
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/data/datamodule.h"

namespace kiln {

using TensorFn = std::function<torch::Tensor(const torch::Tensor&)>;

// Traces `forward` (the model's forward; it must use only the tensors of `model`) on `example`
// [B, ...] with the model in eval mode and no autograd. `class_name` names the root module's type
// (`__torch__.kiln.NAME`).
absl::StatusOr<torch::jit::Module> TraceModel(torch::nn::Module& model, const TensorFn& forward,
                                              const torch::Tensor& example,
                                              const std::string& class_name);

// The traced module against the model on each of `inputs` (batches of other sizes than the
// trace's): an error naming the batch size and the largest difference when an output differs by
// more than `tolerance` (absolute, plus the same relative) or the traced module fails. `what` names
// the model.
absl::Status CheckTraceAgrees(torch::jit::Module& traced, const TensorFn& forward,
                              const std::vector<torch::Tensor>& inputs, double tolerance,
                              const std::string& what);

// Writes `module` to `path` (atomically) as torch.jit.save does.
absl::Status SaveModule(const torch::jit::Module& module, const std::string& path);

// Replaces every aten::linear of the traced forward with quantized::linear_dynamic on int8
// weights (symmetric, per tensor) prepacked for the current quantized engine; returns how many
// layers it quantized. An error when there is none, or the build has no quantized engine.
absl::StatusOr<int> QuantizeDynamicInt8(torch::jit::Module& traced);

// The quantized engine dynamic int8 uses on this machine: fbgemm where LibTorch has it, else
// onednn, else qnnpack (Debian's 1.13 has no fbgemm); "" when there is none. Selects it.
std::string SelectQuantizedEngine();

// What a model is traced on: three rows of the first evaluation batch (test, else validation, else
// predict split), repeated when there are fewer; token inputs padded with 0 or cut to `length`.
absl::StatusOr<torch::Tensor> TraceExampleBatch(data::DataModule& dm,
                                                std::optional<int64_t> length);

}  // namespace kiln
