// kiln._kiln: the Python face of kiln (python/kiln/__init__.py wraps it). Configs cross as plain
// dicts, lists and scalars; kiln's errors become kiln.KilnError with kiln's one-line message; the
// GIL is released while kiln composes, builds and trains. Built with the pybind11 that PyPI's torch
// ships in its include/ (the one torch's own extensions use), against kiln's own LibTorch, which
// is the torch of the same virtual environment.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "components/models/hf_checkpoint.h"
#include "components/models/model.h"
#include "lib/base/error_text.h"
#include "lib/base/files.h"
#include "lib/commands/job.h"
#include "lib/config/node.h"
#include "lib/config/yaml_io.h"
#include "lib/data/datamodule.h"
#include "lib/data/loader.h"
#include "lib/data/sampler.h"
#include "lib/inference/predictor.h"
#include "lib/logging/logger.h"
#include "lib/registry/registry.h"
#include "lib/report/report_page.h"
#include "lib/report/run_reader.h"
#include "lib/run/command.h"
#include "lib/trainer/trainer.h"
#include "python/common.h"
#include "python/components.h"

namespace py = pybind11;

namespace kiln::python {
namespace {

// What Released says before LibTorch's own line when kiln's code throws.
constexpr const char* kPredictFailed = "the model cannot answer this input";
constexpr const char* kBuildFailed = "the job cannot be built";

py::object ToPython(const config::Node& node) {
  switch (node.kind()) {
    case config::NodeKind::kNull: return py::none();
    case config::NodeKind::kBool: return py::bool_(node.as_bool());
    case config::NodeKind::kInt:
      // Python's int has no bound: 2**64 from a config stays 2**64.
      if (node.is_big_int())
        return py::reinterpret_steal<py::object>(
            PyLong_FromString(node.int_text().c_str(), nullptr, 10));
      return py::int_(node.as_int());
    case config::NodeKind::kFloat: return py::float_(node.as_float());
    case config::NodeKind::kString: return py::str(node.as_string());
    case config::NodeKind::kList: {
      py::list out;
      for (const auto& item : node.items()) out.append(ToPython(*item));
      return out;
    }
    case config::NodeKind::kMap: {
      py::dict out;
      for (const auto& [key, value] : node.entries())
        out[py::str(config::KeyText(key))] = ToPython(*value);
      return out;
    }
    default:  // `???` and interpolations left as text
      return py::str(config::ScalarToYaml(node));
  }
}

config::NodePtr FromPython(const py::handle& value, const std::string& where) {
  if (value.is_none()) return config::Node::Null();
  if (py::isinstance<py::bool_>(value)) return config::Node::Bool(value.cast<bool>());
  if (py::isinstance<py::int_>(value))
    return config::Node::Integer(
        py::str(py::int_(py::reinterpret_borrow<py::object>(value))).cast<std::string>());
  if (py::isinstance<py::float_>(value)) return config::Node::Float(value.cast<double>());
  if (py::isinstance<py::str>(value)) return config::Node::String(value.cast<std::string>());
  if (py::isinstance<py::dict>(value)) {
    config::NodePtr out = config::Node::Map();
    for (const auto& [k, v] : value.cast<py::dict>()) {
      std::string key = py::str(k).cast<std::string>();
      out->Set(key, FromPython(v, where.empty() ? key : where + "." + key));
    }
    return out;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    config::NodePtr out = config::Node::List();
    size_t i = 0;
    for (const auto& item : value)
      out->Append(FromPython(item, where + "[" + std::to_string(i++) + "]"));
    return out;
  }
  throw StatusError("config value " + (where.empty() ? std::string("(root)") : where) + " is a " +
                    std::string(py::str(py::type::of(value).attr("__name__"))) +
                    "; a kiln config holds dicts, lists, str, int, float, bool and None");
}

JobRequest Request(const std::vector<std::string>& overrides, const std::string& config_name,
                   const std::string& config_dir) {
  JobRequest request;
  request.overrides = overrides;
  request.config_name = config_name;
  request.config_dir = config_dir;
  return request;
}

// A kiln.Callback written in Python, called from kiln's loop with the GIL taken for the call. Only
// the hooks the Python class overrides are called. An exception stops the run: it is kept, with its
// traceback, and raised again in Python when the kiln call that ran the loop returns.
class PyCallback : public Callback {
 public:
  PyCallback(py::object callback, std::set<std::string> hooks, int index,
             std::shared_ptr<std::unique_ptr<py::error_already_set>> raised)
      : callback_(std::move(callback)),
        hooks_(std::move(hooks)),
        index_(index),
        raised_(std::move(raised)) {
    py::gil_scoped_acquire gil;
    name_ = py::str(py::type::of(callback_).attr("__qualname__")).cast<std::string>();
  }
  ~PyCallback() override {
    py::gil_scoped_acquire gil;
    callback_ = py::object();
  }
  std::string state_key() const override {
    return "python[" + std::to_string(index_) + "]:" + name_;
  }

  absl::Status OnFitStart(Trainer& t) override { return Call("on_fit_start", t); }
  absl::Status OnFitEnd(Trainer& t) override { return Call("on_fit_end", t); }
  absl::Status OnTrainEpochStart(Trainer& t) override { return Call("on_train_epoch_start", t); }
  absl::Status OnTrainEpochEnd(Trainer& t) override { return Call("on_train_epoch_end", t); }
  absl::Status OnTrainBatchEnd(Trainer& t, const data::Batch&, double loss) override {
    return Call("on_train_batch_end", t, loss);  // made a Python float once the GIL is held
  }
  absl::Status OnValidationStart(Trainer& t) override { return Call("on_validation_start", t); }
  absl::Status OnValidationEnd(Trainer& t, const std::map<std::string, double>& metrics) override {
    return Call("on_validation_end", t, metrics);
  }
  absl::Status OnTestEnd(Trainer& t, const std::map<std::string, double>& metrics) override {
    return Call("on_test_end", t, metrics);
  }

 private:
  template <typename... A>
  absl::Status Call(const char* hook, Trainer& trainer, A&&... args) {
    if (!hooks_.count(hook)) return absl::OkStatus();
    py::gil_scoped_acquire gil;
    try {
      callback_.attr(hook)(py::cast(&trainer, py::return_value_policy::reference),
                           std::forward<A>(args)...);
      return absl::OkStatus();
    } catch (py::error_already_set& e) {
      std::string what = e.what();
      *raised_ = std::make_unique<py::error_already_set>(std::move(e));
      return absl::AbortedError(
          absl::StrCat("Python callback ", name_, ".", hook, " raised ", ErrorLine(what)));
    }
  }

  py::object callback_;
  std::set<std::string> hooks_;
  int index_;
  std::string name_;
  std::shared_ptr<std::unique_ptr<py::error_already_set>> raised_;
};

// A batch as Python sees it: {"input", "target"[, "lengths", "mask"]} as torch.Tensors that share
// kiln's storage (no copy).
py::dict BatchDict(const data::Batch& batch) {
  py::dict out;
  out["input"] = batch.input;
  out["target"] = batch.target;
  if (batch.lengths.defined()) out["lengths"] = batch.lengths;
  if (batch.mask.defined()) out["mask"] = batch.mask;
  return out;
}

// One pass over a DataLoader as a Python iterator. kiln's loader runs on a thread of its own (its
// workers load and collate in parallel, outside the GIL) and hands batches over through a queue of
// `prefetch` batches; __next__ waits for one with the GIL released. Dropping the iterator early
// stops the loader.
class BatchIterator {
 public:
  BatchIterator(std::shared_ptr<data::DataLoader> loader, int64_t epoch)
      : loader_(std::move(loader)) {
    capacity_ = std::max<size_t>(1, static_cast<size_t>(loader_->options().prefetch));
    thread_ = std::thread([this, epoch] {
      absl::Status status = loader_->Run(
          epoch, 0, loader_->num_batches(), [this](data::Batch& b) -> absl::StatusOr<bool> {
            std::unique_lock<std::mutex> lock(mutex_);
            changed_.wait(lock, [this] { return queue_.size() < capacity_ || stopping_; });
            if (stopping_) return false;
            queue_.push_back(std::move(b));
            changed_.notify_all();
            return true;
          });
      std::lock_guard<std::mutex> lock(mutex_);
      status_ = status;
      done_ = true;
      changed_.notify_all();
    });
  }
  ~BatchIterator() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      changed_.notify_all();
    }
    py::gil_scoped_release release;
    if (thread_.joinable()) thread_.join();
  }

  py::dict Next() {
    data::Batch batch;
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return !queue_.empty() || done_; });
      if (queue_.empty()) {
        lock.unlock();
        py::gil_scoped_acquire gil;
        Check(status_);
        throw py::stop_iteration();
      }
      batch = std::move(queue_.front());
      queue_.pop_front();
      changed_.notify_all();
    }
    return BatchDict(batch);
  }

 private:
  std::shared_ptr<data::DataLoader> loader_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<data::Batch> queue_;
  size_t capacity_ = 4;
  bool done_ = false, stopping_ = false;
  absl::Status status_;
};

// A split's loader: iterating starts a pass (epoch 0, 1, ... for the training split, whose order
// and random transforms follow kiln's per-sample seeds: the same seed gives the same batches).
class PyLoader {
 public:
  explicit PyLoader(std::shared_ptr<data::DataLoader> loader) : loader_(std::move(loader)) {}
  std::unique_ptr<BatchIterator> Iter() {
    return std::make_unique<BatchIterator>(loader_, epoch_++);
  }
  int64_t Len() const { return loader_->num_batches(); }

 private:
  std::shared_ptr<data::DataLoader> loader_;
  int64_t epoch_ = 0;
};

// kiln's data module, built from a config node (cfg["data"]), with loaders for its splits.
class PyDataModule {
 public:
  PyDataModule(const py::dict& cfg, uint64_t seed) : seed_(seed) {
    config::Config config(FromPython(cfg, "data"));
    module_ = Released("the data module cannot be built",
                       [&] { return Take(Registry<data::DataModule>::Get().Instantiate(config)); });
  }
  PyLoader TrainLoader() {
    auto ds = Setup(
        data::Stage::kFit, [&] { return module_->train_dataset(); }, "training");
    return Loader(ds, data::RandomSampler(ds->size(), seed_));
  }
  PyLoader ValLoader() {
    auto ds = Setup(
        data::Stage::kFit, [&] { return module_->val_dataset(); }, "validation");
    return Loader(ds, data::SequentialSampler(ds->size()));
  }
  PyLoader TestLoader() {
    auto ds = Setup(
        data::Stage::kTest, [&] { return module_->test_dataset(); }, "test");
    return Loader(ds, data::SequentialSampler(ds->size()));
  }
  std::vector<std::string> ClassNames() const { return module_->class_names(); }

 private:
  template <typename F>
  std::shared_ptr<const data::Dataset> Setup(data::Stage stage, F&& split, const char* name) {
    return Released("setting the data up failed", [&] {
      if (!prepared_) {
        Check(module_->PrepareData());
        prepared_ = true;
      }
      Check(module_->Setup(stage));
      std::shared_ptr<const data::Dataset> ds = split();
      if (ds == nullptr)
        throw StatusError(std::string("this data module has no ") + name + " split");
      return ds;
    });
  }
  PyLoader Loader(std::shared_ptr<const data::Dataset> ds, std::shared_ptr<data::Sampler> sampler) {
    data::LoaderOptions options = module_->loader_options();
    options.seed = seed_;
    return PyLoader(std::make_shared<data::DataLoader>(std::move(ds), std::move(sampler), options));
  }

  std::shared_ptr<data::DataModule> module_;
  uint64_t seed_;
  bool prepared_ = false;
};

// A prediction as `kiln predict` writes it (class_index, class, probability; or text), plus every
// class's probability for a classifier.
py::dict PredictionDict(const Prediction& p) {
  py::dict out;
  for (const auto& [key, value] : p.fields) out[py::str(key)] = ToPython(*value);
  if (!p.probabilities.empty()) out["probabilities"] = p.probabilities;
  if (!p.source.empty()) out["source"] = p.source;
  return out;
}

// A Hugging Face model folder (config.json), not a kiln run or export folder.
bool IsHfFolder(const std::string& path) {
  return IsRegularFile(path + "/config.json") && !IsRegularFile(path + "/config.yaml") &&
         !IsDirectory(path + "/checkpoints");
}

// A Hugging Face language model folder as `kiln predict experiment=pretrained_lm
// model=FAMILY model.pretrained=DIR` composes it: the family from config.json's model_type, the
// weights and the tokenizer from the folder, the overrides on top.
absl::StatusOr<std::unique_ptr<Predictor>> LoadHfFolder(const std::string& path,
                                                        const PredictorOptions& options) {
  KILN_ASSIGN_OR_RETURN(HfConfig hf, HfConfig::Read(path));
  const std::string family = KilnModelFor(hf.model_type());
  if (family != "llama" && family != "gpt2") {
    return hf.Refuse("model_type",
                     "kiln.Predictor generates from the language models kiln reads (llama, "
                     "mistral, qwen2, qwen3, gpt2)");
  }
  std::vector<std::string> overrides = {"experiment=pretrained_lm", "model=" + family,
                                        "model.pretrained='" + AbsolutePath(path) + "'"};
  overrides.insert(overrides.end(), options.overrides.begin(), options.overrides.end());
  KILN_ASSIGN_OR_RETURN(ComposedJob job, ComposeJob(Request(overrides, "train", "")));
  return Predictor::FromConfig(job.cfg, "", options);
}

// kiln::Predictor from Python: raw inputs (image or audio bytes, texts) or already-prepared
// tensors.
class PyPredictor {
 public:
  PyPredictor(const std::string& path, const std::vector<std::string>& overrides,
              std::optional<std::string> quantize) {
    PredictorOptions options;
    options.overrides = overrides;
    options.quantize = std::move(quantize);
    predictor_ = Released("the model cannot be loaded", [&] {
      return Take(IsHfFolder(path) ? LoadHfFolder(path, options) : Predictor::Load(path, options));
    });
  }

  // One raw input: bytes (an image or audio file's contents) or str (a text).
  py::dict PredictOne(const py::object& raw) {
    std::string input = Raw(raw);
    Prediction p = Released(kPredictFailed, [&] { return Take(predictor_->Predict(input)); });
    return PredictionDict(p);
  }
  // Several raw inputs in one forward pass; a bad one raises, naming its position.
  py::list PredictMany(const py::list& raws) {
    std::vector<std::string> inputs;
    for (const auto& raw : raws) inputs.push_back(Raw(py::reinterpret_borrow<py::object>(raw)));
    std::vector<absl::StatusOr<Prediction>> answers = Released(kPredictFailed, [&] {
      std::vector<std::string_view> views(inputs.begin(), inputs.end());
      return predictor_->PredictBatch(views);
    });
    return Answers(answers);
  }
  // A batch of prepared inputs [B, ...] (what the data module's eval pipeline gives), as a tensor.
  py::list PredictTensor(const torch::Tensor& batch) {
    if (!batch.defined() || batch.dim() < 1 || batch.size(0) == 0) {
      throw StatusError(
          "Predictor.predict: a tensor batch needs a first (batch) dimension of at least 1");
    }
    std::vector<data::Example> examples;
    // No label (-1), as the data modules give a raw input.
    for (int64_t i = 0; i < batch.size(0); ++i)
      examples.push_back({batch[i], torch::tensor(int64_t{-1})});
    std::vector<absl::StatusOr<Prediction>> answers =
        Released(kPredictFailed, [&] { return predictor_->PredictPrepared(std::move(examples)); });
    return Answers(answers);
  }
  py::list PredictSplit() {
    std::vector<Prediction> answers =
        Released(kPredictFailed, [&] { return Take(predictor_->PredictSplit()); });
    py::list out;
    for (const auto& p : answers) out.append(PredictionDict(p));
    return out;
  }
  // generate(): the task's own prompt; generate("text", max_new_tokens=..., ...): the prompt and
  // its continuation; generate(["a", "b"], ...): a list, the prompts generated together.
  py::object Generate(const py::object& prompt, std::optional<int64_t> max_new_tokens,
                      std::optional<double> temperature, std::optional<int64_t> top_k,
                      std::optional<double> top_p, std::optional<double> repetition_penalty,
                      std::optional<std::vector<std::string>> stop, std::optional<int64_t> seed) {
    CompletionRequest request;
    request.max_tokens = max_new_tokens;
    request.temperature = temperature;
    request.top_k = top_k;
    request.top_p = top_p;
    request.repetition_penalty = repetition_penalty;
    request.stop = std::move(stop);
    request.seed = seed;
    request.echo = true;
    const bool options = max_new_tokens || temperature || top_k || top_p || repetition_penalty ||
                         request.stop || seed;
    if (prompt.is_none()) {
      if (options) throw py::value_error("generate: give the prompt the options are for");
      return py::str(Released("generating failed", [&] { return Take(predictor_->Generate()); }));
    }
    const bool one = py::isinstance<py::str>(prompt);
    request.prompts = one ? std::vector<std::string>{prompt.cast<std::string>()}
                          : prompt.cast<std::vector<std::string>>();
    std::vector<Completion> done =
        Released("generating failed", [&] { return Take(predictor_->Complete(request)); });
    if (one) return py::str(done.front().text);
    py::list out;
    for (const Completion& c : done) out.append(py::str(c.text));
    return out;
  }
  bool generates() const { return predictor_->generates(); }
  std::vector<std::string> ClassNames() const { return predictor_->class_names(); }

 private:
  static std::string Raw(const py::object& raw) {
    if (py::isinstance<py::bytes>(raw) || py::isinstance<py::str>(raw))
      return raw.cast<std::string>();
    throw StatusError(
        "Predictor.predict takes bytes (an image or audio file's contents), a str (a text), a list "
        "of them, or a torch.Tensor batch; not " +
        std::string(py::str(py::type::of(raw).attr("__name__"))));
  }
  static py::list Answers(const std::vector<absl::StatusOr<Prediction>>& answers) {
    py::list out;
    for (size_t i = 0; i < answers.size(); ++i) {
      if (!answers[i].ok()) {
        throw StatusError(absl::StrCat("input ", i, ": ", answers[i].status().message()));
      }
      out.append(PredictionDict(*answers[i]));
    }
    return out;
  }
  std::unique_ptr<Predictor> predictor_;
};

// A kiln model built by name from Python (kiln.instantiate): its forward and its parameters as
// torch tensors that share kiln's storage.
class PyModel {
 public:
  explicit PyModel(std::shared_ptr<Model> model) : model_(std::move(model)) {}
  torch::Tensor Forward(const torch::Tensor& input) {
    return Released("the model cannot take this input", [&] {
      torch::NoGradGuard no_grad;
      return model_->forward(input);
    });
  }
  std::map<std::string, torch::Tensor> StateDict() const {
    std::map<std::string, torch::Tensor> out;
    for (const auto& p : model_->named_parameters()) out[p.key()] = p.value();
    for (const auto& b : model_->named_buffers()) out[b.key()] = b.value();
    return out;
  }
  void Train(bool on) { model_->train(on); }
  int64_t NumParameters() const {
    int64_t n = 0;
    for (const auto& p : model_->parameters()) n += p.numel();
    return n;
  }

 private:
  std::shared_ptr<Model> model_;
};

// kiln.instantiate: a component from a config node with _target_ (Hydra's instantiate(cfg,
// **kwargs)): models, data modules and the kinds of python/components.h. Tasks, launchers,
// sweepers and prediction writers are built from a job's or a sweep's config.
py::object Instantiate(const py::dict& node, uint64_t seed, const py::object& params,
                       const py::object& optimizer, int64_t total_steps, int64_t steps_per_epoch,
                       int64_t num_classes) {
  config::Config cfg(FromPython(node, ""));
  std::string target = cfg.Get<std::string>("_target_").value_or("");
  if (target.empty()) throw StatusError("kiln.instantiate needs a config node with _target_");
  if (Registry<Model>::Get().Contains(target)) {
    std::shared_ptr<Model> built = Released(
        "kiln.instantiate failed", [&] { return Take(Registry<Model>::Get().Instantiate(cfg)); });
    return py::cast(PyModel(std::move(built)));
  }
  if (Registry<data::DataModule>::Get().Contains(target)) return py::cast(PyDataModule(node, seed));
  InstantiateArgs args{params, optimizer, total_steps, steps_per_epoch, num_classes};
  py::object component = InstantiateComponent(cfg, target, args);
  if (!component.is_none()) return component;
  std::vector<std::string> kinds;
  for (const auto& kind : RegistryHub::Instance().Kinds()) {
    auto names = RegistryHub::Instance().Names(kind);
    if (std::find(names.begin(), names.end(), target) != names.end()) kinds.push_back(kind);
  }
  throw StatusError(
      kinds.empty()
          ? absl::StrCat("kiln.instantiate: no component '", target, "' (kiln list shows them)")
          : absl::StrCat("kiln.instantiate: '", target, "' is a ", absl::StrJoin(kinds, "/"),
                         ", which kiln builds from the config of a job or a sweep (kiln.fit, "
                         "kiln.Trainer, kiln multirun)"));
}

// A built job, driven from Python; every call releases the GIL while kiln works.
class PyJob {
 public:
  static PyJob FromOverrides(const std::vector<std::string>& overrides,
                             const std::string& config_name, const std::string& config_dir,
                             bool evaluate) {
    auto purpose = evaluate ? Job::Purpose::kEvaluate : Job::Purpose::kFit;
    return PyJob(Released(kBuildFailed, [&] {
      return Take(Job::Compose(Request(overrides, config_name, config_dir), purpose));
    }));
  }
  // The run folder gets .hydra/config.yaml (what kiln report, kiln predict and read_run read).
  static PyJob FromDict(const py::dict& cfg, const std::string& output_dir, bool evaluate) {
    config::Config config(FromPython(cfg, ""));
    auto purpose = evaluate ? Job::Purpose::kEvaluate : Job::Purpose::kFit;
    return PyJob(Released(kBuildFailed, [&] {
      return Take(Job::FromConfigInRunFolder(config, output_dir, purpose));
    }));
  }

  // A callback or logger that kiln.instantiate built.
  void AddNative(const py::object& component) {
    if (auto callback = NativeCallback(component)) {
      Check(job_->AddCallback(std::move(callback)));
    } else if (auto logger = NativeLogger(component)) {
      Check(job_->AddLogger(std::move(logger)));
    } else {
      throw StatusError("a job takes kiln callbacks and loggers; this is a " +
                        std::string(py::str(py::type::of(component).attr("__name__"))));
    }
  }
  void AddCallback(py::object callback, const std::set<std::string>& hooks) {
    Check(job_->AddCallback(
        std::make_shared<PyCallback>(std::move(callback), hooks, callbacks_++, raised_)));
  }
  void Fit() {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = Guarded([&] { return job_->Fit(); });
    }
    Finish(status);
  }
  std::map<std::string, double> FitThenTest() {
    return Run([&] { return job_->FitThenTest(); });
  }
  std::map<std::string, double> Test() {
    return Run([&] { return job_->Test(); });
  }
  std::map<std::string, double> Validate() {
    return Run([&] { return job_->Validate(); });
  }
  std::string LoadCheckpoint(const std::string& which) {
    return Released("kiln.Trainer.load_checkpoint failed", [&] {
      return Take(job_->LoadCheckpoint(which, "kiln.Trainer.load_checkpoint"));
    });
  }
  std::string output_dir() const { return job_->output_dir(); }
  py::object config() const { return ToPython(*job_->config().node()); }

 private:
  explicit PyJob(std::unique_ptr<Job> job) : job_(std::move(job)) {}

  template <typename F>
  std::map<std::string, double> Run(F&& work) {
    absl::StatusOr<std::map<std::string, double>> result;
    {
      py::gil_scoped_release release;
      result = Guarded(work);
    }
    Finish(result.status());
    return *std::move(result);
  }
  // LibTorch throws (a model whose forward fails on the data's shape, ...): one line, as kiln's
  // command line says it, never a multi-line C++ message.
  template <typename F>
  static auto Guarded(F&& work) -> decltype(work()) {
    try {
      return work();
    } catch (const py::error_already_set&) {
      throw;
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("kiln's loop failed: ", ErrorLine(e.what())));
    }
  }
  // A Python callback's exception is raised again as it was (its traceback included); any other
  // failure is a KilnError.
  void Finish(const absl::Status& status) {
    if (*raised_ != nullptr) {
      std::unique_ptr<py::error_already_set> raised = std::move(*raised_);
      throw std::move(*raised);
    }
    // Ctrl-C (a notebook's stop button): kiln's loop stopped at a step boundary and wrote a
    // resumable last.ckpt; Python sees the KeyboardInterrupt it expects, with kiln's message.
    if (RequestedExitCode(status) == 128 + SIGINT) {
      PyErr_SetString(PyExc_KeyboardInterrupt, std::string(status.message()).c_str());
      throw py::error_already_set();
    }
    Check(status);
  }

  std::shared_ptr<Job> job_;
  int callbacks_ = 0;
  std::shared_ptr<std::unique_ptr<py::error_already_set>> raised_ =
      std::make_shared<std::unique_ptr<py::error_already_set>>();
};

py::object Compose(const std::string& config_name, const std::vector<std::string>& overrides,
                   const std::string& config_dir) {
  ComposedJob composed = Released("kiln.compose failed", [&] {
    return Take(ComposeJob(Request(overrides, config_name, config_dir)));
  });
  return ToPython(*composed.cfg.node());
}

}  // namespace
}  // namespace kiln::python

PYBIND11_MODULE(_kiln, m) {
  m.doc() = "kiln's native core (use the kiln package)";
  static py::exception<kiln::python::StatusError> error(m, "KilnError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kiln::python::StatusError& e) {
      py::set_error(error, e.what());
    }
  });
  m.attr("__version__") = kiln::run::Version();
  // kiln's log lines go to Python's sys.stderr, which a notebook shows (the process's stderr it
  // does not); until Python exits, then to stderr again.
  kiln::Logger::Instance().set_console_sink([](const std::string& line) {
    py::gil_scoped_acquire gil;
    try {
      py::object err = py::module_::import("sys").attr("stderr");
      if (!err.is_none()) {
        err.attr("write")(line);
        return;
      }
    } catch (const py::error_already_set&) {
    }
    std::fputs(line.c_str(), stderr);
  });
  py::module_::import("atexit").attr("register")(
      py::cpp_function([] { kiln::Logger::Instance().set_console_sink(nullptr); }));
  m.def("compose", &kiln::python::Compose, py::arg("config_name") = "train",
        py::arg("overrides") = std::vector<std::string>{}, py::arg("config_dir") = "",
        "The config `kiln train OVERRIDES` runs, composed with Hydra 1.3's semantics and resolved, "
        "as dicts.");
  m.def("default_config_dir", &kiln::run::DefaultConfigPath, "kiln's own configs folder.");
  m.def(
      "report_html",
      [](const std::vector<std::string>& paths, const std::string& page_dir,
         const std::string& title) {
        namespace report = kiln::report;
        if (!report::HaveChartingLibrary()) {
          throw kiln::python::StatusError(
              "this kiln was built without uPlot, the charting library of kiln report: run "
              "scripts/fetch_web_deps.sh, then cmake again");
        }
        std::string html;
        {
          py::gil_scoped_release release;
          auto collection = kiln::python::Take(report::ReadRuns(paths));
          html = report::ReportHtml(collection, page_dir, title);
        }
        return html;
      },
      py::arg("paths"), py::arg("page_dir"), py::arg("title"),
      "kiln report's page of these runs and sweeps, as HTML.");
  m.def(
      "load_yaml",
      [](const std::string& path) {
        return kiln::python::ToPython(*kiln::python::Take(kiln::config::LoadYamlFile(path)));
      },
      py::arg("path"),
      "A YAML file read as kiln reads configs (YAML 1.1 scalars, Hydra's typed keys).");
  // What a Python callback's hooks get as `trainer`: the loop's counters and a way to stop it.
  py::class_<kiln::Trainer>(m, "Trainer")
      .def_property_readonly("global_step", &kiln::Trainer::global_step)
      .def_property_readonly("current_epoch", &kiln::Trainer::current_epoch)
      .def_property_readonly("train_batches_per_epoch", &kiln::Trainer::train_batches_per_epoch)
      .def_property_readonly("max_epochs",
                             [](const kiln::Trainer& t) { return t.options().max_epochs; })
      .def_property_readonly("max_steps",
                             [](const kiln::Trainer& t) { return t.options().max_steps; })
      .def_property_readonly("callback_metrics", &kiln::Trainer::callback_metrics)
      .def("request_stop", &kiln::Trainer::RequestStopNow,
           py::arg("reason") = "a Python callback asked",
           "Stops the fit after the current optimizer step, with a resumable last.ckpt.");
  py::class_<kiln::python::BatchIterator>(m, "BatchIterator")
      .def(
          "__iter__",
          [](kiln::python::BatchIterator& it) -> kiln::python::BatchIterator& { return it; },
          py::return_value_policy::reference_internal)
      .def("__next__", &kiln::python::BatchIterator::Next);
  py::class_<kiln::python::PyLoader>(m, "Loader")
      .def("__iter__", &kiln::python::PyLoader::Iter, py::keep_alive<0, 1>())
      .def("__len__", &kiln::python::PyLoader::Len);
  py::class_<kiln::python::PyDataModule>(m, "DataModule")
      .def(py::init<const py::dict&, uint64_t>(), py::arg("cfg"), py::arg("seed") = 0)
      .def("train_loader", &kiln::python::PyDataModule::TrainLoader)
      .def("val_loader", &kiln::python::PyDataModule::ValLoader)
      .def("test_loader", &kiln::python::PyDataModule::TestLoader)
      .def_property_readonly("class_names", &kiln::python::PyDataModule::ClassNames);
  py::class_<kiln::python::PyPredictor>(m, "Predictor")
      .def(py::init<const std::string&, const std::vector<std::string>&,
                    std::optional<std::string>>(),
           py::arg("path"), py::arg("overrides") = std::vector<std::string>{},
           py::arg("quantize") = std::nullopt)
      .def("predict_one", &kiln::python::PyPredictor::PredictOne)
      .def("predict_many", &kiln::python::PyPredictor::PredictMany)
      .def("predict_tensor", &kiln::python::PyPredictor::PredictTensor)
      .def("predict_split", &kiln::python::PyPredictor::PredictSplit)
      .def("generate", &kiln::python::PyPredictor::Generate, py::arg("prompt") = py::none(),
           py::kw_only(), py::arg("max_new_tokens") = std::nullopt,
           py::arg("temperature") = std::nullopt, py::arg("top_k") = std::nullopt,
           py::arg("top_p") = std::nullopt, py::arg("repetition_penalty") = std::nullopt,
           py::arg("stop") = std::nullopt, py::arg("seed") = std::nullopt)
      .def_property_readonly("generates", &kiln::python::PyPredictor::generates)
      .def_property_readonly("class_names", &kiln::python::PyPredictor::ClassNames);
  py::class_<kiln::python::PyModel>(m, "Model")
      .def("__call__", &kiln::python::PyModel::Forward, py::arg("input"))
      .def("forward", &kiln::python::PyModel::Forward, py::arg("input"))
      .def("state_dict", &kiln::python::PyModel::StateDict)
      .def("train", &kiln::python::PyModel::Train, py::arg("mode") = true)
      .def("eval", [](kiln::python::PyModel& m) { m.Train(false); })
      .def_property_readonly("num_parameters", &kiln::python::PyModel::NumParameters);
  kiln::python::BindComponents(m);
  m.def("instantiate", &kiln::python::Instantiate, py::arg("node"), py::arg("seed") = 0,
        py::kw_only(), py::arg("params") = py::none(), py::arg("optimizer") = py::none(),
        py::arg("total_steps") = 0, py::arg("steps_per_epoch") = 0, py::arg("num_classes") = 0,
        "A component from a config node with _target_: a model, a data module (seed), an optimizer "
        "(params=), a scheduler (optimizer=, total_steps=, steps_per_epoch=), a loss, a metric "
        "(num_classes=), a transform, a tokenizer or an audio feature extractor.");
  py::class_<kiln::python::PyJob>(m, "Job")
      .def_static("from_overrides", &kiln::python::PyJob::FromOverrides, py::arg("overrides"),
                  py::arg("config_name") = "train", py::arg("config_dir") = "",
                  py::arg("evaluate") = false)
      .def_static("from_dict", &kiln::python::PyJob::FromDict, py::arg("cfg"),
                  py::arg("output_dir"), py::arg("evaluate") = false)
      .def("add_callback", &kiln::python::PyJob::AddCallback, py::arg("callback"), py::arg("hooks"))
      .def("add_native", &kiln::python::PyJob::AddNative, py::arg("component"))
      .def("fit", &kiln::python::PyJob::Fit)
      .def("fit_then_test", &kiln::python::PyJob::FitThenTest)
      .def("test", &kiln::python::PyJob::Test)
      .def("validate", &kiln::python::PyJob::Validate)
      .def("load_checkpoint", &kiln::python::PyJob::LoadCheckpoint, py::arg("which"))
      .def_property_readonly("output_dir", &kiln::python::PyJob::output_dir)
      .def_property_readonly("config", &kiln::python::PyJob::config);
}
