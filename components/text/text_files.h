// Reading text data files with errors that name the file and line: labelled texts from JSONL,
// CSV or TSV (configurable text and label fields) or from a folder per class, plain text files,
// and one text per line (a file or stdin). Every text is checked to be valid UTF-8.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::text {

struct TextRecord {
  std::string text;
  std::string label;  // "" when labels are not read
  std::string where;  // "FILE:LINE" (or the file of a folder-per-class text), for messages
  // A JSONL record of RecordFields::segments_field: its texts in order, each with whether a model
  // learns to write it (a conversation rendered through a chat template by `python -m kiln.chat`:
  // the assistant's turns). Then `text` and `label` are empty.
  std::vector<std::pair<std::string, bool>> segments;
};

struct RecordFields {
  std::string format = "auto";  // auto (from the extension or a folder), jsonl, csv, tsv, folder
  std::string text_field = "text";
  std::string label_field = "label";
  // A JSONL field that, where a record has it, stands for its text and label: a list of [text,
  // trained] pairs (TextRecord::segments). Empty: not read.
  std::string segments_field;
};

// The records of `path`; with `need_label` false the label field may be missing. An empty file, a
// malformed line, a missing field or invalid UTF-8 is an error naming FILE:LINE.
absl::StatusOr<std::vector<TextRecord>> ReadLabelledTexts(const std::string& path,
                                                          const RecordFields& fields,
                                                          bool need_label);

// A whole UTF-8 text file; an empty file or invalid UTF-8 (with its line) is an error.
absl::StatusOr<std::string> ReadPlainText(const std::string& path);

// The documents `path` names: the file itself (ReadPlainText), or for shards (pipe:, *.tar,
// *.index.json, {..} ranges) each sample's KEY.txt in storage order, as `kiln shard` writes a
// text_corpus split (one sample per file). Errors name the file, or the shard and key.
absl::StatusOr<std::vector<std::string>> ReadPlainTexts(const std::string& path);

// One text per non-empty line of `path`, or of standard input when `path` is "-".
absl::StatusOr<std::vector<TextRecord>> ReadTextLines(const std::string& path);

}  // namespace kiln::text
