// What a language model is asked at inference time and what it answers, apart from LibTorch:
// `kiln serve`'s /v1/completions parses requests into these without a model
// (lib/serve/completions.h), and Task::Complete answers them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

// A completion asked at inference time (`kiln serve`'s /v1/completions, Predictor::Complete):
// prompts continued together, each option unset taking the task's own (task.max_tokens, ...).
struct CompletionRequest {
  std::vector<std::string> prompts;
  std::optional<int64_t> max_tokens, top_k, seed;
  std::optional<double> temperature, top_p, repetition_penalty;
  std::optional<std::vector<std::string>> stop;
  bool echo = false;  // the prompt before its continuation in `text`
};

// One prompt's continuation: `finish_reason` is "stop" (an end-of-text token or a stop string,
// which the text does not include) or "length" (max_tokens reached).
struct Completion {
  std::string text, finish_reason;
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// Handed each piece of new text of prompt `index` as it is generated (held back while it could
// still turn out to be part of a stop string or of an unfinished UTF-8 character). Returning
// false ends generation for every prompt (the client is gone).
using CompletionSink = std::function<bool(size_t index, const std::string& text)>;

}  // namespace kiln
