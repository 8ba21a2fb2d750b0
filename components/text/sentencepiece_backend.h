// A thin wall around the SentencePiece library, loaded on first use as its own module
// (libkiln_sentencepiece.so) with dlopen(RTLD_LOCAL | RTLD_DEEPBIND). Debian's libsentencepiece
// carries and exports its own protobuf (3.14) while LibTorch uses the system's (3.21); loaded as
// an ordinary dependency, one copy's symbols replace the other's and protobuf aborts. The module
// also keeps sentencepiece's headers, whose `absl::string_view` clashes with Abseil's, away
// from the rest of kiln: this interface uses standard types only.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::text::spm {

class Processor {
 public:
  virtual ~Processor() = default;
  // Loads a serialized model (a .model file's bytes); returns "" or the error.
  virtual std::string Load(const std::string& serialized) = 0;
  // Thread-safe once loaded.
  virtual std::vector<int> Encode(std::string_view text) const = 0;
  virtual std::string Decode(const std::vector<int>& ids) const = 0;
  virtual int PieceToId(const std::string& piece) const = 0;
  virtual int size() const = 0;
};

// What the module exports (extern "C" kiln_sentencepiece_backend()).
struct Backend {
  std::unique_ptr<Processor> (*make_processor)();
  // Trains a model on `sentences` with SentencePiece trainer flags (`model_type`, `vocab_size`,
  // ...); returns "" and the serialized model in `model`, or the error.
  std::string (*train)(const std::map<std::string, std::string>& flags,
                       const std::vector<std::string>& sentences, std::string* model);
};

// The module's backend, loaded once from the folder of libkiln_components.so; null with the reason
// in `error` when it cannot be loaded.
const Backend* LoadBackend(std::string* error);

}  // namespace kiln::text::spm
