#include "lib/weights/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <new>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "lib/base/error_text.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"
#include "lib/base/torch_compat.h"
#include "lib/weights/lazy_archive.h"
#include "lib/weights/sharded_checkpoint.h"

namespace kiln {

absl::Status WriteCheckpoint(const std::string& path,
                             const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  // A sharded checkpoint (a folder) in the way: the file is written beside it first, then takes
  // its place, so that a failed write leaves the folder whole.
  if (IsShardedCheckpoint(path)) {
    const std::string whole = path + ".whole", previous = path + ".previous";
    KILN_RETURN_IF_ERROR(WriteCheckpoint(whole, fill));
    std::error_code error;
    std::filesystem::remove_all(previous, error);
    std::filesystem::rename(path, previous, error);
    if (!error) std::filesystem::rename(whole, path, error);
    if (error) {
      return absl::DataLossError(
          absl::StrCat(path, ": cannot put the checkpoint in place: ", error.message()));
    }
    std::filesystem::remove_all(previous, error);
    return absl::OkStatus();
  }
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

namespace {
// A checkpoint that does not fit in the memory left: what and how big, in one line.
absl::Status OutOfMemory(const std::string& path, int64_t bytes) {
  return absl::ResourceExhaustedError(
      absl::StrCat(path, ": out of memory reading this checkpoint (", bytes >> 20,
                   " MB; it needs that much beside what the process holds)"));
}
}  // namespace

absl::Status ReadCheckpoint(const std::string& path, torch::serialize::InputArchive* archive,
                            torch::Device device) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint"));
  // trainer.strategy=fsdp writes a folder of pieces: read as the whole checkpoint they make.
  if (S_ISDIR(st.st_mode)) {
    if (IsShardedCheckpoint(path)) return ReadShardedCheckpoint(path, archive, device);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a folder without meta.json, not a checkpoint (nor a sharded one)"));
  }
  // LibTorch's loader throws c10::Error, and torch::jit::ErrorReport (a std::exception, not a
  // c10::Error) for a type it cannot parse in a corrupt archive.
  const auto corrupt = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a readable kiln checkpoint (corrupt or truncated)"));
  };
  c10::IValue format;
  bool has_format = false;
  try {
    if (!ArchiveClaimsFit(path, static_cast<uint64_t>(st.st_size))) return corrupt();
    archive->load_from(path, device);
    has_format = archive->try_read("meta/format", format);
  } catch (const std::exception& e) {
    // Running out of memory (LibTorch's allocator says so in a c10::Error) is not a corrupt file.
    if (IsOutOfMemory(e)) return OutOfMemory(path, st.st_size);
    return corrupt();
  }
  return CheckCheckpointFormat(path,
                               has_format ? std::optional<c10::IValue>(format) : std::nullopt);
}

absl::Status CheckCheckpointFormat(const std::string& path,
                                   const std::optional<c10::IValue>& format) {
  if (!format || !format->isInt()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a kiln checkpoint (no meta/format)"));
  }
  if (format->toInt() > kCheckpointFormat) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": written by a newer kiln (checkpoint format ", format->toInt(),
                     ", this build reads up to ", kCheckpointFormat, ")"));
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
void WriteNamed(
    torch::serialize::OutputArchive& archive,
    const std::function<void(const std::function<void(const std::string&, const torch::Tensor&)>&)>&
        each) {
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

void WriteModelState(const std::map<std::string, torch::Tensor>& state,
                     torch::serialize::OutputArchive& archive) {
  WriteNamed(archive, [&](const auto& put) {
    for (const auto& [name, t] : state) put(name, t);
  });
}

void WriteTrainedModelState(torch::nn::Module& module, const std::string& frozen_digest,
                            torch::serialize::OutputArchive& archive) {
  WriteNamed(archive, [&](const auto& put) {
    for (const auto& p : module.named_parameters())
      if (p.value().requires_grad()) put(p.key(), p.value());
    for (const auto& b : module.named_buffers()) put(b.key(), b.value());
  });
  archive.write("meta/frozen_digest", c10::IValue(frozen_digest));
}

std::string FrozenDigest(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over the names, shapes and bit sums
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xFF;
      h *= 1099511628211ULL;
    }
  };
  int64_t count = 0;
  for (const auto& p : module.named_parameters()) {
    const torch::Tensor& t = p.value();
    if (t.requires_grad()) continue;
    ++count;
    for (char c : p.key()) mix(static_cast<unsigned char>(c));
    for (int64_t size : t.sizes()) mix(static_cast<uint64_t>(size));
    // The bits as integers of the element's width, summed exactly in int64 (wrapping): the same
    // on any thread count, where a floating sum is not.
    torch::Tensor flat = t.detach().to(torch::kCPU).contiguous().view({-1});
    const size_t width = flat.element_size();
    torch::ScalarType bits = width == 8   ? torch::kInt64
                             : width == 4 ? torch::kInt32
                             : width == 2 ? torch::kInt16
                                          : torch::kInt8;
    mix(static_cast<uint64_t>(flat.view(bits).sum(torch::kInt64).item<int64_t>()));
  }
  return absl::StrFormat("%d:%016x", count, h);
}

std::string StoredFrozenDigest(torch::serialize::InputArchive& archive) {
  c10::IValue digest;
  try {
    if (archive.try_read("meta/frozen_digest", digest) && digest.isString())
      return digest.toStringRef();
  } catch (const c10::Error&) {
  }
  return "";
}

absl::StatusOr<std::map<std::string, torch::Tensor>> ReadModelState(
    torch::serialize::InputArchive& archive, const std::string& path) {
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
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": truncated model weights at '", name, "'"));
      }
      state[std::string(name)] = t;
    }
    // Pieces read straight into their parameters (PieceRows::into): undefined, left alone.
    c10::IValue read_into;
    if (archive.try_read(kPiecesReadInto, read_into) && read_into.isString()) {
      for (absl::string_view name :
           absl::StrSplit(read_into.toStringRef(), '\n', absl::SkipEmpty()))
        state[std::string(name)] = torch::Tensor();
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": corrupt model weights in the checkpoint"));
  }
  return state;
}

namespace {
PieceRowsOf& RowsOf() {
  static PieceRowsOf rows_of;
  return rows_of;
}
}  // namespace

void SetPieceRowsOf(PieceRowsOf rows_of) { RowsOf() = std::move(rows_of); }

absl::Status ReadCheckpointFor(const std::string& path, torch::nn::Module& module,
                               torch::serialize::InputArchive* archive, torch::Device device) {
  std::map<std::string, PieceRows> pieces;
  if (RowsOf() && IsShardedCheckpoint(path)) {
    for (const auto& p : module.named_parameters()) {
      if (std::optional<PieceRows> rows = RowsOf()(p.value())) {
        pieces[p.key()] = *rows;
        pieces[p.key()].into = p.value();
      }
    }
  }
  if (pieces.empty()) return ReadCheckpoint(path, archive, device);
  return ReadShardedCheckpoint(path, archive, device, pieces);
}

absl::Status LoadModelState(const std::map<std::string, torch::Tensor>& state,
                            torch::nn::Module& module, const std::string& path,
                            const std::string& frozen_digest) {
  torch::NoGradGuard no_grad;
  if (!frozen_digest.empty() && FrozenDigest(module) != frozen_digest) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": holds LoRA adapters trained beside other frozen weights than those this config loads "
        "(did the model.pretrained or model.init_from files change?)"));
  }
  auto copy = [&](const std::string& name, torch::Tensor& target, bool parameter) -> absl::Status {
    auto it = state.find(name);
    // Read straight into the parameter (a sharded checkpoint's piece: PieceRows::into).
    if (it != state.end() && !it->second.defined() && parameter) return absl::OkStatus();
    if (it == state.end() && parameter && !frozen_digest.empty() && !target.requires_grad()) {
      return absl::OkStatus();  // a frozen base parameter: the config loaded it
    }
    if (it == state.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": checkpoint of another model: no '", name, "'"));
    }
    if (it->second.sizes() != target.sizes()) {
      // A table this worker holds a piece of (several workers, sharded_tables.h): its rows, those
      // past the whole's end zero.
      const std::optional<PieceRows> rows = RowsOf() ? RowsOf()(target) : std::nullopt;
      const torch::Tensor& whole = it->second;
      if (rows && whole.dim() == target.dim() && whole.dim() >= 1 && whole.size(0) == rows->whole &&
          rows->count == target.size(0) && whole.sizes().slice(1) == target.sizes().slice(1)) {
        target.zero_();
        const int64_t begin = std::min(rows->first, rows->whole);
        const int64_t end = std::min(rows->first + rows->count, rows->whole);
        if (end > begin)
          target.narrow(0, 0, end - begin).copy_(whole.narrow(0, begin, end - begin));
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": checkpoint of another model: '", name, "' is ", c10::str(it->second.sizes()),
          " there and ", c10::str(target.sizes()), " here"));
    }
    target.copy_(it->second);
    return absl::OkStatus();
  };
  for (auto& p : module.named_parameters()) {
    if (auto st = copy(p.key(), p.value(), true); !st.ok()) return st;
  }
  for (auto& b : module.named_buffers()) {
    if (auto st = copy(b.key(), b.value(), false); !st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace kiln
