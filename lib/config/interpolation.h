// OmegaConf-style interpolation: `${a.b}`, `${.x}`, `${..x}`, `${a[0]}`, string interpolation
// ("x_${a}"), nested keys, escapes (`\${`), and resolvers (`${oc.env:HOME,/tmp}`).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/config/node.h"

namespace kiln::config {

class Interpolator;
struct InterpolationScan;  // interpolation.cc: where one `${...}` ends and what it holds

// What a resolver sees: its typed arguments, and the interpolator (to look up keys relative
// to the node being resolved).
struct ResolverCall {
  std::string name;
  std::vector<NodePtr> args;
  Interpolator* interpolator;
  const std::vector<std::string>* path;  // path of the node being resolved
};
using ResolverFn = std::function<absl::StatusOr<NodePtr>(const ResolverCall&)>;

// Named resolvers. Default() holds oc.env, oc.select, oc.decode, oc.dict.keys, oc.dict.values,
// now (Hydra's, cached per process) and hydra (reads the `hydra` node of the composed tree);
// plugins add theirs through the Registrar (lib/registry/plugin.h).
class ResolverRegistry {
 public:
  static ResolverRegistry& Default();
  // Adds a resolver; a name that is already registered is refused (never replaced), and the
  // message names whoever registered it first.
  absl::Status Add(const std::string& name, ResolverFn fn, const std::string& origin = "built-in");
  // Add() for kiln's built-ins, whose names are known not to clash.
  void Register(const std::string& name, ResolverFn fn) { Add(name, std::move(fn)).IgnoreError(); }
  bool Contains(const std::string& name) const { return resolvers_.count(name) > 0; }
  const std::string& OriginOf(const std::string& name) const;
  // A name not found calls `load_more` once (the application loads the plugins, whose
  // resolvers are needed only by configs that use them) and looks again.
  const ResolverFn* Find(const std::string& name) const;
  std::vector<std::string> Names() const;
  void set_load_more(std::function<absl::Status()> load_more) { load_more_ = std::move(load_more); }
  // Why `load_more` failed, if it did (an unknown-resolver message says so).
  const absl::Status& load_more_status() const { return load_more_status_; }

 private:
  struct Entry {
    ResolverFn fn;
    std::string origin;
  };
  std::map<std::string, Entry> resolvers_;
  mutable std::function<absl::Status()> load_more_;
  mutable absl::Status load_more_status_;
};

class Interpolator {
 public:
  explicit Interpolator(NodePtr root,
                        const ResolverRegistry& resolvers = ResolverRegistry::Default())
      : root_(std::move(root)), resolvers_(resolvers) {}

  // A copy of `node` (found at `path`) with every interpolation below it resolved. `???`
  // values stay as they are.
  absl::StatusOr<NodePtr> Resolve(const NodePtr& node, const std::vector<std::string>& path);
  absl::StatusOr<NodePtr> ResolveAll() { return Resolve(root_, {}); }

  // Looks up a key as an interpolation would from the node at `path`; nullptr if absent.
  absl::StatusOr<NodePtr> Select(const std::string& key, const std::vector<std::string>& path,
                                 bool resolve);
  const NodePtr& root() const { return root_; }
  // Where the `hydra` resolver looks up `hydra.*` (the composed tree that still holds `hydra`).
  void set_hydra_root(NodePtr hydra_root) { hydra_root_ = std::move(hydra_root); }
  const NodePtr& hydra_root() const { return hydra_root_ ? hydra_root_ : root_; }

 private:
  absl::StatusOr<NodePtr> ResolveString(const Node& node, const std::vector<std::string>& path);
  absl::StatusOr<NodePtr> Evaluate(const InterpolationScan& scan,
                                   const std::vector<std::string>& path);
  absl::StatusOr<std::string> Interpolate(absl::string_view text,
                                          const std::vector<std::string>& path);
  absl::StatusOr<NodePtr> EvaluateArgument(absl::string_view text,
                                           const std::vector<std::string>& path);
  absl::StatusOr<NodePtr> Lookup(absl::string_view key, const std::vector<std::string>& path,
                                 std::vector<std::string>* target_path);

  NodePtr root_;
  NodePtr hydra_root_;
  const ResolverRegistry& resolvers_;
  std::vector<const Node*> stack_;
  // Each node sits at one place in the tree, so its resolved value is fixed; remembering it keeps
  // configs whose interpolations fan out (a: ${b}${b}, b: ${c}${c}, ...) linear instead of
  // exponential.
  std::unordered_map<const Node*, NodePtr> resolved_;
  // Containers resolved on the way through a key; kept alive so their addresses stay unique.
  std::vector<NodePtr> temporaries_;
  std::vector<std::string> stack_keys_;
  // Set while the next Interpolate expands a key (`${models.${name}}`): its interpolations must
  // give strings, as in OmegaConf.
  bool keys_must_be_strings_ = false;
};

// "a.b.0" from path segments (a typed key as its KeyText).
std::string JoinPath(const std::vector<std::string>& path);

// Checks a string value that holds "${" against OmegaConf's interpolation grammar, which
// OmegaConf applies when a value is created (a file loaded, an override applied), whether or
// not it is ever resolved: `${foo`, `${a b}`, `${m['k']}`, `${f:a=b}` are refused.
absl::Status CheckInterpolationSyntax(absl::string_view text);
// Checks text against OmegaConf's `singleElement` rule (what oc.decode accepts).
absl::Status CheckElementSyntax(absl::string_view text);
// The same for every string value in a tree; errors name the key (below `key`) and where the
// value was set.
absl::Status CheckInterpolationSyntaxIn(const Node& node, const std::string& key = "");
// Splits "a.b[0].c" into {"a", "b", "0", "c"}.
std::vector<std::string> SplitKey(absl::string_view key);

}  // namespace kiln::config
