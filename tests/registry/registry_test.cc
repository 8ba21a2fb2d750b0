#include "lib/registry/registry.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>

#include "lib/config/node.h"
#include "lib/config/repository.h"
#include "lib/config/yaml_io.h"

namespace kiln {
namespace {

struct Widget {
  static constexpr const char* kKind = "widget";
  virtual ~Widget() = default;
  std::string name;
  int64_t teeth = 0;
  double ratio = 0;
  std::vector<int64_t> sizes;
};

KILN_REGISTER(Widget, "gear", "A gear for tests",
              OptionSchema()
                  .Required("teeth", OptionType::kInt, "number of teeth")
                  .Float("ratio", 1.5, "gear ratio")
                  .Add("sizes", OptionType::kList, "[1, 2]", "sizes"),
              [](const config::Config& cfg) -> absl::StatusOr<std::shared_ptr<Widget>> {
                auto w = std::make_shared<Widget>();
                w->name = "gear";
                w->teeth = cfg.Get<int64_t>("teeth").value();
                w->ratio = cfg.Get<double>("ratio").value();
                w->sizes = cfg.Get<std::vector<int64_t>>("sizes").value();
                return w;
              });
KILN_REGISTER(Widget, "gasket", "Another one", OptionSchema(),
              [](const config::Config&) -> absl::StatusOr<std::shared_ptr<Widget>> {
                return std::make_shared<Widget>();
              });

config::Config Parse(const std::string& yaml) {
  auto node = config::ParseYaml(yaml, "widget.yaml");
  EXPECT_TRUE(node.ok()) << node.status();
  return config::Config(*node, "model");
}

TEST(Registry, InstantiatesFromTargetWithDefaults) {
  auto w = Registry<Widget>::Get().Instantiate(Parse("_target_: gear\nteeth: 12\n"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->name, "gear");
  EXPECT_EQ((*w)->teeth, 12);
  EXPECT_DOUBLE_EQ((*w)->ratio, 1.5);
  EXPECT_EQ((*w)->sizes, (std::vector<int64_t>{1, 2}));
}

TEST(Registry, IntegerIsAcceptedForFloatOption) {
  auto w = Registry<Widget>::Get().Instantiate(Parse("_target_: gear\nteeth: 1\nratio: 2\n"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_DOUBLE_EQ((*w)->ratio, 2.0);
}

TEST(Registry, UnknownTargetSuggestsClosestAndListsKnown) {
  auto w = Registry<Widget>::Get().Instantiate(Parse("_target_: gaer\nteeth: 1\n"));
  ASSERT_FALSE(w.ok());
  std::string m(w.status().message());
  EXPECT_NE(m.find("unknown widget 'gaer'"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'gear'"), std::string::npos) << m;
  EXPECT_NE(m.find("known: gasket, gear"), std::string::npos) << m;
  EXPECT_NE(m.find("widget.yaml:1"), std::string::npos) << m;
}

TEST(Registry, UnknownOptionNamesKeySuggestionAndLine) {
  auto w = Registry<Widget>::Get().Instantiate(Parse("_target_: gear\nteeth: 1\nratoi: 3.0\n"));
  ASSERT_FALSE(w.ok());
  std::string m(w.status().message());
  EXPECT_NE(m.find("unknown option 'model.ratoi'"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'ratio'"), std::string::npos) << m;
  EXPECT_NE(m.find("widget.yaml:3"), std::string::npos) << m;
}

TEST(Registry, WrongTypeNamesKeyAndLine) {
  auto w = Registry<Widget>::Get().Instantiate(Parse("_target_: gear\nteeth: many\n"));
  ASSERT_FALSE(w.ok());
  std::string m(w.status().message());
  EXPECT_NE(m.find("option 'model.teeth'"), std::string::npos) << m;
  EXPECT_NE(m.find("must be int"), std::string::npos) << m;
  EXPECT_NE(m.find("widget.yaml:2"), std::string::npos) << m;
}

// 2**64 is an int in a config (Python's), but no int option holds it: refused where it was set.
TEST(Registry, IntBeyond64BitsIsRefusedForAnIntOptionAndTakenForAFloatOne) {
  auto w =
      Registry<Widget>::Get().Instantiate(Parse("_target_: gear\nteeth: 18446744073709551616\n"));
  ASSERT_FALSE(w.ok());
  std::string m(w.status().message());
  EXPECT_NE(m.find("option 'model.teeth' of widget 'gear' must be an integer within 64 bits, got "
                   "18446744073709551616"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("widget.yaml:2"), std::string::npos) << m;
  auto f = Registry<Widget>::Get().Instantiate(
      Parse("_target_: gear\nteeth: 1\nratio: 18446744073709551616\n"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_DOUBLE_EQ((*f)->ratio, 18446744073709551616.0);
}

TEST(Registry, MissingRequiredOptionIsNamed) {
  auto w = Registry<Widget>::Get().Instantiate(Parse("_target_: gear\n"));
  ASSERT_FALSE(w.ok());
  EXPECT_NE(
      std::string(w.status().message()).find("option 'model.teeth' of widget 'gear' is required"),
      std::string::npos)
      << w.status();
}

TEST(Registry, MandatoryPlaceholderIsReported) {
  auto w = Registry<Widget>::Get().Instantiate(Parse("_target_: gear\nteeth: ???\n"));
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("missing mandatory value 'model.teeth'"),
            std::string::npos)
      << w.status();
}

TEST(Registry, DuplicateNameIsRefused) {
  auto st = Registry<Widget>::Get().Register(
      "gear", "again", OptionSchema(),
      [](const config::Config&) -> absl::StatusOr<std::shared_ptr<Widget>> { return nullptr; });
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(std::string(st.message()).find("widget 'gear' is already registered"),
            std::string::npos);
}

TEST(Registry, HubListsKindsNamesAndOrigins) {
  auto names = RegistryHub::Instance().Names("widget");
  EXPECT_EQ(names, (std::vector<std::string>{"gasket", "gear"}));
  auto components = RegistryHub::Instance().Components("widget");
  ASSERT_EQ(components.size(), 2u);
  EXPECT_EQ(components[1]->origin, "built-in");
  EXPECT_EQ(components[1]->options.options().size(), 3u);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A component whose options are bound to a struct: declared once, checked, filled. A kind of its
// own, so the widget listing above stays as it is.
struct Sprocket : Widget {
  static constexpr const char* kKind = "sprocket_kind";
};

struct SprocketOptions {
  std::string mode = "fast";
  int64_t teeth = 12;
  double ratio = 0.5;
  std::optional<int64_t> limit;
  std::vector<std::string> tags = {"a"};
};

KILN_REGISTER_BOUND(
    Sprocket, "sprocket", "A bound widget for tests",
    OptionBinding<SprocketOptions>()
        .Field("mode", &SprocketOptions::mode, "fast or slow", OneOf({"fast", "slow"}))
        .Field("teeth", &SprocketOptions::teeth, "teeth", AtLeast(3))
        .Field("ratio", &SprocketOptions::ratio, "ratio", InRange(0, 1))
        .Field("limit", &SprocketOptions::limit, "limit (null: none)", GreaterThan(0))
        .Field("tags", &SprocketOptions::tags, "tags", NonEmpty()),
    [](const SprocketOptions& o) -> absl::StatusOr<std::shared_ptr<Sprocket>> {
      auto w = std::make_shared<Sprocket>();
      w->name = o.mode + "/" + (o.limit ? std::to_string(*o.limit) : "none") + "/" + o.tags.back();
      w->teeth = o.teeth;
      w->ratio = o.ratio;
      return w;
    });

TEST(OptionBinding, FillsTheStructWithDefaultsAndGivenValues) {
  auto w = Registry<Sprocket>::Get().Instantiate(Parse("_target_: sprocket\n"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->name, "fast/none/a");
  EXPECT_EQ((*w)->teeth, 12);
  EXPECT_DOUBLE_EQ((*w)->ratio, 0.5);
  w = Registry<Sprocket>::Get().Instantiate(
      Parse("_target_: sprocket\nmode: slow\nteeth: 3\nratio: 1\nlimit: 7\ntags: [x, y]\n"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->name, "slow/7/y");
  EXPECT_EQ((*w)->teeth, 3);
  EXPECT_DOUBLE_EQ((*w)->ratio, 1.0);
}

TEST(OptionBinding, EachCheckRefusesWithOneMessageFormat) {
  struct Case {
    const char* yaml;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"mode: medium",
            "option 'model.mode' of sprocket_kind 'sprocket' must be one of: fast, slow, got "
            "medium (set at widget.yaml:2"},
           {"teeth: 2",
            "option 'model.teeth' of sprocket_kind 'sprocket' must be at least 3, got 2 (set at "
            "widget.yaml:2"},
           {"ratio: 1.5",
            "option 'model.ratio' of sprocket_kind 'sprocket' must be in [0, 1], got 1.5 (set at "
            "widget.yaml:2"},
           {"limit: 0",
            "option 'model.limit' of sprocket_kind 'sprocket' must be greater than 0, got 0 (set "
            "at widget.yaml:2"},
           {"tags: []",
            "option 'model.tags' of sprocket_kind 'sprocket' must be a list of strings "
            "(non-empty), got [] (set at widget.yaml:2"},
           {"tags: [1]",
            "option 'model.tags' of sprocket_kind 'sprocket' must be a list of strings "
            "(non-empty), got [1] (set at widget.yaml:2"},
           {"teeth: many",
            "option 'model.teeth' of sprocket_kind 'sprocket' must be int, got string many (set at "
            "widget.yaml:2"},
       }) {
    auto w = Registry<Sprocket>::Get().Instantiate(
        Parse(std::string("_target_: sprocket\n") + c.yaml + "\n"));
    ASSERT_FALSE(w.ok()) << c.yaml;
    EXPECT_EQ(std::string(w.status().message()).rfind(c.message, 0), 0u) << w.status().message();
  }
  // null is accepted by an optional field, and its check is not asked.
  EXPECT_TRUE(
      Registry<Sprocket>::Get().Instantiate(Parse("_target_: sprocket\nlimit: null\n")).ok());
}

// Lists of numbers, pairs, nested parts and a check of two options at once, as components use them.
struct Cog : Widget {
  static constexpr const char* kKind = "cog_kind";
  std::string part_key;
  std::string part_target;
};

struct CogOptions {
  std::vector<int64_t> sizes = {1, 2};
  std::vector<double> weights = {0.5};
  std::pair<double, double> range = {0.0, 1.0};
  std::optional<std::vector<int64_t>> extra;
  int64_t low = 0;
  int64_t high = 10;
  config::Config part;
  config::NodePtr shape;
};

KILN_REGISTER_BOUND(
    Cog, "cog", "A bound widget with lists and a nested part",
    OptionBinding<CogOptions>()
        .Field("sizes", &CogOptions::sizes, "sizes", Each(AtLeast(1)))
        .Field("weights", &CogOptions::weights, "weights", NonEmpty())
        .Field("range", &CogOptions::range, "[low, high]", Each(InRange(0, 1)))
        .Field("extra", &CogOptions::extra, "more sizes (null: none)")
        .Field("low", &CogOptions::low, "low")
        .Field("high", &CogOptions::high, "high")
        .RequiredNode("part", &CogOptions::part, OptionType::kMap, "a nested part")
        .RequiredNode("shape", &CogOptions::shape, OptionType::kAny, "a side or [h, w]",
                      OptionCheck{"a side or [h, w]",
                                  [](const config::Node& n) {
                                    return n.kind() == config::NodeKind::kInt || n.is_list();
                                  }}),
    [](const CogOptions& o, const OptionContext& context) -> absl::StatusOr<std::shared_ptr<Cog>> {
      if (o.low >= o.high)
        return context.Refuse("low", "less than high (" + std::to_string(o.high) + ")");
      auto w = std::make_shared<Cog>();
      w->sizes = o.sizes;
      w->ratio = o.weights[0] + o.range.second + (o.extra ? 100.0 : 0.0);
      w->part_key = o.part.prefix();
      w->part_target = o.part.Get<std::string>("_target_").value_or("?");
      return w;
    });

TEST(OptionBinding, FillsListsPairsAndNestedParts) {
  auto w =
      Registry<Cog>::Get().Instantiate(Parse("_target_: cog\npart: {_target_: gear}\nshape: 3\n"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->sizes, (std::vector<int64_t>{1, 2}));
  EXPECT_DOUBLE_EQ((*w)->ratio, 1.5);
  EXPECT_EQ((*w)->part_key, "model.part");
  EXPECT_EQ((*w)->part_target, "gear");
  w = Registry<Cog>::Get().Instantiate(
      Parse("_target_: cog\nsizes: [4]\nweights: [2]\nrange: [0, 0.25]\nextra: [1]\npart: "
            "{_target_: x}\nshape: [2, 3]\n"));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->sizes, (std::vector<int64_t>{4}));
  EXPECT_DOUBLE_EQ((*w)->ratio, 102.25);
}

TEST(OptionBinding, ListItemsAndOptionsTogetherAreRefusedWithTheOneFormat) {
  struct Case {
    const char* yaml;
    const char* message;
  };
  const std::string part = "part: {_target_: gear}\nshape: 3\n";
  for (const Case& c : std::vector<Case>{
           {"sizes: [3, 0]",
            "option 'model.sizes.1' of cog_kind 'cog' must be at least 1, got 0 (set at "
            "widget.yaml:2"},
           {"sizes: [1.5]",
            "option 'model.sizes' of cog_kind 'cog' must be a list of integers, got [1.5] (set at "
            "widget.yaml:2"},
           {"weights: []",
            "option 'model.weights' of cog_kind 'cog' must be a list of numbers (non-empty), got "
            "[]"},
           {"range: [0.5]",
            "option 'model.range' of cog_kind 'cog' must be a list of two numbers, got [0.5]"},
           {"range: [0.5, 2]",
            "option 'model.range.1' of cog_kind 'cog' must be in [0, 1], got 2 (set at "
            "widget.yaml:2"},
           {"extra: [a]",
            "option 'model.extra' of cog_kind 'cog' must be a list of integers, got [a]"},
           {"low: 10",
            "option 'model.low' of cog_kind 'cog' must be less than high (10), got 10 (set at "
            "widget.yaml:2"},
       }) {
    auto w = Registry<Cog>::Get().Instantiate(
        Parse(std::string("_target_: cog\n") + c.yaml + "\n" + part));
    ASSERT_FALSE(w.ok()) << c.yaml;
    EXPECT_EQ(std::string(w.status().message()).rfind(c.message, 0), 0u) << w.status().message();
  }
  // A required option of type any is refused when null, with its check's words.
  auto w = Registry<Cog>::Get().Instantiate(
      Parse("_target_: cog\npart: {_target_: gear}\nshape: null\n"));
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(
      std::string(w.status().message())
          .rfind("option 'model.shape' of cog_kind 'cog' must be a side or [h, w], got null", 0),
      0u)
      << w.status();
  w = Registry<Cog>::Get().Instantiate(Parse("_target_: cog\nshape: 1\n"));
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(std::string(w.status().message())
                .rfind("option 'model.part' of cog_kind 'cog' is required", 0),
            0u)
      << w.status();
}

// kiln's own launcher and sweeper configs (lib/config/hydra_conf) hold exactly the options their
// components declare, with the declared defaults: the YAML and the declaration cannot drift.
TEST(BuiltinHydraConfigs, LauncherAndSweeperConfigsMatchTheirDeclarations) {
  int checked = 0;
  for (const auto& [name, text] : config::BuiltinHydraConfigs()) {
    std::string kind;
    if (name.rfind("hydra/launcher/", 0) == 0) kind = "launcher";
    if (name.rfind("hydra/sweeper/", 0) == 0) kind = "sweeper";
    // A component's config is hydra/KIND/NAME; deeper ones are its groups'
    // (hydra/sweeper/sampler/tpe).
    if (kind.empty() ||
        name.find('/', std::string("hydra/" + kind + "/").size()) != std::string::npos)
      continue;
    auto node = config::ParseYaml(text, name + ".yaml");
    ASSERT_TRUE(node.ok()) << node.status();
    config::NodePtr target = (*node)->Find("_target_");
    ASSERT_NE(target, nullptr) << name;
    const RegistryHub::Entry* entry = RegistryHub::Instance().Find(kind, target->as_string());
    ASSERT_NE(entry, nullptr) << name << " names " << kind << " '" << target->as_string() << "'";
    std::set<std::string> keys;
    for (const auto& [key, value] : (*node)->entries()) {
      if (key[0] == '_') continue;
      if (key == "defaults") {  // `- sampler: tpe`: a config group fills the option of its name
        for (const auto& item : value->items()) {
          for (const auto& [group, option] : item->entries()) keys.insert(group);
        }
        continue;
      }
      keys.insert(key);
      const OptionSpec* spec = entry->info.options.Find(key);
      ASSERT_NE(spec, nullptr) << name << ": '" << key << "' is not an option of " << kind << " "
                               << target->as_string();
      ASSERT_NE(spec->default_value, nullptr) << name << ": " << key;
      EXPECT_TRUE(config::DeepEqual(*value, *spec->default_value))
          << name << ": " << key << " is " << config::ToYaml(*value) << " in the YAML, declared "
          << config::ToYaml(*spec->default_value);
    }
    for (const auto& spec : entry->info.options.options()) {
      EXPECT_TRUE(keys.count(spec.name)) << name << " lacks the option '" << spec.name << "'";
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5);  // launchers basic, local, slurm; sweepers basic, optuna
}

}  // namespace
}  // namespace kiln
