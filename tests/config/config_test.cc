#include "lib/config/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lib/config/node.h"
#include "lib/config/provenance.h"
#include "lib/config/secrets.h"
#include "lib/config/suggest.h"
#include "lib/config/yaml_io.h"

namespace kiln::config {
namespace config_test {

using ::testing::ElementsAre;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

constexpr char kTrainYaml[] =
    "trainer:\n"             // 1
    "  max_epochs: 3\n"      // 2
    "  lr: 0.01\n"           // 3
    "  name: run\n"          // 4
    "  fast: true\n"         // 5
    "  epochs_text: '5'\n"   // 6
    "  big: 10000000000\n"   // 7
    "  nothing: null\n"      // 8
    "  required: ???\n"      // 9
    "  ids: [1, 2, 3]\n"     // 10
    "  tags: [a, b]\n"       // 11
    "  mixed: [1, x]\n"      // 12
    "  ratio: 2\n"           // 13
    "data:\n"                // 14
    "  loader:\n"            // 15
    "    batch_size: 32\n";  // 16

Config TrainConfig() {
  auto parsed = ParseYaml(kTrainYaml, "train.yaml");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return Config(parsed.ok() ? *parsed : Node::Map());
}

// --- Typed access ---

TEST(ConfigGet, Int) {
  auto v = TrainConfig().Get<int>("trainer.max_epochs");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 3);
}

TEST(ConfigGet, Int64) {
  auto v = TrainConfig().Get<int64_t>("trainer.big");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, int64_t{10000000000});
}

TEST(ConfigGet, IntThatDoesNotFitIn32BitsIsAnError) {
  auto v = TrainConfig().Get<int>("trainer.big");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("trainer.big"));
  EXPECT_THAT(Message(v.status()), HasSubstr("32 bits"));
}

// A config may hold 2**64 (Python's int), but no int64 reader takes it: it says where it is.
TEST(ConfigGet, IntBeyond64BitsIsAnErrorForInt64AndANumberForDouble) {
  auto parsed = ParseYaml("seed: 18446744073709551616\n", "big.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  Config config(*parsed);
  auto v = config.Get<int64_t>("seed");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("seed"));
  EXPECT_THAT(Message(v.status()), HasSubstr("64 bits"));
  EXPECT_THAT(Message(v.status()), HasSubstr("big.yaml:1"));
  EXPECT_FALSE(config.Get<int>("seed").ok());
  auto d = config.Get<double>("seed");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_DOUBLE_EQ(*d, 18446744073709551616.0);
}

TEST(ConfigGet, Double) {
  auto v = TrainConfig().Get<double>("trainer.lr");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_DOUBLE_EQ(*v, 0.01);
}

TEST(ConfigGet, DoubleAcceptsAnInt) {
  auto v = TrainConfig().Get<double>("trainer.ratio");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_DOUBLE_EQ(*v, 2.0);
}

TEST(ConfigGet, Float) {
  auto v = TrainConfig().Get<float>("trainer.lr");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FLOAT_EQ(*v, 0.01f);
}

TEST(ConfigGet, Bool) {
  auto v = TrainConfig().Get<bool>("trainer.fast");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(*v);
}

TEST(ConfigGet, String) {
  auto v = TrainConfig().Get<std::string>("trainer.name");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "run");
}

TEST(ConfigGet, IntList) {
  auto v = TrainConfig().Get<std::vector<int>>("trainer.ids");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(*v, ElementsAre(1, 2, 3));
}

TEST(ConfigGet, StringList) {
  auto v = TrainConfig().Get<std::vector<std::string>>("trainer.tags");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(*v, ElementsAre("a", "b"));
}

TEST(ConfigGet, ListElementByIndex) {
  Config cfg = TrainConfig();
  auto dotted = cfg.Get<int>("trainer.ids.1");
  ASSERT_TRUE(dotted.ok()) << dotted.status();
  EXPECT_EQ(*dotted, 2);
  auto bracketed = cfg.Get<int>("trainer.ids[2]");
  ASSERT_TRUE(bracketed.ok()) << bracketed.status();
  EXPECT_EQ(*bracketed, 3);
}

TEST(ConfigGet, ListWithAWrongElementNamesTheElement) {
  auto v = TrainConfig().Get<std::vector<int>>("trainer.mixed");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("trainer.mixed.1"));
  EXPECT_THAT(Message(v.status()), HasSubstr("train.yaml:12"));
}

TEST(ConfigGet, ListOfAScalarIsAnError) {
  auto v = TrainConfig().Get<std::vector<int>>("trainer.max_epochs");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("trainer.max_epochs"));
  EXPECT_THAT(Message(v.status()), HasSubstr("list"));
}

TEST(ConfigGet, NodePtr) {
  auto v = TrainConfig().Get<NodePtr>("data.loader");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE((*v)->is_map());
}

TEST(ConfigGet, EmptyKeyIsTheRoot) {
  auto v = TrainConfig().Get<NodePtr>("");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE((*v)->Contains("trainer"));
}

// --- Type errors ---

TEST(ConfigTypeError, NamesFullKeyAndFileLine) {
  auto v = TrainConfig().Get<int>("trainer.epochs_text");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(v.status()), HasSubstr("'trainer.epochs_text'"));
  EXPECT_THAT(Message(v.status()), HasSubstr("set at train.yaml:6"));
  EXPECT_THAT(Message(v.status()), HasSubstr("string"));
}

TEST(ConfigTypeError, BoolFromString) {
  auto v = TrainConfig().Get<bool>("trainer.name");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("'trainer.name'"));
  EXPECT_THAT(Message(v.status()), HasSubstr("set at train.yaml:4"));
}

TEST(ConfigTypeError, StringFromInt) {
  auto v = TrainConfig().Get<std::string>("trainer.max_epochs");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("set at train.yaml:2"));
}

TEST(ConfigTypeError, IntFromFloat) {
  auto v = TrainConfig().Get<int>("trainer.lr");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("trainer.lr"));
}

TEST(ConfigTypeError, DoubleFromBool) {
  auto v = TrainConfig().Get<double>("trainer.fast");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("trainer.fast"));
}

TEST(ConfigTypeError, NamesTheOverride) {
  NodePtr root = Node::Map();
  NodePtr value = Node::String("abc");
  value->set_source(Source::Override("epochs=abc"));
  root->Set("epochs", value);
  auto v = Config(root).Get<int>("epochs");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("command line 'epochs=abc'"));
}

TEST(ConfigTypeError, WithoutSourceHasNoSetAt) {
  NodePtr root = Node::Map();
  root->Set("x", Node::String("abc"));
  auto v = Config(root).Get<int>("x");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("'x'"));
  EXPECT_THAT(Message(v.status()), ::testing::Not(HasSubstr("set at")));
}

// --- Missing and absent ---

TEST(ConfigMissing, MandatoryValueNamesTheKey) {
  auto v = TrainConfig().Get<int>("trainer.required");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("'trainer.required'"));
  EXPECT_THAT(Message(v.status()), HasSubstr("train.yaml:9"));
}

TEST(ConfigMissing, NotFoundSuggestsTheClosestKey) {
  auto v = TrainConfig().Get<int>("trainer.max_epoch");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(v.status()), HasSubstr("'trainer.max_epoch'"));
  EXPECT_THAT(Message(v.status()), HasSubstr("did you mean 'trainer.max_epochs'"));
}

TEST(ConfigMissing, NotFoundAtTheTopLevel) {
  auto v = TrainConfig().Get<int>("trainr.max_epochs");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("did you mean 'trainer'"));
}

TEST(ConfigMissing, NotFoundWithNothingCloseHasNoSuggestion) {
  auto v = TrainConfig().Get<int>("trainer.zzzzzzzzzzzz");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), ::testing::Not(HasSubstr("did you mean")));
}

TEST(ConfigMissing, BelowAScalarIsNotFound) {
  auto v = TrainConfig().Get<int>("trainer.max_epochs.x");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("trainer.max_epochs.x"));
}

TEST(ConfigGetOr, AbsentKeyGivesFallback) {
  auto v = TrainConfig().GetOr<int>("trainer.absent", 7);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 7);
}

TEST(ConfigGetOr, NullGivesFallback) {
  auto v = TrainConfig().GetOr<std::string>("trainer.nothing", "dflt");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "dflt");
}

TEST(ConfigGetOr, PresentValueWins) {
  auto v = TrainConfig().GetOr<int>("trainer.max_epochs", 7);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 3);
}

TEST(ConfigGetOr, WrongTypeIsStillAnError) {
  auto v = TrainConfig().GetOr<int>("trainer.name", 7);
  EXPECT_FALSE(v.ok());
}

TEST(ConfigGetOr, AbsentParentGivesFallback) {
  auto v = TrainConfig().GetOr<bool>("nosuch.flag", true);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(*v);
}

// --- Sub-configs ---

TEST(ConfigSub, PrefixesKeysInMessages) {
  auto sub = TrainConfig().Sub("trainer");
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_EQ(sub->prefix(), "trainer");
  EXPECT_EQ(sub->FullKey("lr"), "trainer.lr");
  auto v = sub->Get<int>("name");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("'trainer.name'"));
}

TEST(ConfigSub, NotFoundInSubSuggestsFullKey) {
  auto sub = TrainConfig().Sub("trainer");
  ASSERT_TRUE(sub.ok()) << sub.status();
  auto v = sub->Get<int>("max_epoch");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("'trainer.max_epoch'"));
  EXPECT_THAT(Message(v.status()), HasSubstr("did you mean 'trainer.max_epochs'"));
}

TEST(ConfigSub, NestedSubs) {
  auto data = TrainConfig().Sub("data");
  ASSERT_TRUE(data.ok()) << data.status();
  auto loader = data->Sub("loader");
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(loader->prefix(), "data.loader");
  auto v = loader->Get<int>("batch_size");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 32);
  auto bad = loader->Get<std::string>("batch_size");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(Message(bad.status()), HasSubstr("'data.loader.batch_size'"));
  EXPECT_THAT(Message(bad.status()), HasSubstr("train.yaml:16"));
}

TEST(ConfigSub, MissingInSubNamesFullKey) {
  auto sub = TrainConfig().Sub("trainer");
  ASSERT_TRUE(sub.ok());
  auto v = sub->Get<int>("required");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("'trainer.required'"));
}

TEST(ConfigSub, OfAScalarIsAnError) {
  auto sub = TrainConfig().Sub("trainer.max_epochs");
  ASSERT_FALSE(sub.ok());
  EXPECT_THAT(Message(sub.status()), HasSubstr("trainer.max_epochs"));
  EXPECT_THAT(Message(sub.status()), HasSubstr("mapping"));
}

TEST(ConfigSub, OfAMissingKeyIsNotFound) {
  auto sub = TrainConfig().Sub("nosuch");
  ASSERT_FALSE(sub.ok());
  EXPECT_EQ(sub.status().code(), absl::StatusCode::kNotFound);
}

TEST(ConfigSub, ListErrorsInSubNameTheFullKey) {
  auto sub = TrainConfig().Sub("trainer");
  ASSERT_TRUE(sub.ok());
  auto v = sub->Get<std::vector<int>>("mixed");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Message(v.status()), HasSubstr("trainer.mixed.1"));
}

// --- Other accessors ---

TEST(ConfigAccessors, HasAndKeys) {
  Config cfg = TrainConfig();
  EXPECT_TRUE(cfg.Has("trainer.lr"));
  EXPECT_TRUE(cfg.Has("trainer.nothing"));
  EXPECT_FALSE(cfg.Has("trainer.nope"));
  EXPECT_TRUE(cfg.Has("trainer.ids.0"));
  EXPECT_FALSE(cfg.Has("trainer.ids.9"));
  EXPECT_THAT(cfg.Keys(), ElementsAre("trainer", "data"));
}

TEST(ConfigAccessors, WhereSet) {
  Config cfg = TrainConfig();
  EXPECT_EQ(cfg.WhereSet("trainer.lr"), "train.yaml:3");
  EXPECT_EQ(cfg.WhereSet("trainer.nope"), "");
}

TEST(ConfigAccessors, DefaultConfigIsEmpty) {
  Config cfg;
  EXPECT_THAT(cfg.Keys(), IsEmpty());
  EXPECT_FALSE(cfg.Has("a"));
  EXPECT_EQ(cfg.FullKey("a"), "a");
}

// --- Provenance ---

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

TEST(FormatProvenance, FileAndOverrideSources) {
  auto parsed = ParseYaml("a: 1\nb:\n  c: x\n  l: [1]\n", "cfg.yaml");
  ASSERT_TRUE(parsed.ok());
  NodePtr root = *parsed;
  NodePtr five = Node::Int(5);
  five->set_source(Source::Override("a=5"));
  root->Set("a", five);
  std::vector<std::string> lines = Lines(FormatProvenance(*root));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0], StartsWith("a: 5 "));
  EXPECT_THAT(lines[0], EndsWith("command line 'a=5'"));
  EXPECT_THAT(lines[1], StartsWith("b.c: x "));
  EXPECT_THAT(lines[1], EndsWith("cfg.yaml:3"));
  EXPECT_THAT(lines[2], StartsWith("b.l.0: 1 "));
  EXPECT_THAT(lines[2], EndsWith("cfg.yaml:4"));
}

TEST(FormatProvenance, ColumnsAreAligned) {
  auto parsed = ParseYaml("a: 1\nlonger_key: 2\n", "cfg.yaml");
  ASSERT_TRUE(parsed.ok());
  std::vector<std::string> lines = Lines(FormatProvenance(**parsed));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].find("cfg.yaml"), lines[1].find("cfg.yaml"));
}

TEST(FormatProvenance, EmptyContainersAndUnknownSources) {
  NodePtr root = Node::Map();
  root->Set("e", Node::Map());
  root->Set("s", Node::String("007"));
  std::vector<std::string> lines = Lines(FormatProvenance(*root));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], StartsWith("e: {}"));
  EXPECT_THAT(lines[1], StartsWith("s: '007'"));
  EXPECT_THAT(lines[1], EndsWith("(set by kiln)"));
}

TEST(SourceDescribe, Forms) {
  EXPECT_EQ(Source::File(std::make_shared<const std::string>("f.yaml"), 3, 1).Describe(),
            "f.yaml:3");
  EXPECT_EQ(Source::File(std::make_shared<const std::string>("f.yaml"), 0, 0).Describe(), "f.yaml");
  EXPECT_EQ(Source::Override("x=1").Describe(), "command line 'x=1'");
  EXPECT_EQ(Source().Describe(), "");
  EXPECT_FALSE(Source().known());
}

// --- Suggestions ---

TEST(EditDistance, Basics) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("abc", "abc"), 0u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("max_epoch", "max_epochs"), 1u);
}

TEST(EditDistance, TranspositionIsOneEdit) { EXPECT_EQ(EditDistance("lr", "rl"), 1u); }

TEST(EditDistance, IgnoresCase) { EXPECT_EQ(EditDistance("Batch", "batch"), 0u); }

TEST(ClosestNames, NearestFirst) {
  std::vector<std::string> candidates = {"batch_size", "max_epochs", "min_epochs", "lr"};
  auto close = ClosestNames("max_epoch", candidates);
  ASSERT_FALSE(close.empty());
  EXPECT_EQ(close[0], "max_epochs");
  EXPECT_THAT(close, ::testing::Not(::testing::Contains("batch_size")));
}

TEST(ClosestNames, RespectsLimit) {
  auto close = ClosestNames("ab", {"abc", "abd", "abe", "abf"}, 2);
  EXPECT_EQ(close.size(), 2u);
}

TEST(ClosestNames, NothingPlausible) {
  EXPECT_THAT(ClosestNames("zzzzzz", {"batch_size", "learning_rate"}), IsEmpty());
}

TEST(ClosestNames, ExactMatchIsNotASuggestion) {
  EXPECT_THAT(ClosestNames("lr", {"lr"}), IsEmpty());
}

TEST(ClosestNames, PrefixIsPlausible) {
  EXPECT_THAT(ClosestNames("optim", {"optimizer", "trainer"}), ElementsAre("optimizer"));
}

TEST(DidYouMean, Formats) {
  EXPECT_EQ(DidYouMean("modle", {"model", "data"}), " (did you mean 'model'?)");
  EXPECT_EQ(DidYouMean("ab", {"abc", "abd"}), " (did you mean 'abc' or 'abd'?)");
  EXPECT_EQ(DidYouMean("zzzzzz", {"model"}), "");
  EXPECT_EQ(DidYouMean("x", {}), "");
}

// A secret key's value is *** in a copy (its override's text too), null and absent stay, other
// keys and the original are untouched; overrides and the hydra node's records likewise.
TEST(Secrets, AreRedactedInCopiesOfConfigsAndOverrides) {
  RegisterSecretKey("tracker.password");
  RegisterSecretKey("tracker.password");
  std::vector<std::string> keys = SecretKeys();
  EXPECT_EQ(std::count(keys.begin(), keys.end(), "tracker.password"), 1);
  auto parsed =
      ParseYaml("tracker:\n  user: me\n  password: hunter2\nother: {password: fine}\n", "t.yaml");
  ASSERT_TRUE(parsed.ok());
  (*parsed)
      ->Find("tracker")
      ->Find("password")
      ->set_source(Source::Override("tracker.password=hunter2"));
  NodePtr redacted = RedactSecrets(**parsed);
  EXPECT_EQ(ToYaml(*redacted),
            "tracker:\n  user: me\n  password: '***'\nother:\n  password: fine\n");
  EXPECT_EQ(redacted->Find("tracker")->Find("password")->source().Describe(),
            "command line 'tracker.password=***'");
  EXPECT_EQ((*parsed)->Find("tracker")->Find("password")->as_string(), "hunter2");
  auto no_value = ParseYaml("tracker: {password: null}\n", "t.yaml");
  EXPECT_TRUE(RedactSecrets(**no_value)->Find("tracker")->Find("password")->is_null());
  EXPECT_EQ(RedactOverride("tracker.password=hunter2"), "tracker.password=***");
  EXPECT_EQ(RedactOverride("++tracker.password='a=b'"), "++tracker.password=***");
  EXPECT_EQ(RedactOverride("tracker.user=me"), "tracker.user=me");
  EXPECT_EQ(RedactOverride("~tracker.password"), "~tracker.password");
  auto hydra = ParseYaml("overrides:\n  task: [tracker.password=hunter2, seed=1]\n", "h.yaml");
  EXPECT_EQ(ToYaml(*RedactHydraSecrets(**hydra)),
            "overrides:\n  task:\n  - tracker.password=***\n  - seed=1\n");
}

}  // namespace config_test
}  // namespace kiln::config
