// Runs every case of ../shared/conformance/hydra and of tests/config/hydra_cases (expected
// results produced by Hydra 1.3.2 itself, see tests/config/hydra_cases/README.md) through the
// real `kiln` binary, judged as ../shared/conformance/hydra/README.md says. Beyond that README,
// a printed config must quote the same strings Hydra quotes, and sweep jobs must print the same
// text (`kiln_skip: reason` in a case.yaml skips a case, e.g. one where Hydra has a bug).
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "lib/config/node.h"
#include "lib/config/override.h"
#include "lib/config/repository.h"
#include "lib/config/sweep.h"
#include "lib/config/yaml_io.h"
#include "tests/support/process.h"

namespace kiln::config {
namespace conformance_test {

using kiln::testing::FileExists;
using kiln::testing::ReadFile;
using kiln::testing::RunProcess;

// The two folders of cases: the shared ones and kiln's own.
struct Folder {
  const char* label;
  std::string root;
};
const Folder kFolders[] = {{"shared", KILN_CONFORMANCE_DIR}, {"kiln", KILN_OWN_CASES_DIR}};

struct CaseRef {
  int folder;  // index into kFolders
  std::string name;
};
void PrintTo(const CaseRef& c, std::ostream* os) {
  *os << kFolders[c.folder].label << "/" << c.name;
}

std::vector<std::string> CaseNames(const std::string& root) {
  std::vector<std::string> names;
  DIR* d = opendir(root.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name[0] != '.' && FileExists(root + "/" + name + "/case.yaml")) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<CaseRef> AllCases() {
  std::vector<CaseRef> cases;
  for (int f = 0; f < 2; ++f) {
    for (auto& name : CaseNames(kFolders[f].root)) cases.push_back({f, name});
  }
  return cases;
}

int g_ran[2] = {0, 0};
int g_passed[2] = {0, 0};
int g_skipped[2] = {0, 0};

class Conformance : public ::testing::TestWithParam<CaseRef> {
 protected:
  static void TearDownTestSuite() {
    std::printf("Hydra conformance: shared %d of %d, kiln %d of %d cases passed", g_passed[0],
                g_ran[0], g_passed[1], g_ran[1]);
    if (g_skipped[0] + g_skipped[1] > 0) {
      std::printf(" (%d more skipped: kiln_skip in their case.yaml)", g_skipped[0] + g_skipped[1]);
    }
    std::printf("\n");
  }

  NodePtr Load(const std::string& file) {
    auto node = LoadYamlFile(dir_ + "/" + file);
    EXPECT_TRUE(node.ok()) << node.status();
    return node.ok() ? *node : Node::Null();
  }

  testing::ProcessResult Kiln(bool resolve) {
    std::vector<std::string> argv = {KILN_BINARY,     "train",      "--config-path", dir_ + "/conf",
                                     "--config-name", config_name_, "--cfg",         "job"};
    if (resolve) argv.push_back("--resolve");
    for (const auto& o : overrides_) argv.push_back(o);
    return RunProcess(argv, env_);
  }

  void ExpectConfig(const testing::ProcessResult& r, const std::string& expected_file) {
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto got = ParseYaml(r.out, "<kiln output>");
    ASSERT_TRUE(got.ok()) << got.status() << "\n" << r.out;
    NodePtr expected = Load(expected_file);
    EXPECT_TRUE(DeepEqual(**got, *expected)) << "kiln printed:\n"
                                             << r.out << "expected (" << expected_file << "):\n"
                                             << ToYaml(*expected);
    // Hydra quotes every string a YAML 1.1 reader would retype (`'2024-01-05'`, `'yes'`); so
    // must kiln, for readers other than its own.
    auto kiln_quoted = QuotedScalarPaths(r.out);
    auto hydra_quoted = QuotedScalarPaths(ReadFile(dir_ + "/" + expected_file));
    ASSERT_TRUE(kiln_quoted.ok() && hydra_quoted.ok());
    EXPECT_EQ(*kiln_quoted, *hydra_quoted) << "quoted differently; kiln printed:\n"
                                           << r.out << "Hydra printed:\n"
                                           << ReadFile(dir_ + "/" + expected_file);
  }

  void ExpectRefusal(const testing::ProcessResult& r) {
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line expected:\n" << r.err;
    for (const auto& word : mentions_)
      EXPECT_NE(r.err.find(word), std::string::npos) << "missing '" << word << "' in: " << r.err;
  }

  // A job line's overrides: split at spaces outside quotes (Hydra joins them with spaces).
  static std::vector<std::string> SplitJobLine(const std::string& line) {
    std::vector<std::string> out;
    std::string current;
    char quote = '\0';
    for (size_t i = 0; i < line.size(); ++i) {
      char c = line[i];
      if (quote == '\0' && c == '\\' && i + 1 < line.size()) {
        current += c;
        current += line[++i];
        continue;
      }
      if (quote != '\0' && c == '\\' && i + 1 < line.size() && line[i + 1] == quote) {
        current += c;
        current += line[++i];
        continue;
      }
      if (quote == '\0' && (c == '\'' || c == '"')) {
        quote = c;
      } else if (c == quote) {
        quote = '\0';
      } else if (quote == '\0' && c == ' ') {
        if (!current.empty()) out.push_back(current);
        current.clear();
        continue;
      }
      current += c;
    }
    if (!current.empty()) out.push_back(current);
    return out;
  }

  void RunSweep() {
    std::vector<Override> overrides;
    absl::Status failed;
    for (const auto& text : overrides_) {
      auto o = ParseOverride(text);
      if (!o.ok()) {
        failed = o.status();
        break;
      }
      overrides.push_back(*o);
    }
    ConfigRepository repo(FileExists(dir_ + "/conf")
                              ? std::vector<SearchPathEntry>{{"main", dir_ + "/conf"}}
                              : std::vector<SearchPathEntry>{});
    absl::StatusOr<std::vector<std::vector<std::string>>> jobs =
        failed.ok() ? PlanSweep({}, overrides, repo) : failed;
    if (!FileExists(dir_ + "/sweep.txt")) {  // Hydra refused to plan it: so must kiln
      ASSERT_FALSE(jobs.ok()) << "kiln planned " << jobs->size() << " jobs";
      for (const auto& word : mentions_) {
        EXPECT_NE(jobs.status().message().find(word), absl::string_view::npos)
            << "missing '" << word << "' in: " << jobs.status();
      }
      return;
    }
    ASSERT_TRUE(jobs.ok()) << jobs.status();
    std::vector<std::string> lines =
        absl::StrSplit(ReadFile(dir_ + "/sweep.txt"), '\n', absl::SkipEmpty());
    ASSERT_EQ(jobs->size(), lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      std::vector<std::string> want = SplitJobLine(lines[i]);
      const auto& got = (*jobs)[i];
      ASSERT_EQ(got.size(), want.size()) << lines[i];
      for (size_t j = 0; j < want.size(); ++j) {
        auto g = ParseOverride(got[j]);
        auto w = ParseOverride(want[j]);
        ASSERT_TRUE(g.ok() && w.ok()) << got[j] << " / " << want[j];
        EXPECT_EQ(g->KeyElement(), w->KeyElement());
        ASSERT_EQ(g->has_value, w->has_value) << got[j] << " vs " << want[j];
        if (w->has_value) {
          EXPECT_TRUE(DeepEqual(*g->value.node, *w->value.node)) << got[j] << " vs " << want[j];
        }
        EXPECT_EQ(got[j], want[j]) << "printed differently";
      }
    }
  }

  std::string dir_;
  std::string config_name_;
  std::vector<std::string> overrides_;
  std::vector<std::string> mentions_;
  std::map<std::string, std::string> env_;
};

TEST_P(Conformance, MatchesHydra) {
  const int folder = GetParam().folder;
  dir_ = kFolders[folder].root + "/" + GetParam().name;
  ++g_ran[folder];
  NodePtr spec = Load("case.yaml");
  ASSERT_TRUE(spec->is_map());
  if (NodePtr skip = spec->Find("kiln_skip"); skip && skip->kind() == NodeKind::kString) {
    --g_ran[folder];  // not run: kiln deliberately differs (docs/configuration.md says why)
    ++g_skipped[folder];
    GTEST_SKIP() << skip->as_string();
  }
  config_name_ = spec->Find("config_name")->as_string();
  if (NodePtr o = spec->Find("overrides"); o && o->is_list()) {
    for (const auto& item : o->items()) overrides_.push_back(item->as_string());
  }
  if (NodePtr m = spec->Find("error_mentions"); m && m->is_list()) {
    for (const auto& item : m->items()) mentions_.push_back(PythonStr(*item));
  }
  if (NodePtr e = spec->Find("env"); e && e->is_map()) {
    for (const auto& [k, v] : e->entries()) env_[k] = PythonStr(*v);
  }
  NodePtr mode = spec->Find("mode");
  bool has_expected = FileExists(dir_ + "/expected.yaml");
  bool has_resolved = FileExists(dir_ + "/resolved.yaml");
  bool has_error = FileExists(dir_ + "/error.txt");
  if (mode && mode->kind() == NodeKind::kString && mode->as_string() == "sweep") {
    RunSweep();
  } else if (has_error && !has_resolved && !has_expected) {
    ExpectRefusal(Kiln(false));
  } else if (has_error && has_expected) {
    ExpectConfig(Kiln(false), "expected.yaml");
    ExpectRefusal(Kiln(true));
  } else {
    ExpectConfig(Kiln(false), "expected.yaml");
    ExpectConfig(Kiln(true), "resolved.yaml");
  }
  if (!HasFailure()) ++g_passed[folder];
}

INSTANTIATE_TEST_SUITE_P(Hydra, Conformance, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<CaseRef>& info) {
                           return std::string(kFolders[info.param.folder].label) + "_" +
                                  info.param.name;
                         });

TEST(ConformanceSuite, FindsTheCases) {
  EXPECT_GE(CaseNames(kFolders[0].root).size(), 60u) << "no cases under " << kFolders[0].root;
  EXPECT_GE(CaseNames(kFolders[1].root).size(), 100u) << "no cases under " << kFolders[1].root;
}

}  // namespace conformance_test
}  // namespace kiln::config
