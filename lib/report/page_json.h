// What the report and the lr_find plot put into their pages: a compact JSON writer for the data
// (numbers with the digits a chart needs, strings safe inside <script>) and text escaped for HTML.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "lib/config/json.h"

namespace kiln::report {

// A compact JSON writer: numbers with the digits a chart needs, strings safe inside <script>.
class PageJson {
 public:
  PageJson& Raw(absl::string_view s) {
    Comma();
    out_.append(s.data(), s.size());
    return *this;
  }
  PageJson& Key(absl::string_view k) {
    Comma();
    AppendString(k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  PageJson& Str(absl::string_view s) {
    Comma();
    AppendString(s);
    return *this;
  }
  PageJson& Num(double v, const char* format = "%.6g") {
    Comma();
    if (std::isfinite(v)) {
      char buf[32];
      std::snprintf(buf, sizeof(buf), format, v);
      out_ += buf;
    } else {
      out_ += "null";
    }
    return *this;
  }
  PageJson& Int(int64_t v) {
    Comma();
    absl::StrAppend(&out_, v);
    return *this;
  }
  PageJson& Null() { return Raw("null"); }
  PageJson& Open(char c) {
    Comma();
    out_ += c;
    first_ = true;
    return *this;
  }
  PageJson& Close(char c) {
    out_ += c;
    first_ = false;
    return *this;
  }
  std::string Take() { return std::move(out_); }

 private:
  void Comma() {
    if (after_key_) {
      after_key_ = false;
      first_ = false;
      return;
    }
    if (!first_ && !out_.empty()) out_ += ',';
    first_ = false;
  }
  // JSON's own escapes, and never "</script>" (nor any tag) inside the page's data.
  void AppendString(absl::string_view s) {
    out_ += absl::StrReplaceAll(config::JsonString(std::string(s)),
                                {{"<", "\\u003c"}, {">", "\\u003e"}, {"&", "\\u0026"}});
  }

  std::string out_;
  bool first_ = true;
  bool after_key_ = false;
};

// `text` for HTML (the page's title).
inline std::string HtmlText(const std::string& text) {
  return absl::StrReplaceAll(text, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}});
}

}  // namespace kiln::report
