#include "lib/config/compose.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "lib/config/defaults_list.h"
#include "lib/config/interpolation.h"
#include "lib/config/merge.h"
#include "lib/config/node.h"
#include "lib/config/override.h"
#include "lib/config/repository.h"
#include "lib/config/sweep.h"
#include "lib/config/yaml_io.h"
#include "tests/support/process.h"

namespace kiln::config {
namespace compose_test {

using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

NodePtr At(const NodePtr& root, const std::string& key) {
  if (root == nullptr) return nullptr;
  return SelectPath(root, SplitKey(key));
}

std::vector<std::string> Strings(const NodePtr& list) {
  std::vector<std::string> out;
  if (list == nullptr || !list->is_list()) return out;
  for (const auto& item : list->items()) out.push_back(PythonStr(*item));
  return out;
}

std::vector<std::string> Keys(const NodePtr& map) {
  std::vector<std::string> out;
  if (map == nullptr || !map->is_map()) return out;
  for (const auto& [k, v] : map->entries()) out.push_back(k);
  return out;
}

class ComposeTest : public ::testing::Test {
 protected:
  void Write(const std::string& relative, const std::string& contents) {
    dir_.Write(relative, contents);
  }

  ComposeOptions Options(const std::string& config_name, std::vector<std::string> overrides) {
    ComposeOptions options;
    options.search_path = {{"main", dir_.path()}};
    options.config_name = config_name;
    options.overrides = std::move(overrides);
    return options;
  }

  absl::StatusOr<ComposeResult> Run(const std::string& config_name,
                                    std::vector<std::string> overrides = {}) {
    return Compose(Options(config_name, std::move(overrides)));
  }

  // The composed job config; fails the test on an error.
  NodePtr Job(const std::string& config_name, std::vector<std::string> overrides = {}) {
    auto result = Run(config_name, std::move(overrides));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->job : Node::Map();
  }

  absl::Status Error(const std::string& config_name, std::vector<std::string> overrides = {}) {
    auto result = Run(config_name, std::move(overrides));
    EXPECT_FALSE(result.ok()) << "composed:\n" << (result.ok() ? ToYaml(*result->job) : "");
    return result.ok() ? absl::OkStatus() : result.status();
  }

  // The order in which non-hydra configs are merged.
  std::vector<std::string> MergeOrder(const ComposeResult& result) {
    std::vector<std::string> out;
    for (const auto& d : result.defaults->defaults) {
      if (d.config_path.rfind("hydra/", 0) == 0) continue;
      out.push_back(d.config_path);
    }
    return out;
  }

  void WriteDbTree() {
    Write("db/mysql.yaml", "driver: mysql\nport: 3306\nuser: root\n");
    Write("db/postgres.yaml", "driver: postgres\nport: 5432\n");
    Write("model/cnn.yaml", "layers: 3\nwidth: 64\n");
    Write("model/resnet.yaml", "layers: 50\nwidth: 256\n");
  }

  kiln::testing::TempDir dir_;
};

// --- Defaults lists ---

TEST_F(ComposeTest, NoDefaultsListIsJustTheFile) {
  Write("config.yaml", "a: 1\nb:\n  c: x\n");
  NodePtr job = Job("config");
  EXPECT_EQ(At(job, "a")->as_int(), 1);
  EXPECT_EQ(At(job, "b.c")->as_string(), "x");
  EXPECT_EQ(job->Find("hydra"), nullptr);
  EXPECT_EQ(job->Find("defaults"), nullptr);
}

TEST_F(ComposeTest, NoPrimaryConfigComposesOverridesOnly) {
  auto result = Run("", {"+a=1"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(At(result->job, "a")->as_int(), 1);
}

TEST_F(ComposeTest, MissingPrimaryConfigIsAnError) {
  absl::Status st = Error("nosuch");
  EXPECT_THAT(Message(st), HasSubstr("nosuch"));
}

TEST_F(ComposeTest, DefaultsAreMergedInOrder) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n  - model: cnn\n  - _self_\nx: 1\n");
  auto result = Run("config");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(MergeOrder(*result), ElementsAre("db/mysql", "model/cnn", "config"));
  EXPECT_THAT(Keys(result->job), ElementsAre("db", "model", "x"));
  EXPECT_EQ(At(result->job, "db.port")->as_int(), 3306);
  EXPECT_EQ(At(result->job, "model.layers")->as_int(), 3);
}

TEST_F(ComposeTest, SelfLastOverridesGroupValues) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n  - _self_\ndb:\n  port: 1\n");
  auto result = Run("config");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(MergeOrder(*result), ElementsAre("db/mysql", "config"));
  EXPECT_EQ(At(result->job, "db.port")->as_int(), 1);
}

TEST_F(ComposeTest, SelfFirstIsOverriddenByGroupValues) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - _self_\n  - db: mysql\ndb:\n  port: 1\n  extra: e\n");
  auto result = Run("config");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(MergeOrder(*result), ElementsAre("config", "db/mysql"));
  EXPECT_EQ(At(result->job, "db.port")->as_int(), 3306);
  EXPECT_EQ(At(result->job, "db.extra")->as_string(), "e");
}

TEST_F(ComposeTest, SelfInTheMiddle) {
  WriteDbTree();
  Write(
      "config.yaml",
      "defaults:\n  - db: mysql\n  - _self_\n  - model: cnn\ndb:\n  port: 1\nmodel:\n  width: 2\n");
  auto result = Run("config");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(MergeOrder(*result), ElementsAre("db/mysql", "config", "model/cnn"));
  EXPECT_EQ(At(result->job, "db.port")->as_int(), 1);
  EXPECT_EQ(At(result->job, "model.width")->as_int(), 64);
}

TEST_F(ComposeTest, MissingSelfMeansSelfLast) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\ndb:\n  port: 1\n");
  auto result = Run("config");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(MergeOrder(*result), ElementsAre("db/mysql", "config"));
  EXPECT_EQ(At(result->job, "db.port")->as_int(), 1);
}

TEST_F(ComposeTest, NonGroupConfigDefault) {
  Write("base.yaml", "a: 1\nb: 1\n");
  Write("config.yaml", "defaults:\n  - base\n  - _self_\nb: 2\n");
  auto result = Run("config");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(MergeOrder(*result), ElementsAre("base", "config"));
  EXPECT_EQ(At(result->job, "a")->as_int(), 1);
  EXPECT_EQ(At(result->job, "b")->as_int(), 2);
}

TEST_F(ComposeTest, NestedDefaultsInGroupConfig) {
  WriteDbTree();
  Write("model/big.yaml", "defaults:\n  - cnn\n  - _self_\nwidth: 1024\n");
  Write("config.yaml", "defaults:\n  - model: big\n");
  NodePtr job = Job("config");
  EXPECT_EQ(At(job, "model.layers")->as_int(), 3);
  EXPECT_EQ(At(job, "model.width")->as_int(), 1024);
}

TEST_F(ComposeTest, OverrideGroupOption) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n  - _self_\n");
  auto result = Run("config", {"db=postgres"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(At(result->job, "db.driver")->as_string(), "postgres");
  EXPECT_EQ(At(result->job, "db.user"), nullptr);
  EXPECT_THAT(MergeOrder(*result), ElementsAre("db/postgres", "config"));
}

TEST_F(ComposeTest, OverrideGroupWithUnknownOptionListsOptions) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n");
  absl::Status st = Error("config", {"db=oracle"});
  EXPECT_THAT(Message(st), HasSubstr("db/oracle"));
  EXPECT_THAT(Message(st), HasSubstr("mysql, postgres"));
}

TEST_F(ComposeTest, OverrideOfGroupNotInDefaultsSuggestsAppend) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n");
  absl::Status st = Error("config", {"model=cnn"});
  EXPECT_THAT(Message(st), HasSubstr("Could not override 'model'"));
  EXPECT_THAT(Message(st), HasSubstr("+model=cnn"));
}

TEST_F(ComposeTest, MisspelledGroupSuggestsTheGroup) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - model: cnn\n");
  absl::Status st = Error("config", {"modle=resnet"});
  EXPECT_THAT(Message(st), HasSubstr("modle"));
  EXPECT_THAT(Message(st), HasSubstr("'model'"));
}

TEST_F(ComposeTest, AppendGroup) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n  - _self_\nx: 1\n");
  auto result = Run("config", {"+model=resnet"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(At(result->job, "model.layers")->as_int(), 50);
  EXPECT_THAT(MergeOrder(*result), ElementsAre("db/mysql", "config", "model/resnet"));
}

TEST_F(ComposeTest, AppendGroupWithImplicitSelfMergesAfterSelf) {
  // Hydra adds the implicit _self_ before it appends the command line's +group entries.
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\nmodel:\n  layers: 1\n");
  auto result = Run("config", {"+model=resnet"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(MergeOrder(*result), ElementsAre("db/mysql", "config", "model/resnet"));
  EXPECT_EQ(At(result->job, "model.layers")->as_int(), 50);
}

TEST_F(ComposeTest, AppendGroupAlreadyInDefaultsIsAnError) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n");
  absl::Status st = Error("config", {"+db=postgres"});
  EXPECT_THAT(Message(st), HasSubstr("db"));
}

TEST_F(ComposeTest, DeleteGroup) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n  - model: cnn\n");
  auto result = Run("config", {"~db"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->job->Find("db"), nullptr);
  EXPECT_NE(result->job->Find("model"), nullptr);
  EXPECT_THAT(MergeOrder(*result), ElementsAre("model/cnn", "config"));
}

TEST_F(ComposeTest, DeleteGroupWithMatchingOption) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n");
  NodePtr job = Job("config", {"~db=mysql"});
  EXPECT_EQ(job->Find("db"), nullptr);
}

TEST_F(ComposeTest, DeleteGroupWithOtherOptionIsAnError) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n");
  absl::Status st = Error("config", {"~db=postgres"});
  EXPECT_THAT(Message(st), HasSubstr("Could not delete 'db=postgres'"));
}

TEST_F(ComposeTest, DeleteGroupNotInDefaultsIsAnError) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n");
  absl::Status st = Error("config", {"~model"});
  EXPECT_THAT(Message(st), HasSubstr("Could not delete 'model'"));
}

TEST_F(ComposeTest, NullOptionSkipsTheGroup) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n");
  auto result = Run("config", {"db=null"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->job->Find("db"), nullptr);
}

TEST_F(ComposeTest, MandatoryGroupWithoutChoiceIsAnError) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: ???\n");
  absl::Status st = Error("config");
  EXPECT_THAT(Message(st), HasSubstr("You must specify 'db'"));
}

TEST_F(ComposeTest, MandatoryGroupSetOnCommandLine) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: ???\n");
  NodePtr job = Job("config", {"db=postgres"});
  EXPECT_EQ(At(job, "db.port")->as_int(), 5432);
}

// --- Packages ---

TEST_F(ComposeTest, GlobalPackageHeader) {
  Write("model/flat.yaml", "# @package _global_\nlr: 0.1\n");
  Write("config.yaml", "defaults:\n  - model: flat\n");
  NodePtr job = Job("config");
  ASSERT_NE(job->Find("lr"), nullptr);
  EXPECT_DOUBLE_EQ(job->Find("lr")->as_float(), 0.1);
  EXPECT_EQ(job->Find("model"), nullptr);
}

TEST_F(ComposeTest, ExplicitPackageHeader) {
  Write("model/deep.yaml", "# @package nets.main\nlayers: 9\n");
  Write("config.yaml", "defaults:\n  - model: deep\n");
  NodePtr job = Job("config");
  EXPECT_EQ(At(job, "nets.main.layers")->as_int(), 9);
  EXPECT_EQ(job->Find("model"), nullptr);
}

TEST_F(ComposeTest, PackageInDefaultsEntry) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db@primary: mysql\n  - db@replica: postgres\n");
  NodePtr job = Job("config");
  EXPECT_EQ(At(job, "primary.port")->as_int(), 3306);
  EXPECT_EQ(At(job, "replica.port")->as_int(), 5432);
  EXPECT_EQ(job->Find("db"), nullptr);
}

TEST_F(ComposeTest, OverrideGroupWithPackage) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db@primary: mysql\n  - db@replica: mysql\n");
  NodePtr job = Job("config", {"db@replica=postgres"});
  EXPECT_EQ(At(job, "primary.port")->as_int(), 3306);
  EXPECT_EQ(At(job, "replica.port")->as_int(), 5432);
}

TEST_F(ComposeTest, NestedGroupDefaultPackage) {
  Write("server/db/mysql.yaml", "port: 3306\n");
  Write("config.yaml", "defaults:\n  - server/db: mysql\n");
  NodePtr job = Job("config");
  EXPECT_EQ(At(job, "server.db.port")->as_int(), 3306);
}

TEST_F(ComposeTest, NestedGroupOverride) {
  Write("server/db/mysql.yaml", "port: 3306\n");
  Write("server/db/pg.yaml", "port: 5432\n");
  Write("config.yaml", "defaults:\n  - server/db: mysql\n");
  NodePtr job = Job("config", {"server/db=pg"});
  EXPECT_EQ(At(job, "server.db.port")->as_int(), 5432);
}

// --- Multi-select, optional, conflicts ---

TEST_F(ComposeTest, MultiSelectMergesOptionsInOrder) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: [mysql, postgres]\n");
  auto result = Run("config");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(MergeOrder(*result), ElementsAre("db/mysql", "db/postgres", "config"));
  EXPECT_EQ(At(result->job, "db.port")->as_int(), 5432);
  EXPECT_EQ(At(result->job, "db.user")->as_string(), "root");
}

TEST_F(ComposeTest, MultiSelectOverrideFromCommandLine) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: [mysql]\n");
  auto result = Run("config", {"db=[postgres,mysql]"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(MergeOrder(*result), ElementsAre("db/postgres", "db/mysql", "config"));
  EXPECT_EQ(At(result->job, "db.port")->as_int(), 3306);
}

TEST_F(ComposeTest, OptionalMissingOptionIsSkipped) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n  - optional extra: nothing\n  - _self_\na: 1\n");
  auto result = Run("config");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->job->Find("extra"), nullptr);
  EXPECT_THAT(MergeOrder(*result), ElementsAre("db/mysql", "config"));
}

TEST_F(ComposeTest, OptionalPresentOptionIsMerged) {
  WriteDbTree();
  Write("extra/something.yaml", "k: v\n");
  Write("config.yaml", "defaults:\n  - optional extra: something\n");
  NodePtr job = Job("config");
  EXPECT_EQ(At(job, "extra.k")->as_string(), "v");
}

TEST_F(ComposeTest, NonOptionalMissingOptionIsAnError) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: oracle\n");
  absl::Status st = Error("config");
  EXPECT_THAT(Message(st), HasSubstr("db/oracle"));
}

TEST_F(ComposeTest, MultipleValuesForAGroupIsAnError) {
  WriteDbTree();
  Write("base.yaml", "defaults:\n  - db: postgres\n");
  Write("config.yaml", "defaults:\n  - db: mysql\n  - base\n");
  absl::Status st = Error("config");
  EXPECT_THAT(Message(st), HasSubstr("Multiple values for db"));
  EXPECT_THAT(Message(st), HasSubstr("override db"));
}

TEST_F(ComposeTest, SameGroupTwiceInOneDefaultsListIsAnError) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n  - db: postgres\n");
  absl::Status st = Error("config");
  EXPECT_THAT(Message(st), HasSubstr("Multiple values for db"));
}

TEST_F(ComposeTest, OverrideKeywordInDefaultsList) {
  WriteDbTree();
  Write("base.yaml", "defaults:\n  - override /db: postgres\n");
  Write("config.yaml", "defaults:\n  - db: mysql\n  - base\n");
  NodePtr job = Job("config");
  EXPECT_EQ(At(job, "db.port")->as_int(), 5432);
}

TEST_F(ComposeTest, CommandLineBeatsOverrideKeyword) {
  WriteDbTree();
  Write("db/sqlite.yaml", "port: 0\n");
  Write("base.yaml", "defaults:\n  - override /db: postgres\n");
  Write("config.yaml", "defaults:\n  - db: mysql\n  - base\n");
  NodePtr job = Job("config", {"db=sqlite"});
  EXPECT_EQ(At(job, "db.port")->as_int(), 0);
}

TEST_F(ComposeTest, InterpolatedDefaultFollowsTheChoice) {
  WriteDbTree();
  Write("schema/mysql.yaml", "tables: 1\n");
  Write("schema/postgres.yaml", "tables: 2\n");
  Write("config.yaml", "defaults:\n  - db: mysql\n  - schema: ${db}\n");
  EXPECT_EQ(At(Job("config"), "schema.tables")->as_int(), 1);
  EXPECT_EQ(At(Job("config", {"db=postgres"}), "schema.tables")->as_int(), 2);
}

// --- Config overrides ---

TEST_F(ComposeTest, ChangeExistingValue) {
  Write("config.yaml", "trainer:\n  max_epochs: 3\n");
  NodePtr job = Job("config", {"trainer.max_epochs=10"});
  EXPECT_EQ(At(job, "trainer.max_epochs")->as_int(), 10);
}

TEST_F(ComposeTest, ChangeToAnotherType) {
  Write("config.yaml", "a: 1\n");
  NodePtr job = Job("config", {"a=hello"});
  EXPECT_EQ(At(job, "a")->as_string(), "hello");
}

TEST_F(ComposeTest, UnknownKeyInStructModeSuggestsFullKey) {
  Write("config.yaml", "trainer:\n  max_epochs: 3\n  lr: 0.1\n");
  absl::Status st = Error("config", {"trainer.max_epoch=10"});
  EXPECT_THAT(Message(st), HasSubstr("trainer.max_epoch"));
  EXPECT_THAT(Message(st), HasSubstr("did you mean 'trainer.max_epochs'"));
  EXPECT_THAT(Message(st), HasSubstr("+trainer.max_epoch=10"));
}

TEST_F(ComposeTest, UnknownTopLevelKeySuggestsClosestKey) {
  Write("config.yaml", "epochs: 3\n");
  absl::Status st = Error("config", {"epoch=10"});
  EXPECT_THAT(Message(st), HasSubstr("did you mean 'epochs'"));
}

TEST_F(ComposeTest, AddNewKey) {
  Write("config.yaml", "a: 1\n");
  NodePtr job = Job("config", {"+b.c=2"});
  EXPECT_EQ(At(job, "b.c")->as_int(), 2);
}

TEST_F(ComposeTest, AddExistingKeyIsAnError) {
  Write("config.yaml", "a: 1\n");
  absl::Status st = Error("config", {"+a=2"});
  EXPECT_THAT(Message(st), HasSubstr("Could not append to config. An item is already at 'a'"));
  EXPECT_THAT(Message(st), HasSubstr("'++a=2'"));
}

TEST_F(ComposeTest, ForceAddCreatesMissingKey) {
  Write("config.yaml", "a: 1\n");
  NodePtr job = Job("config", {"++b.c=2"});
  EXPECT_EQ(At(job, "b.c")->as_int(), 2);
}

TEST_F(ComposeTest, ForceAddOverwritesExistingKey) {
  Write("config.yaml", "a: 1\n");
  NodePtr job = Job("config", {"++a=2"});
  EXPECT_EQ(At(job, "a")->as_int(), 2);
}

TEST_F(ComposeTest, EmptyDictOverrideKeepsKeys) {
  Write("config.yaml", "c:\n  x: 1\n  y: 2\n");
  NodePtr job = Job("config", {"c={}"});
  EXPECT_EQ(At(job, "c.x")->as_int(), 1);
  EXPECT_EQ(At(job, "c.y")->as_int(), 2);
}

TEST_F(ComposeTest, DictOverrideMergesIntoExistingMap) {
  Write("config.yaml", "c:\n  x: 1\n  y: 2\n");
  NodePtr job = Job("config", {"c={x: 9}"});
  EXPECT_EQ(At(job, "c.x")->as_int(), 9);
  EXPECT_EQ(At(job, "c.y")->as_int(), 2);
}

TEST_F(ComposeTest, DictValueForAGroupMergesIntoItsConfig) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n");
  NodePtr job = Job("config", {"db={port: 1}"});
  EXPECT_EQ(At(job, "db.port")->as_int(), 1);
  EXPECT_EQ(At(job, "db.driver")->as_string(), "mysql");
}

TEST_F(ComposeTest, UnknownNestedKeySuggestsFullKeyAtItsDepth) {
  Write("config.yaml", "a:\n  bb:\n    c: 1\n");
  absl::Status st = Error("config", {"a.b.c=2"});
  EXPECT_THAT(Message(st), HasSubstr("Could not override 'a.b.c'"));
  EXPECT_THAT(Message(st), HasSubstr("did you mean 'a.bb'"));
}

TEST_F(ComposeTest, DictOverrideWithUnknownKeyIsAnError) {
  Write("config.yaml", "c:\n  x: 1\n");
  absl::Status st = Error("config", {"c={zz: 1}"});
  EXPECT_THAT(Message(st), HasSubstr("zz"));
}

TEST_F(ComposeTest, ListOverrideReplacesTheList) {
  Write("config.yaml", "a: [1, 2, 3]\n");
  NodePtr job = Job("config", {"a=[7]"});
  EXPECT_THAT(Strings(At(job, "a")), ElementsAre("7"));
}

TEST_F(ComposeTest, ListElementOverride) {
  Write("config.yaml", "a: [p, q, r]\n");
  NodePtr job = Job("config", {"a.1=x"});
  EXPECT_THAT(Strings(At(job, "a")), ElementsAre("p", "x", "r"));
}

TEST_F(ComposeTest, ListElementOutOfRangeIsAnError) {
  Write("config.yaml", "a: [p]\n");
  absl::Status st = Error("config", {"a.5=x"});
  EXPECT_THAT(Message(st), HasSubstr("a.5"));
}

TEST_F(ComposeTest, MapInsideListOverride) {
  Write("config.yaml", "a:\n- name: p\n- name: q\n");
  NodePtr job = Job("config", {"a.1.name=z"});
  EXPECT_EQ(At(job, "a.1.name")->as_string(), "z");
  EXPECT_EQ(At(job, "a.0.name")->as_string(), "p");
}

TEST_F(ComposeTest, DeleteKey) {
  Write("config.yaml", "a: 1\nb: 2\n");
  NodePtr job = Job("config", {"~a"});
  EXPECT_EQ(job->Find("a"), nullptr);
  EXPECT_EQ(At(job, "b")->as_int(), 2);
}

TEST_F(ComposeTest, DeleteKeyWithMatchingValue) {
  Write("config.yaml", "a: 3\nb: 2\n");
  NodePtr job = Job("config", {"~a=3"});
  EXPECT_EQ(job->Find("a"), nullptr);
}

TEST_F(ComposeTest, DeleteWithValueMismatchIsAnError) {
  Write("config.yaml", "a: 3\n");
  absl::Status st = Error("config", {"~a=5"});
  EXPECT_THAT(Message(st),
              HasSubstr("Could not delete from config. The value of 'a' is 3 and not 5."));
}

TEST_F(ComposeTest, DeleteMissingKeyIsAnError) {
  Write("config.yaml", "a: 3\n");
  absl::Status st = Error("config", {"~zz"});
  EXPECT_THAT(Message(st), HasSubstr("Could not delete from config. 'zz' does not exist."));
}

TEST_F(ComposeTest, DeleteListElement) {
  Write("config.yaml", "a: [p, q, r]\n");
  NodePtr job = Job("config", {"~a.1"});
  EXPECT_THAT(Strings(At(job, "a")), ElementsAre("p", "r"));
}

TEST_F(ComposeTest, OverridesApplyInCommandLineOrder) {
  Write("config.yaml", "a: 1\n");
  NodePtr job = Job("config", {"a=2", "a=3"});
  EXPECT_EQ(At(job, "a")->as_int(), 3);
}

TEST_F(ComposeTest, MissingValueNeverReplacesAValue) {
  Write("base.yaml", "a: 1\n");
  Write("config.yaml", "defaults:\n  - base\n  - _self_\na: ???\n");
  EXPECT_EQ(At(Job("config"), "a")->as_int(), 1);
}

TEST_F(ComposeTest, SweepWithoutMultirunIsAnError) {
  Write("config.yaml", "a: 1\n");
  absl::Status st = Error("config", {"a=1,2"});
  EXPECT_THAT(Message(st), HasSubstr("Ambiguous value for argument 'a=1,2'"));
}

TEST_F(ComposeTest, SweepInMultirunIsLeftOut) {
  Write("config.yaml", "a: 1\nb: 1\n");
  ComposeOptions options = Options("config", {"a=5,6", "b=2"});
  options.multirun = true;
  auto result = Compose(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(At(result->job, "a")->as_int(), 1);
  EXPECT_EQ(At(result->job, "b")->as_int(), 2);
  EXPECT_EQ(At(result->hydra, "mode")->as_string(), "MULTIRUN");
}

TEST_F(ComposeTest, SyntaxErrorIsReportedBeforeFilesAreRead) {
  absl::Status st = Error("does_not_exist", {"a=[1"});
  EXPECT_THAT(Message(st), HasSubstr("a=[1"));
  EXPECT_THAT(Message(st), HasSubstr("column"));
}

TEST_F(ComposeTest, BrokenYamlNamesTheFile) {
  Write("config.yaml", "a: [1\n");
  absl::Status st = Error("config");
  EXPECT_THAT(Message(st), HasSubstr("config.yaml:"));
}

TEST_F(ComposeTest, InterpolationValueFromCommandLineResolves) {
  Write("config.yaml", "a: 1\nb: 2\n");
  auto result = Run("config", {"b=${a}"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(At(result->job, "b")->as_string(), "${a}");
  auto job = ResolveJob(*result);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(At(*job, "b")->as_int(), 1);
}

TEST_F(ComposeTest, ResolveJobLeavesMissingValues) {
  Write("config.yaml", "a: ???\nb: 2\n");
  auto result = Run("config");
  ASSERT_TRUE(result.ok()) << result.status();
  auto job = ResolveJob(*result);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(At(*job, "a")->is_missing());
}

TEST_F(ComposeTest, ReusedRepositoryIsNotChangedByOverrides) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n  - _self_\nlist: [1, 2]\n");
  ConfigRepository repo({{"main", dir_.path()}});
  auto first = Compose(Options("config", {"db.port=1", "list.0=9", "~db.user", "+db.x=1"}), repo);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(At(first->job, "db.port")->as_int(), 1);
  auto second = Compose(Options("config", {}), repo);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(At(second->job, "db.port")->as_int(), 3306);
  EXPECT_EQ(At(second->job, "db.user")->as_string(), "root");
  EXPECT_EQ(At(second->job, "db.x"), nullptr);
  EXPECT_THAT(Strings(At(second->job, "list")), ElementsAre("1", "2"));
}

// --- The hydra node ---

TEST_F(ComposeTest, HydraChoicesRecordTheGroups) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - db: mysql\n  - model: resnet\n");
  auto result = Run("config", {"model=cnn"});
  ASSERT_TRUE(result.ok()) << result.status();
  NodePtr choices = At(result->hydra, "runtime.choices");
  ASSERT_NE(choices, nullptr);
  EXPECT_EQ(At(choices, "model")->as_string(), "cnn");
  EXPECT_EQ(At(choices, "db")->as_string(), "mysql");
  ASSERT_NE(choices->Find("hydra/launcher"), nullptr);
  EXPECT_EQ(choices->Find("hydra/launcher")->as_string(), "basic");
}

TEST_F(ComposeTest, HydraOverridesSplitTaskAndHydra) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - model: resnet\nx: 1\n");
  auto result = Run("config", {"model=cnn", "x=2", "hydra.verbose=true"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(Strings(At(result->hydra, "overrides.task")), ElementsAre("model=cnn", "x=2"));
  EXPECT_THAT(Strings(At(result->hydra, "overrides.hydra")), ElementsAre("hydra.verbose=true"));
  EXPECT_TRUE(At(result->hydra, "verbose")->as_bool());
}

TEST_F(ComposeTest, HydraJobNameAndConfigName) {
  Write("config.yaml", "a: 1\n");
  ComposeOptions options = Options("config", {});
  options.job_name = "trainer_job";
  auto result = Compose(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(At(result->hydra, "job.name")->as_string(), "trainer_job");
  EXPECT_EQ(At(result->hydra, "job.config_name")->as_string(), "config");
  EXPECT_EQ(At(result->hydra, "mode")->as_string(), "RUN");
  EXPECT_EQ(result->root->Find("hydra"), result->hydra);
}

TEST_F(ComposeTest, HydraOverrideDirnameIsSortedTaskOverrides) {
  Write("config.yaml", "b: 1\na: 1\n");
  auto result = Run("config", {"b=2", "a=3"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(At(result->hydra, "job.override_dirname")->as_string(), "a=3,b=2");
}

TEST_F(ComposeTest, ResolveJobReadsHydraValues) {
  Write("config.yaml", "name: ${hydra:job.name}\nport: 1\nurl: host:${port}\n");
  ComposeOptions options = Options("config", {"port=8080"});
  options.job_name = "svc";
  auto result = Compose(options);
  ASSERT_TRUE(result.ok()) << result.status();
  auto job = ResolveJob(*result);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(At(*job, "name")->as_string(), "svc");
  EXPECT_EQ(At(*job, "url")->as_string(), "host:8080");
}

TEST_F(ComposeTest, ResolveHydraWorksInRunMode) {
  // A single run (not a multirun) has no hydra.job.num; resolving the hydra node for it (as
  // `kiln CMD --dry-run` does) must still work and expand the run dir.
  Write("config.yaml", "a: 1\n");
  ComposeOptions options = Options("config", {"hydra.run.dir=out/${hydra.job.name}"});
  options.job_name = "svc";
  auto result = Compose(options);
  ASSERT_TRUE(result.ok()) << result.status();
  auto hydra = ResolveHydra(*result);
  ASSERT_TRUE(hydra.ok()) << hydra.status();
  EXPECT_EQ(At(*hydra, "run.dir")->as_string(), "out/svc");
  EXPECT_EQ(At(*hydra, "job_logging.file_name")->as_string(), "svc.log");
}

TEST_F(ComposeTest, RunModeOutputDirIsTheResolvedRunDir) {
  Write("config.yaml", "a: 1\n");
  ComposeOptions options = Options("config", {"hydra.run.dir=out/${hydra.job.name}"});
  options.job_name = "svc";
  auto result = Compose(options);
  ASSERT_TRUE(result.ok()) << result.status();
  NodePtr output_dir = At(result->hydra, "runtime.output_dir");
  ASSERT_NE(output_dir, nullptr);
  EXPECT_EQ(output_dir->as_string(), "out/svc");
}

// --- Sources ---

TEST_F(ComposeTest, FileValuesKnowTheirFileAndLine) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - model: cnn\n  - _self_\n\ntop: 1\n");
  NodePtr job = Job("config");
  const Source& width = At(job, "model.width")->source();
  ASSERT_NE(width.file, nullptr);
  EXPECT_THAT(*width.file, EndsWith("model/cnn.yaml"));
  EXPECT_EQ(width.line, 2);
  const Source& top = At(job, "top")->source();
  ASSERT_NE(top.file, nullptr);
  EXPECT_THAT(*top.file, EndsWith("config.yaml"));
  EXPECT_EQ(top.line, 5);
  EXPECT_TRUE(top.override_text.empty());
}

TEST_F(ComposeTest, LinesCountThePackageHeaderAndDefaults) {
  WriteDbTree();
  Write("extra/e.yaml",
        "# @package _global_\n# comment\ndefaults:\n  - /db: mysql\n\nflag: true\n");
  Write("config.yaml", "defaults:\n  - extra: e\n");
  NodePtr job = Job("config");
  ASSERT_NE(At(job, "flag"), nullptr);
  const Source& flag = At(job, "flag")->source();
  ASSERT_NE(flag.file, nullptr);
  EXPECT_THAT(*flag.file, EndsWith("extra/e.yaml"));
  EXPECT_EQ(flag.line, 6);
  EXPECT_EQ(At(job, "db.port")->source().line, 2);
}

TEST_F(ComposeTest, OverriddenValuesKnowTheirOverride) {
  WriteDbTree();
  Write("config.yaml", "defaults:\n  - model: cnn\n");
  NodePtr job = Job("config", {"model.width=128", "+model.extra=[1,2]"});
  const Source& width = At(job, "model.width")->source();
  EXPECT_EQ(width.override_text, "model.width=128");
  EXPECT_EQ(width.Describe(), "command line 'model.width=128'");
  EXPECT_EQ(At(job, "model.extra")->source().override_text, "+model.extra=[1,2]");
  EXPECT_EQ(At(job, "model.extra.1")->source().override_text, "+model.extra=[1,2]");
  EXPECT_EQ(At(job, "model.layers")->source().line, 1);
}

TEST_F(ComposeTest, DictMergeOverrideSourcesPointAtTheOverride) {
  Write("config.yaml", "c:\n  x: 1\n  y: 2\n");
  NodePtr job = Job("config", {"c={x: 9}"});
  EXPECT_EQ(At(job, "c.x")->source().override_text, "c={x: 9}");
  EXPECT_EQ(At(job, "c.y")->source().line, 3);
}

// --- Sweeps ---

std::vector<Override> ParseAll(const std::vector<std::string>& texts) {
  auto parsed = ParseOverrides(texts);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : std::vector<Override>();
}

using Jobs = std::vector<std::vector<std::string>>;

Jobs Plan(const std::vector<std::string>& params, const std::vector<std::string>& overrides,
          const ConfigRepository& repo) {
  auto jobs = PlanSweep(ParseAll(params), ParseAll(overrides), repo);
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  return jobs.ok() ? *jobs : Jobs();
}

TEST(PlanSweep, CartesianProductInCommandLineOrder) {
  ConfigRepository repo({});
  Jobs jobs = Plan({}, {"a=1,2", "b=x,y"}, repo);
  EXPECT_EQ(jobs, (Jobs{{"a=1", "b=x"}, {"a=1", "b=y"}, {"a=2", "b=x"}, {"a=2", "b=y"}}));
}

TEST(PlanSweep, PlainOverridesGoIntoEveryJob) {
  ConfigRepository repo({});
  Jobs jobs = Plan({}, {"x=0", "a=1,2", "+c=3"}, repo);
  EXPECT_EQ(jobs, (Jobs{{"x=0", "a=1", "+c=3"}, {"x=0", "a=2", "+c=3"}}));
}

TEST(PlanSweep, NoOverridesIsOneEmptyJob) {
  ConfigRepository repo({});
  EXPECT_EQ(Plan({}, {}, repo), (Jobs{{}}));
}

TEST(PlanSweep, LaterDuplicateReplacesEarlierInPlace) {
  ConfigRepository repo({});
  Jobs jobs = Plan({}, {"a=1,2", "b=x", "a=3,4"}, repo);
  EXPECT_EQ(jobs, (Jobs{{"a=3", "b=x"}, {"a=4", "b=x"}}));
}

TEST(PlanSweep, ParamsComeFirstAndCommandLineReplacesThem) {
  ConfigRepository repo({});
  Jobs jobs = Plan({"a=1,2", "b=5,6"}, {"c=0", "b=7"}, repo);
  EXPECT_EQ(jobs, (Jobs{{"a=1", "b=7", "c=0"}, {"a=2", "b=7", "c=0"}}));
}

TEST(PlanSweep, DeleteOverrideIsWrittenAsHydraWritesIt) {
  // Hydra's job lines write a delete without a value as ~a=null, which deletes whatever is there.
  ConfigRepository repo({});
  Jobs jobs = Plan({}, {"~a", "b=1,2"}, repo);
  EXPECT_EQ(jobs, (Jobs{{"~a=null", "b=1"}, {"~a=null", "b=2"}}));
}

TEST(PlanSweep, GroupWithPackageKeepsItsKey) {
  ConfigRepository repo({});
  Jobs jobs = Plan({}, {"db@backup=a,b"}, repo);
  EXPECT_EQ(jobs, (Jobs{{"db@backup=a"}, {"db@backup=b"}}));
}

TEST(PlanSweep, ValuesArePrintedSoTheyParseBack) {
  ConfigRepository repo({});
  Jobs jobs = Plan({}, {"a=x\\,y,'1.5',[1,2]"}, repo);
  ASSERT_EQ(jobs.size(), 3u);
  auto first = ParseOverride(jobs[0][0]);
  ASSERT_TRUE(first.ok()) << jobs[0][0];
  EXPECT_EQ(first->value.node->as_string(), "x,y");
  auto second = ParseOverride(jobs[1][0]);
  ASSERT_TRUE(second.ok()) << jobs[1][0];
  EXPECT_EQ(second->value.node->kind(), NodeKind::kString);
  EXPECT_EQ(second->value.node->as_string(), "1.5");
  auto third = ParseOverride(jobs[2][0]);
  ASSERT_TRUE(third.ok()) << jobs[2][0];
  EXPECT_TRUE(third->value.node->is_list());
}

TEST_F(ComposeTest, GlobSweepReadsGroupOptions) {
  Write("db/mysql.yaml", "a: 1\n");
  Write("db/postgres.yaml", "a: 1\n");
  Write("db/sqlite.yaml", "a: 1\n");
  ConfigRepository repo({{"main", dir_.path()}});
  EXPECT_EQ(Plan({}, {"db=glob(*,exclude=sqlite)"}, repo), (Jobs{{"db=mysql"}, {"db=postgres"}}));
  EXPECT_EQ(Plan({}, {"db=glob(p*)"}, repo), (Jobs{{"db=postgres"}}));
}

TEST(PlanSweep, GlobOnANonGroupIsAnError) {
  ConfigRepository repo({});
  auto jobs = PlanSweep({}, ParseAll({"lr=glob(*)"}), repo);
  ASSERT_FALSE(jobs.ok());
  EXPECT_THAT(Message(jobs.status()), HasSubstr("lr"));
}

// --- Helpers ---

TEST(SetPath, CreatesMapsOnTheWay) {
  NodePtr root = Node::Map();
  SetPath(*root, "a.b.c", Node::Int(1));
  EXPECT_EQ(At(root, "a.b.c")->as_int(), 1);
  SetPath(*root, "a.b.d", Node::Int(2));
  EXPECT_EQ(At(root, "a.b.c")->as_int(), 1);
  EXPECT_EQ(At(root, "a.b.d")->as_int(), 2);
}

}  // namespace compose_test
}  // namespace kiln::config
