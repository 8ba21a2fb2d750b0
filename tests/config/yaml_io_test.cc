#include "lib/config/yaml_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/config/node.h"
#include "tests/config/typed_value_checks.h"

namespace kiln::config {
namespace yaml_io_test {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

NodePtr MustParse(const std::string& text) {
  auto parsed = ParseYaml(text, "test.yaml");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : Node::Map();
}

// The value of `v` in "v: <text>".
NodePtr Value(const std::string& text) {
  NodePtr root = MustParse("v: " + text + "\n");
  NodePtr v = root->is_map() ? root->Find("v") : nullptr;
  EXPECT_NE(v, nullptr) << text;
  return v ? v : Node::String("<absent>");
}

constexpr auto ExpectInt = &TypedValueChecks<Value>::Int;
constexpr auto ExpectBigInt = &TypedValueChecks<Value>::BigInt;
constexpr auto ExpectFloat = &TypedValueChecks<Value>::Float;
constexpr auto ExpectBool = &TypedValueChecks<Value>::Bool;
constexpr auto ExpectString = &TypedValueChecks<Value>::String;
constexpr auto ExpectNull = &TypedValueChecks<Value>::Null;

// --- Scalar typing (PyYAML's YAML 1.1 resolvers plus OmegaConf's float resolver) ---

TEST(YamlScalarTyping, YesNoOnOffAreBools) {
  for (const char* t : {"yes", "Yes", "YES", "on", "On", "ON", "true", "True", "TRUE"}) {
    ExpectBool(t, true);
  }
  for (const char* t : {"no", "No", "NO", "off", "Off", "OFF", "false", "False", "FALSE"}) {
    ExpectBool(t, false);
  }
}

TEST(YamlScalarTyping, OddlyCasedBoolWordsAndYNAreStrings) {
  ExpectString("tRUE", "tRUE");
  ExpectString("yEs", "yEs");
  ExpectString("y", "y");
  ExpectString("n", "n");
}

TEST(YamlScalarTyping, NullForms) {
  ExpectNull("~");
  ExpectNull("null");
  ExpectNull("Null");
  ExpectNull("NULL");
  NodePtr root = MustParse("v:\n");
  ASSERT_NE(root->Find("v"), nullptr);
  EXPECT_TRUE(root->Find("v")->is_null());
}

TEST(YamlScalarTyping, NullLikeWordsInOtherCaseAreStrings) { ExpectString("nULL", "nULL"); }

TEST(YamlScalarTyping, DecimalInts) {
  ExpectInt("0", 0);
  ExpectInt("42", 42);
  ExpectInt("-17", -17);
  ExpectInt("+5", 5);
}

TEST(YamlScalarTyping, UnderscoresInInts) { ExpectInt("1_000", 1000); }

TEST(YamlScalarTyping, LeadingZeroIsOctal) {
  ExpectInt("007", 7);
  ExpectInt("010", 8);
  ExpectInt("-010", -8);
}

TEST(YamlScalarTyping, NonOctalDigitsAfterZeroAreStrings) {
  ExpectString("08", "08");
  ExpectString("09", "09");
}

TEST(YamlScalarTyping, HexAndBinary) {
  ExpectInt("0x1F", 31);
  ExpectInt("0xff", 255);
  ExpectInt("-0x10", -16);
  ExpectInt("0b101", 5);
}

TEST(YamlScalarTyping, UppercaseHexPrefixIsAString) { ExpectString("0X1F", "0X1F"); }

TEST(YamlScalarTyping, SexagesimalInt) {
  ExpectInt("1:30", 90);
  ExpectInt("-1:0:0", -3600);
  ExpectInt("2_0:30", 1230);
  // Exact in base 60 up to int64's ends (a double would round these).
  ExpectInt("2562047788015215:30:7", INT64_MAX);
  ExpectInt("-2562047788015215:30:8", INT64_MIN);
}

// Python's int has no bound, and OmegaConf keeps 2**64 an int: so do kiln's YAML ints, in every
// base (the values are Python's int() of the same texts). Sexagesimals are computed exactly (the
// compose fuzzer once found a cast of an out-of-range double here).
TEST(YamlScalarTyping, IntsBeyondInt64StayInts) {
  ExpectInt("9223372036854775807", INT64_MAX);
  ExpectInt("-9223372036854775808", INT64_MIN);
  ExpectBigInt("9223372036854775808", "9223372036854775808");
  ExpectBigInt("-9223372036854775809", "-9223372036854775809");
  ExpectBigInt("+18_446_744_073_709_551_616", "18446744073709551616");
  ExpectBigInt("0x1FFFFFFFFFFFFFFFF", "36893488147419103231");
  ExpectBigInt("-0b11111111111111111111111111111111111111111111111111111111111111111",
               "-36893488147419103231");
  ExpectBigInt("01777777777777777777777", "18446744073709551615");
  ExpectBigInt("2562047788015215:30:8", "9223372036854775808");
  ExpectBigInt("12345678901234567890:0", "740740734074074073400");
  ExpectBigInt("99999999999999999999999:0", "5999999999999999999999940");
  ExpectInt("0x00000000000000000000000000000001", 1);  // leading zeros do not make it big
}

TEST(YamlScalarTyping, BigIntsPrintAndReadBack) {
  NodePtr root =
      MustParse("a: 18446744073709551616\nb: [-99999999999999999999]\n18446744073709551616: key\n");
  std::string text = ToYaml(*root);
  EXPECT_EQ(text,
            "a: 18446744073709551616\nb:\n- -99999999999999999999\n18446744073709551616: key\n");
  EXPECT_TRUE(DeepEqual(*MustParse(text), *root));
  EXPECT_FALSE(DeepEqual(*Value("18446744073709551616"), *Value("18446744073709551617")));
  EXPECT_FALSE(DeepEqual(*Value("18446744073709551616"), *Value("'18446744073709551616'")));
}

// A tag PyYAML's safe loader has no constructor for is refused where it is, as Hydra refuses it,
// on a mapping, a list or a scalar; the standard tags are read.
TEST(YamlTags, UnknownTagsAreRefusedWithTheirPlace) {
  for (const auto& [text, where] : std::vector<std::pair<std::string, std::string>>{
           {"model: !model {name: cnn}\n",
            "test.yaml:1:8: could not determine a constructor for the tag '!model'"},
           {"l: !layers [1, 2]\n",
            "test.yaml:1:4: could not determine a constructor for the tag '!layers'"},
           {"a: 1\nport: !port 3306\n",
            "test.yaml:2:7: could not determine a constructor for the tag '!port'"},
           {"t: !!python/tuple [1, 2]\n",
            "could not determine a constructor for the tag 'tag:yaml.org,2002:python/tuple'"}}) {
    auto parsed = ParseYaml(text, "test.yaml");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_THAT(Message(parsed.status()), HasSubstr(where)) << text;
  }
  NodePtr root = MustParse("m: !!map {x: 1}\nl: !!seq [1]\ns: !!str 5\n");
  EXPECT_TRUE(root->Find("m")->is_map());
  EXPECT_TRUE(root->Find("l")->is_list());
  EXPECT_EQ(root->Find("s")->as_string(), "5");
}

TEST(YamlScalarTyping, Floats) {
  ExpectFloat("1.5", 1.5);
  ExpectFloat("-2.25", -2.25);
  ExpectFloat("1.", 1.0);
  ExpectFloat(".5", 0.5);
  ExpectFloat("1_000.5", 1000.5);
  ExpectFloat("1.5e3", 1500.0);
  ExpectFloat("1.0e-05", 1e-5);
}

TEST(YamlScalarTyping, ExponentWithoutDotIsFloat) {
  ExpectFloat("1e3", 1000.0);
  ExpectFloat("1E3", 1000.0);
  ExpectFloat("-1e3", -1000.0);
  ExpectFloat("2e-2", 0.02);
  ExpectFloat("1e+3", 1000.0);
}

TEST(YamlScalarTyping, InfinityAndNan) {
  NodePtr inf = Value(".inf");
  ASSERT_EQ(inf->kind(), NodeKind::kFloat);
  EXPECT_TRUE(std::isinf(inf->as_float()));
  EXPECT_GT(inf->as_float(), 0);
  NodePtr neg = Value("-.inf");
  ASSERT_EQ(neg->kind(), NodeKind::kFloat);
  EXPECT_TRUE(std::isinf(neg->as_float()));
  EXPECT_LT(neg->as_float(), 0);
  for (const char* t : {".Inf", ".INF", "+.inf"}) {
    NodePtr v = Value(t);
    ASSERT_EQ(v->kind(), NodeKind::kFloat) << t;
    EXPECT_TRUE(std::isinf(v->as_float())) << t;
  }
  for (const char* t : {".nan", ".NaN", ".NAN"}) {
    NodePtr v = Value(t);
    ASSERT_EQ(v->kind(), NodeKind::kFloat) << t;
    EXPECT_TRUE(std::isnan(v->as_float())) << t;
  }
}

TEST(YamlScalarTyping, InfAndNanWithoutDotAreStrings) {
  ExpectString("inf", "inf");
  ExpectString("nan", "nan");
}

TEST(YamlScalarTyping, DatesStayStrings) {
  // OmegaConf removes PyYAML's timestamp resolver.
  ExpectString("2001-12-14", "2001-12-14");
}

TEST(YamlScalarTyping, QuotedScalarsStayStrings) {
  ExpectString("'007'", "007");
  ExpectString("\"true\"", "true");
  ExpectString("'yes'", "yes");
  ExpectString("'1.5'", "1.5");
  ExpectString("'null'", "null");
  ExpectString("'~'", "~");
  ExpectString("\"1e3\"", "1e3");
  ExpectString("''", "");
}

TEST(YamlScalarTyping, ExplicitTags) {
  ExpectString("!!str 5", "5");
  ExpectFloat("!!float 1", 1.0);
  ExpectInt("!!int 12", 12);
}

TEST(YamlScalarTyping, PlainWordsAreStrings) {
  ExpectString("hello", "hello");
  ExpectString("hello world", "hello world");
  ExpectString("1.2.3", "1.2.3");
  ExpectString("${a.b}", "${a.b}");
  ExpectString("???", "???");
}

TEST(YamlScalarTyping, ResolvePlainScalarAgreesWithParse) {
  EXPECT_EQ(ResolvePlainScalar("yes")->kind(), NodeKind::kBool);
  EXPECT_EQ(ResolvePlainScalar("007")->as_int(), 7);
  EXPECT_EQ(ResolvePlainScalar("1e3")->kind(), NodeKind::kFloat);
  EXPECT_EQ(ResolvePlainScalar("")->kind(), NodeKind::kNull);
  EXPECT_EQ(ResolvePlainScalar("abc")->as_string(), "abc");
}

// --- Structure and errors ---

TEST(ParseYaml, NestedMapsAndListsKeepOrder) {
  NodePtr root = MustParse("b: 1\na:\n  y: [1, 2]\n  x:\n    - p: 1\n      q: 2\n");
  ASSERT_TRUE(root->is_map());
  ASSERT_EQ(root->entries().size(), 2u);
  EXPECT_EQ(root->entries()[0].first, "b");
  EXPECT_EQ(root->entries()[1].first, "a");
  NodePtr a = root->Find("a");
  EXPECT_EQ(a->entries()[0].first, "y");
  EXPECT_EQ(a->Find("y")->items().size(), 2u);
  NodePtr x = a->Find("x");
  ASSERT_TRUE(x->is_list());
  ASSERT_EQ(x->items().size(), 1u);
  EXPECT_EQ(x->items()[0]->Find("q")->as_int(), 2);
}

TEST(ParseYaml, EmptyDocumentIsNull) {
  NodePtr root = MustParse("");
  EXPECT_TRUE(root->is_null());
}

TEST(ParseYaml, AnchorsAndAliases) {
  NodePtr root = MustParse("a: &x 5\nb: *x\n");
  EXPECT_EQ(root->Find("b")->as_int(), 5);
}

TEST(ParseYaml, MergeKeyMergesTheAnchoredMap) {
  // PyYAML's SafeLoader (which OmegaConf uses) applies YAML 1.1 merge keys.
  NodePtr root = MustParse("base: &b\n  x: 1\n  y: 1\nderived:\n  <<: *b\n  y: 2\n");
  NodePtr derived = root->Find("derived");
  ASSERT_NE(derived, nullptr);
  EXPECT_FALSE(derived->Contains("<<"));
  ASSERT_NE(derived->Find("x"), nullptr);
  EXPECT_EQ(derived->Find("x")->as_int(), 1);
  EXPECT_EQ(derived->Find("y")->as_int(), 2);
}

TEST(ParseYaml, MultipleDocumentsAreAnError) {
  // PyYAML's yaml.load (OmegaConf.load) refuses a stream with more than one document.
  auto parsed = ParseYaml("a: 1\n---\nb: 2\n", "multi.yaml");
  EXPECT_FALSE(parsed.ok()) << "second document silently dropped";
  if (!parsed.ok()) EXPECT_THAT(Message(parsed.status()), StartsWith("multi.yaml:"));
}

TEST(ParseYaml, NonScalarKeyIsAnError) {
  auto parsed = ParseYaml("? [1, 2]\n: x\n", "key.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(Message(parsed.status()), StartsWith("key.yaml:1:"));
}

TEST(ParseYaml, SourcesAreOneBasedLineAndColumn) {
  NodePtr root = MustParse("a: 1\nb:\n  c: hello\n");
  const Source& a = root->Find("a")->source();
  ASSERT_NE(a.file, nullptr);
  EXPECT_EQ(*a.file, "test.yaml");
  EXPECT_EQ(a.line, 1);
  EXPECT_EQ(a.column, 4);
  const Source& c = root->Find("b")->Find("c")->source();
  EXPECT_EQ(c.line, 3);
  EXPECT_EQ(c.column, 6);
  EXPECT_EQ(c.Describe(), "test.yaml:3");
}

TEST(ParseYaml, NullValueSourcePointsAtItsKey) {
  NodePtr root = MustParse("a: 1\nempty:\nb: 2\n");
  const Source& s = root->Find("empty")->source();
  EXPECT_EQ(s.line, 2);
  EXPECT_EQ(s.column, 1);
}

TEST(ParseYaml, NullValueAtEndOfFileSourcePointsAtItsKey) {
  NodePtr root = MustParse("a: 1\nempty:\n");
  EXPECT_EQ(root->Find("empty")->source().line, 2);
}

TEST(ParseYaml, ExplicitNullSourceIsItsOwnPosition) {
  NodePtr root = MustParse("x: ~\ny: null\n");
  EXPECT_EQ(root->Find("x")->source().line, 1);
  EXPECT_EQ(root->Find("y")->source().line, 2);
  EXPECT_EQ(root->Find("y")->source().column, 4);
}

TEST(ParseYaml, DuplicateKeysRejected) {
  auto parsed = ParseYaml("a: 1\nb: 2\na: 3\n", "dup.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(Message(parsed.status()), HasSubstr("duplicate key 'a'"));
  EXPECT_THAT(Message(parsed.status()), StartsWith("dup.yaml:3:1:"));
}

TEST(ParseYaml, DuplicateNestedKeysRejected) {
  auto parsed = ParseYaml("top:\n  x: 1\n  x: 2\n", "dup.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(Message(parsed.status()), HasSubstr("duplicate key 'x'"));
  EXPECT_THAT(Message(parsed.status()), StartsWith("dup.yaml:3:3:"));
}

// OmegaConf keeps a plain bool, int or float key typed: `on:` is the key True, `1:` the key 1,
// neither of them the string keys 'on' or '1'; ToYaml prints them as Hydra does.
TEST(ParseYaml, BoolIntAndFloatKeysStayTyped) {
  NodePtr root = MustParse("on: a\nOff: b\n2: c\n'2': d\n0x10: e\n1.5: f\ny: g\n!!str 3: h\n");
  EXPECT_EQ(root->Find(TypedKey(*Node::Bool(true)))->as_string(), "a");
  EXPECT_EQ(root->Find(TypedKey(*Node::Bool(false)))->as_string(), "b");
  EXPECT_EQ(root->Find("on"), nullptr);
  EXPECT_EQ(root->Find(TypedKey(*Node::Int(2)))->as_string(), "c");
  EXPECT_EQ(root->Find("2")->as_string(), "d");
  EXPECT_EQ(root->Find(TypedKey(*Node::Int(16)))->as_string(), "e");
  EXPECT_EQ(root->Find(TypedKey(*Node::Float(1.5)))->as_string(), "f");
  EXPECT_EQ(root->Find("y")->as_string(), "g");
  EXPECT_EQ(root->Find("3")->as_string(), "h");
  EXPECT_EQ(ToYaml(*root), "true: a\nfalse: b\n2: c\n'2': d\n16: e\n1.5: f\n'y': g\n'3': h\n");
}

// OmegaConf's loader refuses only repeated string keys; a repeated typed key (and 1, 1.0 and true
// are one key) replaces the value and keeps the first spelling, as a Python dict does.
TEST(ParseYaml, RepeatedTypedKeysReplaceTheValue) {
  NodePtr root = MustParse("1: a\non: b\n1.0: c\n'1': d\n");
  EXPECT_EQ(ToYaml(*root), "1: c\n'1': d\n");
}

TEST(ParseYaml, NullKeyIsAnError) {
  for (const char* text : {"a: 1\nnull: 2\n", "a: 1\n~: 2\n", "a: 1\nNULL: 2\n"}) {
    auto parsed = ParseYaml(text, "k.yaml");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_THAT(Message(parsed.status()), StartsWith("k.yaml:2:1: a mapping key cannot be null"));
  }
  EXPECT_TRUE(ParseYaml("'null': 1\n", "k.yaml").ok());
}

TEST(ParseYaml, SyntaxErrorCarriesFileLineColumn) {
  auto parsed = ParseYaml("a: 1\nb: [1, 2\n", "bad.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(Message(parsed.status()), ::testing::MatchesRegex("bad\\.yaml:[0-9]+:[0-9]+: .*"));
}

TEST(ParseYaml, SyntaxErrorPointsAtTheBadLine) {
  // The second key is indented deeper than the first: invalid at line 2.
  auto parsed = ParseYaml("a: 1\n  b: 2\nc: 3\n", "bad.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(Message(parsed.status()), StartsWith("bad.yaml:2:"));
}

TEST(ParseYaml, TabIndentationIsAnError) {
  auto parsed = ParseYaml("a:\n\tb: 1\n", "tabs.yaml");
  EXPECT_FALSE(parsed.ok());
  if (!parsed.ok()) EXPECT_THAT(Message(parsed.status()), StartsWith("tabs.yaml:"));
}

TEST(ParseYaml, UnsupportedTagIsAnError) {
  auto parsed = ParseYaml("a: !!python/object foo\n", "tag.yaml");
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(Message(parsed.status()), StartsWith("tag.yaml:1:"));
  EXPECT_THAT(Message(parsed.status()), HasSubstr("tag"));
}

TEST(LoadYamlFile, MissingFileIsNotFound) {
  auto loaded = LoadYamlFile("/nonexistent/kiln/dir/file.yaml");
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(loaded.status()), HasSubstr("/nonexistent/kiln/dir/file.yaml"));
}

// --- Writing ---

TEST(ToYaml, ScalarsInBlockMap) {
  NodePtr m = Node::Map();
  m->Set("i", Node::Int(3));
  m->Set("f", Node::Float(0.5));
  m->Set("b", Node::Bool(true));
  m->Set("n", Node::Null());
  m->Set("s", Node::String("hello"));
  // OmegaConf quotes the key 'n' (YAML 1.1's y/n booleans) as it quotes the value.
  EXPECT_EQ(ToYaml(*m), "i: 3\nf: 0.5\nb: true\n'n': null\ns: hello\n");
}

TEST(ToYaml, QuotesStringsThatReadBackAsOtherTypes) {
  NodePtr m = Node::Map();
  m->Set("a", Node::String("007"));
  m->Set("b", Node::String("true"));
  m->Set("c", Node::String("1.5"));
  m->Set("d", Node::String("yes"));
  m->Set("e", Node::String("null"));
  m->Set("f", Node::String("1e3"));
  m->Set("g", Node::String(""));
  m->Set("h", Node::String("~"));
  EXPECT_EQ(ToYaml(*m),
            "a: '007'\nb: 'true'\nc: '1.5'\nd: 'yes'\ne: 'null'\nf: '1e3'\ng: ''\nh: '~'\n");
}

TEST(ToYaml, QuotesWhatYaml11OrPythonWouldRetype) {
  // As OmegaConf.to_yaml: YAML 1.1 timestamps, y/n, Python's int()/float() forms, octal-looking
  // decimals, sexagesimals, the merge and value keys; but not 2024-1-5 or 1:60.
  for (const char* s : {"2024-01-05", "2024-01-05 10:00:00", "2024-1-5T1:00:00Z", "y", "N", "inf",
                        "-Infinity", "nan", "0888", "08", "1_000", ".5e3", "0x1F", "1:30",
                        "190:20:30.5", "=", "<<", "-.inf", "\u00a01"}) {
    SCOPED_TRACE(s);
    NodePtr m = Node::Map();
    m->Set("k", Node::String(s));
    std::string out = ToYaml(*m);
    EXPECT_TRUE(out.rfind("k: '", 0) == 0 || out.rfind("k: \"", 0) == 0) << out;
  }
  for (const char* s : {"2024-1-5", "1:60", "0o17", "0X1F", "-.nan", "tRue", "1,000", "a b"}) {
    NodePtr m = Node::Map();
    m->Set("k", Node::String(s));
    EXPECT_EQ(ToYaml(*m), absl::StrCat("k: ", s, "\n"));
  }
}

TEST(ToYaml, Yaml11LineBreaksAreEscapedAndReadBack) {
  // NEL, LS and PS are line breaks to YAML 1.1 but not to yaml-cpp: written as escapes.
  auto parsed = ParseYaml("a: \"x\\Ny\\Lz\\P\"\n", "t.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)->Find("a")->as_string(), "x\u0085y\u2028z\u2029");
  std::string out = ToYaml(**parsed);
  EXPECT_EQ(out, "a: \"x\\x85y\\Lz\\P\"\n");
  auto again = ParseYaml(out, "t.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(DeepEqual(**again, **parsed));
}

// "\_" is the no-break space (U+00A0), which yaml-cpp decodes to the lone byte 0xA0: read as UTF-8,
// and kiln's output reads back (the compose fuzzer's input: fuzz/regressions/compose/nbsp_escape).
TEST(ParseYaml, TheNoBreakSpaceEscapeIsUtf8AndReadsBack) {
  auto parsed = ParseYaml("a: \"\\_x\"\nb: \"y\\_\"\n", "t.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)->Find("a")->as_string(), "\u00a0x");
  EXPECT_EQ((*parsed)->Find("b")->as_string(), "y\u00a0");
  auto again = ParseYaml(ToYaml(**parsed), "t.yaml");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(DeepEqual(**again, **parsed));
}

TEST(ParseYaml, PlainValueAndMergeIndicatorsAreRefused) {
  // PyYAML has no constructor for YAML 1.1's value (=) and merge (<<) types, so Hydra refuses.
  EXPECT_FALSE(ParseYaml("a: =\n", "t.yaml").ok());
  EXPECT_FALSE(ParseYaml("a: <<\n", "t.yaml").ok());
  EXPECT_TRUE(ParseYaml("a: '='\nb: '<<'\n", "t.yaml").ok());
}

TEST(ToYaml, PlainStringsStayUnquoted) {
  NodePtr m = Node::Map();
  m->Set("a", Node::String("hello world"));
  m->Set("b", Node::String("${x.y}"));
  m->Set("c", Node::String("???"));
  m->Set("d", Node::String("/tmp/a-b_c"));
  EXPECT_EQ(ToYaml(*m), "a: hello world\nb: ${x.y}\nc: ???\nd: /tmp/a-b_c\n");
}

TEST(ToYaml, QuotesStringsWithYamlIndicators) {
  NodePtr m = Node::Map();
  m->Set("a", Node::String("x: y"));
  m->Set("b", Node::String("#c"));
  m->Set("c", Node::String("- item"));
  m->Set("d", Node::String("[x]"));
  m->Set("e", Node::String("it's"));
  m->Set("f", Node::String("'quoted'"));
  // A quote inside a word needs no quoting, as with PyYAML; a leading one does.
  EXPECT_EQ(ToYaml(*m), "a: 'x: y'\nb: '#c'\nc: '- item'\nd: '[x]'\ne: it's\nf: '''quoted'''\n");
}

TEST(ToYaml, EmptyContainers) {
  EXPECT_EQ(ToYaml(*Node::Map()), "{}\n");
  EXPECT_EQ(ToYaml(*Node::List()), "[]\n");
  NodePtr m = Node::Map();
  m->Set("m", Node::Map());
  m->Set("l", Node::List());
  EXPECT_EQ(ToYaml(*m), "m: {}\nl: []\n");
}

TEST(ToYaml, NestedMapsIndentByTwo) {
  NodePtr inner = Node::Map();
  inner->Set("c", Node::Int(1));
  NodePtr mid = Node::Map();
  mid->Set("b", inner);
  NodePtr m = Node::Map();
  m->Set("a", mid);
  EXPECT_EQ(ToYaml(*m), "a:\n  b:\n    c: 1\n");
}

TEST(ToYaml, ListsUnderKeysSitAtTheKeyIndentation) {
  NodePtr list = Node::List();
  list->Append(Node::Int(1));
  list->Append(Node::String("two"));
  NodePtr m = Node::Map();
  m->Set("xs", list);
  EXPECT_EQ(ToYaml(*m), "xs:\n- 1\n- two\n");
}

TEST(ToYaml, ListOfMaps) {
  NodePtr first = Node::Map();
  first->Set("name", Node::String("a"));
  first->Set("size", Node::Int(1));
  NodePtr second = Node::Map();
  second->Set("name", Node::String("b"));
  NodePtr list = Node::List();
  list->Append(first);
  list->Append(second);
  NodePtr m = Node::Map();
  m->Set("items", list);
  EXPECT_EQ(ToYaml(*m), "items:\n- name: a\n  size: 1\n- name: b\n");
}

TEST(ToYaml, ListOfListsAndMapWithList) {
  NodePtr inner = Node::List();
  inner->Append(Node::Int(1));
  inner->Append(Node::Int(2));
  NodePtr map_with_list = Node::Map();
  NodePtr ys = Node::List();
  ys->Append(Node::Int(3));
  map_with_list->Set("ys", ys);
  NodePtr list = Node::List();
  list->Append(inner);
  list->Append(map_with_list);
  EXPECT_EQ(ToYaml(*list), "- - 1\n  - 2\n- ys:\n  - 3\n");
}

TEST(ToYaml, FloatFormatting) {
  NodePtr m = Node::Map();
  m->Set("a", Node::Float(1.0));
  m->Set("b", Node::Float(1e-5));
  m->Set("c", Node::Float(std::numeric_limits<double>::infinity()));
  m->Set("d", Node::Float(-std::numeric_limits<double>::infinity()));
  m->Set("e", Node::Float(std::numeric_limits<double>::quiet_NaN()));
  m->Set("f", Node::Float(1e16));
  EXPECT_EQ(ToYaml(*m), "a: 1.0\nb: 1.0e-05\nc: .inf\nd: -.inf\ne: .nan\nf: 1.0e+16\n");
}

TEST(ScalarToYaml, ContainersInFlowStyle) {
  NodePtr list = Node::List();
  list->Append(Node::Int(1));
  list->Append(Node::String("a,b"));
  NodePtr map = Node::Map();
  map->Set("k", list);
  EXPECT_EQ(ScalarToYaml(*map), "{k: [1, 'a,b']}");
}

TEST(ToYaml, KeysThatLookLikeOtherTypesAreQuoted) {
  NodePtr m = Node::Map();
  m->Set("1", Node::Int(1));
  m->Set("true", Node::Int(2));
  std::string out = ToYaml(*m);
  EXPECT_EQ(out, "'1': 1\n'true': 2\n");
}

// --- Round trip ---

NodePtr VariedTree() {
  NodePtr root = Node::Map();
  root->Set("int", Node::Int(42));
  root->Set("neg", Node::Int(-7));
  root->Set("big", Node::Int(int64_t{1} << 50));
  root->Set("float", Node::Float(0.1));
  root->Set("tiny", Node::Float(1e-7));
  root->Set("huge", Node::Float(1e20));
  root->Set("whole", Node::Float(3.0));
  root->Set("inf", Node::Float(-std::numeric_limits<double>::infinity()));
  root->Set("nan", Node::Float(std::numeric_limits<double>::quiet_NaN()));
  root->Set("yes", Node::Bool(false));
  root->Set("none", Node::Null());
  const char* strings[] = {
      "007",        "true",  "1.5",  "yes",         "off",         "null",      "~",
      "",           "1e3",   "0x1F", "1_000",       "1:30",        ".inf",      " leading",
      "trailing ",  "a: b",  "- x",  "[x]",         "{y}",         "x, y",      "it's",
      "say \"hi\"", "#hash", "a #b", "back\\slash", "multi\nline", "tab\there", "*star",
      "&anchor",    "!bang", "%pct", "@at",         "`tick",       "?",         "-",
      ":",          "---",   "...",  "héllo",       "${a.b}",      "???",       "x:",
      "|",          ">",     "'",    "\""};
  NodePtr strs = Node::List();
  for (const char* s : strings) strs->Append(Node::String(s));
  root->Set("strings", strs);
  NodePtr list_of_maps = Node::List();
  for (int i = 0; i < 2; ++i) {
    NodePtr m = Node::Map();
    m->Set("id", Node::Int(i));
    NodePtr tags = Node::List();
    tags->Append(Node::String("t" + std::to_string(i)));
    tags->Append(Node::List());
    m->Set("tags", tags);
    m->Set("empty", Node::Map());
    list_of_maps->Append(m);
  }
  root->Set("list_of_maps", list_of_maps);
  NodePtr nested = Node::List();
  NodePtr inner = Node::List();
  inner->Append(Node::Int(1));
  inner->Append(Node::List());
  nested->Append(inner);
  nested->Append(Node::Map());
  root->Set("nested", nested);
  NodePtr odd_keys = Node::Map();
  odd_keys->Set("1", Node::String("one"));
  odd_keys->Set("null", Node::Int(0));
  odd_keys->Set("a b", Node::Int(1));
  odd_keys->Set("k: v", Node::Int(2));
  odd_keys->Set("", Node::Int(3));
  root->Set("odd_keys", odd_keys);
  root->Set("empty_map", Node::Map());
  root->Set("empty_list", Node::List());
  return root;
}

TEST(YamlRoundTrip, VariedTreeReadsBackEqual) {
  NodePtr tree = VariedTree();
  std::string text = ToYaml(*tree);
  auto parsed = ParseYaml(text, "roundtrip.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
  EXPECT_TRUE(DeepEqual(**parsed, *tree)) << text;
}

TEST(YamlRoundTrip, EveryStringReadsBackAsTheSameString) {
  NodePtr strs = VariedTree()->Find("strings");
  for (const auto& s : strs->items()) {
    NodePtr m = Node::Map();
    m->Set("v", s);
    std::string text = ToYaml(*m);
    auto parsed = ParseYaml(text, "s.yaml");
    ASSERT_TRUE(parsed.ok()) << parsed.status() << " for " << text;
    NodePtr v = (*parsed)->Find("v");
    ASSERT_NE(v, nullptr) << text;
    EXPECT_EQ(v->kind(), NodeKind::kString) << text;
    EXPECT_EQ(v->as_string(), s->as_string()) << text;
  }
}

TEST(YamlRoundTrip, TopLevelScalar) {
  for (NodePtr n : {Node::Int(5), Node::String("007"), Node::Float(2.5), Node::Bool(true)}) {
    auto parsed = ParseYaml(ToYaml(*n), "scalar.yaml");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_TRUE(DeepEqual(**parsed, *n)) << ToYaml(*n);
  }
}

TEST(YamlRoundTrip, Int64Extremes) {
  NodePtr m = Node::Map();
  m->Set("max", Node::Int(std::numeric_limits<int64_t>::max()));
  m->Set("min", Node::Int(std::numeric_limits<int64_t>::min()));
  std::string text = ToYaml(*m);
  auto parsed = ParseYaml(text, "ints.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(DeepEqual(**parsed, *m)) << text;
}

// Overlong UTF-8 forms, surrogates and code points beyond U+10FFFF are refused as Python's decoder
// refuses them (the compose fuzzer found E0 80 8A, an overlong newline, read as a key's first
// byte).
TEST(YamlCharacters, InvalidUtf8FormsAreRefusedWithTheirPlace) {
  for (std::string bad :
       {std::string("a:\n\xe0\x80\x8a\tb: 1\n"), std::string("a: \xed\xa0\x80\n"),
        std::string("a: \xf0\x80\x80\x80\n"), std::string("a: \xf4\x90\x80\x80\n")}) {
    auto parsed = ParseYaml(bad, "bad.yaml");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("bad.yaml:"), std::string::npos) << parsed.status();
    EXPECT_NE(parsed.status().message().find("invalid UTF-8 (byte 0x"), std::string::npos)
        << parsed.status();
  }
  for (std::string good :
       {std::string("a: \xe0\xa0\x80\n"), std::string("a: \xed\x9f\xbf\n"),
        std::string("a: \xf0\x90\x80\x80\n"), std::string("a: \xf4\x8f\xbf\xbf\n")}) {
    EXPECT_TRUE(ParseYaml(good, "good.yaml").ok()) << good;
  }
}

// A quoted scalar that runs into the end of the file: yaml-cpp ends it there, PyYAML (so Hydra)
// refuses it ("while scanning a quoted scalar ... found unexpected end of stream").
TEST(YamlQuotes, AQuoteNotClosedBeforeTheEndIsRefusedWhereItStarts) {
  for (const auto& [bad, column] :
       std::vector<std::pair<std::string, int>>{{"a: \"abc\n", 4},
                                                {"b: 'abc\n", 4},
                                                {"x: 1\nc: \"ab\\\"\n", 4},
                                                {"d: 'it''s\n", 4},
                                                {"\"key: 1\n", 1}}) {
    auto parsed = ParseYaml(bad, "quote.yaml");
    ASSERT_FALSE(parsed.ok()) << bad;
    const int line = bad.rfind('\n', bad.size() - 2) == std::string::npos ? 1 : 2;
    EXPECT_EQ(std::string(parsed.status().message()),
              absl::StrCat("quote.yaml:", line, ":", column,
                           ": invalid YAML: the quoted scalar that starts here is not closed "
                           "before the end of the file"))
        << bad;
  }
  for (const std::string good :
       {"a: \"abc\"\n", "b: 'it''s'\n", "c: \"a\\\"b\"\n", "d: \"multi\n  line\"\n",
        "e: {k: 'v'}\n", "f: \"\"\n", "g: ''\n"}) {
    EXPECT_TRUE(ParseYaml(good, "good.yaml").ok()) << good;
  }
}

}  // namespace yaml_io_test
}  // namespace kiln::config
