// A token n-gram language model for shallow fusion in CTC beam search (a character LM over the
// tokenizer's ids, trained in seconds from the training transcripts). Estimates are Witten-Bell
// interpolated down to a uniform distribution over the vocabulary, so every id has a probability:
//   P(w | h) = (c(h, w) + T(h) P(w | h')) / (c(h) + T(h)),
// where h' drops h's oldest id and T(h) counts the distinct ids seen after h. Sentences start
// with order-1 <bos> ids of context and end with <eos>.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::speech {

class NgramLm {
 public:
  // order >= 1 (1: unigram); ids in [0, vocab_size); bos/eos: the context and end ids.
  NgramLm(int order, int64_t vocab_size, int64_t bos, int64_t eos);

  // Counts one sentence (its token ids, without bos/eos).
  void Add(const std::vector<int64_t>& sentence);

  // Natural log of P(next | the last order-1 ids of `history`, after <bos> padding); `next` may
  // be eos_id() for the sentence's end.
  double LogProb(const std::vector<int64_t>& history, int64_t next) const;

  int order() const { return order_; }
  int64_t eos_id() const { return eos_; }
  int64_t sentences() const { return sentences_; }

 private:
  // A context of k ids is the node k steps down from the root, by its ids newest first, so that
  // LogProb walks from the empty context to the longest one without building keys.
  struct Context {
    std::unordered_map<int64_t, int64_t> next;      // id -> count after this context
    std::unordered_map<int64_t, int32_t> children;  // one older id -> its node
    int64_t total = 0;
  };
  // The id `back` steps before the end of `ids` (1: the last), <bos> before the start.
  int64_t Before(const int64_t* ids, size_t size, size_t back) const {
    return back <= size ? ids[size - back] : bos_;
  }

  int order_;
  int64_t vocab_, bos_, eos_, sentences_ = 0;
  std::vector<Context> contexts_;  // [0]: the empty context (the root)
};

}  // namespace kiln::speech
