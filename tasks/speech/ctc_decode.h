// CTC decoding for speech recognition (its error rates are the cer and wer metrics). A CTC model
// emits, per frame, a distribution over the tokens and a blank; a label sequence is any frame
// path with repeats merged and blanks removed ("aa-ab" -> "aab"). Greedy decoding takes the best
// class per frame; prefix beam search (Hannun et al. 2014, "First-Pass Large Vocabulary Continuous
// Speech Recognition using Bi-Directional Recurrent DNNs") keeps the `beam_size` label prefixes of
// highest probability summed over all their paths, optionally fused with an n-gram LM.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "tasks/speech/ngram_lm.h"

namespace kiln::speech {

// log_probs: [frames, classes] (the real frames of one utterance), any float dtype.
std::vector<int64_t> CtcGreedyDecode(const torch::Tensor& log_probs, int64_t blank);

// Shallow fusion of a language model into the beam search: a label sequence y is ranked by
//   log P_ctc(y | audio) + weight * log P_lm(y, <eos>) + bonus * |y|
// (the bonus offsets the LM's preference for short outputs).
struct LmFusion {
  const NgramLm* lm = nullptr;  // null: no language model
  double weight = 0;            // speech_recognition passes task.lm_weight and task.lm_bonus
  double bonus = 0;
};

// Prefix beam search. Per frame only the `beam_size` most likely classes (and the blank) are
// extended. Returns the label sequence of the best rank found (with no LM, the most probable).
std::vector<int64_t> CtcBeamSearch(const torch::Tensor& log_probs, int64_t blank, int64_t beam_size,
                                   const LmFusion& fusion = {});

}  // namespace kiln::speech
