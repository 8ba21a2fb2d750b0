// SentencePiece on the spam corpus: training time (no cache: a fresh cache folder) and encoding
// throughput in MB/s of UTF-8 text, on one thread and with Tokenizer::EncodeAll (oneTBB) on
// every thread allowed. Run by bench/tokenizer_speed.sh.
//   tokenizer_speed TRAIN.jsonl unigram|bpe VOCAB_SIZE THREADS
#include <tbb/global_control.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "components/text/text_files.h"
#include "components/text/tokenizer.h"
#include "lib/registry/registry.h"

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc != 5) {
    std::fprintf(stderr, "usage: tokenizer_speed TRAIN.jsonl unigram|bpe VOCAB_SIZE THREADS\n");
    return 1;
  }
  int threads = std::atoi(argv[4]);
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                            static_cast<size_t>(threads));
  auto records = text::ReadLabelledTexts(argv[1], {}, true);
  if (!records.ok()) {
    std::fprintf(stderr, "%s\n", std::string(records.status().message()).c_str());
    return 1;
  }
  std::vector<std::string> texts;
  double bytes = 0;
  for (auto& r : *records) {
    bytes += static_cast<double>(r.text.size());
    texts.push_back(std::move(r.text));
  }
  std::string cache = std::filesystem::temp_directory_path() /
                      ("kiln_tokenizer_speed_" + std::to_string(::getpid()));
  auto tok = Registry<text::Tokenizer>::Get().Instantiate(
      "sentencepiece", Options()
                           .Set("model_type", argv[2])
                           .Set("vocab_size", static_cast<int64_t>(std::atoll(argv[3])))
                           .Set("cache_dir", cache)
                           .Set("num_threads", static_cast<int64_t>(threads)));
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  auto t0 = Clock::now();
  absl::Status fitted = (*tok)->Fit(texts, argv[1]);
  double train_s = seconds(t0);
  std::filesystem::remove_all(cache);
  if (!fitted.ok()) {
    std::fprintf(stderr, "%s\n", std::string(fitted.message()).c_str());
    return 1;
  }
  t0 = Clock::now();
  size_t tokens = 0;
  for (const auto& t : texts) tokens += (*tok)->Encode(t).size();
  double one_s = seconds(t0);
  t0 = Clock::now();
  auto all = (*tok)->EncodeAll(texts);
  double all_s = seconds(t0);
  std::printf(
      "%s vocab %s on %zu texts, %.1f MB: train %.1f s (%d threads); encode %.1f MB/s on 1 thread, "
      "%.1f MB/s with EncodeAll on %d threads; %.2f bytes per token\n",
      argv[2], argv[3], texts.size(), bytes / 1e6, train_s, threads, bytes / 1e6 / one_s,
      bytes / 1e6 / all_s, threads, bytes / static_cast<double>(tokens));
  return all.size() == texts.size() ? 0 : 1;
}
