// libFuzzer target: the tokenizer model loader: a SentencePiece .model file's bytes (as
// tokenizer.model_file or a cached model brings them) through kiln's SentencePiece module
// (components/text/sentencepiece_backend.cc), then an encode and decode with the loaded model.
#include <cstdlib>
#include <map>
#include <string>

#include "components/text/sentencepiece_backend.h"
#include "fuzz/fuzz_input.h"

extern "C" const kiln::text::spm::Backend* kiln_sentencepiece_backend();

// Seeds: small models trained by SentencePiece as kiln trains them (unigram, bpe, char, word).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = kiln::fuzz::SeedDir();
  if (dir == nullptr) return 0;
  std::vector<std::string> sentences;
  for (int i = 0; i < 40; ++i)
    sentences.push_back("the quick brown fox " + std::to_string(i) + " jumps over ünïcode dogs");
  for (const char* type : {"unigram", "bpe", "char", "word"}) {
    std::map<std::string, std::string> flags{{"model_type", type},
                                             {"vocab_size", "40"},
                                             {"normalization_rule_name", "identity"},
                                             {"hard_vocab_limit", "false"},
                                             {"pad_id", "0"},
                                             {"unk_id", "1"},
                                             {"bos_id", "2"},
                                             {"eos_id", "3"},
                                             {"num_threads", "1"}};
    std::string model;
    std::string error = kiln_sentencepiece_backend()->train(flags, sentences, &model);
    if (!error.empty()) std::exit(1);
    kiln::fuzz::WriteSeed(std::string(type) + ".model", model);
  }
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::text::spm::Backend* backend = kiln_sentencepiece_backend();
  auto processor = backend->make_processor();
  std::string error = processor->Load(std::string(reinterpret_cast<const char*>(data), size));
  if (error.empty()) {
    std::vector<int> ids = processor->Encode("hello world, ünïcode 12345");
    std::string text = processor->Decode(ids);
    (void)processor->PieceToId("<unk>");
    (void)processor->size();
  }
  return 0;
}
