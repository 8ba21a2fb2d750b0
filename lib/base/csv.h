// One CSV cell as RFC 4180 writes it: quoted (with quotes doubled) when it holds a comma, a quote
// or a line break; as it is otherwise. For the CSV files kiln writes (summary.csv,
// predictions.csv).
#pragma once

#include <string>

namespace kiln {

inline std::string CsvCell(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace kiln
