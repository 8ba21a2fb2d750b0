#include "lib/registry/registry.h"

#include <gtest/gtest.h>

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
