#include "lib/trainer/connectors/checkpoint_connector.h"

#include <cxxabi.h>

#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>
#include <typeinfo>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/weights/checkpoint.h"

namespace kiln {

std::string Callback::state_key() const {
  int status = 0;
  char* demangled = abi::__cxa_demangle(typeid(*this).name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : typeid(*this).name();
  std::free(demangled);
  // "kiln::(anonymous namespace)::ModelCheckpoint" -> "ModelCheckpoint"
  size_t colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

namespace {

// The archive keys of the callbacks' states: "callbacks/" + state_key, made safe for an archive
// name (letters, digits, '_', '/'); a second callback with the same key gets "_2", and so on.
std::vector<std::string> CallbackStateKeys(
    const std::vector<std::shared_ptr<Callback>>& callbacks) {
  std::vector<std::string> keys;
  std::map<std::string, int> seen;
  for (const auto& c : callbacks) {
    std::string key = c->state_key();
    for (char& ch : key) {
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '/') ch = '_';
    }
    int n = ++seen[key];
    keys.push_back(absl::StrCat("callbacks/", key, n > 1 ? absl::StrCat("_", n) : ""));
  }
  return keys;
}

// The loop counters, by archive key.
std::vector<std::pair<const char*, int64_t*>> Counters(LoopPosition& loop) {
  return {{"loop/global_step", &loop.global_step},
          {"loop/epoch", &loop.epoch},
          {"loop/batch_in_epoch", &loop.batch_in_epoch},
          {"loop/micro_batches", &loop.micro_batches},
          {"loop/samples", &loop.samples}};
}

// Refuses a checkpoint written for another model, then loads its weights.
absl::Status LoadSameModel(const std::string& path, torch::serialize::InputArchive& archive,
                           Task& task, const std::string& model_name) {
  c10::IValue stored_name;
  if (!model_name.empty() && archive.try_read("meta/model", stored_name) &&
      stored_name.isString() && !stored_name.toStringRef().empty() &&
      stored_name.toStringRef() != model_name) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": checkpoint of model '", stored_name.toStringRef(),
                     "', but the config builds model '", model_name, "'"));
  }
  KILN_ASSIGN_OR_RETURN(auto state, ReadModelState(archive, path));
  return LoadModelState(state, task.module(), path, StoredFrozenDigest(archive));
}

}  // namespace

absl::Status SaveFitCheckpoint(const std::string& path, const FitParts& parts,
                               const LoopPosition& position,
                               const std::function<void(torch::serialize::OutputArchive&)>& extra) {
  LoopPosition loop = position;
  return WriteCheckpoint(path, [&](torch::serialize::OutputArchive& archive) {
    WriteCheckpointMeta(archive, parts.model_name, parts.config_yaml);
    if (extra) extra(archive);
    std::map<std::string, torch::Tensor> replaced;
    for (const auto& c : *parts.callbacks) {
      replaced = c->CheckpointModelState();
      if (!replaced.empty()) break;
    }
    if (replaced.empty() && !parts.frozen_digest.empty()) {
      WriteTrainedModelState(parts.task->module(), parts.frozen_digest, archive);
    } else if (replaced.empty()) {
      WriteModelState(parts.task->module(), archive);
    } else {
      WriteModelState(replaced, archive);
    }
    if (parts.optimizer != nullptr) {
      torch::serialize::OutputArchive opt;
      parts.optimizer->save(opt);
      archive.write("optimizer", opt);
    }
    if (parts.scaler != nullptr) parts.scaler->Save(archive);
    if (parts.scheduler != nullptr) {
      torch::serialize::OutputArchive sched;
      parts.scheduler->Save(sched);
      archive.write("scheduler", sched);
    }
    for (const auto& [key, counter] : Counters(loop)) archive.write(key, c10::IValue(*counter));
    archive.write("loop/elapsed_seconds", c10::IValue(loop.elapsed_seconds));
    archive.write("loop/seed", c10::IValue(loop.seed));
    archive.write("loop/world_size", c10::IValue(loop.world_size));
    archive.write("loop/batch_size", c10::IValue(loop.batch_size));
    archive.write("rng/cpu", at::detail::getDefaultCPUGenerator().get_state());
    const auto& callbacks = *parts.callbacks;
    std::vector<std::string> keys = CallbackStateKeys(callbacks);
    for (size_t i = 0; i < callbacks.size(); ++i) {
      torch::serialize::OutputArchive state;
      callbacks[i]->SaveState(state);
      archive.write(keys[i], state);
    }
  });
}

absl::StatusOr<LoopPosition> RestoreFitCheckpoint(
    const std::string& path, const FitParts& parts,
    const std::function<void(torch::nn::Module&)>& place_module,
    const std::function<absl::Status()>& callbacks_restored, int64_t batch_size) {
  torch::serialize::InputArchive archive;
  KILN_RETURN_IF_ERROR(ReadCheckpointFor(path, parts.task->module(), &archive));
  KILN_RETURN_IF_ERROR(LoadSameModel(path, archive, *parts.task, parts.model_name));
  LoopPosition loop;
  try {
    place_module(parts.task->module());
    // By state key; a callback the checkpoint does not know starts fresh. Checkpoints written
    // before state keys hold callbacks by list position.
    const auto& callbacks = *parts.callbacks;
    std::vector<std::string> keys = CallbackStateKeys(callbacks);
    bool keyed = false;
    for (size_t i = 0; i < callbacks.size(); ++i) {
      torch::serialize::InputArchive state;
      if (archive.try_read(keys[i], state)) {
        callbacks[i]->LoadState(state);
        keyed = true;
      }
    }
    for (size_t i = 0; i < callbacks.size() && !keyed; ++i) {
      torch::serialize::InputArchive state;
      if (archive.try_read(absl::StrCat("callbacks/", i), state)) callbacks[i]->LoadState(state);
    }
    KILN_RETURN_IF_ERROR(callbacks_restored());
    // The optimizer's state goes where its parameters are: LibTorch's Optimizer::load keeps each
    // tensor on the device the archive holds it on, so on a GPU the state is read from a copy of
    // the archive loaded there (the main one is on the CPU, as the checkpoint may come from a GPU).
    torch::serialize::InputArchive opt;
    torch::serialize::InputArchive on_device;
    torch::serialize::InputArchive* optimizer_archive = &archive;
    std::vector<torch::Tensor> parameters = parts.task->module().parameters();
    if (parts.optimizer != nullptr && !parameters.empty() && !parameters[0].is_cpu()) {
      KILN_RETURN_IF_ERROR(
          ReadCheckpointFor(path, parts.task->module(), &on_device, parameters[0].device()));
      optimizer_archive = &on_device;
    }
    if (parts.optimizer != nullptr && optimizer_archive->try_read("optimizer", opt))
      parts.optimizer->load(opt);
    torch::serialize::InputArchive sched;
    if (parts.scheduler != nullptr && archive.try_read("scheduler", sched))
      parts.scheduler->Load(sched);
    if (parts.scaler != nullptr) parts.scaler->Load(archive);
    c10::IValue v;
    for (const auto& [key, counter] : Counters(loop)) {
      archive.read(key, v);
      *counter = v.toInt();
    }
    archive.read("loop/elapsed_seconds", v);
    loop.elapsed_seconds = v.toDouble();
    loop.seed = archive.try_read("loop/seed", v) ? v.toInt() : 0;
    loop.world_size = archive.try_read("loop/world_size", v) ? v.toInt() : 1;
    loop.batch_size = archive.try_read("loop/batch_size", v) ? v.toInt() : batch_size;
    torch::Tensor rng;
    archive.read("rng/cpu", rng);
    at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
    {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_state(rng);
    }
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot resume from this checkpoint: ", e.what_without_backtrace()));
  }
  return loop;
}

absl::Status LoadCheckpointWeights(const std::string& path, Task& task,
                                   const std::string& model_name) {
  torch::serialize::InputArchive archive;
  KILN_RETURN_IF_ERROR(ReadCheckpoint(path, &archive));
  return LoadSameModel(path, archive, task, model_name);
}

}  // namespace kiln
