#include "lib/config/defaults_list.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/config/suggest.h"

namespace kiln::config {
namespace {

struct OverrideMetadata {
  bool external_override = false;
  std::optional<std::string> containing_config_path;
  bool used = false;
};

struct Deletion {
  std::optional<std::string> name;
  bool used = false;
};

absl::Status CompositionError(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// Hydra's `Overrides`: the command line's group choices and deletions, and what the defaults
// lists chose so far.
class Overrides {
 public:
  absl::Status Init(const ConfigRepository& repo, const std::vector<Override>& overrides) {
    for (const auto& o : overrides) {
      if (o.is_sweep()) continue;
      bool is_group = repo.GroupExists(o.key_or_group);
      bool is_dict = o.has_value && o.value.node && o.value.node->is_map();
      if (is_dict || !is_group) {
        config_overrides.push_back(o);
      } else if (o.is_force_add()) {
        return CompositionError(absl::StrCat("force-add of config groups is not supported: '",
                                             o.input_line, "' (use +", o.input_line.substr(2),
                                             ")"));
      } else if (o.is_delete()) {
        Deletion del;
        if (o.has_value) {
          if (o.value.node->kind() != NodeKind::kString) {
            return CompositionError(absl::StrCat("deleting config group '", o.GroupKey(),
                                                 "': the option must be a name in '", o.input_line,
                                                 "'"));
          }
          del.name = o.value.node->as_string();
        }
        deletions_order.push_back(o.GroupKey());
        deletions[o.GroupKey()] = del;
      } else {
        const Node& v = *o.value.node;
        bool is_list = v.is_list();
        if (v.kind() != NodeKind::kString && !is_list && !v.is_null()) {
          return CompositionError(absl::StrCat("config group override '", o.input_line,
                                               "' must name an option of group '", o.key_or_group,
                                               "', not ", KindName(v.kind()), " ", ScalarText(v)));
        }
        Choice choice;
        choice.is_null = v.is_null();
        if (is_list) {
          choice.is_list = true;
          for (const auto& item : v.items()) {
            if (item->kind() != NodeKind::kString) {
              return CompositionError(absl::StrCat("config group override '", o.input_line,
                                                   "': options must be names"));
            }
            choice.options.push_back(item->as_string());
          }
        } else if (!choice.is_null) {
          choice.value = v.as_string();
        }
        if (o.is_add()) {
          DefaultElement d;
          d.is_group = true;
          d.group = o.key_or_group;
          d.package = o.package;
          d.value_is_null = choice.is_null;
          d.value_is_list = choice.is_list;
          d.value = choice.value;
          d.options = choice.options;
          d.external_append = true;
          d.source = Source::Override(o.input_line);
          append_group_defaults.push_back(d);
        } else {
          std::string key = o.GroupKey();
          SetChoice(key, choice);
          OverrideMetadata meta;
          meta.external_override = true;
          metadata[key] = meta;
          sources[key] = Source::Override(o.input_line);
        }
      }
    }
    return absl::OkStatus();
  }

  void AddOverride(const std::string& parent_config_path, const DefaultElement& d) {
    std::string key = d.OverrideKey();
    if (FindChoice(key) != nullptr) return;
    Choice choice;
    choice.is_null = d.value_is_null;
    choice.is_list = d.value_is_list;
    choice.value = d.value;
    choice.options = d.options;
    SetChoice(key, choice);
    OverrideMetadata meta;
    meta.containing_config_path = parent_config_path;
    metadata[key] = meta;
    sources[key] = d.source;
  }

  bool IsOverridden(const DefaultElement& d) const {
    return d.is_group && FindChoice(d.OverrideKey()) != nullptr;
  }

  void OverrideDefaultOption(DefaultElement* d) {
    std::string key = d->OverrideKey();
    const Choice* choice = FindChoice(key);
    if (choice == nullptr) return;
    d->value_is_null = choice->is_null;
    d->value_is_list = choice->is_list;
    d->value = choice->value;
    d->options = choice->options;
    d->config_name_overridden = true;
    auto it = sources.find(key);
    if (it != sources.end()) d->source = it->second;
    metadata[key].used = true;
  }

  absl::Status EnsureOverridesUsed() const {
    for (const auto& [key, choice] : override_choices) {
      const OverrideMetadata& meta = metadata.at(key);
      if (meta.used) continue;
      std::string group = key.substr(0, key.find('@'));
      std::set<std::string> choices;
      auto it = known_choices_per_group.find(group);
      if (it != known_choices_per_group.end()) choices = it->second;
      std::string msg;
      if (choices.size() > 1) {
        msg = absl::StrCat("Could not override '", key, "'. Did you mean to override one of ",
                           absl::StrJoin(choices, ", "), "?");
      } else if (choices.size() == 1) {
        msg = absl::StrCat("Could not override '", key, "'. Did you mean to override ",
                           *choices.begin(), "?");
      } else {
        msg = absl::StrCat("Could not override '", key, "'. No match in the defaults list.");
      }
      if (meta.containing_config_path.has_value()) {
        msg = absl::StrCat("In '", *meta.containing_config_path, "': ", msg);
        auto src = sources.find(key);
        if (src != sources.end() && src->second.known()) msg += " (" + src->second.Describe() + ")";
      }
      if (meta.external_override) {
        msg += absl::StrCat(" To append to your default list use +", key, "=", choice.Text());
      }
      return CompositionError(msg);
    }
    return absl::OkStatus();
  }

  absl::Status EnsureDeletionsUsed() const {
    for (const auto& key : deletions_order) {
      const Deletion& del = deletions.at(key);
      if (del.used) continue;
      std::string desc = del.name.has_value() ? key + "=" + *del.name : key;
      return CompositionError(
          absl::StrCat("Could not delete '", desc, "'. No match in the defaults list"));
    }
    return absl::OkStatus();
  }

  absl::Status SetKnownChoice(const DefaultElement& d) {
    if (!d.is_group) return absl::OkStatus();
    std::string key = d.OverrideKey();
    std::optional<std::string> name = d.Name();
    bool found = false;
    for (auto& [k, v] : known_choices) {
      if (k != key) continue;
      found = true;
      if (name != v) {
        return CompositionError(absl::StrCat(
            "Multiple values for ", key, ". To override a value use 'override ", key, ": ",
            v.value_or("null"), "'", d.source.known() ? " (" + d.source.Describe() + ")" : ""));
      }
    }
    if (!found) known_choices.emplace_back(key, name);
    known_choices_per_group[d.GroupPath()].insert(key);
    return absl::OkStatus();
  }

  bool IsDeleted(const DefaultElement& d) const {
    if (!d.is_group) return false;
    auto it = deletions.find(d.OverrideKey());
    if (it == deletions.end()) return false;
    if (!it->second.name.has_value()) return true;
    return it->second.name == d.Name();
  }

  void Delete(DefaultElement* d) {
    d->deleted = true;
    deletions[d->OverrideKey()].used = true;
  }

  struct Choice {
    bool is_null = false;
    bool is_list = false;
    std::string value;
    std::vector<std::string> options;
    std::string Text() const {
      if (is_null) return "null";
      if (is_list) return "[" + absl::StrJoin(options, ",") + "]";
      return value;
    }
  };

  static std::string ScalarText(const Node& v) { return NodeToOverrideString(v); }

  const Choice* FindChoice(const std::string& key) const {
    for (const auto& [k, c] : override_choices) {
      if (k == key) return &c;
    }
    return nullptr;
  }

  void SetChoice(const std::string& key, const Choice& choice) {
    for (auto& [k, c] : override_choices) {
      if (k == key) {
        c = choice;
        return;
      }
    }
    override_choices.emplace_back(key, choice);
  }

  std::vector<std::pair<std::string, Choice>> override_choices;
  std::map<std::string, OverrideMetadata> metadata;
  std::map<std::string, Source> sources;
  std::vector<DefaultElement> append_group_defaults;
  std::vector<Override> config_overrides;
  std::vector<std::pair<std::string, std::optional<std::string>>> known_choices;
  std::map<std::string, std::set<std::string>> known_choices_per_group;
  std::map<std::string, Deletion> deletions;
  std::vector<std::string> deletions_order;
};

class TreeBuilder {
 public:
  TreeBuilder(ConfigRepository& repo, Overrides& overrides, bool skip_missing)
      : repo_(repo), overrides_(overrides), skip_missing_(skip_missing) {}

  absl::Status Build(DefaultsTreeNode* root, bool is_root_config, bool interpolated_subtree) {
    if (root->virtual_root) {
      // Children (hydra/config, then the primary config) are expanded last to first.
      for (auto it = root->children.rbegin(); it != root->children.rend(); ++it) {
        (*it)->node.UpdateParent("", "");
        auto st = Build(it->get(), (*it)->node.primary, false);
        if (!st.ok()) return st;
      }
      return absl::OkStatus();
    }
    DefaultElement& parent = root->node;
    if (is_root_config) {
      parent.UpdateParent("", "");
      if (!repo_.ConfigExists(parent.ConfigPath())) return ConfigNotFound(*root);
    }
    // The package header.
    if (!parent.is_missing() && parent.Name().has_value() && !parent.is_options()) {
      auto loaded = repo_.Load(parent.ConfigPath());
      if (!loaded.ok()) return loaded.status();
      if (*loaded != nullptr) parent.SetPackageHeader((*loaded)->package_header);
    }
    if (overrides_.IsDeleted(parent)) {
      overrides_.Delete(&parent);
      return absl::OkStatus();
    }
    if (auto st = overrides_.SetKnownChoice(parent); !st.ok()) return st;
    if (!parent.Name().has_value()) return absl::OkStatus();
    if (parent.is_missing()) {
      if (skip_missing_) return absl::OkStatus();
      if (parent.is_group) {
        std::string key = parent.OverrideKey();
        auto options = repo_.GroupOptions(parent.GroupPath());
        return CompositionError(
            absl::StrCat("You must specify '", key, "', e.g, ", key,
                         "=<OPTION>. Available options: ", absl::StrJoin(options, ", ")));
      }
      return CompositionError(
          absl::StrCat("Missing ConfigDefault is not supported: ", parent.path));
    }
    auto loaded_or = repo_.Load(parent.ConfigPath());
    if (!loaded_or.ok()) return loaded_or.status();
    const LoadedConfig* loaded = *loaded_or;
    if (loaded == nullptr) {
      if (parent.optional) {
        parent.deleted = true;
        return absl::OkStatus();
      }
      return ConfigNotFound(*root);
    }
    std::vector<DefaultElement> defaults = loaded->defaults;
    bool self_added = false;
    if (!defaults.empty() || (is_root_config && !overrides_.append_group_defaults.empty())) {
      auto added = ValidateSelf(parent, &defaults);
      if (!added.ok()) return added.status();
      self_added = *added;
    }
    if (is_root_config) {
      for (const auto& d : overrides_.append_group_defaults) defaults.push_back(d);
    }
    if (auto st = UpdateOverrides(&defaults, parent, interpolated_subtree); !st.ok()) return st;

    std::vector<std::unique_ptr<DefaultsTreeNode>> children;  // built last to first
    auto add_child = [&](DefaultElement element) -> absl::Status {
      auto child = std::make_unique<DefaultsTreeNode>();
      child->node = std::move(element);
      child->parent = root;
      auto st = Build(child.get(), false, interpolated_subtree);
      if (!st.ok()) return st;
      children.push_back(std::move(child));
      return absl::OkStatus();
    };
    for (auto it = defaults.rbegin(); it != defaults.rend(); ++it) {
      DefaultElement d = *it;
      if (d.is_self()) {
        d.UpdateParent(root->node.parent_base_dir.value_or(""), root->node.Package().value_or(""));
        auto child = std::make_unique<DefaultsTreeNode>();
        child->node = std::move(d);
        child->parent = root;
        children.push_back(std::move(child));
        continue;
      }
      if (d.override_) continue;
      d.UpdateParent(parent.GroupPath(), parent.FinalPackage());
      if (overrides_.IsOverridden(d)) overrides_.OverrideDefaultOption(&d);
      if (d.is_options()) {
        for (auto opt = d.options.rbegin(); opt != d.options.rend(); ++opt) {
          if (opt->find("${") != std::string::npos) {
            return CompositionError(
                absl::StrCat("In '", parent.ConfigPath(),
                             "': Defaults List interpolation is not supported in "
                             "options list items"));
          }
          DefaultElement item;
          item.path = d.group + "/" + *opt;
          item.package = d.package;
          item.optional = d.optional;
          item.source = d.source;
          item.UpdateParent(parent.GroupPath(), parent.FinalPackage());
          if (auto st = add_child(std::move(item)); !st.ok()) return st;
        }
        continue;
      }
      if (d.is_interpolation()) {
        auto child = std::make_unique<DefaultsTreeNode>();
        child->node = std::move(d);
        child->parent = root;
        children.push_back(std::move(child));
        continue;
      }
      if (auto st = add_child(std::move(d)); !st.ok()) return st;
    }

    // Deferred interpolations (`optional db_schema: ${db}`) see every choice made above.
    std::vector<std::pair<std::string, std::optional<std::string>>> known =
        overrides_.known_choices;
    (void)self_added;
    for (auto& child : children) {
      DefaultElement& d = child->node;
      if (child->expanded || !d.is_interpolation()) continue;
      std::string unresolved;
      if (!d.ResolveInterpolation(known, &unresolved)) {
        std::vector<std::string> keys;
        for (const auto& [k, v] : known) keys.push_back(k);
        return CompositionError(absl::StrCat(
            "Error resolving interpolation '", unresolved, "' in the defaults list of '",
            parent.ConfigPath(), "'",
            keys.empty() ? "" : ", possible interpolation keys: ", absl::StrJoin(keys, ", ")));
      }
      d.UpdateParent(parent.GroupPath(), parent.FinalPackage());
      if (auto st = Build(child.get(), false, true); !st.ok()) return st;
    }
    std::reverse(children.begin(), children.end());
    root->children = std::move(children);
    root->expanded = !root->children.empty();
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<bool> ValidateSelf(const DefaultElement& containing,
                                    std::vector<DefaultElement>* defaults) {
    bool has_self = false;
    bool has_non_override = false;
    for (const auto& d : *defaults) {
      if (!d.override_) has_non_override = true;
      if (d.is_self()) {
        if (has_self) {
          std::string where = d.source.known() ? " (" + d.source.Describe() + ")" : "";
          return CompositionError(
              absl::StrCat("Duplicate _self_ defined in ", containing.ConfigPath(), where));
        }
        has_self = true;
      }
    }
    if ((!has_self && has_non_override) || defaults->empty()) {
      DefaultElement self;
      self.path = "_self_";
      defaults->push_back(self);
    }
    return !has_self;
  }

  absl::Status UpdateOverrides(std::vector<DefaultElement>* defaults, const DefaultElement& parent,
                               bool interpolated_subtree) {
    bool seen_override = false;
    const DefaultElement* last_override = nullptr;
    for (auto& d : *defaults) {
      if (d.is_self()) continue;
      d.UpdateParent(parent.GroupPath(), parent.FinalPackage());
      if (seen_override && !(d.override_ || d.external_append)) {
        return CompositionError(absl::StrCat(
            "In ", parent.ConfigPath(), ": Override '", last_override->OverrideKey(), " : ",
            last_override->Name().value_or("null"), "' is defined before '", d.OverrideKey(), ": ",
            d.Name().value_or("null"), "'. Overrides must be at the end of the defaults list"));
      }
      if (d.is_group && d.override_) {
        seen_override = true;
        last_override = &d;
        if (interpolated_subtree) {
          return CompositionError(
              absl::StrCat(parent.ConfigPath(),
                           ": Default List Overrides are not allowed in the subtree of an "
                           "interpolated config group (override ",
                           d.OverrideKey(), "=", d.Name().value_or("null"), ")"));
        }
        overrides_.AddOverride(parent.ConfigPath(), d);
      }
    }
    return absl::OkStatus();
  }

  absl::Status ConfigNotFound(const DefaultsTreeNode& tree) {
    const DefaultElement& element = tree.node;
    if (element.primary) {
      auto options = repo_.GroupOptions("");
      std::string hint = DidYouMean(element.ConfigPath(), options);
      return absl::NotFoundError(
          absl::StrCat("Cannot find primary config '", element.ConfigPath(), "'", hint,
                       ". Check that it's in your config search path (", SearchPathSummary(), ")"));
    }
    std::string msg;
    if (element.is_group) {
      std::string group = element.GroupPath();
      auto options = repo_.GroupOptions(group);
      msg = absl::StrCat("Could not find '", element.ConfigPath(), "'");
      if (!options.empty()) {
        msg += DidYouMean(element.Name().value_or(""), options);
        msg += absl::StrCat(". Available options in '", group, "': ", absl::StrJoin(options, ", "));
      }
    } else {
      msg = absl::StrCat("Could not load '", element.ConfigPath(), "'");
    }
    if (tree.parent != nullptr && !tree.parent->virtual_root) {
      msg = absl::StrCat("In '", tree.parent->node.ConfigPath(), "': ", msg);
    }
    if (element.source.known()) msg += " (" + element.source.Describe() + ")";
    return absl::NotFoundError(msg);
  }

  std::string SearchPathSummary() const {
    std::vector<std::string> paths;
    for (const auto& e : repo_.search_path()) {
      if (e.provider != "kiln") paths.push_back(e.path);
    }
    return "search path: " + absl::StrJoin(paths, ", ");
  }

  ConfigRepository& repo_;
  Overrides& overrides_;
  bool skip_missing_;
};

std::optional<ResultDefault> MakeResult(const DefaultsTreeNode* tree, const DefaultElement& node) {
  if (!node.Name().has_value()) return std::nullopt;
  ResultDefault res;
  if (node.is_self()) {
    res.config_path = tree->node.ConfigPath();
    res.is_self = true;
    if (tree->parent != nullptr && !tree->parent->virtual_root)
      res.parent = tree->parent->node.ConfigPath();
    res.package = tree->node.FinalPackage();
    res.primary = tree->node.primary;
  } else {
    res.config_path = node.ConfigPath();
    if (tree != nullptr && !tree->virtual_root) res.parent = tree->node.ConfigPath();
    res.package = node.FinalPackage();
    if (node.is_group) res.override_key = node.OverrideKey();
    res.primary = node.primary;
  }
  return res;
}

void Walk(const DefaultsTreeNode& tree, std::vector<ResultDefault>* out) {
  auto visit = [&](const DefaultsTreeNode* containing, const DefaultElement& node) {
    if (node.deleted || node.is_missing()) return;
    auto res = MakeResult(containing, node);
    if (res.has_value()) out->push_back(*res);
  };
  if (!tree.expanded) {
    visit(tree.parent, tree.node);
    return;
  }
  for (const auto& child : tree.children) {
    if (!child->expanded) {
      visit(&tree, child->node);
    } else {
      Walk(*child, out);
    }
  }
}

void FormatTree(const DefaultsTreeNode& tree, int depth, std::string* out) {
  if (!tree.virtual_root) {
    const DefaultElement& d = tree.node;
    std::string line(depth * 2, ' ');
    if (d.is_self()) {
      line += "_self_";
    } else if (d.is_group) {
      line += d.GroupPath() + ": " + (d.Name().has_value() ? *d.Name() : std::string("null"));
      if (d.FinalPackage() != d.DefaultPackage()) line += "  (package " + d.FinalPackage() + ")";
    } else {
      line += d.ConfigPath();
    }
    if (d.deleted) line += "  (deleted)";
    *out += line + "\n";
  }
  for (const auto& child : tree.children)
    FormatTree(*child, tree.virtual_root ? depth : depth + 1, out);
}

}  // namespace

absl::StatusOr<DefaultsList> CreateDefaultsList(ConfigRepository& repo,
                                                const std::string& config_name,
                                                const std::vector<Override>& overrides_list,
                                                bool with_hydra, bool skip_missing) {
  Overrides overrides;
  if (auto st = overrides.Init(repo, overrides_list); !st.ok()) return st;

  auto root = std::make_unique<DefaultsTreeNode>();
  DefaultElement primary;
  primary.path = config_name.empty() ? "_dummy_empty_config_" : config_name;
  primary.primary = true;
  if (with_hydra) {
    root->virtual_root = true;
    root->expanded = true;
    auto hydra = std::make_unique<DefaultsTreeNode>();
    hydra->node.path = "hydra/config";
    hydra->parent = root.get();
    auto primary_node = std::make_unique<DefaultsTreeNode>();
    primary_node->node = primary;
    primary_node->parent = root.get();
    root->children.push_back(std::move(hydra));
    if (!config_name.empty()) root->children.push_back(std::move(primary_node));
  } else {
    root->node = primary;
  }
  TreeBuilder builder(repo, overrides, skip_missing);
  if (auto st = builder.Build(root.get(), /*is_root_config=*/!with_hydra, false); !st.ok())
    return st;

  DefaultsList result;
  Walk(*root, &result.defaults);
  std::set<std::string> keys;
  for (const auto& item : result.defaults) {
    if (item.is_self || !item.override_key.has_value()) continue;
    if (!keys.insert(*item.override_key).second) {
      return CompositionError(
          absl::StrCat(*item.override_key, " appears more than once in the final defaults list"));
    }
  }
  if (auto st = overrides.EnsureOverridesUsed(); !st.ok()) return st;
  if (auto st = overrides.EnsureDeletionsUsed(); !st.ok()) return st;
  result.tree = std::move(root);
  result.config_overrides = overrides.config_overrides;
  result.choices = overrides.known_choices;
  return result;
}

std::string FormatDefaultsTree(const DefaultsTreeNode& tree) {
  std::string out;
  FormatTree(tree, 0, &out);
  return out;
}

}  // namespace kiln::config
