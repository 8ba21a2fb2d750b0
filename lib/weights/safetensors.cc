#include "lib/weights/safetensors.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/files.h"
#include "lib/base/status_macros.h"

namespace kiln {
namespace {

const std::vector<std::pair<std::string, torch::ScalarType>>& DtypeNames() {
  static const auto* names = new std::vector<std::pair<std::string, torch::ScalarType>>{
      {"F32", torch::kFloat32},   {"F64", torch::kFloat64}, {"F16", torch::kFloat16},
      {"BF16", torch::kBFloat16}, {"I64", torch::kInt64},   {"I32", torch::kInt32},
      {"I16", torch::kInt16},     {"I8", torch::kInt8},     {"U8", torch::kUInt8},
      {"BOOL", torch::kBool}};
  return *names;
}

}  // namespace

std::vector<std::pair<std::string, torch::Tensor>> StateDict(torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> state;
  for (const auto& p : module.named_parameters()) state.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers()) state.emplace_back(b.key(), b.value());
  return state;
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  std::vector<torch::Tensor> contiguous;
  for (const auto& [name, tensor] : tensors) {
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    std::string dtype;
    for (const auto& [n, type] : DtypeNames()) {
      if (type == t.scalar_type()) dtype = n;
    }
    if (dtype.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": cannot store '", name, "' of type ",
                                                     c10::toString(t.scalar_type()),
                                                     " in safetensors"));
    }
    size_t begin = data.size();
    data.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
    header[name] = {
        {"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8,
              ' ');  // keeps the data 8-byte aligned, as the reference writer does
  uint64_t n = json.size();
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i)
    file[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  file += json;
  file += data;
  return WriteFileAtomically(path, file);
}

absl::StatusOr<std::map<std::string, torch::Tensor>> ReadSafetensors(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a valid safetensors file (", what, ")"));
  };
  if (bytes.size() < 8) return bad("too short");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  if (n > bytes.size() - 8) return bad("header longer than the file");
  nlohmann::json header =
      nlohmann::json::parse(bytes.substr(8, n), nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return bad("header is not a JSON object");
  const char* data = bytes.data() + 8 + n;
  size_t data_size = bytes.size() - 8 - n;
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") ||
        !info.contains("data_offsets")) {
      return bad(absl::StrCat("entry '", name, "' lacks dtype, shape or data_offsets"));
    }
    torch::ScalarType type = torch::kFloat32;
    bool known = false;
    for (const auto& [n2, t] : DtypeNames()) {
      if (info["dtype"].is_string() && info["dtype"].get<std::string>() == n2) {
        type = t;
        known = true;
      }
    }
    if (!known) return bad(absl::StrCat("unsupported dtype of '", name, "'"));
    // The shape and offsets are checked against the file before anything is allocated: a header
    // of a few bytes can claim any shape.
    if (!info["shape"].is_array()) return bad(absl::StrCat("bad shape of '", name, "'"));
    std::vector<int64_t> shape;
    uint64_t nbytes = torch::elementSize(type);
    for (const auto& d : info["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 62)) {
        return bad(absl::StrCat("bad shape of '", name, "'"));
      }
      shape.push_back(d.get<int64_t>());
      if (__builtin_mul_overflow(nbytes, d.get<uint64_t>(), &nbytes)) nbytes = UINT64_MAX;
    }
    const auto& offsets = info["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      return bad(absl::StrCat("bad data_offsets of '", name, "'"));
    }
    uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (end < begin || end > data_size || end - begin != nbytes) {
      return bad(absl::StrCat("data of '", name, "' does not fit its shape or the file"));
    }
    torch::Tensor t = torch::empty(shape, type);
    if (nbytes > 0) std::memcpy(t.data_ptr(), data + begin, nbytes);
    tensors[name] = t;
  }
  return tensors;
}

}  // namespace kiln
