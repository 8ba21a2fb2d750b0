#include "python/components.h"

#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "components/audio/features.h"
#include "components/text/tokenizer.h"
#include "lib/base/error_text.h"
#include "lib/data/sample_rng.h"
#include "lib/data/transform.h"
#include "lib/registry/registry.h"
#include "lib/trainer/callback.h"
#include "lib/trainer/loss.h"
#include "lib/trainer/metric.h"
#include "lib/trainer/optimization.h"
#include "python/common.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

class PyOptimizer {
 public:
  PyOptimizer(std::string name, std::shared_ptr<torch::optim::Optimizer> optimizer)
      : name_(std::move(name)), optimizer_(std::move(optimizer)) {}
  void Step() {
    Released(name_ + " step failed", [&] { optimizer_->step(); });
  }
  void ZeroGrad(bool set_to_none) {
    Released(name_ + " zero_grad failed", [&] { optimizer_->zero_grad(set_to_none); });
  }
  std::vector<double> Lr() const {
    std::vector<double> out;
    for (const auto& group : optimizer_->param_groups()) out.push_back(group.options().get_lr());
    return out;
  }
  const std::shared_ptr<torch::optim::Optimizer>& optimizer() const { return optimizer_; }

 private:
  std::string name_;
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
};

class PyScheduler {
 public:
  PyScheduler(std::shared_ptr<Scheduler> scheduler,
              std::shared_ptr<torch::optim::Optimizer> optimizer)
      : scheduler_(std::move(scheduler)), optimizer_(std::move(optimizer)) {}
  void Step(std::optional<double> metric) {
    Released("the scheduler's step failed",
             [&] { scheduler_->Step(metric.value_or(std::numeric_limits<double>::quiet_NaN())); });
  }
  std::string Interval() const {
    return scheduler_->interval() == Scheduler::Interval::kStep ? "step" : "epoch";
  }
  std::string Monitor() const { return scheduler_->monitor(); }

 private:
  std::shared_ptr<Scheduler> scheduler_;
  std::shared_ptr<torch::optim::Optimizer> optimizer_;  // the schedule holds a pointer to it
};

class PyLoss {
 public:
  explicit PyLoss(std::shared_ptr<Loss> loss) : loss_(std::move(loss)) {}
  torch::Tensor Call(const torch::Tensor& output, const torch::Tensor& target) {
    return Released("the loss cannot take these tensors",
                    [&] { return loss_->Forward(output, target); });
  }

 private:
  std::shared_ptr<Loss> loss_;
};

class PyMetric {
 public:
  PyMetric(std::shared_ptr<Metric> metric, int64_t num_classes) : metric_(std::move(metric)) {
    for (int64_t c = 0; c < num_classes; ++c) class_names_.push_back(std::to_string(c));
  }
  void Update(const torch::Tensor& preds, const torch::Tensor& target,
              std::optional<torch::Tensor> mask) {
    MetricBatch batch;
    batch.preds = preds.detach();
    batch.target = target;
    if (mask) batch.mask = *mask;
    Check(Released("the metric cannot take these tensors", [&] {
      torch::NoGradGuard no_grad;
      return metric_->Update(batch);
    }));
  }
  // One value (accuracy, cer): a float, as torchmetrics gives; several (f1 per class): a dict.
  py::object Compute() const {
    MetricValues values = Take(metric_->Compute(class_names_));
    if (values.size() == 1 && values.begin()->first.empty())
      return py::float_(values.begin()->second);
    return py::cast(values);
  }
  void Reset() { metric_->Reset(); }

 private:
  std::shared_ptr<Metric> metric_;
  std::vector<std::string> class_names_;
};

class PyTransform {
 public:
  explicit PyTransform(std::shared_ptr<data::Transform> transform)
      : transform_(std::move(transform)) {}
  // The same draws as kiln's loader for sample `index` of `epoch` under `seed`.
  torch::Tensor Call(const torch::Tensor& input, uint64_t seed, int64_t epoch,
                     int64_t index) const {
    return Released("the transform cannot take this tensor", [&] {
      data::SampleRng rng(seed, epoch, index);
      return transform_->Apply(input, rng);
    });
  }
  bool deterministic() const { return transform_->deterministic(); }

 private:
  std::shared_ptr<data::Transform> transform_;
};

class PyTokenizer {
 public:
  explicit PyTokenizer(std::shared_ptr<text::Tokenizer> tokenizer)
      : tokenizer_(std::move(tokenizer)) {}
  void Fit(const std::vector<std::string>& texts, const std::string& corpus_name) {
    Check(Released("fitting the tokenizer failed",
                   [&] { return tokenizer_->Fit(texts, corpus_name); }));
  }
  std::vector<int64_t> Encode(const std::string& text) const {
    RequireFitted("encode");
    return Released("the tokenizer cannot encode this text",
                    [&] { return tokenizer_->Encode(text); });
  }
  std::string Decode(const std::vector<int64_t>& ids) const {
    RequireFitted("decode");
    return Released("the tokenizer cannot decode these ids",
                    [&] { return tokenizer_->Decode(ids); });
  }
  int64_t vocab_size() const { return tokenizer_->vocab_size(); }
  std::string Describe() const { return tokenizer_->Describe(); }

 private:
  // kiln's data modules fit a tokenizer before anything encodes with it; from Python the order is
  // the caller's, and an unfitted tokenizer (no vocabulary, no SentencePiece model) must not run.
  void RequireFitted(const char* call) const {
    if (tokenizer_->fingerprint() == 0) {
      throw StatusError(absl::StrCat("Tokenizer.", call,
                                     ": the tokenizer is not fitted yet; call fit(texts) first"));
    }
  }

  std::shared_ptr<text::Tokenizer> tokenizer_;
};

class PyFeatures {
 public:
  explicit PyFeatures(std::shared_ptr<audio::FeatureExtractor> features)
      : features_(std::move(features)) {}
  torch::Tensor Call(const torch::Tensor& waveform) const {
    return Released("the feature extractor cannot take this waveform",
                    [&] { return features_->Compute(waveform); });
  }
  const audio::FeatureExtractor& get() const { return *features_; }

 private:
  std::shared_ptr<audio::FeatureExtractor> features_;
};

// A native callback or logger, held for a job; opaque to Python.
struct PyNativeCallback {
  std::string name;
  std::shared_ptr<Callback> callback;
};
struct PyNativeLogger {
  std::string name;
  std::shared_ptr<MetricsLogger> logger;
};

// The tensors to optimize, with names: a Python model's named_parameters() or parameters(), or a
// list of tensors.
NamedParameters ParametersFrom(const py::object& params, const std::string& target) {
  if (params.is_none()) {
    throw StatusError(
        absl::StrCat("kiln.instantiate: the optimizer '", target,
                     "' needs params= (a model's parameters() or named_parameters())"));
  }
  NamedParameters out;
  for (const py::handle& item : params) {
    if (py::isinstance<py::tuple>(item) && py::len(item) == 2) {
      py::object tensor = item[py::int_(1)];
      if (!THPVariable_Check(tensor.ptr())) {
        throw StatusError(absl::StrCat(
            "kiln.instantiate: params holds a pair whose second item is a ",
            std::string(py::str(py::type::of(tensor).attr("__name__"))), ", not a tensor"));
      }
      out.emplace_back(py::str(item[py::int_(0)]).cast<std::string>(),
                       tensor.cast<torch::Tensor>());
    } else if (THPVariable_Check(item.ptr())) {
      out.emplace_back(std::to_string(out.size()), item.cast<torch::Tensor>());
    } else {
      throw StatusError(absl::StrCat("kiln.instantiate: params holds a ",
                                     std::string(py::str(py::type::of(item).attr("__name__"))),
                                     "; it takes tensors or (name, tensor) pairs"));
    }
  }
  if (out.empty())
    throw StatusError("kiln.instantiate: params is empty: there is nothing to optimize");
  return out;
}

template <typename T>
std::shared_ptr<T> Build(const config::Config& cfg) {
  return Released("kiln.instantiate failed",
                  [&] { return Take(Registry<T>::Get().Instantiate(cfg)); });
}

}  // namespace

py::object InstantiateComponent(const config::Config& cfg, const std::string& target,
                                const InstantiateArgs& args) {
  if (Registry<OptimizerFactory>::Get().Contains(target)) {
    NamedParameters params = ParametersFrom(args.params, target);
    auto factory = Build<OptimizerFactory>(cfg);
    std::shared_ptr<torch::optim::Optimizer> optimizer = Take(factory->Create(params));
    return py::cast(PyOptimizer(target, std::move(optimizer)));
  }
  if (Registry<Scheduler>::Get().Contains(target)) {
    if (args.optimizer.is_none() || !py::isinstance<PyOptimizer>(args.optimizer)) {
      throw StatusError(
          absl::StrCat("kiln.instantiate: the scheduler '", target,
                       "' needs optimizer= (a kiln.Optimizer from kiln.instantiate)"));
    }
    auto optimizer = args.optimizer.cast<const PyOptimizer&>().optimizer();
    auto scheduler = Build<Scheduler>(cfg);
    Check(scheduler->Attach(optimizer.get(), args.total_steps, args.steps_per_epoch));
    return py::cast(PyScheduler(std::move(scheduler), std::move(optimizer)));
  }
  if (Registry<Loss>::Get().Contains(target)) return py::cast(PyLoss(Build<Loss>(cfg)));
  if (Registry<Metric>::Get().Contains(target)) {
    auto metric = Build<Metric>(cfg);
    MetricSetup setup;
    setup.num_classes = args.num_classes;
    Check(metric->Setup(setup));
    return py::cast(PyMetric(std::move(metric), args.num_classes));
  }
  if (Registry<data::Transform>::Get().Contains(target))
    return py::cast(PyTransform(Build<data::Transform>(cfg)));
  if (Registry<text::Tokenizer>::Get().Contains(target))
    return py::cast(PyTokenizer(Build<text::Tokenizer>(cfg)));
  if (Registry<audio::FeatureExtractor>::Get().Contains(target)) {
    return py::cast(PyFeatures(Build<audio::FeatureExtractor>(cfg)));
  }
  if (Registry<Callback>::Get().Contains(target))
    return py::cast(PyNativeCallback{target, Build<Callback>(cfg)});
  if (Registry<MetricsLogger>::Get().Contains(target))
    return py::cast(PyNativeLogger{target, Build<MetricsLogger>(cfg)});
  return py::none();
}

std::shared_ptr<Callback> NativeCallback(const py::handle& object) {
  return py::isinstance<PyNativeCallback>(object) ? object.cast<const PyNativeCallback&>().callback
                                                  : nullptr;
}

std::shared_ptr<MetricsLogger> NativeLogger(const py::handle& object) {
  return py::isinstance<PyNativeLogger>(object) ? object.cast<const PyNativeLogger&>().logger
                                                : nullptr;
}

void BindComponents(py::module_& m) {
  py::class_<PyOptimizer>(
      m, "Optimizer", "A kiln optimizer over torch tensors (kiln.instantiate(cfg, params=...)).")
      .def("step", &PyOptimizer::Step, "One update from the tensors' .grad.")
      .def("zero_grad", &PyOptimizer::ZeroGrad, py::arg("set_to_none") = true)
      .def_property_readonly("lr", &PyOptimizer::Lr, "Each parameter group's learning rate now.");
  py::class_<PyScheduler>(m, "Scheduler", "A kiln learning-rate schedule on a kiln.Optimizer.")
      .def("step", &PyScheduler::Step, py::arg("metric") = std::nullopt,
           "Advances one step or epoch (see interval); metric: the monitored value of a plateau "
           "schedule.")
      .def_property_readonly("interval", &PyScheduler::Interval)
      .def_property_readonly("monitor", &PyScheduler::Monitor);
  py::class_<PyLoss>(m, "Loss", "A kiln loss: loss(output, target) is a tensor with autograd.")
      .def("__call__", &PyLoss::Call, py::arg("output"), py::arg("target"));
  py::class_<PyMetric>(m, "Metric",
                       "A kiln metric: update(preds, target) per batch, then compute().")
      .def("update", &PyMetric::Update, py::arg("preds"), py::arg("target"),
           py::arg("mask") = std::nullopt)
      .def("compute", &PyMetric::Compute)
      .def("reset", &PyMetric::Reset);
  py::class_<PyTransform>(m, "Transform",
                          "A kiln transform: transform(x, seed, epoch, index) draws as kiln's "
                          "loader does for that sample.")
      .def("__call__", &PyTransform::Call, py::arg("input"), py::arg("seed") = 0,
           py::arg("epoch") = 0, py::arg("index") = 0)
      .def_property_readonly("deterministic", &PyTransform::deterministic);
  py::class_<PyTokenizer>(m, "Tokenizer",
                          "A kiln tokenizer: fit(texts), encode(text), decode(ids).")
      .def("fit", &PyTokenizer::Fit, py::arg("texts"), py::arg("corpus_name") = "python")
      .def("encode", &PyTokenizer::Encode, py::arg("text"))
      .def("decode", &PyTokenizer::Decode, py::arg("ids"))
      .def_property_readonly("vocab_size", &PyTokenizer::vocab_size)
      .def("__repr__", &PyTokenizer::Describe);
  py::class_<PyNativeCallback>(m, "NativeCallback",
                               "A kiln callback, for kiln.fit(callbacks=[...]) or kiln.Job.")
      .def("__repr__", [](const PyNativeCallback& c) { return "<kiln callback " + c.name + ">"; });
  py::class_<PyNativeLogger>(m, "NativeLogger",
                             "A kiln logger, for kiln.fit(loggers=[...]) or kiln.Job.")
      .def("__repr__", [](const PyNativeLogger& l) { return "<kiln logger " + l.name + ">"; });
  py::class_<PyFeatures>(m, "AudioFeatures",
                         "A kiln feature extractor: features(waveform) is [frames, num_features].")
      .def("__call__", &PyFeatures::Call, py::arg("waveform"))
      .def_property_readonly("num_features",
                             [](const PyFeatures& f) { return f.get().num_features(); })
      .def_property_readonly("sample_rate",
                             [](const PyFeatures& f) { return f.get().sample_rate(); })
      .def(
          "num_frames",
          [](const PyFeatures& f, int64_t samples) { return f.get().num_frames(samples); },
          py::arg("samples"));
}

}  // namespace kiln::python
