// libkiln_cuda's half of trainer.cuda_graphs (cuda_graph_step.h): the captured and replayed step.
// Part of libkiln_cuda (lib/CMakeLists.txt), which links LibTorch's CUDA libraries.
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/error_text.h"
#include "lib/base/status_macros.h"
#include "lib/logging/logger.h"
#include "lib/trainer/capturable_optimizer.h"
#include "lib/trainer/internal/cuda_graph_step.h"
#include "lib/trainer/strategy.h"
#include "lib/trainer/trainer.h"

namespace kiln {
namespace {
// A batch's tensors, for what is done to each alike.
constexpr torch::Tensor data::Batch::*kBatchTensors[] = {&data::Batch::input, &data::Batch::target,
                                                         &data::Batch::lengths, &data::Batch::mask};

std::string ShapeOf(const torch::Tensor& t) { return t.defined() ? c10::str(t.sizes()) : "none"; }

// The same shapes, dtypes and strides (what a graph's captured kernels assume).
bool SameLayout(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.sizes() == b.sizes() && a.strides() == b.strides() && a.scalar_type() == b.scalar_type();
}

bool SameLayout(const data::Batch& a, const data::Batch& b) {
  for (auto member : kBatchTensors) {
    if (!SameLayout(a.*member, b.*member)) return false;
  }
  return true;
}

size_t TrainedParameterCount(const torch::optim::Optimizer& optimizer) {
  size_t n = 0;
  for (const auto& group : optimizer.param_groups()) n += group.params().size();
  return n;
}

class GraphStep final : public CudaGraphStep::Impl {
 public:
  GraphStep(const LoopContext& c, CapturableOptimizer* o)
      : ctx(c), capturable(o), side(at::cuda::getStreamFromPool()) {}

  LoopContext ctx;
  CapturableOptimizer* capturable;
  at::cuda::CUDAStream side;
  int64_t eager_steps = 0;  // warm-up steps run since the graphs were (last) dropped
  size_t trained_parameters = 0;
  std::unique_ptr<at::cuda::CUDAGraph> forward_backward, optimizer_step;
  data::Batch static_batch;  // what the graphs read
  Task::TrainingOutputs static_outputs;
  std::vector<torch::Tensor> graph_grads;  // the gradients the forward-backward graph writes
  std::optional<std::string> other_shape;  // the one other batch shape run eagerly
  bool replayed = false;                   // this step's forward-backward was a replay

  torch::optim::Optimizer& optimizer() { return *ctx.state.optimizer; }
  Task& task() { return *ctx.state.inputs.task; }

  void Drop() {
    forward_backward.reset();
    optimizer_step.reset();
    static_batch = data::Batch();
    static_outputs = Task::TrainingOutputs();
    graph_grads.clear();
    other_shape.reset();
    eager_steps = 0;
  }

  // Work on the side stream, ordered after what the current stream has queued, and the current
  // stream after it.
  template <typename F>
  auto OnSideStream(F&& work) {
    at::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream();
    at::cuda::CUDAEvent ready;
    ready.record(current);
    ready.block(side);
    struct Join {
      at::cuda::CUDAStream current, side;
      ~Join() {
        at::cuda::CUDAEvent done;
        done.record(side);
        done.block(current);
      }
    } join{current, side};
    at::cuda::CUDAStreamGuard guard(side);
    return work();
  }

  absl::StatusOr<Task::TrainingOutputs> Eager(const data::Batch& batch) {
    return OnSideStream([&]() -> absl::StatusOr<Task::TrainingOutputs> {
      absl::StatusOr<Task::TrainingOutputs> outputs;
      {
        AutocastScope autocast(ctx.strategy);
        outputs = task().TrainingLoss(batch);
      }
      if (!outputs.ok()) return outputs.status();
      KILN_RETURN_IF_ERROR(ctx.strategy.Backward(outputs->loss, true));
      return outputs;
    });
  }

  void Clip() {
    if (!ctx.options.gradient_clip_val.has_value()) return;
    ClipGradientsOnDevice(
        task().module().parameters(), *ctx.options.gradient_clip_val,
        ctx.options.gradient_clip_algorithm == TrainerOptions::ClipAlgorithm::kNorm);
  }

  // Captures `work` into `graph` on the side stream; a failure (an operation that reads the host,
  // which CUDA refuses while capturing) ends the capture and says so.
  template <typename F>
  absl::Status Capture(at::cuda::CUDAGraph& graph, const char* what, F&& work) {
    bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);  // casts made in a capture must not outlive it
    absl::Status status;
    try {
      at::cuda::CUDAStreamGuard guard(side);
      // Thread-local: the data loader's threads may use CUDA meanwhile (pinning host memory).
      graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        status = work();
      } catch (const std::exception& e) {
        status = absl::InternalError(e.what());
      }
      graph.capture_end();
    } catch (const std::exception& e) {
      if (status.ok()) status = absl::InternalError(e.what());
    }
    at::autocast::set_autocast_cache_enabled(cache);
    if (status.ok()) return status;
    return absl::FailedPreconditionError(absl::StrCat(
        "trainer.cuda_graphs=true: the ", what, " could not be captured as a CUDA graph: ",
        ErrorLine(std::string(status.message())), " (set trainer.cuda_graphs=false)"));
  }

  absl::StatusOr<Task::TrainingOutputs> CaptureForwardBackward(const data::Batch& batch) {
    c10::cuda::device_synchronize();
    optimizer().zero_grad();  // the graph's backward makes the gradients, in its own memory
    static_batch = batch;
    for (auto member : kBatchTensors) {
      if ((batch.*member).defined()) static_batch.*member = (batch.*member).clone();
    }
    forward_backward = std::make_unique<at::cuda::CUDAGraph>();
    Task::TrainingOutputs outputs;
    absl::Status captured =
        Capture(*forward_backward, "forward and backward", [&]() -> absl::Status {
          absl::StatusOr<Task::TrainingOutputs> out;
          {
            AutocastScope autocast(ctx.strategy);
            out = task().TrainingLoss(static_batch);
          }
          if (!out.ok()) return out.status();
          outputs = *out;
          return ctx.strategy.Backward(outputs.loss, true);
        });
    if (!captured.ok()) {
      Drop();
      return captured;
    }
    static_outputs = outputs;
    graph_grads.clear();
    for (const auto& p : task().module().parameters()) graph_grads.push_back(p.grad());
    trained_parameters = TrainedParameterCount(optimizer());
    forward_backward->replay();
    replayed = true;
    return static_outputs;
  }

  absl::Status CaptureOptimizerStep() {
    c10::cuda::device_synchronize();
    if (absl::Status s = capturable->MakeCapturable(); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "trainer.cuda_graphs=true: the optimizer's step cannot be captured: ", s.message(),
          " (set trainer.cuda_graphs=false)"));
    }
    optimizer_step = std::make_unique<at::cuda::CUDAGraph>();
    capturable->SetCapturing(true);
    absl::Status captured = Capture(*optimizer_step, "optimizer step", [&]() -> absl::Status {
      Clip();
      optimizer().step();
      return absl::OkStatus();
    });
    capturable->SetCapturing(false);
    if (!captured.ok()) {
      Drop();
      return captured;
    }
    Logger::Instance().Info(absl::StrCat("trainer.cuda_graphs: the training step captured after ",
                                         eager_steps, " warm-up steps, for batches of input ",
                                         ShapeOf(static_batch.input),
                                         "; it is replayed from now on"));
    return absl::OkStatus();
  }

  absl::StatusOr<Task::TrainingOutputs> ForwardBackward(const data::Batch& batch) override {
    if (forward_backward && TrainedParameterCount(optimizer()) != trained_parameters) {
      Logger::Instance().Info(
          "trainer.cuda_graphs: the trained parameters changed; capturing the step again");
      optimizer().zero_grad();
      Drop();
    }
    replayed = false;
    if (!forward_backward) {
      if (eager_steps < CudaGraphStep::kWarmupSteps || batch.size() == 0) return Eager(batch);
      return CaptureForwardBackward(batch);
    }
    if (!SameLayout(batch, static_batch)) {
      std::string shape = ShapeOf(batch.input);
      if (other_shape.has_value() && *other_shape != shape) {
        return absl::FailedPreconditionError(absl::StrCat(
            "trainer.cuda_graphs=true needs batches of one shape: batch ", batch.index,
            " of epoch ", batch.epoch, " has input ", shape, ", the step was captured for ",
            ShapeOf(static_batch.input), " and ", *other_shape,
            " ran eagerly (set trainer.cuda_graphs=false, or give the data one shape: "
            "data.drop_last=true)"));
      }
      other_shape = shape;
      // Eagerly, with gradients of its own; the graph's come back after its optimizer step.
      optimizer().zero_grad();
      return Eager(batch);
    }
    for (auto member : kBatchTensors) {
      if ((batch.*member).defined())
        (static_batch.*member).copy_(batch.*member, /*non_blocking=*/true);
    }
    forward_backward->replay();
    replayed = true;
    return static_outputs;
  }

  void RestoreGraphGradients() {
    if (!forward_backward) return;
    auto parameters = task().module().parameters();
    for (size_t i = 0; i < parameters.size() && i < graph_grads.size(); ++i)
      parameters[i].mutable_grad() = graph_grads[i];
  }

  absl::Status OptimizerStep() override {
    if (replayed) {
      if (!optimizer_step) KILN_RETURN_IF_ERROR(CaptureOptimizerStep());
      capturable->BeforeReplay();
      optimizer_step->replay();
      capturable->AfterReplay();
      return absl::OkStatus();
    }
    // Eagerly: warm-up, or a batch of the other shape.
    OnSideStream([&] {
      Clip();
      optimizer().step();
      optimizer().zero_grad();
    });
    ++eager_steps;
    RestoreGraphGradients();
    return absl::OkStatus();
  }

  void SkipOptimizerStep() override {
    if (replayed) return;  // the next replay writes the graph's gradients anew
    optimizer().zero_grad();
    RestoreGraphGradients();
  }
};

}  // namespace

std::unique_ptr<CudaGraphStep::Impl> MakeCudaGraphStepImpl(const LoopContext& ctx,
                                                           CapturableOptimizer* optimizer) {
  return std::make_unique<GraphStep>(ctx, optimizer);
}

}  // namespace kiln
