#include "components/text/text_files.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "components/text/utf8.h"
#include "lib/base/status_macros.h"
#include "lib/data/shards/shard_set.h"
#include "lib/data/shards/tar_shard.h"

namespace kiln::text {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  if (S_ISDIR(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a folder, not a file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot be read"));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The 1-based line and column of byte `offset`.
std::pair<size_t, size_t> LineOf(const std::string& data, size_t offset) {
  size_t line = 1 + static_cast<size_t>(std::count(
                        data.begin(), data.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
  size_t start = data.rfind('\n', offset == 0 ? 0 : offset - 1);
  size_t column = offset - (start == std::string::npos || offset == 0 ? 0 : start + 1) + 1;
  return {line, column};
}

absl::Status CheckUtf8(const std::string& data, const std::string& path) {
  size_t bad = FindInvalidUtf8(data);
  if (bad == std::string::npos) return absl::OkStatus();
  auto [line, column] = LineOf(data, bad);
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s:%d: invalid UTF-8 (byte 0x%02X at column %d); re-encode the file as UTF-8", path, line,
      static_cast<unsigned char>(data[bad]), column));
}

absl::Status CheckNotEmpty(const std::string& data, const std::string& path) {
  if (data.find_first_not_of(" \t\r\n") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file (no text)"));
  }
  return absl::OkStatus();
}

std::string Extension(const std::string& path) {
  size_t dot = path.rfind('.');
  size_t slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return path.substr(dot + 1);
}

absl::Status MissingField(const std::string& where, const std::string& field,
                          const std::string& which, const std::vector<std::string>& present) {
  return absl::InvalidArgumentError(absl::StrCat(
      where, ": no ", which, " field '", field, "' (the line has: ",
      present.empty() ? "nothing" : absl::StrJoin(present, ", "), "); set data.", which, "_field"));
}

// Calls fn(line number, line) for every line that is not blank, without its "\r\n" or "\n".
absl::Status ForEachLine(const std::string& data,
                         const std::function<absl::Status(size_t, std::string_view)>& fn) {
  size_t number = 0;
  for (size_t begin = 0; begin < data.size();) {
    size_t end = data.find('\n', begin);
    if (end == std::string::npos) end = data.size();
    ++number;
    std::string_view line(data.data() + begin, end - begin);
    begin = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    KILN_RETURN_IF_ERROR(fn(number, line));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TextRecord>> ReadJsonl(const std::string& path, const std::string& data,
                                                  const RecordFields& f, bool need_label) {
  std::vector<TextRecord> out;
  KILN_RETURN_IF_ERROR(ForEachLine(data, [&](size_t line, std::string_view text) -> absl::Status {
    std::string where = absl::StrCat(path, ":", line);
    nlohmann::json j =
        nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": not a JSON object"));
    }
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
    if (!f.segments_field.empty()) {
      auto segments = j.find(f.segments_field);
      if (segments != j.end()) {
        TextRecord r{"", "", where, {}};
        bool good = segments->is_array() && !segments->empty();
        for (const auto& pair : good ? *segments : nlohmann::json::array()) {
          good = pair.is_array() && pair.size() == 2 && pair[0].is_string() && pair[1].is_boolean();
          if (!good) break;
          r.segments.emplace_back(pair[0].get<std::string>(), pair[1].get<bool>());
        }
        if (!good)
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": field '", f.segments_field,
                           "' is not a non-empty list of [text, trained] pairs (as python -m "
                           "kiln.chat writes them)"));
        out.push_back(std::move(r));
        return absl::OkStatus();
      }
      if (j.contains("messages") && !j.contains(f.text_field)) {
        return absl::InvalidArgumentError(absl::StrCat(
            where,
            ": a conversation (messages): render it through the model's chat template first, "
            "python -m kiln.chat --tokenizer DIR IN.jsonl OUT.jsonl (docs/finetuning.md)"));
      }
    }
    auto field = j.find(f.text_field);
    if (field == j.end()) return MissingField(where, f.text_field, "text", keys);
    if (!field->is_string())
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": field '", f.text_field, "' is not a string"));
    TextRecord r{field->get<std::string>(), "", where};
    auto label = j.find(f.label_field);
    if (label != j.end() && !label->is_null()) {
      r.label = label->is_string() ? label->get<std::string>() : label->dump();
    } else if (need_label) {
      return MissingField(where, f.label_field, "label", keys);
    }
    out.push_back(std::move(r));
    return absl::OkStatus();
  }));
  return out;
}

// RFC 4180 CSV (quoted fields may hold separators, quotes and line breaks) or TSV (no quoting);
// the first row names the fields.
absl::StatusOr<std::vector<TextRecord>> ReadDelimited(const std::string& path,
                                                      const std::string& data, char sep,
                                                      const RecordFields& f, bool need_label) {
  std::vector<std::vector<std::string>> rows;
  std::vector<size_t> row_lines;
  size_t line = 1, i = 0;
  while (i < data.size()) {
    std::vector<std::string> row;
    size_t row_line = line;
    std::string cell;
    bool quoted = false, end_of_row = false;
    while (i < data.size() && !end_of_row) {
      char c = data[i];
      if (quoted) {
        if (c == '"' && i + 1 < data.size() && data[i + 1] == '"') {
          cell += '"';
          i += 2;
          continue;
        }
        if (c == '"') {
          quoted = false;
        } else {
          if (c == '\n') ++line;
          cell += c;
        }
        ++i;
        continue;
      }
      if (c == '"' && sep == ',' && cell.empty()) {
        quoted = true;
      } else if (c == sep) {
        row.push_back(std::move(cell));
        cell.clear();
      } else if (c == '\n') {
        ++line;
        end_of_row = true;
      } else if (c != '\r') {
        cell += c;
      }
      ++i;
    }
    if (quoted)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", row_line, ": a quoted field is not closed"));
    row.push_back(std::move(cell));
    if (row.size() == 1 && row[0].empty()) continue;  // blank line
    rows.push_back(std::move(row));
    row_lines.push_back(row_line);
  }
  if (rows.empty())
    return absl::InvalidArgumentError(absl::StrCat(path, ": empty file (no header row)"));
  const std::vector<std::string>& header = rows[0];
  auto column = [&](const std::string& name) -> int64_t {
    auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : it - header.begin();
  };
  int64_t text_col = column(f.text_field), label_col = column(f.label_field);
  std::string header_where = absl::StrCat(path, ":", row_lines[0], " (header)");
  if (text_col < 0) return MissingField(header_where, f.text_field, "text", header);
  if (label_col < 0 && need_label)
    return MissingField(header_where, f.label_field, "label", header);
  std::vector<TextRecord> out;
  for (size_t r = 1; r < rows.size(); ++r) {
    std::string where = absl::StrCat(path, ":", row_lines[r]);
    if (rows[r].size() != header.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", rows[r].size(), " fields, but the header has ", header.size()));
    }
    TextRecord rec{rows[r][static_cast<size_t>(text_col)],
                   label_col >= 0 ? rows[r][static_cast<size_t>(label_col)] : "", where};
    if (need_label && rec.label.empty())
      return MissingField(where, f.label_field, "label (empty)", header);
    out.push_back(std::move(rec));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path, bool folders) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open the folder"));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    struct stat st;
    if (::stat((path + "/" + name).c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode) == folders) names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<std::vector<TextRecord>> ReadFolderPerClass(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> classes, ListDir(path, /*folders=*/true));
  if (classes.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no class folders (expected one sub-folder per class)"));
  std::vector<TextRecord> out;
  for (const auto& label : classes) {
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> files,
                          ListDir(path + "/" + label, /*folders=*/false));
    for (const auto& name : files) {
      std::string file = path + "/" + label + "/" + name;
      KILN_ASSIGN_OR_RETURN(std::string text, ReadFile(file));
      KILN_RETURN_IF_ERROR(CheckUtf8(text, file));
      KILN_RETURN_IF_ERROR(CheckNotEmpty(text, file));
      out.push_back({std::move(text), label, file});
    }
  }
  if (out.empty())
    return absl::InvalidArgumentError(absl::StrCat(path, ": the class folders hold no files"));
  return out;
}

// Shard samples (data=shards' layout, `kiln shard` of a labelled_text module): the text is member
// TEXT_FIELD or txt, the label member LABEL_FIELD or cls; storage order.
absl::StatusOr<std::vector<TextRecord>> ReadShardTexts(const std::string& path,
                                                       const RecordFields& fields,
                                                       bool need_label) {
  std::vector<TextRecord> out;
  KILN_RETURN_IF_ERROR(data::shards::ForEachShardSample(
      path, [&](data::shards::ShardSample& sample, const std::string& where) -> absl::Status {
        const std::string* text = sample.Find(fields.text_field);
        if (text == nullptr) text = sample.Find("txt");
        if (text == nullptr)
          return absl::InvalidArgumentError(
              absl::StrCat(where, " has no .txt (or .", fields.text_field, ")"));
        const std::string* label = sample.Find(fields.label_field);
        if (label == nullptr) label = sample.Find("cls");
        if (label == nullptr && need_label) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, " has no label (.", fields.label_field, " or .cls)"));
        }
        KILN_RETURN_IF_ERROR(CheckUtf8(*text, where));
        KILN_RETURN_IF_ERROR(CheckNotEmpty(*text, where));
        out.push_back({*text,
                       label == nullptr ? "" : std::string(absl::StripAsciiWhitespace(*label)),
                       where});
        return absl::OkStatus();
      }));
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no records"));
  return out;
}

}  // namespace

absl::StatusOr<std::vector<TextRecord>> ReadLabelledTexts(const std::string& path,
                                                          const RecordFields& fields,
                                                          bool need_label) {
  std::string format = fields.format;
  struct stat st;
  if (format == "shards" || (format == "auto" && data::shards::LooksLikeShardSpec(path)))
    return ReadShardTexts(path, fields, need_label);
  if (format == "auto") {
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      format = "folder";
    } else {
      format = Extension(path);
      if (format == "json" || format == "ndjson") format = "jsonl";
    }
  }
  if (format == "folder") return ReadFolderPerClass(path);
  if (format != "jsonl" && format != "csv" && format != "tsv") {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": cannot tell the format from the name; set data.format to jsonl, csv, tsv or folder"));
  }
  KILN_ASSIGN_OR_RETURN(std::string data, ReadFile(path));
  KILN_RETURN_IF_ERROR(CheckNotEmpty(data, path));
  KILN_RETURN_IF_ERROR(CheckUtf8(data, path));
  absl::StatusOr<std::vector<TextRecord>> records =
      format == "jsonl"
          ? ReadJsonl(path, data, fields, need_label)
          : ReadDelimited(path, data, format == "csv" ? ',' : '\t', fields, need_label);
  if (records.ok() && records->empty())
    return absl::InvalidArgumentError(absl::StrCat(path, ": no records"));
  return records;
}

absl::StatusOr<std::string> ReadPlainText(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string data, ReadFile(path));
  KILN_RETURN_IF_ERROR(CheckNotEmpty(data, path));
  KILN_RETURN_IF_ERROR(CheckUtf8(data, path));
  return data;
}

absl::StatusOr<std::vector<std::string>> ReadPlainTexts(const std::string& path) {
  std::vector<std::string> texts;
  if (!data::shards::LooksLikeShardSpec(path)) {
    KILN_ASSIGN_OR_RETURN(std::string text, ReadPlainText(path));
    texts.push_back(std::move(text));
    return texts;
  }
  KILN_RETURN_IF_ERROR(data::shards::ForEachShardSample(
      path, [&](data::shards::ShardSample& sample, const std::string& where) -> absl::Status {
        std::string* text = sample.Find("txt");
        if (text == nullptr)
          return absl::InvalidArgumentError(absl::StrCat(where, " has no text (.txt)"));
        KILN_RETURN_IF_ERROR(CheckNotEmpty(*text, where));
        KILN_RETURN_IF_ERROR(CheckUtf8(*text, where));
        texts.push_back(std::move(*text));
        return absl::OkStatus();
      }));
  if (texts.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no texts"));
  return texts;
}

absl::StatusOr<std::vector<TextRecord>> ReadTextLines(const std::string& path) {
  std::string data;
  std::string name = path == "-" ? "<stdin>" : path;
  if (path == "-") {
    std::ostringstream s;
    s << std::cin.rdbuf();
    data = s.str();
  } else {
    KILN_ASSIGN_OR_RETURN(data, ReadFile(path));
  }
  KILN_RETURN_IF_ERROR(CheckNotEmpty(data, name));
  KILN_RETURN_IF_ERROR(CheckUtf8(data, name));
  std::vector<TextRecord> out;
  KILN_RETURN_IF_ERROR(ForEachLine(data, [&](size_t line, std::string_view text) {
    out.push_back({std::string(text), "", absl::StrCat(name, ":", line)});
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace kiln::text
