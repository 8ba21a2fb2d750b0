#include "lib/serve/request_inputs.h"

#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kiln::serve {

absl::StatusOr<std::vector<std::string>> RequestInputs(const httplib::Request& req) {
  std::vector<std::string> inputs;
  if (req.is_multipart_form_data()) {
    for (const auto& [name, part] : req.files) inputs.push_back(part.content);
    if (inputs.empty()) return absl::InvalidArgumentError("the multipart form has no parts");
    return inputs;
  }
  std::string type = req.get_header_value("Content-Type");
  if (!absl::StartsWith(type, "application/json")) {
    if (req.body.empty())
      return absl::InvalidArgumentError(
          "the request has no body (send an input, or JSON {\"inputs\": [...]})");
    inputs.push_back(req.body);
    return inputs;
  }
  nlohmann::json body;
  try {
    body = nlohmann::json::parse(req.body);
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON: ", e.what()));
  }
  if (!body.is_object() || (body.contains("input") == body.contains("inputs"))) {
    return absl::InvalidArgumentError(
        "the JSON body must be an object with \"inputs\": [...] or \"input\": ...");
  }
  nlohmann::json items =
      body.contains("inputs") ? body["inputs"] : nlohmann::json::array({body["input"]});
  const char* key = body.contains("inputs") ? "inputs" : "input";
  if (!items.is_array()) return absl::InvalidArgumentError("\"inputs\" must be a list");
  if (items.empty()) return absl::InvalidArgumentError("\"inputs\" is empty");
  for (size_t i = 0; i < items.size(); ++i) {
    const nlohmann::json& item = items[i];
    std::string where = body.contains("inputs") ? absl::StrCat(key, "[", i, "]") : key;
    if (item.is_string()) {
      inputs.push_back(item.get<std::string>());
    } else if (item.is_object() && item.size() == 1 && item.contains("b64") &&
               item["b64"].is_string()) {
      std::string bytes;
      if (!absl::Base64Unescape(item["b64"].get<std::string>(), &bytes)) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".b64 is not valid base64"));
      }
      inputs.push_back(std::move(bytes));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " must be a string (a text) or {\"b64\": \"...\"} (a file's bytes), got ",
          item.type_name()));
    }
  }
  return inputs;
}

}  // namespace kiln::serve
