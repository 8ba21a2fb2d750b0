#include "lib/registry/registry.h"

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/config/suggest.h"

namespace kiln {

RegistryHub& RegistryHub::Instance() {
  static RegistryHub* hub = new RegistryHub();
  return *hub;
}

absl::Status RegistryHub::Add(ComponentInfo info, std::shared_ptr<void> factory) {
  auto& kind = kinds_[info.kind];
  auto it = kind.find(info.name);
  if (it != kind.end()) {
    return absl::AlreadyExistsError(absl::StrCat(
        info.kind, " '", info.name, "' is already registered by ", it->second.info.origin, "; ",
        current_origin_, " cannot register it again (choose another name)"));
  }
  info.origin = current_origin_;
  std::string name = info.name;
  kind.emplace(name, Entry{std::move(info), std::move(factory)});
  return absl::OkStatus();
}

const RegistryHub::Entry* RegistryHub::Find(const std::string& kind,
                                            const std::string& name) const {
  auto k = kinds_.find(kind);
  if (k == kinds_.end()) return nullptr;
  auto it = k->second.find(name);
  return it == k->second.end() ? nullptr : &it->second;
}

std::vector<std::string> RegistryHub::Names(const std::string& kind) const {
  std::vector<std::string> names;
  auto k = kinds_.find(kind);
  if (k == kinds_.end()) return names;
  for (const auto& [name, entry] : k->second) names.push_back(name);
  return names;
}

std::vector<std::string> RegistryHub::Kinds() const {
  std::vector<std::string> kinds;
  for (const auto& [kind, entries] : kinds_) kinds.push_back(kind);
  return kinds;
}

std::vector<const ComponentInfo*> RegistryHub::Components(const std::string& kind) const {
  std::vector<const ComponentInfo*> out;
  auto k = kinds_.find(kind);
  if (k == kinds_.end()) return out;
  for (const auto& [name, entry] : k->second) out.push_back(&entry.info);
  return out;
}

std::string UnknownComponentMessage(const std::string& kind, const std::string& name) {
  std::vector<std::string> known = RegistryHub::Instance().Names(kind);
  std::string message = absl::StrCat("unknown ", kind, " '", name, "'");
  auto close = config::ClosestNames(name, known, 1);
  if (!close.empty()) absl::StrAppend(&message, " — did you mean '", close[0], "'?");
  absl::StrAppend(&message, known.empty() ? absl::StrCat(" (no ", kind, " is registered)")
                                          : absl::StrCat("; known: ", absl::StrJoin(known, ", ")));
  return message;
}

namespace internal {
void ReportRegistrationFailure(const absl::Status& status) {
  std::fprintf(stderr, "kiln: error: %s\n", std::string(status.message()).c_str());
  std::exit(2);
}
}  // namespace internal

}  // namespace kiln
