// libFuzzer target: text data files (components/text/text_files.cc): labelled texts in JSONL, CSV
// and TSV (the first byte chooses the format, whether labels are needed and whether a JSONL record
// may be a rendered conversation's segments; the rest is the file), a plain text file, and one
// text per line.
#include "components/text/text_files.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  kiln::fuzz::MemFile file(data + 1, size - 1);
  if (!file.ok()) return 0;
  kiln::text::RecordFields fields;
  static const char* const kFormats[] = {"jsonl", "csv", "tsv"};
  fields.format = kFormats[data[0] % 3];
  if (data[0] & 4) fields.label_field = "category";
  bool need_label = (data[0] & 8) == 0;
  if (data[0] & 32) fields.segments_field = "segments";
  auto records = kiln::text::ReadLabelledTexts(file.path(), fields, need_label);
  if (records.ok()) {
    for (const auto& r : *records) {
      if (r.where.empty()) __builtin_trap();
      if (!r.segments.empty() && (!r.text.empty() || !r.label.empty())) __builtin_trap();
    }
  }
  if (data[0] & 16) {
    auto text = kiln::text::ReadPlainText(file.path());
    auto lines = kiln::text::ReadTextLines(file.path());
    (void)text;
    (void)lines;
  }
  return 0;
}
