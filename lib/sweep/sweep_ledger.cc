#include "lib/sweep/sweep_ledger.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "lib/base/csv.h"
#include "lib/base/files.h"
#include "lib/config/node.h"
#include "lib/config/yaml_io.h"

namespace kiln::sweep {
namespace {

using config::NodeKind;
using config::NodePtr;

std::string Quote(const std::string& text) {
  std::string flat = absl::StrReplaceAll(text, {{"\n", " "}, {"\r", " "}});
  return absl::StrCat("'", absl::StrReplaceAll(flat, {{"'", "''"}}), "'");
}

std::string LedgerPath(const std::string& sweep_dir) { return sweep_dir + "/ledger.yaml"; }

}  // namespace

absl::StatusOr<std::vector<LedgerEntry>> ReadLedger(const std::string& sweep_dir) {
  std::vector<LedgerEntry> entries;
  std::ifstream in(LedgerPath(sweep_dir));
  if (!in) return entries;
  std::string line;
  while (std::getline(in, line)) {
    auto node = config::ParseYaml(line, LedgerPath(sweep_dir));
    if (!node.ok() || !(*node)->is_list() || (*node)->size() != 1 || !(*node)->items()[0]->is_map())
      continue;
    const NodePtr& m = (*node)->items()[0];
    LedgerEntry e;
    NodePtr job = m->Find("job"), status = m->Find("status"), seconds = m->Find("seconds"),
            overrides = m->Find("overrides"), message = m->Find("message"), dir = m->Find("dir");
    if (!job || job->kind() != NodeKind::kInt || !status || status->kind() != NodeKind::kString ||
        !overrides || !overrides->is_list()) {
      continue;
    }
    e.job = job->as_int();
    e.status = status->as_string();
    if (seconds && seconds->kind() == NodeKind::kFloat) e.seconds = seconds->as_float();
    for (const auto& o : overrides->items()) e.overrides.push_back(config::PythonStr(*o));
    if (message && message->kind() == NodeKind::kString) e.message = message->as_string();
    if (dir && dir->kind() == NodeKind::kString) e.dir = dir->as_string();
    entries.push_back(std::move(e));
  }
  return entries;
}

absl::Status AppendLedger(const std::string& sweep_dir, const LedgerEntry& e) {
  std::vector<std::string> overrides;
  for (const auto& o : e.overrides) overrides.push_back(Quote(o));
  std::string line = absl::StrFormat(
      "- {job: %d, status: %s, seconds: %.3f, overrides: [%s], dir: %s, message: %s}\n", e.job,
      e.status, e.seconds, absl::StrJoin(overrides, ", "), Quote(e.dir), Quote(e.message));
  // One write with O_APPEND: lines from jobs running in parallel never interleave.
  int fd = ::open(LedgerPath(sweep_dir).c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0)
    return absl::InternalError(
        absl::StrCat("cannot write ", LedgerPath(sweep_dir), ": ", std::strerror(errno)));
  ssize_t written = ::write(fd, line.data(), line.size());
  ::fsync(fd);
  ::close(fd);
  if (written != static_cast<ssize_t>(line.size())) {
    return absl::InternalError(absl::StrCat("cannot write ", LedgerPath(sweep_dir)));
  }
  return absl::OkStatus();
}

std::vector<std::string> JobIdentity(const std::vector<std::string>& overrides) {
  std::vector<std::string> identity;
  for (const auto& o : overrides) {
    size_t start = o.find_first_not_of("+~");
    if (start != std::string::npos && o.compare(start, 5, "hydra") == 0 && o.size() > start + 5 &&
        (o[start + 5] == '.' || o[start + 5] == '/')) {
      continue;
    }
    identity.push_back(o);
  }
  return identity;
}

std::map<int64_t, LedgerEntry> LatestByJob(const std::vector<LedgerEntry>& entries) {
  std::map<int64_t, LedgerEntry> latest;
  for (const auto& e : entries) latest[e.job] = e;
  return latest;
}

absl::StatusOr<std::string> WriteSweepSummary(const std::string& sweep_dir,
                                              const std::vector<std::vector<std::string>>& jobs) {
  auto entries = ReadLedger(sweep_dir);
  if (!entries.ok()) return entries.status();
  auto latest = LatestByJob(*entries);
  std::vector<std::map<std::string, std::string>> metrics(jobs.size());
  std::set<std::string> names;
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto done = latest.find(static_cast<int64_t>(i));
    if (done == latest.end() || done->second.dir.empty()) continue;
    std::string file = done->second.dir + "/test_metrics.yaml";
    auto node = config::LoadYamlFile(file);  // absent for jobs that do not test
    if (!node.ok() || !(*node)->is_map()) continue;
    for (const auto& [key, value] : (*node)->entries()) {
      if (value->kind() != NodeKind::kFloat && value->kind() != NodeKind::kInt) continue;
      double v = value->kind() == NodeKind::kFloat ? value->as_float()
                                                   : static_cast<double>(value->as_int());
      metrics[i][key] = absl::StrFormat("%.4f", v);
      names.insert(key);
    }
  }
  std::vector<std::string> header = {"job", "status", "seconds", "overrides"};
  header.insert(header.end(), names.begin(), names.end());
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto it = latest.find(static_cast<int64_t>(i));
    std::vector<std::string> row = {
        absl::StrCat(i), it == latest.end() ? "missing" : it->second.status,
        it == latest.end() ? "" : absl::StrFormat("%.1f", it->second.seconds),
        absl::StrJoin(JobIdentity(jobs[i]), " ")};
    for (const auto& n : names) row.push_back(metrics[i].count(n) ? metrics[i][n] : "");
    rows.push_back(std::move(row));
  }
  std::string csv;
  std::vector<std::string> cells;
  for (const auto& h : header) cells.push_back(CsvCell(h));
  absl::StrAppend(&csv, absl::StrJoin(cells, ","), "\n");
  for (const auto& row : rows) {
    cells.clear();
    for (const auto& c : row) cells.push_back(CsvCell(c));
    absl::StrAppend(&csv, absl::StrJoin(cells, ","), "\n");
  }
  if (auto st = WriteFileAtomically(sweep_dir + "/summary.csv", csv); !st.ok()) return st;
  std::vector<size_t> widths(header.size());
  for (size_t c = 0; c < header.size(); ++c) {
    widths[c] = header[c].size();
    for (const auto& row : rows) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string table;
  auto add_row = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&table, c ? "  " : "", row[c], std::string(widths[c] - row[c].size(), ' '));
    }
    absl::StrAppend(&table, "\n");
  };
  add_row(header);
  for (const auto& row : rows) add_row(row);
  return table;
}

}  // namespace kiln::sweep
