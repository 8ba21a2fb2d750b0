#include "lib/config/secrets.h"

#include <algorithm>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln::config {
namespace {

std::mutex& Mutex() {
  static auto* mu = new std::mutex();
  return *mu;
}

std::vector<std::string>& Keys() {
  static auto* keys = new std::vector<std::string>();
  return *keys;
}

// The key an override sets: "serve.token" of "serve.token=x", "+serve.token=x", "~serve.token".
std::string OverrideKey(absl::string_view text) {
  while (!text.empty() && (text[0] == '+' || text[0] == '~')) text.remove_prefix(1);
  return std::string(text.substr(0, text.find('=')));
}

}  // namespace

void RegisterSecretKey(const std::string& dotted_key) {
  std::lock_guard<std::mutex> lock(Mutex());
  if (std::find(Keys().begin(), Keys().end(), dotted_key) == Keys().end())
    Keys().push_back(dotted_key);
}

bool IsSecretKey(absl::string_view dotted_key) {
  std::lock_guard<std::mutex> lock(Mutex());
  return std::find(Keys().begin(), Keys().end(), dotted_key) != Keys().end();
}

std::vector<std::string> SecretKeys() {
  std::lock_guard<std::mutex> lock(Mutex());
  return Keys();
}

std::string RedactOverride(absl::string_view override_text) {
  size_t eq = override_text.find('=');
  if (eq == absl::string_view::npos || !IsSecretKey(OverrideKey(override_text)))
    return std::string(override_text);
  return absl::StrCat(override_text.substr(0, eq + 1), kRedacted);
}

NodePtr RedactSecrets(const Node& job) {
  NodePtr out = job.Clone();
  for (const std::string& key : SecretKeys()) {
    std::vector<std::string> path = absl::StrSplit(key, '.');
    Node* parent = out.get();
    for (size_t i = 0; parent != nullptr && i + 1 < path.size(); ++i) {
      NodePtr next = parent->is_map() ? parent->Find(path[i]) : nullptr;
      parent = next.get();
    }
    if (parent == nullptr || !parent->is_map()) continue;
    NodePtr value = parent->Find(path.back());
    if (value == nullptr || value->is_null()) continue;
    NodePtr hidden = Node::String(kRedacted);
    Source source = value->source();
    if (!source.override_text.empty()) source.override_text = RedactOverride(source.override_text);
    hidden->set_source(source);
    parent->Set(path.back(), hidden);
  }
  return out;
}

NodePtr RedactHydraSecrets(const Node& hydra) {
  NodePtr out = hydra.Clone();
  if (NodePtr overrides = out->is_map() ? out->Find("overrides") : nullptr;
      overrides && overrides->is_map()) {
    for (const auto& [name, list] : overrides->entries()) {
      if (!list->is_list()) continue;
      for (auto& item : list->mutable_items()) {
        if (item->kind() == NodeKind::kString)
          item = Node::String(RedactOverride(item->as_string()));
      }
    }
  }
  return out;
}

}  // namespace kiln::config
