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

TEST(Registry, MissingRequiredOptionIsNamed) {
  auto w = Registry<Widget>::Get().Instantiate(Parse("_target_: gear\n"));
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("option 'model.teeth' of widget 'gear' is required"),
            std::string::npos)
      << w.status();
}

TEST(Registry, MandatoryPlaceholderIsReported) {
  auto w = Registry<Widget>::Get().Instantiate(Parse("_target_: gear\nteeth: ???\n"));
  ASSERT_FALSE(w.ok());
  EXPECT_NE(std::string(w.status().message()).find("missing mandatory value 'model.teeth'"), std::string::npos)
      << w.status();
}

TEST(Registry, DuplicateNameIsRefused) {
  auto st = Registry<Widget>::Get().Register("gear", "again", OptionSchema(),
                                             [](const config::Config&) -> absl::StatusOr<std::shared_ptr<Widget>> {
                                               return nullptr;
                                             });
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(std::string(st.message()).find("widget 'gear' is already registered"), std::string::npos);
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

KILN_REGISTER_BOUND(Sprocket, "sprocket", "A bound widget for tests",
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
           {"mode: medium", "option 'model.mode' of sprocket_kind 'sprocket' must be one of: fast, slow, got medium (set at widget.yaml:2"},
           {"teeth: 2", "option 'model.teeth' of sprocket_kind 'sprocket' must be at least 3, got 2 (set at widget.yaml:2"},
           {"ratio: 1.5", "option 'model.ratio' of sprocket_kind 'sprocket' must be in [0, 1], got 1.5 (set at widget.yaml:2"},
           {"limit: 0", "option 'model.limit' of sprocket_kind 'sprocket' must be greater than 0, got 0 (set at widget.yaml:2"},
           {"tags: []", "option 'model.tags' of sprocket_kind 'sprocket' must be a list of strings (non-empty), got [] (set at widget.yaml:2"},
           {"tags: [1]", "option 'model.tags' of sprocket_kind 'sprocket' must be a list of strings (non-empty), got [1] (set at widget.yaml:2"},
           {"teeth: many", "option 'model.teeth' of sprocket_kind 'sprocket' must be int, got string many (set at widget.yaml:2"},
       }) {
    auto w = Registry<Sprocket>::Get().Instantiate(Parse(std::string("_target_: sprocket\n") + c.yaml + "\n"));
    ASSERT_FALSE(w.ok()) << c.yaml;
    EXPECT_EQ(std::string(w.status().message()).rfind(c.message, 0), 0u) << w.status().message();
  }
  // null is accepted by an optional field, and its check is not asked.
  EXPECT_TRUE(Registry<Sprocket>::Get().Instantiate(Parse("_target_: sprocket\nlimit: null\n")).ok());
}

// kiln's own launcher and sweeper configs (lib/config/hydra_conf) hold exactly the options their
// components declare, with the declared defaults: the YAML and the declaration cannot drift.
TEST(BuiltinHydraConfigs, LauncherAndSweeperConfigsMatchTheirDeclarations) {
  int checked = 0;
  for (const auto& [name, text] : config::BuiltinHydraConfigs()) {
    std::string kind;
    if (name.rfind("hydra/launcher/", 0) == 0) kind = "launcher";
    if (name.rfind("hydra/sweeper/", 0) == 0) kind = "sweeper";
    if (kind.empty()) continue;
    auto node = config::ParseYaml(text, name + ".yaml");
    ASSERT_TRUE(node.ok()) << node.status();
    config::NodePtr target = (*node)->Find("_target_");
    ASSERT_NE(target, nullptr) << name;
    const RegistryHub::Entry* entry = RegistryHub::Instance().Find(kind, target->as_string());
    ASSERT_NE(entry, nullptr) << name << " names " << kind << " '" << target->as_string() << "'";
    std::set<std::string> keys;
    for (const auto& [key, value] : (*node)->entries()) {
      if (key[0] == '_') continue;
      keys.insert(key);
      const OptionSpec* spec = entry->info.options.Find(key);
      ASSERT_NE(spec, nullptr) << name << ": '" << key << "' is not an option of " << kind << " " << target->as_string();
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
  EXPECT_EQ(checked, 4);  // launchers basic, local, slurm; sweeper basic
}

}  // namespace
}  // namespace kiln
