// Command-line overrides in Hydra 1.3's grammar: `key=v`, `+key=v`, `++key=v`, `~key[=v]`,
// `group=opt`, `group@pkg=opt`, quoted strings, escapes, lists, dicts, interpolations, and
// sweeps (`a,b`, `choice()`, `range()`, `glob()`, `interval()`, `sort()`, `shuffle()`, `tag()`).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/config/node.h"

namespace kiln::config {

enum class OverrideType { kChange, kAdd, kForceAdd, kDelete };

// One value of an override or of a sweep. `quote` is the quote character when the value was
// written quoted (so sweeps can print it back as written), '\0' otherwise.
struct OverrideValue {
  NodePtr node;
  char quote = '\0';
  std::string quoted_text;  // the quoted literal as written, quotes included
};

enum class SweepKind { kNone, kChoice, kRange, kGlob, kInterval };

struct Sweep {
  SweepKind kind = SweepKind::kNone;
  std::vector<OverrideValue> choices;  // kChoice: the values in order
  NodePtr range_start, range_stop, range_step;
  std::vector<std::string> glob_include, glob_exclude;
  NodePtr interval_low, interval_high;  // floats; ints under int(interval(a,b))
  std::vector<std::string> tags;        // tag(log, interval(a,b)): "log"
  bool sort = false, sort_reverse = false, shuffle = false;
};

struct Override {
  OverrideType type = OverrideType::kChange;
  std::string key_or_group;            // "model", "server/db", "trainer.max_epochs", "a.1"
  std::optional<std::string> package;  // the part after '@'
  bool has_value = false;              // false only for `~key`
  OverrideValue value;                 // the value unless this is a sweep
  Sweep sweep;
  std::string input_line;

  bool is_sweep() const { return sweep.kind != SweepKind::kNone; }
  bool is_discrete_sweep() const { return is_sweep() && sweep.kind != SweepKind::kInterval; }
  bool is_delete() const { return type == OverrideType::kDelete; }
  bool is_add() const { return type == OverrideType::kAdd; }
  bool is_force_add() const { return type == OverrideType::kForceAdd; }
  // The key with its prefix and package, as a sweep job line writes it: "+b", "db@server.x".
  std::string KeyElement() const;
  // "db" or "db@pkg" without prefix: the key of a config-group override.
  std::string GroupKey() const;
};

// Parses one override. Errors name the override and the column where parsing failed.
absl::StatusOr<Override> ParseOverride(absl::string_view text);

// Parses a single value (an element, not a sweep) with the override grammar, as oc.decode does.
absl::StatusOr<OverrideValue> ParseOverrideValue(absl::string_view text);

// A value written back in override syntax: strings escaped or re-quoted, lists and dicts in
// brackets. Parsing the result gives the same value.
std::string OverrideValueToString(const OverrideValue& value);
std::string NodeToOverrideString(const Node& node);

}  // namespace kiln::config
