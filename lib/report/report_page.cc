#include "lib/report/report_page.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "lib/config/json.h"
#include "lib/report/page_json.h"

namespace kiln::report {

using config::JsonString;
using config::NodeToJson;
namespace {

namespace fs = std::filesystem;

const char kTemplate[] =
#include "lib/report/web/report_html.inc"
    ;
const char kRendererJs[] =
#include "lib/report/web/report_js.inc"
    ;
const char kRendererCss[] =
#include "lib/report/web/report_css.inc"
    ;
const char kUplotJs[] =
#include "lib/report/web/uplot_js.inc"
    ;
const char kUplotCss[] =
#include "lib/report/web/uplot_css.inc"
    ;

std::string Href(const std::string& path, const std::string& page_dir) {
  std::error_code ec;
  fs::path rel = fs::relative(path, page_dir, ec);
  std::string p = ec || rel.empty() ? path : rel.string();
  std::string out;
  for (unsigned char c : p) {
    if (std::isalnum(c) || std::strchr("-._~/", c)) {
      out += static_cast<char>(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

// x as the first step and then differences (small integers for integer steps); y with 5 digits.
void WriteSeries(PageJson& j, const Series& s, int64_t raw_points) {
  j.Open('{').Key("n").Int(raw_points).Key("dx").Open('[');
  double previous = 0;
  for (double x : s.steps) {
    double d = x - previous;
    if (d == std::floor(d) && std::fabs(d) < 1e15) {
      j.Int(static_cast<int64_t>(d));
    } else {
      j.Num(d, "%.10g");
    }
    previous = x;
  }
  j.Close(']').Key("y").Open('[');
  for (double y : s.values) j.Num(y, "%.5g");
  j.Close(']').Close('}');
}

void WriteStrings(PageJson& j, const std::vector<std::string>& v) {
  j.Open('[');
  for (const auto& s : v) j.Str(s);
  j.Close(']');
}

void WriteTable(PageJson& j, const Table& t) {
  j.Open('{').Key("name").Str(t.name).Key("header");
  WriteStrings(j, t.header);
  j.Key("rows").Open('[');
  for (const auto& row : t.rows) WriteStrings(j, row);
  j.Close(']').Close('}');
}

void WriteRun(PageJson& j, const Run& run, const std::map<std::string, double>& widths,
              const std::string& page_dir) {
  j.Open('{').Key("name").Str(run.name).Key("dir").Str(run.dir).Key("status").Str(run.status);
  j.Key("overrides");
  WriteStrings(j, run.overrides);
  j.Key("wall");
  if (run.wall_seconds)
    j.Num(*run.wall_seconds, "%.1f");
  else
    j.Null();
  j.Key("samples_per_second");
  if (run.samples_per_second)
    j.Num(*run.samples_per_second, "%.1f");
  else
    j.Null();
  j.Key("series").Open('{');
  for (const auto& [name, s] : run.series) {
    j.Key(name);
    WriteSeries(j, Downsample(s, widths.at(name), kDisplayBuckets), static_cast<int64_t>(s.size()));
  }
  j.Close('}').Key("test").Open('{');
  for (const auto& [k, v] : run.test_metrics) j.Key(k).Num(v);
  j.Close('}').Key("confusion").Open('[');
  for (const auto& t : run.confusion_matrices) WriteTable(j, t);
  j.Close(']').Key("per_class").Open('[');
  for (const auto& t : run.per_class) WriteTable(j, t);
  j.Close(']').Key("config").Open('[');
  for (const auto& [k, v] : run.config) j.Open('[').Str(k).Str(v).Close(']');
  j.Close(']').Key("checkpoints").Open('[');
  for (const auto& c : run.checkpoints) {
    j.Open('{')
        .Key("name")
        .Str(fs::path(c.path).filename().string())
        .Key("href")
        .Str(Href(c.path, page_dir));
    j.Key("bytes").Int(c.bytes).Close('}');
  }
  j.Close(']').Key("notes");
  WriteStrings(j, run.notes);
  j.Close('}');
}

void WriteSweep(PageJson& j, const Sweep& sweep) {
  j.Open('{')
      .Key("name")
      .Str(sweep.name)
      .Key("dir")
      .Str(sweep.dir)
      .Key("sweeper")
      .Str(sweep.sweeper);
  j.Key("objectives");
  WriteStrings(j, sweep.objectives);
  j.Key("directions");
  WriteStrings(j, sweep.directions);
  j.Key("space").Open('[');
  for (const auto& p : sweep.space) {
    j.Open('{').Key("name").Str(p.name).Key("kind").Str(p.kind);
    j.Key("log").Raw(p.log ? "true" : "false");
    if (p.low && p.high) j.Key("low").Num(*p.low, "%.10g").Key("high").Num(*p.high, "%.10g");
    j.Key("choices");
    WriteStrings(j, p.choices);
    j.Close('}');
  }
  j.Close(']');
  j.Key("trials").Open('[');
  for (const auto& t : sweep.trials) {
    j.Open('{').Key("number").Int(t.number).Key("state").Str(t.state).Key("values").Open('[');
    for (double v : t.values) j.Num(v, "%.8g");
    j.Close(']').Key("params").Open('{');
    for (const auto& [k, v] : t.params) j.Key(k).Str(v);
    j.Close('}').Key("seconds");
    if (t.seconds)
      j.Num(*t.seconds, "%.1f");
    else
      j.Null();
    j.Key("run").Int(t.run).Close('}');
  }
  j.Close(']').Key("notes");
  WriteStrings(j, sweep.notes);
  j.Close('}');
}

}  // namespace

bool HaveChartingLibrary() { return sizeof(kUplotJs) > 1; }
const char* UplotJs() { return kUplotJs; }
const char* UplotCss() { return kUplotCss; }

std::string ReportJson(const Collection& c, const std::string& page_dir) {
  // One bucket width per metric across runs, so that overlaid curves share their x positions.
  std::map<std::string, double> max_step;
  for (const auto& run : c.runs) {
    for (const auto& [name, s] : run.series) {
      for (double x : s.steps) max_step[name] = std::max(max_step[name], x);
    }
  }
  std::map<std::string, double> widths;
  for (const auto& [name, m] : max_step) widths[name] = BucketWidth(m, kDisplayBuckets);
  PageJson j;
  j.Open('{').Key("display_buckets").Int(kDisplayBuckets).Key("notes");
  WriteStrings(j, c.notes);
  j.Key("runs").Open('[');
  for (const auto& run : c.runs) WriteRun(j, run, widths, page_dir);
  j.Close(']').Key("sweeps").Open('[');
  for (const auto& sweep : c.sweeps) WriteSweep(j, sweep);
  j.Close(']').Close('}');
  return j.Take();
}

std::string ReportHtml(const Collection& c, const std::string& page_dir, const std::string& title,
                       int live_refresh_ms) {
  std::string escaped_title = HtmlText(title);
  // The library's and the renderer's text go in as they are: both come from this build.
  return absl::StrReplaceAll(kTemplate, {{"{{TITLE}}", escaped_title},
                                         {"{{LIVE_MS}}", absl::StrCat(live_refresh_ms)},
                                         {"{{UPLOT_CSS}}", kUplotCss},
                                         {"{{REPORT_CSS}}", kRendererCss},
                                         {"{{UPLOT_JS}}", kUplotJs},
                                         {"{{REPORT_JS}}", kRendererJs},
                                         {"{{DATA}}", ReportJson(c, page_dir)}});
}

}  // namespace kiln::report
