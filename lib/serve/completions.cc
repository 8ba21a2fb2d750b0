#include "lib/serve/completions.h"

#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::serve {
namespace {

using Json = nlohmann::json;

// Non-UTF-8 bytes (a byte-level model can generate them) become U+FFFD instead of throwing.
std::string Dump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

absl::Status Refuse(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("\"", field, "\" ", what));
}

// A text or a list of texts (at least one).
absl::StatusOr<std::vector<std::string>> Texts(const Json& v, const std::string& field,
                                               bool allow_empty_list) {
  if (v.is_string()) return std::vector<std::string>{v.get<std::string>()};
  if (!v.is_array()) return Refuse(field, "must be a text or a list of texts");
  std::vector<std::string> out;
  for (const Json& item : v) {
    if (item.is_number_integer() || item.is_array()) {
      return Refuse(field, "holds token ids, which kiln does not take: send the text");
    }
    if (!item.is_string()) return Refuse(field, "must be a text or a list of texts");
    out.push_back(item.get<std::string>());
  }
  if (out.empty() && !allow_empty_list) return Refuse(field, "is an empty list");
  return out;
}

absl::StatusOr<double> Number(const Json& v, const std::string& field) {
  if (!v.is_number()) return Refuse(field, "must be a number");
  return v.get<double>();
}

absl::StatusOr<int64_t> Integer(const Json& v, const std::string& field) {
  if (!v.is_number_integer()) return Refuse(field, "must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return Refuse(field, "is too large");
  return v.get<int64_t>();
}

absl::StatusOr<bool> Bool(const Json& v, const std::string& field) {
  if (!v.is_boolean()) return Refuse(field, "must be true or false");
  return v.get<bool>();
}

// A field accepted only at its default (null, or the value given).
absl::Status OnlyDefault(const Json& v, const std::string& field, const Json& fallback,
                         const std::string& instead) {
  if (v.is_null() || v == fallback) return absl::OkStatus();
  return Refuse(field, absl::StrCat("is not supported", instead.empty() ? "" : "; ", instead));
}

const char* const kFields[] = {"prompt",
                               "max_tokens",
                               "temperature",
                               "top_p",
                               "top_k",
                               "stop",
                               "seed",
                               "stream",
                               "echo",
                               "repetition_penalty",
                               "model",
                               "stream_options",
                               "user",
                               "n",
                               "best_of",
                               "suffix",
                               "logprobs",
                               "logit_bias",
                               "presence_penalty",
                               "frequency_penalty"};

nlohmann::ordered_json Head(const std::string& id, int64_t created, const std::string& model) {
  nlohmann::ordered_json j;
  j["id"] = id;
  j["object"] = "text_completion";
  j["created"] = created;
  j["model"] = model;
  return j;
}

nlohmann::ordered_json Usage(const std::vector<Completion>& completions) {
  int64_t prompt = 0, generated = 0;
  for (const Completion& c : completions) {
    prompt += c.prompt_tokens;
    generated += c.completion_tokens;
  }
  nlohmann::ordered_json u;
  u["prompt_tokens"] = prompt;
  u["completion_tokens"] = generated;
  u["total_tokens"] = prompt + generated;
  return u;
}

nlohmann::ordered_json Choice(size_t index, const std::string& text,
                              const std::string& finish_reason) {
  nlohmann::ordered_json c;
  c["text"] = text;
  c["index"] = index;
  c["logprobs"] = nullptr;
  c["finish_reason"] =
      finish_reason.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(finish_reason);
  return c;
}

std::string Event(const nlohmann::ordered_json& j) { return "data: " + Dump(j) + "\n\n"; }

}  // namespace

absl::StatusOr<CompletionsCall> ParseCompletionsRequest(std::string_view body) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return absl::InvalidArgumentError("the body is not JSON (send a completions request object)");
  if (!j.is_object())
    return absl::InvalidArgumentError("the body must be a JSON object with \"prompt\"");
  for (const auto& [key, value] : j.items()) {
    if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown field \"", key, "\"; /v1/completions takes ",
                       absl::StrJoin(std::begin(kFields), std::end(kFields), ", ")));
    }
  }
  CompletionsCall call;
  CompletionRequest& r = call.request;
  if (!j.contains("prompt") || j["prompt"].is_null())
    return absl::InvalidArgumentError("\"prompt\" is missing: give the text to continue");
  auto prompts = Texts(j["prompt"], "prompt", /*allow_empty_list=*/false);
  if (!prompts.ok()) return prompts.status();
  r.prompts = *std::move(prompts);
  r.max_tokens = 16;
  auto set = [&j](const char* key) { return j.contains(key) && !j[key].is_null(); };
  if (set("max_tokens")) {
    auto v = Integer(j["max_tokens"], "max_tokens");
    if (!v.ok()) return v.status();
    if (*v < 0) return Refuse("max_tokens", "must be at least 0");
    r.max_tokens = *v;
  }
  if (set("temperature")) {
    auto v = Number(j["temperature"], "temperature");
    if (!v.ok()) return v.status();
    if (!(*v >= 0)) return Refuse("temperature", "must be at least 0 (0: the most likely token)");
    r.temperature = *v;
  }
  if (set("top_p")) {
    auto v = Number(j["top_p"], "top_p");
    if (!v.ok()) return v.status();
    if (!(*v > 0 && *v <= 1)) return Refuse("top_p", "must be in (0, 1]");
    r.top_p = *v;
  }
  if (set("top_k")) {
    auto v = Integer(j["top_k"], "top_k");
    if (!v.ok()) return v.status();
    if (*v < -1) return Refuse("top_k", "must be at least 0 (0 or -1: every token)");
    r.top_k = *v < 0 ? 0 : *v;
  }
  if (set("repetition_penalty")) {
    auto v = Number(j["repetition_penalty"], "repetition_penalty");
    if (!v.ok()) return v.status();
    if (!(*v > 0)) return Refuse("repetition_penalty", "must be greater than 0 (1: none)");
    r.repetition_penalty = *v;
  }
  if (set("stop")) {
    auto v = Texts(j["stop"], "stop", /*allow_empty_list=*/true);
    if (!v.ok()) return v.status();
    r.stop = *std::move(v);
  }
  if (set("seed")) {
    auto v = Integer(j["seed"], "seed");
    if (!v.ok()) return v.status();
    r.seed = *v;
  }
  if (set("echo")) {
    auto v = Bool(j["echo"], "echo");
    if (!v.ok()) return v.status();
    r.echo = *v;
  }
  if (set("stream")) {
    auto v = Bool(j["stream"], "stream");
    if (!v.ok()) return v.status();
    call.stream = *v;
  }
  if (set("stream_options")) {
    const Json& o = j["stream_options"];
    if (!o.is_object()) return Refuse("stream_options", "must be an object");
    if (!call.stream) return Refuse("stream_options", "needs \"stream\": true");
    for (const auto& [key, value] : o.items()) {
      if (key != "include_usage")
        return Refuse("stream_options", absl::StrCat("has an unknown field \"", key, "\""));
      auto v = Bool(value, "stream_options.include_usage");
      if (!v.ok()) return v.status();
      call.include_usage = *v;
    }
  }
  if (j.contains("model") && !j["model"].is_null() && !j["model"].is_string())
    return Refuse("model", "must be a text");
  struct Fixed {
    const char* field;
    Json fallback;
    const char* instead;
  };
  const Fixed fixed[] = {
      {"n", 1, "one completion per prompt (send the prompt several times in \"prompt\")"},
      {"best_of", 1, ""},
      {"suffix", "", ""},
      {"logprobs", 0, ""},
      {"logit_bias", Json::object(), ""},
      {"presence_penalty", 0, "use \"repetition_penalty\""},
      {"frequency_penalty", 0, "use \"repetition_penalty\""},
  };
  for (const Fixed& f : fixed) {
    if (!j.contains(f.field)) continue;
    if (absl::Status s = OnlyDefault(j[f.field], f.field, f.fallback, f.instead); !s.ok()) return s;
  }
  return call;
}

std::string NewCompletionId() {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::string id = "cmpl-";
  for (int i = 0; i < 24; ++i) id += kHex[random() & 15];
  return id;
}

std::string CompletionJson(const std::string& id, int64_t created, const std::string& model,
                           const std::vector<Completion>& completions) {
  nlohmann::ordered_json j = Head(id, created, model);
  j["choices"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < completions.size(); ++i)
    j["choices"].push_back(Choice(i, completions[i].text, completions[i].finish_reason));
  j["usage"] = Usage(completions);
  return Dump(j);
}

std::string CompletionEvent(const std::string& id, int64_t created, const std::string& model,
                            size_t index, const std::string& text,
                            const std::string& finish_reason) {
  nlohmann::ordered_json j = Head(id, created, model);
  j["choices"] = nlohmann::ordered_json::array({Choice(index, text, finish_reason)});
  return Event(j);
}

std::string UsageEvent(const std::string& id, int64_t created, const std::string& model,
                       const std::vector<Completion>& completions) {
  nlohmann::ordered_json j = Head(id, created, model);
  j["choices"] = nlohmann::ordered_json::array();
  j["usage"] = Usage(completions);
  return Event(j);
}

std::string OpenAiErrorJson(const std::string& message, const std::string& type) {
  nlohmann::ordered_json j;
  j["error"]["message"] = message;
  j["error"]["type"] = type;
  j["error"]["param"] = nullptr;
  j["error"]["code"] = nullptr;
  return Dump(j);
}

std::string ErrorEvent(const std::string& message) {
  return "data: " + OpenAiErrorJson(message, "server_error") + "\n\n";
}

}  // namespace kiln::serve
