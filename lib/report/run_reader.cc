#include "lib/report/run_reader.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/base/files.h"
#include "lib/config/node.h"
#include "lib/config/override.h"
#include "lib/config/sweep.h"
#include "lib/config/yaml_io.h"
#include "lib/sweep/optuna/study.h"
#include "lib/sweep/sweep_ledger.h"

namespace kiln::report {
namespace {

namespace fs = std::filesystem;
using config::Node;
using config::NodeKind;
using config::NodePtr;

bool IsFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

bool IsDir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

std::optional<std::string> ReadText(const fs::path& p) {
  auto text = ReadFileToString(p.string());
  if (!text.ok()) return std::nullopt;
  return *std::move(text);
}

// One CSV line split into cells (RFC 4180 quoting); the files kiln writes hold no line breaks in
// cells.
std::vector<std::string> CsvCells(absl::string_view line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else if (c != '\r') {
      cells.back() += c;
    }
  }
  return cells;
}

// The lines of a CSV file; a last line without its line break is one a writer had not finished
// (kiln's writers end every line), so it is left out and noted.
std::vector<std::string> CsvLines(const std::string& text, const std::string& what,
                                  std::vector<std::string>* notes) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && !lines.back().empty()) {
    notes->push_back(absl::StrCat(
        what, ": the last line is cut short (a file still being written?); skipped it"));
  }
  lines.pop_back();
  return lines;
}

std::optional<Table> ReadTable(const fs::path& file, std::vector<std::string>* notes) {
  auto text = ReadText(file);
  if (!text) return std::nullopt;
  std::vector<std::string> lines = CsvLines(*text, file.filename().string(), notes);
  if (lines.empty()) {
    notes->push_back(absl::StrCat(file.filename().string(), ": empty; skipped"));
    return std::nullopt;
  }
  Table table;
  table.name = file.stem().string();
  table.header = CsvCells(lines[0]);
  for (size_t i = 1; i < lines.size(); ++i) {
    auto cells = CsvCells(lines[i]);
    if (cells.size() != table.header.size()) {
      notes->push_back(absl::StrCat(file.filename().string(), ": line ", i + 1, " has ",
                                    cells.size(), " cells, the header ", table.header.size(),
                                    "; skipped the line"));
      continue;
    }
    table.rows.push_back(std::move(cells));
  }
  return table;
}

// A whole cell as a number (std::from_chars: the hot loop of a 20,000-line metrics.csv).
bool ParseNumber(absl::string_view cell, double* out) {
  const char* end = cell.data() + cell.size();
  auto [ptr, ec] = std::from_chars(cell.data(), end, *out);
  if (ec == std::errc() && ptr == end) return true;
  return absl::SimpleAtod(cell, out);  // "+1", " 1", "inf": what from_chars refuses
}

// Splits `line` at commas into `cells` (reused between lines: metrics.csv has many); a line with
// a quote goes through CsvCells.
void SplitCells(absl::string_view line, std::vector<std::string>* quoted,
                std::vector<absl::string_view>* cells) {
  cells->clear();
  if (line.find('"') != absl::string_view::npos) {
    *quoted = CsvCells(line);
    for (const auto& c : *quoted) cells->push_back(c);
    return;
  }
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  size_t start = 0;
  for (size_t comma; (comma = line.find(',', start)) != absl::string_view::npos;
       start = comma + 1) {
    cells->push_back(line.substr(start, comma - start));
  }
  cells->push_back(line.substr(start));
}

void ReadMetricsCsv(const fs::path& file, Run* run) {
  auto text = ReadText(file);
  if (!text) return;
  absl::string_view rest(*text);
  if (rest.empty()) {
    run->notes.push_back("metrics.csv: empty; no curves");
    return;
  }
  size_t end = rest.rfind('\n');
  if (end + 1 != rest.size()) {
    run->notes.push_back(
        "metrics.csv: the last line is cut short (a file still being written?); skipped it");
    rest = end == absl::string_view::npos ? absl::string_view() : rest.substr(0, end + 1);
  }
  size_t eol = rest.find('\n');
  if (eol == absl::string_view::npos) {
    run->notes.push_back("metrics.csv: no complete header line; no curves");
    return;
  }
  std::vector<std::string> header = CsvCells(rest.substr(0, eol));
  rest.remove_prefix(eol + 1);
  size_t step_col = std::find(header.begin(), header.end(), "step") - header.begin();
  if (step_col == header.size()) {
    run->notes.push_back("metrics.csv: no 'step' column; no curves");
    return;
  }
  std::vector<Series*> columns(header.size(), nullptr);
  for (size_t c = 0; c < header.size(); ++c) {
    if (c != step_col) columns[c] = &run->series[header[c]];
  }
  int64_t bad = 0;
  std::vector<std::string> quoted;
  std::vector<absl::string_view> cells;
  while (!rest.empty()) {
    eol = rest.find('\n');
    absl::string_view line = rest.substr(0, eol);
    rest.remove_prefix(eol + 1);
    SplitCells(line, &quoted, &cells);
    double step;
    if (cells.size() != header.size() || !ParseNumber(cells[step_col], &step)) {
      ++bad;
      continue;
    }
    for (size_t c = 0; c < cells.size(); ++c) {
      if (columns[c] == nullptr || cells[c].empty()) continue;
      double v;
      if (!ParseNumber(cells[c], &v)) v = std::nan("");
      columns[c]->steps.push_back(step);
      columns[c]->values.push_back(v);
    }
  }
  if (bad > 0)
    run->notes.push_back(absl::StrCat("metrics.csv: skipped ", bad, " malformed line(s)"));
  for (auto it = run->series.begin(); it != run->series.end();) {
    it = it->second.size() == 0 ? run->series.erase(it) : std::next(it);
  }
}

void Flatten(const Node& node, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>* out) {
  if (node.is_map()) {
    if (node.size() == 0) out->push_back({prefix, "{}"});
    for (const auto& [key, value] : node.entries()) {
      Flatten(*value, prefix.empty() ? key : absl::StrCat(prefix, ".", key), out);
    }
  } else if (node.is_list()) {
    if (node.size() == 0) out->push_back({prefix, "[]"});
    for (size_t i = 0; i < node.size(); ++i)
      Flatten(*node.items()[i], absl::StrCat(prefix, ".", i), out);
  } else {
    out->push_back({prefix, config::ScalarToYaml(node)});
  }
}

// The training's samples per second, from the fit loop's last line ("fit done: 1 epochs, 42
// optimizer steps, 5376 samples in 22.2 s").
std::optional<double> LogSamplesPerSecond(const std::string& log) {
  size_t at = log.rfind("fit done: ");
  if (at == std::string::npos) return std::nullopt;
  absl::string_view line = absl::string_view(log).substr(at, log.find('\n', at) - at);
  size_t samples = line.find(" samples in ");
  size_t comma = line.rfind(", ", samples);
  double n, seconds;
  if (samples == absl::string_view::npos || comma == absl::string_view::npos ||
      !absl::SimpleAtod(line.substr(comma + 2, samples - comma - 2), &n)) {
    return std::nullopt;
  }
  absl::string_view rest = line.substr(samples + 12);
  if (!absl::SimpleAtod(rest.substr(0, rest.find(' ')), &seconds) || !(seconds > 0))
    return std::nullopt;
  return n / seconds;
}

// Seconds between the first and the last timestamp of train.log ("[2026-11-24 12:00:00,123]...").
std::optional<double> LogWallSeconds(const std::string& text) {
  auto parse = [](absl::string_view line) -> std::optional<double> {
    if (line.size() < 25 || line[0] != '[') return std::nullopt;
    std::tm tm{};
    std::string stamp(line.substr(1, 19));
    if (strptime(stamp.c_str(), "%Y-%m-%d %H:%M:%S", &tm) == nullptr) return std::nullopt;
    int ms = 0;
    if (line[20] == ',' && !absl::SimpleAtoi(line.substr(21, 3), &ms)) ms = 0;
    tm.tm_isdst = -1;
    return static_cast<double>(std::mktime(&tm)) + ms / 1000.0;
  };
  std::optional<double> first, last;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (auto t = parse(line)) {
      if (!first) first = t;
      last = t;
    }
  }
  if (!first) return std::nullopt;
  return *last - *first;
}

bool HasEnding(const std::string& s, absl::string_view end) { return absl::EndsWith(s, end); }

bool IsRunDir(const fs::path& dir) {
  return IsFile(dir / ".hydra" / "config.yaml") || IsFile(dir / "metrics.csv") ||
         IsFile(dir / "test_metrics.yaml");
}

bool IsSweepDir(const fs::path& dir) {
  return IsFile(dir / "multirun.yaml") || IsFile(dir / "ledger.yaml");
}

std::string Relative(const fs::path& path, const fs::path& base) {
  std::error_code ec;
  fs::path rel = fs::relative(path, base, ec);
  std::string s = ec || rel.empty() ? path.string() : rel.string();
  return s == "." ? path.filename().string() : s;
}

double Number(const Node& n) {
  if (n.kind() == NodeKind::kFloat) return n.as_float();
  if (n.kind() == NodeKind::kInt) return config::NumberValue(n);
  return std::nan("");
}

// The search space: hydra.sweeper.params, then the sweeps of the command line
// (hydra.overrides.task), a later one of a key replacing an earlier one, as the sweepers merge
// them. What does not parse is left out: the page then lays the axis out from the trials' values.
void ReadSearchSpace(const Node& root, const NodePtr& sweeper, Sweep* sweep) {
  std::vector<config::Override> params, task;
  if (auto p = config::ParseSweepParams(sweeper->Find("params")); p.ok()) params = *std::move(p);
  NodePtr hydra = root.Find("hydra");
  NodePtr overrides = hydra ? hydra->Find("overrides") : nullptr;
  NodePtr lines = overrides && overrides->is_map() ? overrides->Find("task") : nullptr;
  if (lines && lines->is_list()) {
    for (const auto& line : lines->items()) {
      if (line->kind() != NodeKind::kString) continue;
      if (auto o = config::ParseOverride(line->as_string()); o.ok()) task.push_back(*std::move(o));
    }
  }
  for (const auto& o : config::MergeSweepOverrides(params, task)) {
    if (!o.is_sweep()) continue;
    const config::Sweep& s = o.sweep;
    SweptParam p;
    p.name = o.KeyElement();
    p.name.erase(0, p.name.find_first_not_of('+'));
    p.log = std::find(s.tags.begin(), s.tags.end(), "log") != s.tags.end();
    switch (s.kind) {
      case config::SweepKind::kInterval:
        p.kind = "interval";
        if (double a = Number(*s.interval_low), b = Number(*s.interval_high);
            std::isfinite(a) && std::isfinite(b)) {
          p.low = a;
          p.high = b;
        }
        break;
      case config::SweepKind::kRange: p.kind = "range"; break;
      case config::SweepKind::kChoice:
        p.kind = "choice";
        for (const auto& c : s.choices) p.choices.push_back(config::OverrideValueToString(c));
        break;
      default: p.kind = "glob";
    }
    sweep->space.push_back(std::move(p));
  }
}

// multirun.yaml's hydra.sweeper: its _target_ name (basic, optuna), objectives and directions.
void ReadSweeperConfig(const fs::path& dir, Sweep* sweep) {
  sweep->sweeper = "basic";
  auto node = config::LoadYamlFile((dir / "multirun.yaml").string());
  if (!node.ok()) return;
  NodePtr hydra = (*node)->Find("hydra");
  NodePtr sweeper = hydra ? hydra->Find("sweeper") : nullptr;
  if (!sweeper || !sweeper->is_map()) return;
  if (NodePtr target = sweeper->Find("_target_"); target && target->kind() == NodeKind::kString) {
    std::string t = target->as_string();
    sweep->sweeper = t.find("optuna") != std::string::npos ? "optuna" : t;
  }
  auto strings = [](const NodePtr& n) {
    std::vector<std::string> out;
    if (!n) return out;
    if (n->kind() == NodeKind::kString) out.push_back(n->as_string());
    if (n->is_list()) {
      for (const auto& item : n->items()) {
        if (item->kind() == NodeKind::kString) out.push_back(item->as_string());
      }
    }
    return out;
  };
  sweep->directions = strings(sweeper->Find("direction"));
  ReadSearchSpace(**node, sweeper, sweep);
}

// An Optuna sweep's summary.csv: trial,state,OBJECTIVE...,seconds,PARAM...,dir.
void ReadOptunaSummary(const fs::path& dir, Sweep* sweep) {
  std::vector<std::string> notes;
  auto table = ReadTable(dir / "summary.csv", &notes);
  sweep->notes.insert(sweep->notes.end(), notes.begin(), notes.end());
  if (!table) return;
  const auto& h = table->header;
  auto seconds_col = std::find(h.begin(), h.end(), "seconds") - h.begin();
  if (h.size() < 4 || h[0] != "trial" || h[1] != "state" ||
      seconds_col == static_cast<long>(h.size()) || h.back() != "dir") {
    sweep->notes.push_back("summary.csv: not the table an Optuna sweep writes; skipped");
    return;
  }
  sweep->objectives.assign(h.begin() + 2, h.begin() + seconds_col);
  for (const auto& row : table->rows) {
    Trial t;
    if (!absl::SimpleAtoi(row[0], &t.number)) continue;
    t.state = row[1];
    for (long c = 2; c < seconds_col; ++c) {
      double v;
      if (absl::SimpleAtod(row[c], &v)) t.values.push_back(v);
    }
    double s;
    if (absl::SimpleAtod(row[seconds_col], &s)) t.seconds = s;
    for (size_t c = seconds_col + 1; c + 1 < h.size(); ++c) t.params[h[c]] = row[c];
    t.dir = row.back();
    sweep->trials.push_back(std::move(t));
  }
}

// An Optuna sweep's trials from its study (study.yaml names it), which has the final state of every
// trial, those of other processes sharing the study included. False when the sweep has no
// study.yaml; when the study cannot be read, a note says why and the caller reads summary.csv.
bool ReadOptunaStudy(const fs::path& dir, Sweep* sweep) {
  auto record = sweep::ReadStudyRecord(dir.string());
  if (!record.ok()) {
    if (!absl::IsNotFound(record.status()))
      sweep->notes.push_back(std::string(record.status().message()));
    return false;
  }
  sweep->objectives = record->objectives;
  sweep->directions = record->directions;
  auto trials = sweep::ReadStudyTrials(dir.string(), *record);
  if (!trials.ok()) {
    sweep->notes.push_back(absl::StrCat("could not read the study '", record->study_name, "' (",
                                        trials.status().message(),
                                        "); trial states are from summary.csv"));
    return false;
  }
  for (const auto& s : *trials) {
    Trial t;
    t.number = s.number;
    t.state = s.state;
    t.values = s.values;
    t.seconds = s.seconds;
    t.params = s.params;
    t.dir = s.dir;
    sweep->trials.push_back(std::move(t));
  }
  return true;
}

// A grid sweep's ledger.yaml: the last entry of each job.
void ReadLedgerTrials(const fs::path& dir, Sweep* sweep) {
  auto entries = sweep::ReadLedger(dir.string());
  if (!entries.ok()) {
    sweep->notes.push_back(absl::StrCat("ledger.yaml: ", entries.status().message(), "; skipped"));
    return;
  }
  for (const auto& [job, e] : sweep::LatestByJob(*entries)) {
    Trial t;
    t.number = job;
    t.state = e.status;
    t.seconds = e.seconds;
    for (const auto& o : sweep::JobIdentity(e.overrides)) {
      size_t eq = o.find('=');
      if (eq != std::string::npos)
        t.params[std::string(absl::StripPrefix(o.substr(0, eq), "+"))] = o.substr(eq + 1);
    }
    t.dir = e.dir;
    if (e.status != "ok" && !e.message.empty()) {
      sweep->notes.push_back(absl::StrCat("job ", job, " ", e.status, ": ", e.message));
    }
    sweep->trials.push_back(std::move(t));
  }
}

class Reader {
 public:
  absl::Status Add(const std::string& path) {
    fs::path p = fs::absolute(path).lexically_normal();
    if (p.has_filename() == false) p = p.parent_path();
    if (!IsDir(p)) return absl::NotFoundError(absl::StrCat("'", path, "' is not a directory"));
    base_ = IsRunDir(p) || IsSweepDir(p) ? p.parent_path() : p;
    Walk(p, 0);
    return absl::OkStatus();
  }

  // Reads the runs found, in parallel (a folder of 100 long runs is mostly parsing metrics.csv).
  Collection Finish() {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next++) < pending_.size();) {
        const Pending& p = pending_[i];
        Run& run = out_.runs[p.index];
        std::string dir = run.dir, name = run.name;
        run = ReadRun(dir, name);
        if (!p.trial_state.empty()) run.status = TrialStatus(p.trial_state, run.status);
        if (!p.note.empty()) run.notes.push_back(p.note);
      }
    };
    size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), 8);
    std::vector<std::thread> pool;
    for (size_t t = 1; t < std::min(threads, pending_.size()); ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    return std::move(out_);
  }

 private:
  void Walk(const fs::path& dir, int depth) {
    if (!seen_.insert(fs::weakly_canonical(dir).string()).second) return;
    if (IsSweepDir(dir)) return AddSweep(dir);
    if (IsRunDir(dir)) {
      AddRun(dir, "", "");
      return;
    }
    if (depth >= kMaxDepth) return;
    std::vector<fs::path> children;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::string name = it->path().filename().string();
      if (name.empty() || name[0] == '.' || name == "checkpoints") continue;
      if (IsDir(it->path())) children.push_back(it->path());
    }
    std::sort(children.begin(), children.end(), NaturalLess);
    for (const auto& child : children) Walk(child, depth + 1);
  }

  void AddSweep(const fs::path& dir) {
    Sweep sweep;
    sweep.dir = dir.string();
    sweep.name = Relative(dir, base_);
    ReadSweeperConfig(dir, &sweep);
    if (sweep.sweeper == "optuna" && ReadOptunaStudy(dir, &sweep)) {
    } else if (sweep.sweeper == "optuna" && IsFile(dir / "summary.csv")) {
      ReadOptunaSummary(dir, &sweep);
    } else {
      ReadLedgerTrials(dir, &sweep);
    }
    // The jobs' folders: those the sweep names, then any other run folder inside it.
    std::set<std::string> taken;
    for (auto& t : sweep.trials) {
      fs::path job = t.dir.empty() ? dir / std::to_string(t.number) : fs::path(t.dir);
      if (job.is_relative()) job = fs::absolute(job);
      if (!IsRunDir(job)) {
        if (t.state != "ok" && t.state != "COMPLETE") continue;
        sweep.notes.push_back(
            absl::StrCat("job ", t.number, ": no run folder at ", job.string(), "; skipped"));
        continue;
      }
      taken.insert(fs::weakly_canonical(job).string());
      seen_.insert(fs::weakly_canonical(job).string());
      t.run = static_cast<int>(AddRun(job, t.state, ""));
    }
    std::vector<fs::path> others;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (IsDir(it->path()) && IsRunDir(it->path()) &&
          !taken.count(fs::weakly_canonical(it->path()).string())) {
        others.push_back(it->path());
      }
    }
    std::sort(others.begin(), others.end(), NaturalLess);
    for (const auto& job : others) {
      seen_.insert(fs::weakly_canonical(job).string());
      AddRun(job, "", "not in the sweep's records (still running, or from an earlier sweep)");
    }
    out_.sweeps.push_back(std::move(sweep));
  }

  static std::string TrialStatus(const std::string& state, const std::string& run_status) {
    if (state == "ok" || state == "COMPLETE") return run_status;
    if (state == "PRUNED") return "pruned";
    if (state == "failed" || state.rfind("FAIL", 0) == 0) return "failed";
    return state.empty() ? run_status : absl::AsciiStrToLower(state);
  }

  // "10" after "9": job folders are numbers.
  static bool NaturalLess(const fs::path& a, const fs::path& b) {
    std::string x = a.filename().string(), y = b.filename().string();
    int64_t i, j;
    if (absl::SimpleAtoi(x, &i) && absl::SimpleAtoi(y, &j)) return i < j;
    return x < y;
  }

  // A run to read in Finish, with what its sweep says about it; returns its index.
  size_t AddRun(const fs::path& dir, const std::string& trial_state, const std::string& note) {
    Run run;
    run.dir = dir.string();
    run.name = Relative(dir, base_);
    out_.runs.push_back(std::move(run));
    pending_.push_back({out_.runs.size() - 1, trial_state, note});
    return out_.runs.size() - 1;
  }

  struct Pending {
    size_t index;
    std::string trial_state;
    std::string note;
  };

  static constexpr int kMaxDepth = 6;
  std::vector<Pending> pending_;
  fs::path base_;
  std::set<std::string> seen_;
  Collection out_;
};

}  // namespace

Run ReadRun(const std::string& dir_path, const std::string& name) {
  fs::path dir(dir_path);
  Run run;
  run.dir = dir.string();
  run.name = name;
  if (IsFile(dir / "metrics.csv")) {
    ReadMetricsCsv(dir / "metrics.csv", &run);
  } else {
    run.notes.push_back(
        "no metrics.csv (the csv logger was off, or the run has not logged yet); no curves");
  }
  bool tested = false;
  if (IsFile(dir / "test_metrics.yaml")) {
    auto node = config::LoadYamlFile((dir / "test_metrics.yaml").string());
    if (node.ok() && (*node)->is_map()) {
      tested = true;
      for (const auto& [key, value] : (*node)->entries()) {
        double v = Number(*value);
        if (!std::isnan(v)) run.test_metrics[key] = v;
      }
    } else {
      run.notes.push_back(absl::StrCat(
          "test_metrics.yaml: ",
          node.ok() ? "not a map of metrics" : std::string(node.status().message()), "; skipped"));
    }
  }
  if (IsFile(dir / ".hydra" / "overrides.yaml")) {
    auto node = config::LoadYamlFile((dir / ".hydra" / "overrides.yaml").string());
    if (node.ok() && (*node)->is_list()) {
      for (const auto& item : (*node)->items()) {
        if (item->kind() == NodeKind::kString) run.overrides.push_back(item->as_string());
      }
    } else {
      run.notes.push_back(".hydra/overrides.yaml: unreadable; skipped");
    }
  }
  if (IsFile(dir / ".hydra" / "config.yaml")) {
    auto node = config::LoadYamlFile((dir / ".hydra" / "config.yaml").string());
    if (node.ok()) {
      Flatten(**node, "", &run.config);
    } else {
      run.notes.push_back(
          absl::StrCat(".hydra/config.yaml: ", node.status().message(), "; skipped"));
    }
  }
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (IsFile(it->path())) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::string n = f.filename().string();
    if (HasEnding(n, "_confusion_matrix.csv")) {
      if (auto t = ReadTable(f, &run.notes)) run.confusion_matrices.push_back(std::move(*t));
    } else if (HasEnding(n, ".csv") && n.find("_per_class_") != std::string::npos) {
      if (auto t = ReadTable(f, &run.notes)) run.per_class.push_back(std::move(*t));
    }
  }
  if (IsDir(dir / "checkpoints")) {
    std::vector<fs::path> ckpts;
    for (fs::directory_iterator it(dir / "checkpoints", ec), end; !ec && it != end;
         it.increment(ec)) {
      if (IsFile(it->path()) && HasEnding(it->path().filename().string(), ".ckpt"))
        ckpts.push_back(it->path());
    }
    std::sort(ckpts.begin(), ckpts.end());
    for (const auto& c : ckpts) {
      std::error_code size_ec;
      auto bytes = fs::file_size(c, size_ec);
      run.checkpoints.push_back({c.string(), size_ec ? -1 : static_cast<int64_t>(bytes)});
    }
  }
  for (const char* log : {"train.log", "test.log", "validate.log"}) {
    if (auto text = ReadText(dir / log)) {
      run.wall_seconds = LogWallSeconds(*text);
      run.samples_per_second = LogSamplesPerSecond(*text);
      break;
    }
  }
  run.status = tested ? "complete" : "incomplete";
  if (!tested)
    run.notes.push_back("no test_metrics.yaml: still running, stopped early, or not tested");
  return run;
}

absl::StatusOr<Collection> ReadRuns(const std::vector<std::string>& paths) {
  if (paths.empty())
    return absl::InvalidArgumentError(
        "kiln report needs a run or sweep folder: kiln report PATH... [-o report.html]");
  Reader reader;
  for (const auto& p : paths) {
    if (auto st = reader.Add(p); !st.ok()) return st;
  }
  Collection c = reader.Finish();
  if (c.runs.empty() && c.sweeps.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no runs under ", absl::StrJoin(paths, ", "),
                     " (a run folder holds .hydra/config.yaml or metrics.csv)"));
  }
  return c;
}

}  // namespace kiln::report
