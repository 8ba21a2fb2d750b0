#include "lib/config/json.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace kiln::config {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string NodeToJson(const Node& node) {
  switch (node.kind()) {
    case NodeKind::kNull: return "null";
    case NodeKind::kBool: return node.as_bool() ? "true" : "false";
    case NodeKind::kInt: return node.int_text();
    case NodeKind::kFloat: {
      double v = node.as_float();
      if (std::isnan(v)) return "NaN";
      if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
      return PythonFloatRepr(
          v);  // the shortest digits that read back as v, as Python's json writes
    }
    case NodeKind::kString: return JsonString(node.as_string());
    case NodeKind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < node.items().size(); ++i)
        absl::StrAppend(&out, i ? ", " : "", NodeToJson(*node.items()[i]));
      return out + "]";
    }
    case NodeKind::kMap: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : node.entries()) {
        absl::StrAppend(&out, first ? "" : ", ",
                        JsonString(IsTypedKey(k) ? NodeToJson(*KeyValue(k)) : k), ": ",
                        NodeToJson(*v));
        first = false;
      }
      return out + "}";
    }
  }
  return "null";
}

}  // namespace kiln::config
