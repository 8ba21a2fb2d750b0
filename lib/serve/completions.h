// OpenAI's completions API as `kiln serve` speaks it (POST /v1/completions): the request body
// read into a CompletionRequest, and the answer as one JSON object or, with "stream": true, as
// server-sent events, one `data: {chunk}` per piece of new text and `data: [DONE]` at the end.
// The parser is LibTorch-free; fuzz/serve_request_fuzzer.cc runs it on any bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/trainer/completion.h"

namespace kiln::serve {

struct CompletionsCall {
  CompletionRequest request;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last chunk with the counts
};

// The request, or an InvalidArgument error (a 400) naming the field and what it takes. Fields:
// prompt (a text or a list of texts), max_tokens (16 when absent, as OpenAI's), temperature,
// top_p, stop (a text or a list), seed, stream, stream_options, echo; top_k and
// repetition_penalty as vLLM takes them; model and user are accepted and ignored; n, best_of,
// logprobs, suffix, logit_bias, presence_penalty and frequency_penalty only at their defaults.
// An unknown field is refused.
absl::StatusOr<CompletionsCall> ParseCompletionsRequest(std::string_view body);

// "cmpl-" and 24 random hex digits.
std::string NewCompletionId();

// The whole answer: {"id", "object": "text_completion", "created", "model", "choices": [{"text",
// "index", "logprobs": null, "finish_reason"}], "usage": {...}}.
std::string CompletionJson(const std::string& id, int64_t created, const std::string& model,
                           const std::vector<Completion>& completions);
// One server-sent event (`data: ...` and a blank line) of a stream: new text of choice `index`,
// or its end (`finish_reason` non-empty, the text then empty).
std::string CompletionEvent(const std::string& id, int64_t created, const std::string& model,
                            size_t index, const std::string& text,
                            const std::string& finish_reason);
// The stream's last chunk with stream_options.include_usage: no choices, the token counts.
std::string UsageEvent(const std::string& id, int64_t created, const std::string& model,
                       const std::vector<Completion>& completions);
// An error once the stream has begun (its status line already sent): an event with OpenAI's
// error object.
std::string ErrorEvent(const std::string& message);
// OpenAI's error body: {"error": {"message", "type", "param", "code"}}.
std::string OpenAiErrorJson(const std::string& message, const std::string& type);

}  // namespace kiln::serve
