#include "lib/config/default_element.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace kiln::config {
namespace {

std::string StripLeadingSlash(const std::string& s) {
  return !s.empty() && s[0] == '/' ? s.substr(1) : s;
}

bool HasInterpolation(const std::string& s) { return s.find("${") != std::string::npos; }

}  // namespace

bool DefaultElement::is_self() const {
  return is_group ? (!value_is_null && !value_is_list && value == "_self_") : path == "_self_";
}

bool DefaultElement::is_missing() const {
  auto name = Name();
  return name.has_value() && *name == "???";
}

bool DefaultElement::is_interpolation() const {
  if (is_group) return !value_is_null && !value_is_list && HasInterpolation(value);
  return HasInterpolation(path);
}

void DefaultElement::UpdateParent(const std::string& base_dir, const std::string& pkg) {
  parent_base_dir = base_dir;
  parent_package = pkg;
  if (package.has_value() && package->find("_group_") != std::string::npos) {
    package = "_global_." + absl::StrReplaceAll(*package, {{"_group_", DefaultPackage()}});
  }
}

void DefaultElement::SetPackageHeader(const std::optional<std::string>& header) {
  if (!header.has_value()) return;
  std::string h = *header;
  // A package header is always absolute.
  if (h != "_global_" && h.rfind("_global_.", 0) != 0) h = h.empty() ? "_global_" : "_global_." + h;
  package_header = h;
}

std::string DefaultElement::GroupPath() const {
  const std::string base = parent_base_dir.value_or("");
  if (is_group) {
    bool absolute = group.rfind('/', 0) == 0 || external_append;
    std::string g = StripLeadingSlash(group);
    if (base.empty() || absolute) return g;
    return base + "/" + g;
  }
  bool absolute = path.rfind('/', 0) == 0;
  std::string p = StripLeadingSlash(path);
  size_t idx = p.rfind('/');
  std::string g = idx == std::string::npos ? "" : p.substr(0, idx);
  if (absolute) return g;
  if (base.empty()) return g;
  return g.empty() ? base : base + "/" + g;
}

std::string DefaultElement::ConfigPath() const {
  if (is_group) {
    std::string name = Name().value_or("");
    std::string g = GroupPath();
    return g.empty() ? name : g + "/" + name;
  }
  const std::string base = parent_base_dir.value_or("");
  bool absolute = path.rfind('/', 0) == 0;
  std::string p = StripLeadingSlash(path);
  if (absolute || base.empty()) return p;
  return base + "/" + p;
}

std::optional<std::string> DefaultElement::Name() const {
  if (is_group) {
    if (value_is_null || value_is_list) return std::nullopt;
    return value;
  }
  size_t idx = path.rfind('/');
  return idx == std::string::npos ? path : path.substr(idx + 1);
}

std::string DefaultElement::DefaultPackage() const {
  return absl::StrReplaceAll(GroupPath(), {{"/", "."}});
}

std::optional<std::string> DefaultElement::Package(bool default_to_package_header) const {
  if (!package.has_value() && default_to_package_header) return package_header;
  return package;
}

std::string DefaultElement::RelativeGroupPath() const {
  if (is_group) return StripLeadingSlash(group);
  std::string p = StripLeadingSlash(path);
  size_t idx = p.rfind('/');
  return idx == std::string::npos ? "" : p.substr(0, idx);
}

std::string DefaultElement::FinalPackage(bool default_to_package_header) const {
  std::string parent = parent_package.value_or("");
  std::optional<std::string> pkg = Package(default_to_package_header);
  std::string p = pkg.has_value() ? *pkg : absl::StrReplaceAll(RelativeGroupPath(), {{"/", "."}});
  std::string ret;
  if (parent.empty()) {
    ret = p;
  } else {
    ret = p.empty() ? parent : parent + "." + p;
  }
  size_t lgi = ret.rfind("_global_");
  if (lgi == std::string::npos) return ret;
  // Hydra slices one character (code point) past "_global_", normally the '.'.
  size_t start = lgi + std::string("_global_").size();
  if (start < ret.size()) {
    unsigned char c = static_cast<unsigned char>(ret[start]);
    start += c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
  }
  return start >= ret.size() ? "" : ret.substr(start);
}

std::string DefaultElement::OverrideKey() const {
  std::string default_pkg = DefaultPackage();
  std::string final_pkg = FinalPackage(/*default_to_package_header=*/false);
  std::string key = GroupPath();
  if (default_pkg != final_pkg) {
    if (final_pkg.empty()) final_pkg = "_global_";
    key += "@" + final_pkg;
  }
  return key;
}

bool DefaultElement::ResolveInterpolation(
    const std::vector<std::pair<std::string, std::optional<std::string>>>& known,
    std::string* unresolved) {
  std::string& text = is_group ? value : path;
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t open = text.find("${", i);
    if (open == std::string::npos) {
      out += text.substr(i);
      break;
    }
    size_t close = text.find('}', open);
    if (close == std::string::npos) {
      *unresolved = text;
      return false;
    }
    out += text.substr(i, open - i);
    std::string key = text.substr(open + 2, close - open - 2);
    while (!key.empty() && key.front() == ' ') key.erase(0, 1);
    while (!key.empty() && key.back() == ' ') key.pop_back();
    bool found = false;
    for (const auto& [k, v] : known) {
      if (k == key && v.has_value()) {
        out += *v;
        found = true;
        break;
      }
    }
    if (!found) {
      *unresolved = text;
      return false;
    }
    i = close + 1;
  }
  text = out;
  return true;
}

std::string DefaultElement::Describe() const {
  if (!is_group) return path;
  std::string key;
  if (override_) key += "override ";
  if (optional) key += "optional ";
  key += group;
  if (package.has_value()) key += "@" + *package;
  std::string v = value_is_null   ? "null"
                  : value_is_list ? "[" + absl::StrJoin(options, ", ") + "]"
                                  : value;
  return key + ": " + v;
}

}  // namespace kiln::config
