#include "lib/weights/lazy_archive.h"

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/storage_context.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/error_text.h"

namespace kiln {
namespace {

// Whether every length a pickle's opcodes claim fits in the bytes that follow it. LibTorch's
// unpickler allocates and zero-fills a claimed length before it reads it (4 GB, and seconds of
// work, from a 300-byte corrupt file), and grows its memo table to whatever id a LONG_BINPUT
// names (10 GB): fuzz/regressions/checkpoint/. Opcodes with no argument or fixed-size arguments
// are stepped over; at an opcode this does not know the check ends and the unpickler judges the
// rest.
bool PickleLengthsFit(const uint8_t* p, size_t n) {
  size_t i = 0;
  auto take = [&](size_t bytes) {
    if (n - i < bytes) return false;
    i += bytes;
    return true;
  };
  auto claimed = [&](size_t width) {  // a little-endian length of `width` bytes, then its bytes
    if (n - i < width) return false;
    uint64_t len = 0;
    for (size_t k = 0; k < width; ++k) len |= uint64_t{p[i + k]} << (8 * k);
    i += width;
    return take(len > n ? n + 1 : static_cast<size_t>(len));
  };
  auto lines = [&](int count) {  // newline-terminated arguments (GLOBAL, INT, ...)
    for (; count > 0; --count) {
      const void* nl = std::memchr(p + i, '\n', n - i);
      if (nl == nullptr) return false;
      i = static_cast<const uint8_t*>(nl) - p + 1;
    }
    return true;
  };
  while (i < n) {
    const uint8_t op = p[i++];
    bool ok = true;
    switch (op) {
      case '.': return true;  // STOP
      case '(':
      case '0':
      case '1':
      case '2':
      case 'N':
      case ')':
      case ']':
      case '}':
      case 'a':
      case 'e':
      case 'l':
      case 'd':
      case 's':
      case 'u':
      case 't':
      case 'R':
      case 'b':
      case 'o':
      case 'Q':
      case 0x81:
      case 0x85:
      case 0x86:
      case 0x87:
      case 0x88:
      case 0x89:
      case 0x90:
      case 0x91:
      case 0x92:
      case 0x93:
      case 0x94:
      case 0x97:
      case 0x98: break;
      case 0x80:
      case 'K':
      case 'h':
      case 'q':
      case 0x82: ok = take(1); break;
      case 'M':
      case 0x83: ok = take(2); break;
      case 'J':
      case 'j':
      case 0x84: ok = take(4); break;
      case 'r': {  // LONG_BINPUT: the unpickler grows its memo to the id; kiln's pickler counts
                   // from 0
        uint64_t id = 0;
        for (size_t k = 0; k < 4 && i + k < n; ++k) id |= uint64_t{p[i + k]} << (8 * k);
        ok = id <= n && take(4);
        break;
      }
      case 'G':
      case 0x95: ok = take(8); break;
      case 0x8c:
      case 'C':
      case 'U':
      case 0x8a: ok = claimed(1); break;
      case 'X':
      case 'B':
      case 'T':
      case 0x8b: ok = claimed(4); break;
      case 0x8d:
      case 0x8e:
      case 0x96: ok = claimed(8); break;
      case 'c':
      case 'i': ok = lines(2); break;
      case 'I':
      case 'L':
      case 'F':
      case 'S':
      case 'V':
      case 'P':
      case 'g':
      case 'p': ok = lines(1); break;
      default: return true;
    }
    if (!ok) return false;
  }
  return true;
}

constexpr char kTensorRecords[] = "data/";

}  // namespace

bool ArchiveClaimsFit(const std::string& path, uint64_t file_size) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  for (const std::string& name : reader.getAllRecords()) {
    if (reader.getRecordSize(name) > file_size) return false;
    // The layout's pickles, and the code's source ranges (code/*.debug_pkl), which the loader
    // unpickles when it reports an error in the code.
    if (absl::EndsWith(name, ".pkl") || absl::EndsWith(name, ".debug_pkl")) {
      auto [data, size] = reader.getRecord(name);
      if (!PickleLengthsFit(static_cast<const uint8_t*>(data.get()), size)) return false;
    }
  }
  return true;
}

absl::StatusOr<std::unique_ptr<LazyArchive>> LazyArchive::Open(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint"));
  std::unique_ptr<LazyArchive> archive(new LazyArchive());
  archive->path_ = path;
  try {
    if (!ArchiveClaimsFit(path, static_cast<uint64_t>(st.st_size))) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a readable kiln checkpoint (corrupt or truncated)"));
    }
    caffe2::serialize::PyTorchStreamReader reader(path);
    // Plain variables, not a structured binding: the reader lambda captures them (clang 14).
    at::DataPtr pickle;
    size_t pickle_size = 0;
    std::tie(pickle, pickle_size) = reader.getRecord("data.pkl");
    const char* bytes = static_cast<const char*>(pickle.get());
    size_t at = 0;
    auto read = [&](char* into, size_t n) -> size_t {
      n = std::min(n, pickle_size - at);
      std::memcpy(into, bytes + at, n);
      at += n;
      return n;
    };
    // Classes get a type of their own per object, with the attributes its state holds (the
    // archive's code/ is not compiled); other type names (restored list and dict tags) parse.
    auto unit = std::make_shared<torch::jit::CompilationUnit>();
    auto resolve = [&](const c10::QualifiedName& name) -> c10::StrongTypePtr {
      if (absl::StartsWith(name.qualifiedName(), "__torch__."))
        return c10::StrongTypePtr(unit, c10::ClassType::create(name, unit));
      return c10::StrongTypePtr(unit,
                                torch::jit::Unpickler::defaultTypeParser(name.qualifiedName()));
    };
    int64_t classes = 0;
    auto load = [&](const c10::StrongTypePtr&,
                    c10::IValue state) -> c10::intrusive_ptr<c10::ivalue::Object> {
      auto type = c10::ClassType::create(
          c10::QualifiedName("__torch__", absl::StrCat("LazyArchive", classes++)), unit);
      std::vector<c10::IValue> slots;
      for (const auto& item : state.toGenericDict()) {
        type->addAttribute(item.key().toStringRef(), item.value().type());
        slots.push_back(item.value());
      }
      auto object = c10::ivalue::Object::create(c10::StrongTypePtr(unit, type), slots.size());
      for (size_t i = 0; i < slots.size(); ++i) object->setSlot(i, std::move(slots[i]));
      return object;
    };
    // No storage is read: each one is its size with no bytes, kept in `storages` by its record.
    auto no_bytes = [](const std::string&) { return at::DataPtr(); };
    auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
    torch::jit::Unpickler unpickler(read, resolve, load, no_bytes, at::Device(at::kCPU),
                                    /*use_storage_device=*/false,
                                    torch::jit::Unpickler::defaultTypeParser, storages);
    unpickler.set_version(reader.version());
    archive->root_ = unpickler.parse_ivalue();
    if (!archive->root_.isObject()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a readable kiln checkpoint (no archive at its root)"));
    }
    for (const std::string& name : reader.getAllRecords()) {
      if (!absl::StartsWith(name, kTensorRecords)) continue;
      const std::string key = name.substr(std::strlen(kTensorRecords));
      if (!storages->hasStorage(key)) continue;
      Record record{reader.getRecordOffset(name), reader.getRecordSize(name)};
      if (record.offset > static_cast<uint64_t>(st.st_size) ||
          record.size > static_cast<uint64_t>(st.st_size) - record.offset) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": not a readable kiln checkpoint (record ", name, " is truncated)"));
      }
      archive->records_[storages->getStorage(key).unsafeGetStorageImpl()] = record;
    }
  } catch (const std::exception& e) {
    if (IsOutOfMemory(e)) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": out of memory reading this checkpoint's layout"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a readable kiln checkpoint (corrupt or truncated)"));
  }
  archive->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (archive->fd_ < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  return archive;
}

LazyArchive::~LazyArchive() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<c10::IValue> LazyArchive::Find(const std::vector<std::string>& keys) const {
  c10::IValue at = root_;
  for (const std::string& key : keys) {
    if (!at.isObject()) return std::nullopt;
    const auto& object = at.toObjectRef();
    const std::optional<size_t> slot = object.type()->findAttributeSlot(key);
    if (!slot) return std::nullopt;
    at = object.getSlot(*slot);
  }
  return at;
}

const LazyArchive::Record* LazyArchive::RecordOf(const torch::Tensor& t) const {
  auto it = records_.find(t.storage().unsafeGetStorageImpl());
  return it == records_.end() ? nullptr : &it->second;
}

void LazyArchive::ReadBytes(const Record& record, uint64_t begin, uint64_t bytes,
                            void* into) const {
  if (begin > record.size || bytes > record.size - begin) {
    throw std::runtime_error(absl::StrCat(path_, ": a tensor reaches past its record (", begin,
                                          " + ", bytes, " of ", record.size, " bytes)"));
  }
  char* out = static_cast<char*>(into);
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n =
        ::pread(fd_, out + done, bytes - done, static_cast<off_t>(record.offset + begin + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw std::runtime_error(
          absl::StrCat(path_, ": truncated while reading a tensor: ",
                       n < 0 ? std::strerror(errno) : "the file ends before it"));
    }
    done += static_cast<uint64_t>(n);
  }
}

torch::Tensor LazyArchive::ReadRows(const torch::Tensor& t, int64_t first, int64_t count) const {
  torch::Tensor out;
  Rows(t, first, count, out);
  return out;
}

void LazyArchive::ReadRowsInto(const torch::Tensor& t, int64_t first, int64_t count,
                               const torch::Tensor& into) const {
  std::vector<int64_t> shape = t.sizes().vec();
  if (!shape.empty()) shape[0] = count;
  if (into.is_cpu() && into.is_contiguous() && into.dtype() == t.dtype() &&
      into.sizes() == c10::IntArrayRef(shape) && t.is_contiguous()) {
    torch::Tensor out = into;
    Rows(t, first, count, out);
    return;
  }
  torch::NoGradGuard no_grad;
  into.copy_(ReadRows(t, first, count));
}

void LazyArchive::Rows(const torch::Tensor& t, int64_t first, int64_t count,
                       torch::Tensor& out) const {
  std::vector<int64_t> shape = t.sizes().vec();
  if (t.dim() == 0) {
    first = 0;
    count = 1;
  } else {
    if (first < 0 || count < 0 || first > t.size(0) || count > t.size(0) - first) {
      throw std::runtime_error(absl::StrCat(path_, ": rows ", first, "..", first + count,
                                            " of a tensor of ", t.size(0), " rows"));
    }
    shape[0] = count;
  }
  // The bytes asked for, checked against the record before anything is allocated: a corrupt
  // layout may claim any size.
  const uint64_t item = t.element_size();
  uint64_t elements = 1, extent = static_cast<uint64_t>(t.storage_offset()) + 1;
  bool overflow = t.storage_offset() < 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t size = d == 0 ? count : shape[d];
    overflow |= size < 0 || t.size(d) < 0 || t.stride(d) < 0 ||
                __builtin_mul_overflow(elements, static_cast<uint64_t>(size), &elements);
    uint64_t reach = 0;
    if (t.size(d) > 0) {
      overflow |= __builtin_mul_overflow(static_cast<uint64_t>(t.size(d) - 1),
                                         static_cast<uint64_t>(t.stride(d)), &reach) ||
                  __builtin_add_overflow(extent, reach, &extent);
    }
  }
  uint64_t bytes = 0;
  overflow |= __builtin_mul_overflow(elements, item, &bytes);
  if (overflow) throw std::runtime_error(absl::StrCat(path_, ": a tensor of impossible size"));
  if (elements == 0) {
    if (!out.defined()) out = torch::empty(shape, torch::TensorOptions().dtype(t.dtype()));
    return;
  }
  const Record* record = RecordOf(t);
  if (record == nullptr) throw std::runtime_error(absl::StrCat(path_, ": a tensor with no bytes"));
  if (t.is_contiguous()) {
    const uint64_t row = t.dim() == 0 ? 1 : static_cast<uint64_t>(t.stride(0));
    const uint64_t begin = (static_cast<uint64_t>(t.storage_offset()) + first * row) * item;
    if (begin > record->size || bytes > record->size - begin)
      throw std::runtime_error(absl::StrCat(path_, ": a tensor reaches past its record"));
    // Straight into `out` when it is given (ReadRowsInto checked it is contiguous and alike).
    if (!out.defined()) out = torch::empty(shape, torch::TensorOptions().dtype(t.dtype()));
    ReadBytes(*record, begin, bytes, out.data_ptr());
    return;
  }
  // Strided: the span of the storage the tensor covers, then its rows of it (never more elements
  // than that span holds: a strided view of a stored tensor does not repeat any).
  uint64_t span_bytes = 0;
  if (__builtin_mul_overflow(extent, item, &span_bytes) || span_bytes > record->size ||
      bytes > record->size) {
    throw std::runtime_error(absl::StrCat(path_, ": a tensor reaches past its record"));
  }
  torch::Tensor span =
      torch::empty({static_cast<int64_t>(extent)}, torch::TensorOptions().dtype(t.dtype()));
  ReadBytes(*record, 0, span_bytes, span.data_ptr());
  torch::Tensor whole = span.as_strided(t.sizes(), t.strides(), t.storage_offset());
  out = (t.dim() == 0 ? whole : whole.narrow(0, first, count)).contiguous();
}

torch::Tensor LazyArchive::Read(const torch::Tensor& t) const {
  return ReadRows(t, 0, t.dim() == 0 ? 1 : t.size(0));
}

c10::IValue LazyArchive::Materialize(const c10::IValue& v) const {
  if (v.isTensor()) return Read(v.toTensor());
  if (v.isList()) {
    c10::impl::GenericList out(v.toList().elementType());
    for (const c10::IValue& item : v.toList()) out.push_back(Materialize(item));
    return out;
  }
  if (v.isTuple()) {
    std::vector<c10::IValue> items;
    for (const c10::IValue& item : v.toTupleRef().elements()) items.push_back(Materialize(item));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  if (v.isGenericDict()) {
    auto dict = v.toGenericDict();
    c10::impl::GenericDict out(dict.keyType(), dict.valueType());
    for (const auto& item : dict) out.insert(item.key(), Materialize(item.value()));
    return out;
  }
  if (v.isObject()) {
    throw std::runtime_error(absl::StrCat(path_, ": an object inside a value"));
  }
  return v;
}

void LazyArchive::CopyObject(
    const c10::ivalue::Object& object, torch::serialize::OutputArchive& out,
    const std::string& prefix,
    const std::function<std::optional<torch::Tensor>(const std::string& path)>& replace) const {
  const auto type = object.type();
  for (size_t i = 0; i < type->numAttributes(); ++i) {
    const std::string& key = type->getAttributeName(i);
    const c10::IValue& value = object.getSlot(i);
    const std::string path = prefix.empty() ? key : absl::StrCat(prefix, "/", key);
    if (value.isTensor()) {
      std::optional<torch::Tensor> given = replace(path);
      out.write(key, given ? *given : Read(value.toTensor()));
    } else if (value.isObject()) {
      torch::serialize::OutputArchive nested(out.compilation_unit());
      CopyObject(value.toObjectRef(), nested, path, replace);
      out.write(key, nested);
    } else {
      out.write(key, Materialize(value));
    }
  }
}

void LazyArchive::CopyTo(
    torch::serialize::OutputArchive& out,
    const std::function<std::optional<torch::Tensor>(const std::string& path)>& replace) const {
  CopyObject(root_.toObjectRef(), out, "", replace);
}

}  // namespace kiln
