#include "lib/config/repository.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/files.h"
#include "lib/config/interpolation.h"
#include "lib/config/yaml_io.h"

namespace kiln::config {
namespace {

constexpr char kBuiltinPath[] = "pkg://kiln.hydra";

// Hydra's _get_header_dict: the leading comment lines, each `# @KEY VALUE` with the key up to
// the first space and the value stripped as Python's str.strip() does (Unicode spaces too).
std::optional<std::string> ParsePackageHeader(absl::string_view text) {
  std::optional<std::string> package;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = PythonStrip(line);
    if (line.empty()) continue;
    if (line[0] != '#') break;
    line = PythonStrip(line.substr(1));
    if (line.empty() || line[0] != '@') continue;
    size_t space = line.find(' ');
    if (space == absl::string_view::npos) continue;  // Hydra reads `@package` alone as another key
    if (line.substr(1, space - 1) == "package")
      package = std::string(PythonStrip(line.substr(space + 1)));
  }
  return package;
}

absl::Status EntryError(const Node& entry, const std::string& file, const std::string& what) {
  std::string where = entry.source().line > 0 ? absl::StrCat(file, ":", entry.source().line) : file;
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

absl::StatusOr<DefaultElement> ParseDefaultEntry(const Node& entry, const std::string& file) {
  DefaultElement d;
  d.source = entry.source();
  if (entry.kind() == NodeKind::kString) {
    const std::string& s = entry.as_string();
    size_t at = s.find('@');
    if (at != std::string::npos) {
      d.path = s.substr(0, at);
      d.package = s.substr(at + 1);
    } else {
      d.path = s;
    }
    if (d.path == "_self_" && d.package.has_value()) {
      return EntryError(entry, file, "_self_@PACKAGE is not supported in a defaults list");
    }
    if (d.package == "_here_") d.package = "";
    return d;
  }
  if (!entry.is_map() || entry.size() != 1) {
    return EntryError(entry, file,
                      "a defaults list entry must be a config name or a single 'group: option' "
                      "pair");
  }
  const auto& [key, value] = entry.entries()[0];
  d.is_group = true;
  std::vector<std::string> words = absl::StrSplit(KeyText(key), ' ', absl::SkipEmpty());
  if (words.empty()) return EntryError(entry, file, "empty group name in defaults list");
  std::string group_key = words.back();
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] == "optional") {
      d.optional = true;
    } else if (words[i] == "override") {
      d.override_ = true;
    } else {
      return EntryError(entry, file,
                        absl::StrCat("unknown keyword '", words[i], "' in defaults entry '", key,
                                     "' (known: optional, override)"));
    }
  }
  size_t at = group_key.find('@');
  if (at != std::string::npos) {
    d.group = group_key.substr(0, at);
    d.package = group_key.substr(at + 1);
    if (d.package == "_here_") d.package = "";
  } else {
    d.group = group_key;
  }
  if (d.group.empty()) return EntryError(entry, file, absl::StrCat("empty group in '", key, "'"));
  if (value->is_null()) {
    d.value_is_null = true;
  } else if (value->kind() == NodeKind::kString) {
    d.value = value->as_string();
  } else if (value->is_list()) {
    d.value_is_list = true;
    for (const auto& item : value->items()) {
      if (item->kind() != NodeKind::kString) {
        return EntryError(*item, file, absl::StrCat("options of '", key, "' must be config names"));
      }
      d.options.push_back(item->as_string());
    }
  } else {
    return EntryError(*value, file,
                      absl::StrCat("the option of '", key,
                                   "' must be a config name, a list of "
                                   "names or null, not ",
                                   ScalarToYaml(*value)));
  }
  return d;
}

std::string DisplayPath(const std::string& path) {
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  std::string prefix = std::string(cwd) + "/";
  if (path.rfind(prefix, 0) == 0) return path.substr(prefix.size());
  return path;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LoadedConfig>> ParseConfigFile(const std::string& config_path,
                                                              const std::string& file,
                                                              absl::string_view text) {
  auto parsed = ParseYaml(text, file);
  if (!parsed.ok()) return parsed.status();
  auto loaded = std::make_unique<LoadedConfig>();
  loaded->config_path = config_path;
  loaded->file = file;
  loaded->package_header = ParsePackageHeader(text);
  NodePtr content = *parsed;
  // OmegaConf parses every "${" value when the file is loaded, used or not.
  if (auto st = CheckInterpolationSyntaxIn(*content); !st.ok()) return st;
  if (content->is_null()) content = Node::Map();
  if (content->is_list()) {
    // A group option may be a list: the group's node becomes that list (Hydra composes it; a
    // primary config or a _global_ one that is a list is refused when it is merged).
    loaded->content = content;
    return loaded;
  }
  if (!content->is_map()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": a config file must hold a mapping or a list at its top level, not a ",
                     KindName(content->kind())));
  }
  if (NodePtr defaults = content->Find("defaults")) {
    if (!defaults->is_list()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ":", defaults->source().line,
                                                     ": 'defaults' must be a list, not a ",
                                                     KindName(defaults->kind())));
    }
    loaded->has_defaults_list = true;
    for (const auto& entry : defaults->items()) {
      auto d = ParseDefaultEntry(*entry, file);
      if (!d.ok()) return d.status();
      loaded->defaults.push_back(*std::move(d));
    }
    content->Erase("defaults");
  }
  loaded->content = content;
  return loaded;
}

ConfigRepository::ConfigRepository(std::vector<SearchPathEntry> search_path) {
  search_path_.push_back({"kiln", kBuiltinPath});
  for (auto& entry : search_path) search_path_.push_back(std::move(entry));
}

bool ConfigRepository::IsDir(const std::string& path) const {
  auto key = "d:" + path;
  auto it = stat_cache_.find(key);
  if (it != stat_cache_.end()) return it->second;
  struct stat st;
  bool result = ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  stat_cache_[key] = result;
  return result;
}

bool ConfigRepository::IsFile(const std::string& path) const {
  auto key = "f:" + path;
  auto it = stat_cache_.find(key);
  if (it != stat_cache_.end()) return it->second;
  struct stat st;
  bool result = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  stat_cache_[key] = result;
  return result;
}

std::optional<std::string> ConfigRepository::FindFile(const std::string& config_path) const {
  std::string name = config_path;
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".yaml") == 0)
    name.resize(name.size() - 5);
  for (const auto& entry : search_path_) {
    if (entry.path == kBuiltinPath) {
      if (BuiltinHydraConfigs().count(name))
        return std::string(kBuiltinPath) + "/" + name + ".yaml";
      continue;
    }
    std::string file = entry.path + "/" + name + ".yaml";
    if (IsFile(file)) return file;
  }
  return std::nullopt;
}

bool ConfigRepository::ConfigExists(const std::string& config_path) const {
  return FindFile(config_path).has_value();
}

absl::StatusOr<const LoadedConfig*> ConfigRepository::Load(const std::string& config_path) {
  auto it = cache_.find(config_path);
  if (it != cache_.end()) return it->second.get();
  auto file = FindFile(config_path);
  if (!file.has_value()) return nullptr;
  std::string name = config_path;
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".yaml") == 0)
    name.resize(name.size() - 5);
  std::string text;
  std::string display;
  if (file->rfind(kBuiltinPath, 0) == 0) {
    text = BuiltinHydraConfigs().at(name);
    display = *file;
  } else {
    auto read = ReadFileToString(*file);
    if (!read.ok()) return read.status();
    text = *std::move(read);
    display = DisplayPath(*file);
  }
  auto loaded = ParseConfigFile(name, display, text);
  if (!loaded.ok()) return loaded.status();
  const LoadedConfig* result = loaded->get();
  cache_[config_path] = *std::move(loaded);
  return result;
}

bool ConfigRepository::GroupExists(const std::string& group) const {
  if (group.empty()) return false;
  for (const auto& entry : search_path_) {
    if (entry.path == kBuiltinPath) {
      for (const auto& [name, text] : BuiltinHydraConfigs()) {
        if (name.rfind(group + "/", 0) == 0) return true;
      }
      continue;
    }
    if (IsDir(entry.path + "/" + group)) return true;
  }
  return false;
}

std::vector<std::string> ConfigRepository::GroupOptions(const std::string& group) const {
  std::set<std::string> options;
  for (const auto& entry : search_path_) {
    if (entry.path == kBuiltinPath) {
      for (const auto& [name, text] : BuiltinHydraConfigs()) {
        if (name.rfind(group + "/", 0) == 0 &&
            name.find('/', group.size() + 1) == std::string::npos) {
          options.insert(name.substr(group.size() + 1));
        }
      }
      continue;
    }
    std::string dir = group.empty() ? entry.path : entry.path + "/" + group;
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".yaml") == 0 &&
          IsFile(dir + "/" + name)) {
        options.insert(name.substr(0, name.size() - 5));
      }
    }
    closedir(d);
  }
  return {options.begin(), options.end()};
}

std::vector<std::string> ConfigRepository::Groups(const std::string& parent) const {
  std::set<std::string> groups;
  for (const auto& entry : search_path_) {
    if (entry.path == kBuiltinPath) continue;
    std::string dir = parent.empty() ? entry.path : entry.path + "/" + parent;
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == ".." || name[0] == '.') continue;
      if (IsDir(dir + "/" + name)) groups.insert(parent.empty() ? name : parent + "/" + name);
    }
    closedir(d);
  }
  return {groups.begin(), groups.end()};
}

std::string ConfigRepository::DescribeSearchPath() const {
  std::string out;
  for (const auto& entry : search_path_) {
    std::string path = entry.path == kBuiltinPath ? entry.path : "file://" + entry.path;
    absl::StrAppend(&out, "provider=", entry.provider, ", path=", path, "\n");
  }
  return out;
}

const std::map<std::string, std::string>& BuiltinHydraConfigs() {
  // The files under lib/config/hydra_conf/, embedded at build time (cmake/EmbedConfigs.cmake).
  static const auto* configs = new std::map<std::string, std::string>{
#include "lib/config/builtin_configs.inc"
  };
  return *configs;
}

}  // namespace kiln::config
