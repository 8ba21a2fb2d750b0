#include "lib/registry/plugin_loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/files.h"
#include "lib/registry/internal/module_loader.h"
#include "lib/registry/plugin.h"
#include "lib/registry/registry.h"

namespace kiln {
namespace {

std::string Canonical(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) != nullptr ? std::string(buf) : path;
}

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
}

// "0.1.0" -> "0.1": plugins must match kiln's major.minor.
std::string MajorMinor(const std::string& version) {
  size_t first = version.find('.');
  if (first == std::string::npos) return version;
  size_t second = version.find('.', first + 1);
  return version.substr(0, second);
}

std::string FixedString(const char* field, size_t size) {
  return std::string(field, strnlen(field, size));
}

// The contents of one ELF section, read with bounds checks (the file may be anything).
// NotFound when the file is an ELF object without that section.
absl::StatusOr<std::string> ReadElfSection(const std::string& path, const std::string& section) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("plugin '", path, "': cannot open it"));
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  auto read_at = [&](uint64_t offset, void* out, uint64_t size) {
    if (offset > file_size || size > file_size - offset) return false;
    in.seekg(static_cast<std::streamoff>(offset));
    return static_cast<bool>(in.read(static_cast<char*>(out), static_cast<std::streamsize>(size)));
  };
  auto not_library = absl::InvalidArgumentError(
      absl::StrCat("plugin '", path, "' is not a kiln plugin: not a 64-bit ELF shared library"));
  Elf64_Ehdr header;
  if (!read_at(0, &header, sizeof(header)) || std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 ||
      header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB ||
      header.e_type != ET_DYN || header.e_shentsize != sizeof(Elf64_Shdr) ||
      header.e_shstrndx >= header.e_shnum) {
    return not_library;
  }
  std::vector<Elf64_Shdr> sections(header.e_shnum);
  if (!read_at(header.e_shoff, sections.data(), sizeof(Elf64_Shdr) * sections.size()))
    return not_library;
  const Elf64_Shdr& names = sections[header.e_shstrndx];
  if (names.sh_size > (1u << 20)) return not_library;
  std::string name_table(names.sh_size, '\0');
  if (!read_at(names.sh_offset, name_table.data(), names.sh_size)) return not_library;
  for (const Elf64_Shdr& s : sections) {
    if (s.sh_name >= name_table.size() ||
        std::strcmp(name_table.c_str() + s.sh_name, section.c_str()) != 0)
      continue;
    if (s.sh_type == SHT_NOBITS || s.sh_size > (1u << 16)) return not_library;
    std::string bytes(s.sh_size, '\0');
    if (!read_at(s.sh_offset, bytes.data(), s.sh_size)) return not_library;
    return bytes;
  }
  return absl::NotFoundError(section);
}

absl::Status CheckCompatible(const PluginManifest& m) {
  std::string who = absl::StrCat("plugin '", m.name, "' (", m.path, ")");
  if (m.abi_version != kPluginAbiVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, " was built for plugin ABI ", m.abi_version, "; this kiln loads ABI ",
                     kPluginAbiVersion, ": rebuild the plugin against kiln ", KILN_VERSION_STRING));
  }
  if (MajorMinor(m.kiln_version) != MajorMinor(KILN_VERSION_STRING)) {
    return absl::FailedPreconditionError(absl::StrCat(who, " was built against kiln ",
                                                      m.kiln_version, "; this is kiln ",
                                                      KILN_VERSION_STRING, ": rebuild the plugin"));
  }
  if (!m.torch_version.empty() && m.torch_version != KILN_TORCH_VERSION_STRING) {
    std::string ours = std::string(KILN_TORCH_VERSION_STRING).empty()
                           ? std::string("this kiln was built without LibTorch")
                           : absl::StrCat("this kiln uses LibTorch ", KILN_TORCH_VERSION_STRING);
    return absl::FailedPreconditionError(absl::StrCat(
        who, " was built against LibTorch ", m.torch_version, "; ", ours, ": rebuild the plugin"));
  }
  return absl::OkStatus();
}

struct LoaderState {
  std::mutex mu;
  std::map<std::string, PluginManifest> by_path;  // canonical path -> manifest
  std::vector<std::string> order;
};

LoaderState& State() {
  static LoaderState* state = new LoaderState();  // never destroyed: plugins are never unloaded
  return *state;
}

// Adds a plugin's components and resolvers: all of them, or none when one name is taken.
absl::Status Commit(const PluginManifest& m, const Registrar& registrar) {
  RegistryHub& hub = RegistryHub::Instance();
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& p : registrar.pending()) {
    if (const RegistryHub::Entry* existing = hub.Find(p.info.kind, p.info.name)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "plugin '", m.name, "' (", m.path, ") registers ", p.info.kind, " '", p.info.name,
          "', which ", existing->info.origin, " already provides: give it another name"));
    }
    if (!seen.insert({p.info.kind, p.info.name}).second) {
      return absl::AlreadyExistsError(absl::StrCat("plugin '", m.name, "' (", m.path,
                                                   ") registers ", p.info.kind, " '", p.info.name,
                                                   "' twice"));
    }
  }
  config::ResolverRegistry& resolvers = config::ResolverRegistry::Default();
  std::set<std::string> seen_resolvers;
  for (const auto& [name, fn] : registrar.resolvers()) {
    if (resolvers.Contains(name)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "plugin '", m.name, "' (", m.path, ") registers config resolver '", name, "', which ",
          resolvers.OriginOf(name), " already provides: give it another name"));
    }
    if (!seen_resolvers.insert(name).second) {
      return absl::AlreadyExistsError(absl::StrCat(
          "plugin '", m.name, "' (", m.path, ") registers config resolver '", name, "' twice"));
    }
  }
  std::string previous = hub.current_origin();
  hub.set_current_origin(m.Origin());
  absl::Status status;
  for (const auto& p : registrar.pending()) {
    status.Update(hub.Add(p.info, p.factory));
  }
  for (const auto& [name, fn] : registrar.resolvers())
    status.Update(resolvers.Add(name, fn, m.Origin()));
  hub.set_current_origin(previous);
  return status;
}

}  // namespace

std::string PluginManifest::Origin() const {
  return absl::StrCat("plugin ", name, " ", version, " (", path, ")");
}

absl::StatusOr<PluginManifest> InspectPlugin(const std::string& path) {
  if (!IsRegularFile(path)) {
    return absl::NotFoundError(absl::StrCat("plugin '", path, "': no such file"));
  }
  PluginManifest m;
  m.path = Canonical(path);
  auto bytes = ReadElfSection(m.path, KILN_PLUGIN_SECTION);
  if (absl::IsNotFound(bytes.status()) && bytes.status().message() == KILN_PLUGIN_SECTION) {
    return absl::InvalidArgumentError(
        absl::StrCat("plugin '", path, "' is not a kiln plugin: it has no ", KILN_PLUGIN_SECTION,
                     " manifest (declare it with KILN_PLUGIN and build it with kiln_add_plugin)"));
  }
  if (!bytes.ok()) return bytes.status();
  KilnPluginManifest raw;
  if (bytes->size() < sizeof(raw)) {
    return absl::InvalidArgumentError(
        absl::StrCat("plugin '", path, "' has a truncated kiln manifest"));
  }
  std::memcpy(&raw, bytes->data(), sizeof(raw));
  if (FixedString(raw.magic, sizeof(raw.magic)) != KILN_PLUGIN_MAGIC) {
    return absl::InvalidArgumentError(
        absl::StrCat("plugin '", path, "' has a corrupt kiln manifest"));
  }
  m.abi_version = raw.abi_version;
  m.kiln_version = FixedString(raw.kiln_version, sizeof(raw.kiln_version));
  m.torch_version = FixedString(raw.torch_version, sizeof(raw.torch_version));
  m.name = FixedString(raw.name, sizeof(raw.name));
  m.version = FixedString(raw.version, sizeof(raw.version));
  if (auto status = CheckCompatible(m); !status.ok()) return status;
  std::string config_dir = FixedString(raw.config_dir, sizeof(raw.config_dir));
  if (!config_dir.empty()) {
    if (config_dir[0] != '/') config_dir = absl::StrCat(Dirname(m.path), "/", config_dir);
    if (!IsDirectory(config_dir)) {
      return absl::NotFoundError(absl::StrCat("plugin '", m.name, "' (", m.path,
                                              "): its config folder ", config_dir,
                                              " does not exist"));
    }
    m.config_dir = Canonical(config_dir);
  }
  return m;
}

absl::StatusOr<PluginManifest> LoadPlugin(const std::string& path) {
  auto inspected = InspectPlugin(path);
  if (!inspected.ok()) return inspected.status();
  return LoadPlugin(*inspected);
}

absl::StatusOr<PluginManifest> LoadPlugin(const PluginManifest& m) {
  LoaderState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  if (auto it = state.by_path.find(m.path); it != state.by_path.end()) return it->second;
  for (const auto& [other_path, other] : state.by_path) {
    if (other.name == m.name) {
      return absl::AlreadyExistsError(absl::StrCat("two plugins are named '", m.name, "': ",
                                                   other_path, " and ", m.path, "; load only one"));
    }
  }
  auto handle = OpenLibraryAs(m.path, m.Origin(), RTLD_LOCAL);
  if (!handle.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("plugin '", m.name, "': ", handle.status().message()));
  }
  // Never dlclose: the registered factories point into the library.
  auto entry = reinterpret_cast<KilnGetPluginInfoFn>(::dlsym(*handle, KILN_PLUGIN_ENTRY));
  if (entry == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("plugin '", m.path,
                                                   "' is not a kiln plugin: it exports no ",
                                                   KILN_PLUGIN_ENTRY, " function"));
  }
  KilnPluginInfo info = entry();
  if (info.abi_version != kPluginAbiVersion || info.name == nullptr || m.name != info.name) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plugin '", m.path, "': its entry function disagrees with its manifest; rebuild it"));
  }
  Registrar registrar;
  if (info.register_components != nullptr) {
    try {
      info.register_components(registrar);
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("plugin '", m.name, "' failed while registering: ", e.what()));
    }
  }
  if (auto status = Commit(m, registrar); !status.ok()) return status;
  state.by_path.emplace(m.path, m);
  state.order.push_back(m.path);
  return m;
}

std::vector<PluginManifest> LoadedPlugins() {
  LoaderState& state = State();
  std::lock_guard<std::mutex> lock(state.mu);
  std::vector<PluginManifest> out;
  for (const auto& path : state.order) out.push_back(state.by_path.at(path));
  return out;
}

absl::StatusOr<std::vector<std::string>> PluginsOnPath(const std::string& path_list) {
  std::vector<std::string> out;
  for (absl::string_view piece : absl::StrSplit(path_list, ':', absl::SkipEmpty())) {
    std::string entry(piece);
    if (!IsDirectory(entry)) {
      if (!IsRegularFile(entry)) {
        return absl::NotFoundError(
            absl::StrCat("KILN_PLUGIN_PATH names '", entry, "', which does not exist"));
      }
      out.push_back(entry);
      continue;
    }
    std::vector<std::string> found;
    if (DIR* dir = ::opendir(entry.c_str())) {
      while (dirent* e = ::readdir(dir)) {
        std::string file = absl::StrCat(entry, "/", e->d_name);
        if (absl::EndsWith(e->d_name, ".so") && IsRegularFile(file) &&
            ReadElfSection(file, KILN_PLUGIN_SECTION).ok()) {
          found.push_back(file);
        }
      }
      ::closedir(dir);
    }
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

absl::StatusOr<std::string> ResolvePluginReference(const std::string& reference,
                                                   const std::string& installed_dir) {
  if (reference.empty()) return absl::InvalidArgumentError("an empty plugin name");
  if (reference.find('/') != std::string::npos || absl::EndsWith(reference, ".so"))
    return reference;
  std::string installed = absl::StrCat(installed_dir, "/lib", reference, ".so");
  if (IsRegularFile(installed)) return installed;
  return absl::NotFoundError(absl::StrCat(
      "plugin '", reference, "' is neither a path nor installed (looked for ", installed, ")"));
}

}  // namespace kiln
