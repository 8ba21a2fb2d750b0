#include "lib/trainer/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/core/error_text.h"
#include "lib/core/files.h"
#include "lib/core/torch_compat.h"

namespace kiln {
absl::Status WriteCheckpoint(const std::string& path,
                             const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  // LibTorch writes through kiln's sink, not to a file of its own: its file writer, failing
  // (a full disk), throws again from its destructor and ends the process.
  return WriteFileAtomically(path, [&](const ByteSink& sink) -> absl::Status {
    try {
      torch::serialize::OutputArchive archive;
      fill(archive);
      archive.save_to([&](const void* data, size_t size) {
        sink(data, size);
        return size;
      });
    } catch (const c10::Error& e) {
      return absl::DataLossError(
          absl::StrCat(path, ": cannot write checkpoint: ", ErrorLine(e.what_without_backtrace())));
    } catch (const std::exception& e) {
      return absl::DataLossError(
          absl::StrCat(path, ": cannot write checkpoint: ", ErrorLine(e.what())));
    }
    return absl::OkStatus();
  });
}

absl::Status ReadCheckpoint(const std::string& path, torch::serialize::InputArchive* archive) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint"));
  // LibTorch's loader throws c10::Error, and torch::jit::ErrorReport (a std::exception, not a
  // c10::Error) for a type it cannot parse in a corrupt archive.
  c10::IValue format;
  bool has_format = false;
  try {
    archive->load_from(path);
    has_format = archive->try_read("meta/format", format);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a readable kiln checkpoint (corrupt or truncated)"));
  }
  if (!has_format || !format.isInt()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a kiln checkpoint (no meta/format)"));
  }
  if (format.toInt() > kCheckpointFormat) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": written by a newer kiln (checkpoint format ",
                                                      format.toInt(), ", this build reads up to ",
                                                      kCheckpointFormat, ")"));
  }
  return absl::OkStatus();
}

void WriteCheckpointMeta(torch::serialize::OutputArchive& archive, const std::string& model_name,
                         const std::string& config_yaml) {
  archive.write("meta/format", c10::IValue(kCheckpointFormat));
  archive.write("meta/kiln_version", c10::IValue(std::string(KILN_VERSION)));
  archive.write("meta/torch_version", c10::IValue(compat::TorchVersion()));
  archive.write("meta/model", c10::IValue(model_name));
  archive.write("meta/config", c10::IValue(config_yaml));
}

namespace {

// Writes "model/I" per tensor and "model/names", one name a line, as `each` hands them over.
void WriteNamed(torch::serialize::OutputArchive& archive,
                const std::function<void(const std::function<void(const std::string&, const torch::Tensor&)>&)>& each) {
  std::string names;
  int64_t i = 0;
  each([&](const std::string& name, const torch::Tensor& t) {
    names += name + "\n";
    // bf16-true's bf16 weights are stored float32 (exact), so every checkpoint loads anywhere.
    torch::Tensor stored = t.detach().to(torch::kCPU);
    archive.write(absl::StrCat("model/", i++),
                  stored.scalar_type() == torch::kBFloat16 ? stored.to(torch::kFloat32) : stored);
  });
  archive.write("model/names", c10::IValue(names));
}

}  // namespace

void WriteModelState(torch::nn::Module& module, torch::serialize::OutputArchive& archive) {
  WriteNamed(archive, [&](const auto& put) {
    for (const auto& p : module.named_parameters()) put(p.key(), p.value());
    for (const auto& b : module.named_buffers()) put(b.key(), b.value());
  });
}

void WriteModelState(const std::map<std::string, torch::Tensor>& state, torch::serialize::OutputArchive& archive) {
  WriteNamed(archive, [&](const auto& put) {
    for (const auto& [name, t] : state) put(name, t);
  });
}

absl::StatusOr<std::map<std::string, torch::Tensor>> ReadModelState(torch::serialize::InputArchive& archive,
                                                                   const std::string& path) {
  c10::IValue names;
  std::map<std::string, torch::Tensor> state;
  try {  // a corrupt archive can throw from a read (see ReadCheckpoint)
    if (!archive.try_read("model/names", names) || !names.isString()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": checkpoint has no model weights"));
    }
    int64_t i = 0;
    for (absl::string_view name : absl::StrSplit(names.toStringRef(), '\n', absl::SkipEmpty())) {
      torch::Tensor t;
      if (!archive.try_read(absl::StrCat("model/", i++), t)) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": truncated model weights at '", name, "'"));
      }
      state[std::string(name)] = t;
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": corrupt model weights in the checkpoint"));
  }
  return state;
}

absl::Status LoadModelState(const std::map<std::string, torch::Tensor>& state, torch::nn::Module& module,
                            const std::string& path) {
  torch::NoGradGuard no_grad;
  auto copy = [&](const std::string& name, torch::Tensor& target) -> absl::Status {
    auto it = state.find(name);
    if (it == state.end()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": checkpoint of another model: no '", name, "'"));
    }
    if (it->second.sizes() != target.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": checkpoint of another model: '", name, "' is ",
                                                     c10::str(it->second.sizes()), " there and ",
                                                     c10::str(target.sizes()), " here"));
    }
    target.copy_(it->second);
    return absl::OkStatus();
  };
  for (auto& p : module.named_parameters()) {
    if (auto st = copy(p.key(), p.value()); !st.ok()) return st;
  }
  for (auto& b : module.named_buffers()) {
    if (auto st = copy(b.key(), b.value()); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace kiln
