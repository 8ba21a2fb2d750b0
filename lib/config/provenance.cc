#include "lib/config/provenance.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "lib/config/yaml_io.h"

namespace kiln::config {
namespace {

void Collect(const Node& node, const std::string& path,
             std::vector<std::pair<std::string, std::string>>* rows,
             std::vector<std::string>* where) {
  bool leaf = node.is_scalar() || node.size() == 0;
  if (leaf) {
    rows->emplace_back(path + ": " + ScalarToYaml(node), "");
    std::string w = node.source().Describe();
    where->push_back(w.empty() ? "(set by kiln)" : w);
    return;
  }
  if (node.is_map()) {
    for (const auto& [k, v] : node.entries()) {
      Collect(*v, path.empty() ? KeyText(k) : path + "." + KeyText(k), rows, where);
    }
  } else {
    for (size_t i = 0; i < node.items().size(); ++i) {
      Collect(*node.items()[i], path + "." + std::to_string(i), rows, where);
    }
  }
}

}  // namespace

std::string FormatProvenance(const Node& config) {
  std::vector<std::pair<std::string, std::string>> rows;
  std::vector<std::string> where;
  Collect(config, "", &rows, &where);
  size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.first.size());
  width = std::min<size_t>(width, 60);
  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string line = rows[i].first;
    if (line.size() < width) line.append(width - line.size(), ' ');
    out += line + "   " + where[i] + "\n";
  }
  return out;
}

}  // namespace kiln::config
