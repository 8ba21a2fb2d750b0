#include "lib/config/interpolation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/config/node.h"
#include "lib/config/yaml_io.h"

namespace kiln::config {
namespace interpolation_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

NodePtr Yaml(const std::string& text) {
  auto parsed = ParseYaml(text, "interp.yaml");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : Node::Map();
}

absl::StatusOr<NodePtr> ResolveYaml(const std::string& text) {
  Interpolator interpolator(Yaml(text));
  return interpolator.ResolveAll();
}

// Resolves `text` and returns the node at dotted `key`.
NodePtr Resolved(const std::string& text, const std::string& key) {
  auto resolved = ResolveYaml(text);
  EXPECT_TRUE(resolved.ok()) << resolved.status();
  if (!resolved.ok()) return Node::String("<error>");
  NodePtr current = *resolved;
  for (const auto& seg : SplitKey(key)) {
    if (current->is_map()) {
      current = current->Find(seg);
    } else if (current->is_list()) {
      current = current->items().at(std::stoul(seg));
    } else {
      current = nullptr;
    }
    if (current == nullptr) {
      ADD_FAILURE() << "no key " << key;
      return Node::String("<absent>");
    }
  }
  return current;
}

absl::Status ResolveError(const std::string& text) {
  auto resolved = ResolveYaml(text);
  EXPECT_FALSE(resolved.ok()) << "resolved to:\n" << (resolved.ok() ? ToYaml(**resolved) : "");
  return resolved.ok() ? absl::OkStatus() : resolved.status();
}

std::string StringAt(const std::string& text, const std::string& key) {
  NodePtr n = Resolved(text, key);
  EXPECT_EQ(n->kind(), NodeKind::kString) << KindName(n->kind());
  return n->kind() == NodeKind::kString ? n->as_string() : "<not a string>";
}

// --- Keys ---

TEST(Interpolation, AbsoluteKey) {
  NodePtr v = Resolved("a:\n  b: 1\nc: ${a.b}\n", "c");
  ASSERT_EQ(v->kind(), NodeKind::kInt);
  EXPECT_EQ(v->as_int(), 1);
}

TEST(Interpolation, RelativeKeyToSibling) {
  NodePtr v = Resolved("a:\n  x: 1\n  y: ${.x}\nx: 2\n", "a.y");
  EXPECT_EQ(v->as_int(), 1);
}

TEST(Interpolation, RelativeKeyToParentLevel) {
  NodePtr v = Resolved("x: 0\na:\n  x: 2\n  b:\n    x: 3\n    y: ${..x}\n", "a.b.y");
  EXPECT_EQ(v->as_int(), 2);
}

TEST(Interpolation, RelativeKeyTwoLevelsUp) {
  NodePtr v = Resolved("x: 0\na:\n  x: 2\n  b:\n    x: 3\n    y: ${...x}\n", "a.b.y");
  EXPECT_EQ(v->as_int(), 0);
}

TEST(Interpolation, RelativeKeyAboveTheRootIsAnError) {
  absl::Status st = ResolveError("x: ${..x}\n");
  EXPECT_THAT(Message(st), HasSubstr("..x"));
}

TEST(Interpolation, ListIndexWithBrackets) {
  EXPECT_EQ(Resolved("a: [10, 20]\nb: ${a[1]}\n", "b")->as_int(), 20);
}

TEST(Interpolation, ListIndexWithDot) {
  EXPECT_EQ(Resolved("a: [10, 20]\nb: ${a.0}\n", "b")->as_int(), 10);
}

TEST(Interpolation, IntoAListOfMaps) {
  EXPECT_EQ(Resolved("a:\n- x: 1\n- x: 2\nb: ${a[1].x}\n", "b")->as_int(), 2);
}

TEST(Interpolation, ListIndexOutOfRangeIsAnError) {
  absl::Status st = ResolveError("a: [10]\nb: ${a[3]}\n");
  EXPECT_THAT(Message(st), HasSubstr("a[3]"));
}

TEST(Interpolation, InsideAList) {
  NodePtr v = Resolved("b: 2\na: [1, '${b}', 'x_${b}']\n", "a");
  ASSERT_TRUE(v->is_list());
  EXPECT_EQ(v->items()[1]->kind(), NodeKind::kInt);
  EXPECT_EQ(v->items()[1]->as_int(), 2);
  EXPECT_EQ(v->items()[2]->as_string(), "x_2");
}

TEST(Interpolation, ChainOfInterpolations) {
  EXPECT_EQ(Resolved("a: 1\nb: ${a}\nc: ${b}\n", "c")->as_int(), 1);
}

// --- Types ---

TEST(Interpolation, FullInterpolationKeepsType) {
  const char* yaml =
      "i: 5\nf: 0.5\nb: true\nn: null\ns: '5'\n"
      "vi: ${i}\nvf: ${f}\nvb: ${b}\nvn: ${n}\nvs: ${s}\n";
  EXPECT_EQ(Resolved(yaml, "vi")->kind(), NodeKind::kInt);
  EXPECT_EQ(Resolved(yaml, "vf")->kind(), NodeKind::kFloat);
  EXPECT_EQ(Resolved(yaml, "vb")->kind(), NodeKind::kBool);
  EXPECT_EQ(Resolved(yaml, "vn")->kind(), NodeKind::kNull);
  EXPECT_EQ(Resolved(yaml, "vs")->kind(), NodeKind::kString);
}

TEST(Interpolation, StringInterpolationUsesPythonStr) {
  const char* yaml =
      "t: true\nf: false\nh: 0.5\nn: null\ni: 3\nw: 3.0\ne: 1.0e-05\n"
      "s: v_${t}_${f}_${h}_${n}_${i}_${w}_${e}\n";
  EXPECT_EQ(StringAt(yaml, "s"), "v_True_False_0.5_None_3_3.0_1e-05");
}

TEST(Interpolation, StringInterpolationOfInfinity) {
  EXPECT_EQ(StringAt("a: .inf\nb: -.inf\ns: ${a}/${b}\n", "s"), "inf/-inf");
}

TEST(Interpolation, StringInterpolationOfContainersUsesPythonStr) {
  EXPECT_EQ(StringAt("l: [1, b, true, null]\ns: x_${l}\n", "s"), "x_[1, 'b', True, None]");
  EXPECT_EQ(StringAt("m:\n  k: v\n  n: 2\ns: x_${m}\n", "s"), "x_{'k': 'v', 'n': 2}");
}

TEST(Interpolation, StringInterpolationOfStringsWithQuotesUsesPythonRepr) {
  // Python: str(["it's"]) == "[\"it's\"]".
  EXPECT_EQ(StringAt("l: [\"it's\"]\ns: x_${l}\n", "s"), "x_[\"it's\"]");
}

TEST(Interpolation, TwoInterpolationsMakeAString) {
  NodePtr v = Resolved("a: 1\nb: 2\nc: ${a}${b}\n", "c");
  ASSERT_EQ(v->kind(), NodeKind::kString);
  EXPECT_EQ(v->as_string(), "12");
}

TEST(Interpolation, SurroundingTextMakesAString) {
  EXPECT_EQ(StringAt("a: 1\nc: ' ${a}'\n", "c"), " 1");
}

TEST(Interpolation, InterpolationToAMapGivesACopy) {
  auto resolved = ResolveYaml("a:\n  x: 1\n  y: [1]\nb: ${a}\n");
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  NodePtr a = (*resolved)->Find("a");
  NodePtr b = (*resolved)->Find("b");
  ASSERT_TRUE(b->is_map());
  EXPECT_TRUE(DeepEqual(*a, *b));
  EXPECT_NE(a.get(), b.get());
  EXPECT_NE(a->Find("x").get(), b->Find("x").get());
  EXPECT_NE(a->Find("y").get(), b->Find("y").get());
  b->Set("x", Node::Int(99));
  EXPECT_EQ(a->Find("x")->as_int(), 1);
}

TEST(Interpolation, ReferencedMapIsResolvedRelativeToItself) {
  NodePtr v = Resolved("a:\n  x: 1\n  y: ${.x}\nx: 5\nb: ${a}\n", "b.y");
  EXPECT_EQ(v->as_int(), 1);
}

TEST(Interpolation, ResolveAllLeavesTheInputUntouched) {
  NodePtr root = Yaml("a: 1\nb: ${a}\n");
  Interpolator interpolator(root);
  ASSERT_TRUE(interpolator.ResolveAll().ok());
  EXPECT_EQ(root->Find("b")->as_string(), "${a}");
}

TEST(Interpolation, NestedKeyInterpolation) {
  NodePtr v = Resolved("bar: x\nfoo:\n  x: 7\n  y: 8\nv: ${foo.${bar}}\n", "v");
  ASSERT_EQ(v->kind(), NodeKind::kInt);
  EXPECT_EQ(v->as_int(), 7);
}

// --- Escapes ---

TEST(Interpolation, EscapedDollarStaysLiteral) {
  EXPECT_EQ(StringAt("x: 1\nv: \\${x}\n", "v"), "${x}");
  EXPECT_EQ(StringAt("x: 1\nv: 'a \\${x} b'\n", "v"), "a ${x} b");
}

TEST(Interpolation, EscapedBackslashBeforeInterpolation) {
  EXPECT_EQ(StringAt("x: 1\nv: \\\\${x}\n", "v"), "\\1");
}

TEST(Interpolation, BackslashElsewhereIsKept) {
  EXPECT_EQ(StringAt("x: 1\nv: C:\\dir\\${x}\n", "v"), "C:\\dir${x}");
}

// --- Resolvers ---

TEST(OcEnv, ReadsTheVariable) {
  setenv("KILN_INTERP_TEST_VAR", "hello", 1);
  EXPECT_EQ(StringAt("v: ${oc.env:KILN_INTERP_TEST_VAR}\n", "v"), "hello");
}

TEST(OcEnv, ValueIsAlwaysAString) {
  setenv("KILN_INTERP_TEST_NUM", "42", 1);
  EXPECT_EQ(StringAt("v: ${oc.env:KILN_INTERP_TEST_NUM}\n", "v"), "42");
}

TEST(OcEnv, DefaultWhenUnset) {
  unsetenv("KILN_INTERP_UNSET_VAR");
  EXPECT_EQ(StringAt("v: ${oc.env:KILN_INTERP_UNSET_VAR,fallback}\n", "v"), "fallback");
  EXPECT_EQ(StringAt("v: '${oc.env:KILN_INTERP_UNSET_VAR,/tmp/x}'\n", "v"), "/tmp/x");
}

TEST(OcEnv, QuotedDefaultKeepsCommas) {
  unsetenv("KILN_INTERP_UNSET_VAR");
  EXPECT_EQ(StringAt("v: \"${oc.env:KILN_INTERP_UNSET_VAR,'a,b'}\"\n", "v"), "a,b");
}

TEST(OcEnv, VariableWinsOverDefault) {
  setenv("KILN_INTERP_TEST_VAR", "hello", 1);
  EXPECT_EQ(StringAt("v: ${oc.env:KILN_INTERP_TEST_VAR,fallback}\n", "v"), "hello");
}

TEST(OcEnv, NullDefault) {
  unsetenv("KILN_INTERP_UNSET_VAR");
  EXPECT_TRUE(Resolved("v: ${oc.env:KILN_INTERP_UNSET_VAR,null}\n", "v")->is_null());
}

TEST(OcEnv, UnsetWithoutDefaultIsAnError) {
  unsetenv("KILN_INTERP_UNSET_VAR");
  absl::Status st = ResolveError("v: ${oc.env:KILN_INTERP_UNSET_VAR}\n");
  EXPECT_THAT(Message(st), HasSubstr("KILN_INTERP_UNSET_VAR"));
}

TEST(OcEnv, NonStringDefaultIsConvertedWithStr) {
  // OmegaConf 2.1+: str(default), so 5 -> '5', 1.5 -> '1.5', true -> 'True', [1, 2] -> '[1, 2]'.
  unsetenv("KILN_INTERP_UNSET_VAR");
  EXPECT_EQ(StringAt("v: ${oc.env:KILN_INTERP_UNSET_VAR,5}\n", "v"), "5");
  EXPECT_EQ(StringAt("v: ${oc.env:KILN_INTERP_UNSET_VAR,1.5}\n", "v"), "1.5");
  EXPECT_EQ(StringAt("v: ${oc.env:KILN_INTERP_UNSET_VAR,true}\n", "v"), "True");
  EXPECT_EQ(StringAt("v: ${oc.env:KILN_INTERP_UNSET_VAR,[1,2]}\n", "v"), "[1, 2]");
}

TEST(OcEnv, SetVariableWinsOverANonStringDefault) {
  setenv("KILN_INTERP_TEST_VAR", "hello", 1);
  EXPECT_EQ(StringAt("v: ${oc.env:KILN_INTERP_TEST_VAR,5}\n", "v"), "hello");
}

TEST(OcEnv, QuotedNumberDefaultIsAString) {
  unsetenv("KILN_INTERP_UNSET_VAR");
  EXPECT_EQ(StringAt("v: \"${oc.env:KILN_INTERP_UNSET_VAR,'5'}\"\n", "v"), "5");
}

TEST(OcSelect, FoundKey) {
  NodePtr v = Resolved("a: 1\nb: ${oc.select:a,7}\n", "b");
  EXPECT_EQ(v->as_int(), 1);
}

TEST(OcSelect, DefaultForAbsentKey) {
  NodePtr v = Resolved("a: 1\nb: ${oc.select:nope,7}\n", "b");
  ASSERT_EQ(v->kind(), NodeKind::kInt);
  EXPECT_EQ(v->as_int(), 7);
}

TEST(OcSelect, DefaultForMissingValue) {
  NodePtr v = Resolved("a: ???\nb: ${oc.select:a,fallback}\n", "b");
  EXPECT_EQ(v->as_string(), "fallback");
}

TEST(OcSelect, NullWithoutDefault) {
  EXPECT_TRUE(Resolved("b: ${oc.select:nope}\n", "b")->is_null());
}

TEST(OcSelect, ResolvesTheSelectedValue) {
  EXPECT_EQ(Resolved("a: 3\nb: ${a}\nc: ${oc.select:b,0}\n", "c")->as_int(), 3);
}

TEST(OcDecode, ListString) {
  NodePtr v = Resolved("s: '[1,2]'\nv: ${oc.decode:${s}}\n", "v");
  ASSERT_TRUE(v->is_list());
  ASSERT_EQ(v->items().size(), 2u);
  EXPECT_EQ(v->items()[0]->as_int(), 1);
  EXPECT_EQ(v->items()[1]->as_int(), 2);
}

TEST(OcDecode, IntString) {
  NodePtr v = Resolved("s: '123'\nv: ${oc.decode:${s}}\n", "v");
  ASSERT_EQ(v->kind(), NodeKind::kInt);
  EXPECT_EQ(v->as_int(), 123);
}

TEST(OcDecode, QuotedLiteralArgument) {
  NodePtr v = Resolved("v: \"${oc.decode:'{a: 1, b: [x]}'}\"\n", "v");
  ASSERT_TRUE(v->is_map());
  EXPECT_EQ(v->Find("a")->as_int(), 1);
  EXPECT_EQ(v->Find("b")->items()[0]->as_string(), "x");
}

TEST(OcDecode, NullStaysNull) {
  EXPECT_TRUE(Resolved("s: null\nv: ${oc.decode:${s}}\n", "v")->is_null());
}

TEST(OcDecode, BadTextIsAnError) {
  absl::Status st = ResolveError("s: '[1,'\nv: ${oc.decode:${s}}\n");
  EXPECT_THAT(Message(st), HasSubstr("oc.decode"));
}

TEST(OcDict, KeysAndValues) {
  const char* yaml = "d:\n  a: 1\n  b: 2\nk: ${oc.dict.keys:d}\nv: ${oc.dict.values:d}\n";
  NodePtr k = Resolved(yaml, "k");
  ASSERT_TRUE(k->is_list());
  ASSERT_EQ(k->items().size(), 2u);
  EXPECT_EQ(k->items()[0]->as_string(), "a");
  EXPECT_EQ(k->items()[1]->as_string(), "b");
  NodePtr v = Resolved(yaml, "v");
  ASSERT_TRUE(v->is_list());
  ASSERT_EQ(v->items().size(), 2u);
  EXPECT_EQ(v->items()[1]->as_int(), 2);
}

TEST(Resolvers, UnknownResolverListsKnownOnes) {
  absl::Status st = ResolveError("v: ${nosuch:x}\n");
  EXPECT_THAT(Message(st), HasSubstr("nosuch"));
  EXPECT_THAT(Message(st), HasSubstr("oc.env"));
  EXPECT_THAT(Message(st), HasSubstr("oc.select"));
  EXPECT_THAT(Message(st), HasSubstr("oc.decode"));
}

TEST(Resolvers, CustomResolverGetsTypedArguments) {
  ResolverRegistry registry;
  registry.Register("add", [](const ResolverCall& call) -> absl::StatusOr<NodePtr> {
    int64_t sum = 0;
    for (const auto& arg : call.args) {
      if (arg->kind() != NodeKind::kInt) return absl::InvalidArgumentError("not an int");
      sum += arg->as_int();
    }
    return Node::Int(sum);
  });
  Interpolator interpolator(Yaml("x: 4\nv: ${add:1,2,${x}}\n"), registry);
  auto resolved = interpolator.ResolveAll();
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  ASSERT_EQ((*resolved)->Find("v")->kind(), NodeKind::kInt);
  EXPECT_EQ((*resolved)->Find("v")->as_int(), 7);
}

// The evaluator splits a resolver's arguments where the grammar reads them (one scanner): a
// missing element is an empty string (OmegaConf's sequence), brackets, braces, quotes and
// interpolations stay whole, `${name:}` has no argument, and the name may be an interpolation.
TEST(Resolvers, ArgumentsSplitWhereTheGrammarReadsThem) {
  ResolverRegistry registry;
  registry.Register("show", [](const ResolverCall& call) -> absl::StatusOr<NodePtr> {
    std::vector<std::string> parts;
    for (const auto& arg : call.args)
      parts.push_back(absl::StrCat(KindName(arg->kind()), "=", PythonStr(*arg)));
    return Node::String(absl::StrCat(parts.size(), ":", absl::StrJoin(parts, "|")));
  });
  Interpolator interpolator(Yaml("which: show\nx: 5\n"
                                 "a: ${show:1,,'b,c'}\n"
                                 "b: ${show:,}\n"
                                 "c: '${show: [1, 2] , {k: v},${x}}'\n"
                                 "d: ${show:}\n"
                                 "e: ${${which}:z}\n"
                                 "f: pre ${show:a,'}'} post\n"),
                            registry);
  auto resolved = interpolator.ResolveAll();
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  auto at = [&](const char* key) { return (*resolved)->Find(key)->as_string(); };
  EXPECT_EQ(at("a"), "3:int=1|string=|string=b,c");
  EXPECT_EQ(at("b"), "2:string=|string=");
  EXPECT_EQ(at("c"), "3:list=[1, 2]|mapping={'k': 'v'}|int=5");
  EXPECT_EQ(at("d"), "0:");
  EXPECT_EQ(at("e"), "1:string=z");
  EXPECT_EQ(at("f"), "pre 2:string=a|string=} post");
}

// An unknown name asks for more resolvers once (the application loads the plugins then); a
// second registration of a name is refused; a failed load is named in the unknown-resolver line.
TEST(Resolvers, LoadMoreOnceRefuseSecondRegistrationAndNameAFailedLoad) {
  ResolverRegistry registry;
  auto one = [](const ResolverCall&) -> absl::StatusOr<NodePtr> { return Node::Int(1); };
  ASSERT_TRUE(registry.Add("one", one, "plugin a").ok());
  absl::Status again = registry.Add("one", one, "plugin b");
  EXPECT_EQ(again.message(),
            "config resolver 'one' is already registered by plugin a; plugin b cannot register it "
            "again: give it "
            "another name");
  int loads = 0;
  registry.set_load_more([&] {
    ++loads;
    return registry.Add(
        "two", [](const ResolverCall&) -> absl::StatusOr<NodePtr> { return Node::Int(2); });
  });
  Interpolator interpolator(Yaml("a: ${two:}\nb: ${two:}\n"), registry);
  auto resolved = interpolator.ResolveAll();
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ((*resolved)->Find("b")->as_int(), 2);
  EXPECT_EQ(loads, 1);

  ResolverRegistry broken;
  broken.set_load_more(
      [] { return absl::FailedPreconditionError("plugin 'x' (x.so): undefined symbol f"); });
  Interpolator failing(Yaml("v: ${three:}\n"), broken);
  auto st = failing.ResolveAll().status();
  EXPECT_THAT(Message(st), HasSubstr("unknown resolver 'three'"));
  EXPECT_THAT(
      Message(st),
      HasSubstr(
          "the plugins that may provide it did not load: plugin 'x' (x.so): undefined symbol f"));
}

TEST(Resolvers, ResolverResultInsideAString) {
  setenv("KILN_INTERP_TEST_VAR", "hello", 1);
  EXPECT_EQ(StringAt("v: pre_${oc.env:KILN_INTERP_TEST_VAR}_post\n", "v"), "pre_hello_post");
}

TEST(Resolvers, HydraResolverReadsTheHydraRoot) {
  NodePtr hydra_root = Yaml("hydra:\n  job:\n    name: app\n");
  Interpolator interpolator(Yaml("v: ${hydra:job.name}\n"));
  interpolator.set_hydra_root(hydra_root);
  auto resolved = interpolator.ResolveAll();
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ((*resolved)->Find("v")->as_string(), "app");
}

// --- Errors ---

TEST(InterpolationErrors, MissingKeyNamesTheKey) {
  absl::Status st = ResolveError("a: 1\nv: ${nope.x}\n");
  EXPECT_THAT(Message(st), HasSubstr("'nope.x'"));
  EXPECT_THAT(Message(st), HasSubstr("not found"));
}

TEST(InterpolationErrors, MissingKeyNamesTheResolvedNode) {
  absl::Status st = ResolveError("a:\n  v: ${nope}\n");
  EXPECT_THAT(Message(st), HasSubstr("a.v"));
  EXPECT_THAT(Message(st), HasSubstr("interp.yaml:2"));
}

TEST(InterpolationErrors, TwoNodeCycle) {
  absl::Status st = ResolveError("a: ${b}\nb: ${a}\n");
  EXPECT_THAT(Message(st), HasSubstr("cycle"));
}

TEST(InterpolationErrors, SelfCycle) {
  absl::Status st = ResolveError("a: ${a}\n");
  EXPECT_THAT(Message(st), HasSubstr("cycle"));
}

TEST(InterpolationErrors, CycleThroughStringInterpolation) {
  absl::Status st = ResolveError("a: x_${b}\nb: y_${a}\n");
  EXPECT_THAT(Message(st), HasSubstr("cycle"));
}

TEST(InterpolationErrors, CycleThroughAMap) {
  absl::Status st = ResolveError("a:\n  x: ${b}\nb: ${a}\n");
  EXPECT_THAT(Message(st), HasSubstr("cycle"));
}

TEST(InterpolationErrors, CycleThroughNestedKey) {
  absl::Status st = ResolveError("a: ${a.x}\n");
  EXPECT_THAT(Message(st), HasSubstr("cycle"));
}

TEST(InterpolationErrors, CycleThroughOcSelect) {
  absl::Status st = ResolveError("a: ${oc.select:b,0}\nb: ${a}\n");
  EXPECT_THAT(Message(st), HasSubstr("cycle"));
}

TEST(InterpolationErrors, InterpolationToMissingValue) {
  absl::Status st = ResolveError("a: ???\nb: ${a}\n");
  EXPECT_THAT(Message(st), HasSubstr("missing"));
  EXPECT_THAT(Message(st), HasSubstr("'a'"));
}

TEST(InterpolationErrors, StringInterpolationToMissingValue) {
  absl::Status st = ResolveError("a: ???\nb: x_${a}\n");
  EXPECT_THAT(Message(st), HasSubstr("missing"));
}

TEST(Interpolation, MissingValuesAreLeftUntouched) {
  auto resolved = ResolveYaml("a: ???\nb:\n  c: ???\nd:\n- ???\n");
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_TRUE((*resolved)->Find("a")->is_missing());
  EXPECT_TRUE((*resolved)->Find("b")->Find("c")->is_missing());
  EXPECT_TRUE((*resolved)->Find("d")->items()[0]->is_missing());
}

// --- Select and key helpers ---

TEST(InterpolatorSelect, FindsAndResolves) {
  Interpolator interpolator(Yaml("a:\n  b: ${c}\nc: 3\n"));
  auto found = interpolator.Select("a.b", {}, /*resolve=*/true);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_NE(*found, nullptr);
  EXPECT_EQ((*found)->as_int(), 3);
  auto raw = interpolator.Select("a.b", {}, /*resolve=*/false);
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ((*raw)->as_string(), "${c}");
  auto absent = interpolator.Select("zz", {}, /*resolve=*/true);
  ASSERT_TRUE(absent.ok());
  EXPECT_EQ(*absent, nullptr);
}

TEST(SplitKey, DotsAndBrackets) {
  EXPECT_THAT(SplitKey("a.b[0].c"), ElementsAre("a", "b", "0", "c"));
  EXPECT_THAT(SplitKey("a[1][2]"), ElementsAre("a", "1", "2"));
  EXPECT_THAT(SplitKey("x"), ElementsAre("x"));
}

TEST(JoinPath, Dots) {
  EXPECT_EQ(JoinPath({"a", "b", "0"}), "a.b.0");
  EXPECT_EQ(JoinPath({}), "");
}

TEST(NodeIsInterpolation, EscapesCount) {
  EXPECT_TRUE(Node::String("${a}")->is_interpolation());
  EXPECT_TRUE(Node::String("x_${a}")->is_interpolation());
  EXPECT_FALSE(Node::String("\\${a}")->is_interpolation());
  EXPECT_TRUE(Node::String("\\\\${a}")->is_interpolation());
  EXPECT_FALSE(Node::String("$a")->is_interpolation());
}

}  // namespace interpolation_test
}  // namespace kiln::config

namespace kiln::config {
namespace interpolation_test {

// Against OmegaConf 2.2's grammar (each verdict checked with OmegaConf.create).
TEST(InterpolationSyntax, AcceptsWhatOmegaConfAccepts) {
  for (const char* s : {"${a}",
                        "${a.b}",
                        "${..a}",
                        "${a[0]}",
                        "${[b]}",
                        "${.[b]}",
                        "${a$}",
                        "${é}",
                        "${ a }",
                        "${a.${b}}",
                        "${a:}",
                        "${oc.env:X,a b}",
                        "${oc.env:X, [1] }",
                        "${oc.env:X,{a:1, b : [2]}}",
                        "${oc.env:X,\\a}",
                        "${a:b}:c",
                        "$${a}",
                        "${a}}",
                        "\\${a",
                        "${f:a,,b}",
                        "${f:'a\\'b'}",
                        "${f:${g:1}}",
                        "${${r}:1}",
                        "${a-b}",
                        "no interpolation {"}) {
    EXPECT_TRUE(CheckInterpolationSyntax(s).ok()) << s;
  }
}

TEST(InterpolationSyntax, RefusesWhatOmegaConfRefuses) {
  for (const char* s : {"${foo",
                        "x ${foo",
                        "${}",
                        "${a b}",
                        "${a.}",
                        "${.}",
                        "${a..b}",
                        "${a[0}",
                        "${m['a.b']}",
                        "${a${b}}",
                        "${ a . b }",
                        "${oc.env:X,a=b}",
                        "${oc.env:X,é}",
                        "${oc.env:X,(a)}",
                        "${oc.env:X,'a' b}",
                        "${oc.env:X,a [1]}",
                        "${oc.env:X,{'a':1}}",
                        "${a-b:c}",
                        "${1a:c}",
                        "${a.1:c}",
                        "${oc.env:X,#}",
                        "${oc.env:X,'a${b'}",
                        "${:}"}) {
    EXPECT_FALSE(CheckInterpolationSyntax(s).ok()) << s;
  }
}

}  // namespace interpolation_test
}  // namespace kiln::config
