#include "lib/config/override.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "lib/config/node.h"
#include "lib/config/repository.h"
#include "lib/config/sweep.h"
#include "tests/config/typed_value_checks.h"

namespace kiln::config {
namespace override_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

Override MustParse(const std::string& text) {
  auto parsed = ParseOverride(text);
  EXPECT_TRUE(parsed.ok()) << text << ": " << parsed.status();
  return parsed.ok() ? *parsed : Override();
}

// The value of "x=<text>", which must not be a sweep.
NodePtr Value(const std::string& text) {
  Override o = MustParse("x=" + text);
  EXPECT_FALSE(o.is_sweep()) << text;
  return o.value.node ? o.value.node : Node::String("<no value>");
}

constexpr auto ExpectString = &TypedValueChecks<Value>::String;
constexpr auto ExpectInt = &TypedValueChecks<Value>::Int;
constexpr auto ExpectBigInt = &TypedValueChecks<Value>::BigInt;
constexpr auto ExpectFloat = &TypedValueChecks<Value>::Float;
constexpr auto ExpectBool = &TypedValueChecks<Value>::Bool;

std::vector<std::string> ChoiceStrings(const Override& o) {
  std::vector<std::string> out;
  for (const auto& c : o.sweep.choices) out.push_back(NodeToOverrideString(*c.node));
  return out;
}

absl::Status ParseError(const std::string& text) {
  auto parsed = ParseOverride(text);
  EXPECT_FALSE(parsed.ok()) << text << " parsed";
  return parsed.ok() ? absl::OkStatus() : parsed.status();
}

// --- Keys and override types ---

TEST(ParseOverride, KeyValue) {
  Override o = MustParse("trainer.max_epochs=10");
  EXPECT_EQ(o.type, OverrideType::kChange);
  EXPECT_EQ(o.key_or_group, "trainer.max_epochs");
  EXPECT_FALSE(o.package.has_value());
  EXPECT_TRUE(o.has_value);
  EXPECT_FALSE(o.is_sweep());
  EXPECT_EQ(o.input_line, "trainer.max_epochs=10");
  ASSERT_EQ(o.value.node->kind(), NodeKind::kInt);
  EXPECT_EQ(o.value.node->as_int(), 10);
}

TEST(ParseOverride, AddPrefix) {
  Override o = MustParse("+db.port=5432");
  EXPECT_TRUE(o.is_add());
  EXPECT_EQ(o.key_or_group, "db.port");
  EXPECT_EQ(o.KeyElement(), "+db.port");
  EXPECT_EQ(o.value.node->as_int(), 5432);
}

TEST(ParseOverride, ForceAddPrefix) {
  Override o = MustParse("++db.port=5432");
  EXPECT_TRUE(o.is_force_add());
  EXPECT_FALSE(o.is_add());
  EXPECT_EQ(o.key_or_group, "db.port");
  EXPECT_EQ(o.KeyElement(), "++db.port");
}

TEST(ParseOverride, DeleteWithoutValue) {
  Override o = MustParse("~db.port");
  EXPECT_TRUE(o.is_delete());
  EXPECT_FALSE(o.has_value);
  EXPECT_EQ(o.key_or_group, "db.port");
  EXPECT_EQ(o.KeyElement(), "~db.port");
}

TEST(ParseOverride, DeleteWithValue) {
  Override o = MustParse("~db.port=5432");
  EXPECT_TRUE(o.is_delete());
  EXPECT_TRUE(o.has_value);
  EXPECT_EQ(o.value.node->as_int(), 5432);
}

TEST(ParseOverride, DeleteWithEmptyValueIsPlainDelete) {
  Override o = MustParse("~db=");
  EXPECT_TRUE(o.is_delete());
  EXPECT_FALSE(o.has_value);
}

TEST(ParseOverride, GroupWithPackage) {
  Override o = MustParse("db@server.primary=mysql");
  EXPECT_EQ(o.key_or_group, "db");
  ASSERT_TRUE(o.package.has_value());
  EXPECT_EQ(*o.package, "server.primary");
  EXPECT_EQ(o.GroupKey(), "db@server.primary");
  EXPECT_EQ(o.KeyElement(), "db@server.primary");
  EXPECT_EQ(o.value.node->as_string(), "mysql");
}

TEST(ParseOverride, AddGroupWithPackage) {
  Override o = MustParse("+db@backup=pg");
  EXPECT_TRUE(o.is_add());
  EXPECT_EQ(o.KeyElement(), "+db@backup");
}

TEST(ParseOverride, NestedGroupPath) {
  Override o = MustParse("server/db=mysql");
  EXPECT_EQ(o.key_or_group, "server/db");
  EXPECT_EQ(o.value.node->as_string(), "mysql");
}

TEST(ParseOverride, ListIndexKey) {
  Override o = MustParse("a.1=x");
  EXPECT_EQ(o.key_or_group, "a.1");
}

TEST(ParseOverride, DashesAndUnderscoresInKeys) {
  Override o = MustParse("my-key.sub_key=1");
  EXPECT_EQ(o.key_or_group, "my-key.sub_key");
}

TEST(ParseOverride, MissingEqualsIsAnError) {
  absl::Status st = ParseError("trainer.max_epochs");
  EXPECT_THAT(Message(st), HasSubstr("trainer.max_epochs"));
}

TEST(ParseOverride, EmptyKeyIsAnError) {
  absl::Status st = ParseError("=5");
  EXPECT_THAT(Message(st), HasSubstr("'=5'"));
}

TEST(ParseOverride, InvalidKeysAreErrors) {
  (void)ParseError("a..b=1");
  (void)ParseError("a b=1");
  (void)ParseError("x =1");
  (void)ParseError("a/b.c=1");
  (void)ParseError("db@a@b=x");
}

// --- Typed values ---

TEST(OverrideValues, Ints) {
  ExpectInt("0", 0);
  ExpectInt("42", 42);
  ExpectInt("-20", -20);
  ExpectInt("+7", 7);
  ExpectInt("1_000", 1000);
  ExpectInt("1_000_000", 1000000);
}

// Hydra's INT is Python's int: no bound. Hex is no int in the override grammar (a string).
TEST(OverrideValues, IntsBeyondInt64StayInts) {
  ExpectInt("-9223372036854775808", std::numeric_limits<int64_t>::min());
  ExpectBigInt("9223372036854775808", "9223372036854775808");
  ExpectBigInt("18_446_744_073_709_551_616", "18446744073709551616");
  ExpectBigInt("-99999999999999999999", "-99999999999999999999");
  ExpectBigInt("int(1e20)", "100000000000000000000");
  ExpectBigInt("int('18446744073709551616')", "18446744073709551616");
  ExpectString("0x1FFFFFFFFFFFFFFFF", "0x1FFFFFFFFFFFFFFFF");
  NodePtr list = Value("[18446744073709551616,1]");
  ASSERT_TRUE(list->is_list());
  EXPECT_EQ(list->items()[0]->int_text(), "18446744073709551616");
  EXPECT_EQ(NodeToOverrideString(*Value("-99999999999999999999")), "-99999999999999999999");
  EXPECT_THAT(std::string(ParseError("x=range(0,99999999999999999999)").message()),
              HasSubstr("int64"));
}

TEST(OverrideValues, Floats) {
  ExpectFloat("3.14", 3.14);
  ExpectFloat("-20.5", -20.5);
  ExpectFloat(".5", 0.5);
  ExpectFloat("5.", 5.0);
  ExpectFloat("1e3", 1000.0);
  ExpectFloat("1E3", 1000.0);
  ExpectFloat("-10e3", -10000.0);
  ExpectFloat("1e-3", 0.001);
  ExpectFloat("1.5e+2", 150.0);
  ExpectFloat("1_000.5", 1000.5);
  // The exponent is DIGIT ('_'? DIGIT)*, so it may start with zeros (Python writes 1e-07).
  ExpectFloat("1e-07", 1e-7);
  ExpectFloat("3e+06", 3e6);
  ExpectFloat("1.5e0_1", 1.5e1);
}

TEST(OverrideValues, InfinityAndNanAnyCase) {
  for (const char* t : {"inf", "INF", "Inf", "+inf"}) {
    NodePtr v = Value(t);
    ASSERT_EQ(v->kind(), NodeKind::kFloat) << t;
    EXPECT_TRUE(std::isinf(v->as_float()) && v->as_float() > 0) << t;
  }
  NodePtr neg = Value("-inf");
  ASSERT_EQ(neg->kind(), NodeKind::kFloat);
  EXPECT_TRUE(std::isinf(neg->as_float()) && neg->as_float() < 0);
  for (const char* t : {"nan", "NaN", "NAN"}) {
    NodePtr v = Value(t);
    ASSERT_EQ(v->kind(), NodeKind::kFloat) << t;
    EXPECT_TRUE(std::isnan(v->as_float())) << t;
  }
}

TEST(OverrideValues, BoolsAreCaseInsensitive) {
  for (const char* t : {"true", "True", "TRUE", "tRuE"}) ExpectBool(t, true);
  for (const char* t : {"false", "False", "FALSE", "fAlSe"}) ExpectBool(t, false);
}

TEST(OverrideValues, YamlOnlyBoolWordsAreStrings) {
  ExpectString("yes", "yes");
  ExpectString("off", "off");
}

TEST(OverrideValues, NullAnyCase) {
  for (const char* t : {"null", "NULL", "Null"}) {
    EXPECT_TRUE(Value(t)->is_null()) << t;
  }
}

TEST(OverrideValues, LeadingZeroDigitsAreAString) {
  ExpectString("007", "007");
  ExpectString("00", "00");
}

TEST(OverrideValues, NumberLikeTextIsAString) {
  ExpectString("1.2.3", "1.2.3");
  ExpectString("0x1F", "0x1F");
  ExpectString("1e", "1e");
  ExpectString("10abc", "10abc");
  ExpectString("1_", "1_");
}

TEST(OverrideValues, UnquotedStrings) {
  ExpectString("mysql", "mysql");
  ExpectString("/path/to/file.txt", "/path/to/file.txt");
  ExpectString("a-b_c", "a-b_c");
  ExpectString("http://x.org:80/a?b|c", "http://x.org:80/a?b|c");
  ExpectString("hello world", "hello world");
  ExpectString("a  b", "a  b");
}

TEST(OverrideValues, WhitespaceAroundValueIsTrimmed) {
  ExpectString("  hello  ", "hello");
  ExpectString(" a b ", "a b");
  ExpectInt("  5 ", 5);
  ExpectString(" 'q' ", "q");
}

TEST(OverrideValues, EmptyValueIsEmptyString) {
  Override o = MustParse("key=");
  EXPECT_TRUE(o.has_value);
  ASSERT_EQ(o.value.node->kind(), NodeKind::kString);
  EXPECT_EQ(o.value.node->as_string(), "");
}

TEST(OverrideValues, QuotedStringsStayStrings) {
  ExpectString("'007'", "007");
  ExpectString("'true'", "true");
  ExpectString("\"1.5\"", "1.5");
  ExpectString("'null'", "null");
  ExpectString("''", "");
  ExpectString("'hello, world'", "hello, world");
  ExpectString("'a=b'", "a=b");
  ExpectString("\"[1, 2]\"", "[1, 2]");
}

TEST(OverrideValues, QuoteCharacterAndTextAreKept) {
  Override o = MustParse("x='a b'");
  EXPECT_EQ(o.value.quote, '\'');
  EXPECT_EQ(o.value.quoted_text, "'a b'");
  EXPECT_EQ(OverrideValueToString(o.value), "'a b'");
  Override d = MustParse("x=\"a b\"");
  EXPECT_EQ(d.value.quote, '"');
  EXPECT_EQ(MustParse("x=ab").value.quote, '\0');
}

TEST(OverrideValues, EscapedQuotesInsideQuotes) {
  ExpectString("'it\\'s'", "it's");
  ExpectString("\"say \\\"hi\\\"\"", "say \"hi\"");
  ExpectString("\"it's\"", "it's");
  ExpectString("'say \"hi\"'", "say \"hi\"");
}

TEST(OverrideValues, BackslashesInsideQuotes) {
  // Backslashes not before a quote are kept; 2N backslashes before a quote are N backslashes.
  ExpectString("'C:\\dir'", "C:\\dir");
  ExpectString("'a\\\\'", "a\\");
  ExpectString("'a\\\\\\'b'", "a\\'b");
}

TEST(OverrideValues, EscapesInUnquotedValues) {
  ExpectString("a\\,b", "a,b");
  ExpectString("a\\ b", "a b");
  ExpectString("a\\=b", "a=b");
  ExpectString("\\(x\\)", "(x)");
  ExpectString("\\[x\\]", "[x]");
  ExpectString("\\{x\\}", "{x}");
  ExpectString("a\\:b", "a:b");
  ExpectString("a\\\\b", "a\\b");
}

TEST(OverrideValues, EscapedTrailingSpaceIsKept) { ExpectString("a\\ ", "a "); }

TEST(OverrideValues, EscapedNumberIsAString) { ExpectString("1\\,000", "1,000"); }

TEST(OverrideValues, BackslashBeforeOrdinaryCharIsLiteral) { ExpectString("C:\\dir", "C:\\dir"); }

TEST(OverrideValues, InterpolationsAreKeptVerbatim) {
  ExpectString("${a.b}", "${a.b}");
  ExpectString("${oc.env:HOME,/tmp}", "${oc.env:HOME,/tmp}");
  ExpectString("pre_${a}_post", "pre_${a}_post");
  ExpectString("${a}${b}", "${a}${b}");
  ExpectString("${.sibling}", "${.sibling}");
}

TEST(OverrideValues, InterpolationIsNotASweepOnItsComma) {
  Override o = MustParse("x=${oc.select:a,5}");
  EXPECT_FALSE(o.is_sweep());
}

TEST(OverrideValues, Lists) {
  NodePtr v = Value("[1,2,3]");
  ASSERT_TRUE(v->is_list());
  ASSERT_EQ(v->items().size(), 3u);
  EXPECT_EQ(v->items()[2]->as_int(), 3);
  EXPECT_TRUE(Value("[]")->is_list());
  EXPECT_EQ(Value("[]")->size(), 0u);
}

TEST(OverrideValues, ListsWithWhitespaceAndMixedTypes) {
  NodePtr v = Value("[ 1 , a b , 'c,d' , null, 2.5, true ]");
  ASSERT_TRUE(v->is_list());
  ASSERT_EQ(v->items().size(), 6u);
  EXPECT_EQ(v->items()[0]->as_int(), 1);
  EXPECT_EQ(v->items()[1]->as_string(), "a b");
  EXPECT_EQ(v->items()[2]->as_string(), "c,d");
  EXPECT_TRUE(v->items()[3]->is_null());
  EXPECT_DOUBLE_EQ(v->items()[4]->as_float(), 2.5);
  EXPECT_TRUE(v->items()[5]->as_bool());
}

TEST(OverrideValues, NestedListsAndDicts) {
  NodePtr v = Value("[a,[b,c],{d:1,e:[2]}]");
  ASSERT_TRUE(v->is_list());
  ASSERT_EQ(v->items().size(), 3u);
  EXPECT_EQ(v->items()[1]->items()[1]->as_string(), "c");
  NodePtr d = v->items()[2];
  ASSERT_TRUE(d->is_map());
  EXPECT_EQ(d->Find("d")->as_int(), 1);
  EXPECT_EQ(d->Find("e")->items()[0]->as_int(), 2);
}

TEST(OverrideValues, Dicts) {
  NodePtr v = Value("{a: 1, b: {c: [1, 2]}, k: v}");
  ASSERT_TRUE(v->is_map());
  ASSERT_EQ(v->entries().size(), 3u);
  EXPECT_EQ(v->entries()[0].first, "a");
  EXPECT_EQ(v->Find("a")->as_int(), 1);
  EXPECT_EQ(v->Find("b")->Find("c")->items()[1]->as_int(), 2);
  EXPECT_EQ(v->Find("k")->as_string(), "v");
}

// Hydra types a dictionary key as it types a value: {1:a} has the int key 1, not the string '1'.
TEST(OverrideValues, DictKeysAreTypedLikeValues) {
  NodePtr v = Value("{1: a, 1.5: b, x: c, 01: d, -2: e}");
  ASSERT_TRUE(v->is_map());
  ASSERT_NE(v->Find(TypedKey(*Node::Int(1))), nullptr);
  EXPECT_EQ(v->Find(TypedKey(*Node::Int(1)))->as_string(), "a");
  EXPECT_EQ(v->Find("1"), nullptr);
  EXPECT_EQ(v->Find(TypedKey(*Node::Float(1.5)))->as_string(), "b");
  EXPECT_EQ(v->Find("x")->as_string(), "c");
  EXPECT_EQ(v->Find("01")->as_string(), "d");  // not one INT token: a string
  EXPECT_EQ(v->Find(TypedKey(*Node::Int(-2)))->as_string(), "e");
  EXPECT_EQ(NodeToOverrideString(*v), "{1:a,1.5:b,x:c,01:d,-2:e}");
}

// As in a Python dict, 1 and True are one key: the first spelling stays, the last value wins.
TEST(OverrideValues, DictKeysThatAreEqualNumbersAreOneKey) {
  NodePtr v = Value("{1: a, TRUE: b}");
  ASSERT_EQ(v->size(), 1u);
  EXPECT_EQ(v->entries()[0].first, TypedKey(*Node::Int(1)));
  EXPECT_EQ(v->entries()[0].second->as_string(), "b");
}

TEST(OverrideValues, EscapedDictKeyStaysAString) {
  NodePtr v = Value("{\\ 1:a}");
  ASSERT_TRUE(v->is_map());
  EXPECT_EQ(v->Find(" 1")->as_string(), "a");
}

TEST(OverrideErrors, NullDictKey) {
  absl::Status st = ParseError("+m={a:1,null:2}");
  EXPECT_THAT(Message(st),
              HasSubstr("'+m={a:1,null:2}': a dictionary key cannot be null (column 9"));
}

TEST(OverrideValues, EmptyDict) {
  NodePtr v = Value("{}");
  ASSERT_TRUE(v->is_map());
  EXPECT_EQ(v->size(), 0u);
}

TEST(OverrideValues, SortOfAListIsASortedValue) {
  Override o = MustParse("x=sort([3,1,2])");
  EXPECT_FALSE(o.is_sweep());
  ASSERT_TRUE(o.value.node->is_list());
  EXPECT_EQ(NodeToOverrideString(*o.value.node), "[1,2,3]");
}

TEST(OverrideValues, CastFunctions) {
  ExpectString("str(5)", "5");
  ExpectInt("int(3.7)", 3);
  ExpectFloat("float(2)", 2.0);
  ExpectBool("bool(1)", true);
}

// --- Sweeps ---

TEST(OverrideSweeps, CommaListIsAChoiceSweep) {
  Override o = MustParse("db=mysql,postgresql");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_TRUE(o.is_discrete_sweep());
  EXPECT_EQ(o.sweep.kind, SweepKind::kChoice);
  EXPECT_THAT(ChoiceStrings(o), ElementsAre("mysql", "postgresql"));
}

TEST(OverrideSweeps, CommaListWithSpacesAndTypes) {
  Override o = MustParse("x=1, 2 ,a b");
  ASSERT_TRUE(o.is_sweep());
  ASSERT_EQ(o.sweep.choices.size(), 3u);
  EXPECT_EQ(o.sweep.choices[0].node->kind(), NodeKind::kInt);
  EXPECT_EQ(o.sweep.choices[1].node->as_int(), 2);
  EXPECT_EQ(o.sweep.choices[2].node->as_string(), "a b");
}

TEST(OverrideSweeps, CommaListOfLists) {
  Override o = MustParse("x=[1,2],[3]");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_THAT(ChoiceStrings(o), ElementsAre("[1,2]", "[3]"));
}

TEST(OverrideSweeps, QuotedCommaIsNotASweep) {
  Override o = MustParse("x='a,b'");
  EXPECT_FALSE(o.is_sweep());
  EXPECT_EQ(o.value.node->as_string(), "a,b");
}

TEST(OverrideSweeps, ChoiceFunction) {
  Override o = MustParse("x=choice(a, 'b c', 3)");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_EQ(o.sweep.kind, SweepKind::kChoice);
  ASSERT_EQ(o.sweep.choices.size(), 3u);
  EXPECT_EQ(o.sweep.choices[1].node->as_string(), "b c");
  EXPECT_EQ(o.sweep.choices[2].node->as_int(), 3);
}

TEST(OverrideSweeps, RangeWithStartAndStop) {
  Override o = MustParse("x=range(1,4)");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_EQ(o.sweep.kind, SweepKind::kRange);
  EXPECT_EQ(o.sweep.range_start->as_int(), 1);
  EXPECT_EQ(o.sweep.range_stop->as_int(), 4);
  EXPECT_EQ(o.sweep.range_step->as_int(), 1);
}

TEST(OverrideSweeps, RangeWithOnlyStop) {
  Override o = MustParse("x=range(3)");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_EQ(o.sweep.range_start->as_int(), 0);
  EXPECT_EQ(o.sweep.range_stop->as_int(), 3);
}

TEST(OverrideSweeps, RangeWithFloatStep) {
  Override o = MustParse("x=range(0,1,0.25)");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_EQ(o.sweep.range_step->kind(), NodeKind::kFloat);
  EXPECT_DOUBLE_EQ(o.sweep.range_step->as_float(), 0.25);
}

TEST(OverrideSweeps, RangeNamedArguments) {
  Override o = MustParse("x=range(start=2,stop=8,step=3)");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_EQ(o.sweep.range_start->as_int(), 2);
  EXPECT_EQ(o.sweep.range_stop->as_int(), 8);
  EXPECT_EQ(o.sweep.range_step->as_int(), 3);
}

TEST(OverrideSweeps, RangeErrors) {
  EXPECT_THAT(Message(ParseError("x=range(1,4,0)")), HasSubstr("step"));
  EXPECT_THAT(Message(ParseError("x=range(a,4)")), HasSubstr("number"));
}

TEST(OverrideSweeps, GlobWithExclude) {
  Override o = MustParse("db=glob(*,exclude=x)");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_EQ(o.sweep.kind, SweepKind::kGlob);
  EXPECT_THAT(o.sweep.glob_include, ElementsAre("*"));
  EXPECT_THAT(o.sweep.glob_exclude, ElementsAre("x"));
}

TEST(OverrideSweeps, GlobWithLists) {
  Override o = MustParse("db=glob([m*,p*],exclude=[pg,mssql])");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_THAT(o.sweep.glob_include, ElementsAre("m*", "p*"));
  EXPECT_THAT(o.sweep.glob_exclude, ElementsAre("pg", "mssql"));
}

TEST(OverrideSweeps, SortOfValues) {
  Override o = MustParse("x=sort(3,1,2)");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_EQ(o.sweep.kind, SweepKind::kChoice);
  EXPECT_TRUE(o.sweep.sort);
  EXPECT_FALSE(o.sweep.sort_reverse);
  EXPECT_EQ(o.sweep.choices.size(), 3u);
}

TEST(OverrideSweeps, SortReverse) {
  Override o = MustParse("x=sort(3,1,2,reverse=true)");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_TRUE(o.sweep.sort);
  EXPECT_TRUE(o.sweep.sort_reverse);
}

TEST(OverrideSweeps, SortOfASweep) {
  Override o = MustParse("x=sort(range(3))");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_EQ(o.sweep.kind, SweepKind::kRange);
  EXPECT_TRUE(o.sweep.sort);
}

TEST(OverrideSweeps, ShuffleMarksTheSweep) {
  Override o = MustParse("x=shuffle(a,b,c)");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_TRUE(o.sweep.shuffle);
  EXPECT_EQ(o.sweep.choices.size(), 3u);
}

TEST(OverrideSweeps, Interval) {
  Override o = MustParse("lr=interval(0,1)");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_FALSE(o.is_discrete_sweep());
  EXPECT_EQ(o.sweep.kind, SweepKind::kInterval);
  // Hydra's interval() is over floats; int(interval(...)) over integers.
  EXPECT_EQ(o.sweep.interval_low->kind(), NodeKind::kFloat);
  EXPECT_EQ(o.sweep.interval_high->as_float(), 1.0);
  Override i = MustParse("n=int(interval(2,9))");
  ASSERT_EQ(i.sweep.kind, SweepKind::kInterval);
  EXPECT_EQ(i.sweep.interval_low->as_int(), 2);
  EXPECT_EQ(i.sweep.interval_high->as_int(), 9);
  EXPECT_FALSE(ParseOverride("x=interval(a,1)").ok());
}

TEST(OverrideSweeps, TagWrapsASweep) {
  Override o = MustParse("x=tag(log,interval(0.1,1.0))");
  ASSERT_TRUE(o.is_sweep());
  EXPECT_EQ(o.sweep.tags, std::vector<std::string>{"log"});
  EXPECT_EQ(o.sweep.kind, SweepKind::kInterval);
}

TEST(OverrideSweeps, ChoiceNeedsAValue) { (void)ParseError("x=choice()"); }

TEST(OverrideSweeps, SweepInsideAListIsAnError) { (void)ParseError("x=[choice(1,2)]"); }

// --- Sweep expansion ---

std::vector<std::string> Expand(const std::string& text) {
  ConfigRepository repo({});
  auto jobs = PlanSweep({}, {MustParse(text)}, repo);
  EXPECT_TRUE(jobs.ok()) << jobs.status();
  std::vector<std::string> lines;
  if (!jobs.ok()) return lines;
  for (const auto& job : *jobs) {
    EXPECT_EQ(job.size(), 1u);
    if (!job.empty()) lines.push_back(job[0]);
  }
  return lines;
}

TEST(SweepExpansion, IntRange) {
  EXPECT_THAT(Expand("x=range(1,4)"), ElementsAre("x=1", "x=2", "x=3"));
}

TEST(SweepExpansion, NegativeStepRange) {
  EXPECT_THAT(Expand("x=range(4,1,-1)"), ElementsAre("x=4", "x=3", "x=2"));
}

TEST(SweepExpansion, FloatRange) {
  EXPECT_THAT(Expand("x=range(0,1,0.25)"), ElementsAre("x=0.0", "x=0.25", "x=0.5", "x=0.75"));
}

TEST(SweepExpansion, FloatRangeUsesHydrasDecimalArithmetic) {
  // Decimal(0.1) is the double's exact value, summed with 28 significant digits: 0.3 here
  // (binary addition gives 0.30000000000000004), but 2.6999999999999997 and a last 3.0 below.
  // The expected values are what Hydra 1.3.2 prints for these overrides.
  EXPECT_THAT(Expand("x=range(0,0.35,0.1)"), ElementsAre("x=0.0", "x=0.1", "x=0.2", "x=0.3"));
  EXPECT_THAT(Expand("x=range(2.4,3,0.3)"), ElementsAre("x=2.4", "x=2.6999999999999997", "x=3.0"));
  EXPECT_THAT(Expand("x=range(0.5,0.2,-0.1)"), ElementsAre("x=0.5", "x=0.4", "x=0.3"));
  EXPECT_THAT(Expand("x=range(0,1e-6,3e-7)"),
              ElementsAre("x=0.0", "x=3e-07", "x=6e-07", "x=9e-07"));
}

TEST(SweepExpansion, FloatRangeNeedsFiniteNumbers) {
  ConfigRepository repo({});
  auto jobs = PlanSweep({}, {MustParse("x=range(0,inf,1)")}, repo);
  EXPECT_FALSE(jobs.ok());
}

TEST(SweepExpansion, SortedChoices) {
  EXPECT_THAT(Expand("x=sort(3,1,2)"), ElementsAre("x=1", "x=2", "x=3"));
  EXPECT_THAT(Expand("x=sort(3,1,2,reverse=true)"), ElementsAre("x=3", "x=2", "x=1"));
  EXPECT_THAT(Expand("x=sort(b,c,a)"), ElementsAre("x=a", "x=b", "x=c"));
}

TEST(SweepExpansion, QuotedChoicesPrintAsWritten) {
  EXPECT_THAT(Expand("x='a b',c,\"d,e\""), ElementsAre("x='a b'", "x=c", "x=\"d,e\""));
}

TEST(SweepExpansion, IntervalCannotBeExpanded) {
  ConfigRepository repo({});
  auto jobs = PlanSweep({}, {MustParse("lr=interval(0,1)")}, repo);
  ASSERT_FALSE(jobs.ok());
  EXPECT_THAT(Message(jobs.status()), HasSubstr("interval"));
}

// --- Syntax errors ---

TEST(OverrideErrors, UnclosedListNamesOverrideAndColumn) {
  absl::Status st = ParseError("x=[1,2");
  EXPECT_THAT(Message(st), HasSubstr("'x=[1,2'"));
  EXPECT_THAT(Message(st), HasSubstr("column 7"));
}

TEST(OverrideErrors, StrayClosingParen) {
  absl::Status st = ParseError("x=a)");
  EXPECT_THAT(Message(st), HasSubstr("'x=a)'"));
  EXPECT_THAT(Message(st), HasSubstr("column 4"));
}

TEST(OverrideErrors, UnterminatedQuote) {
  absl::Status st = ParseError("key='abc");
  EXPECT_THAT(Message(st), HasSubstr("key='abc"));
  EXPECT_THAT(Message(st), HasSubstr("column 5"));
}

TEST(OverrideErrors, QuotedStringMustStandAlone) {
  absl::Status st = ParseError("x='a'b");
  EXPECT_THAT(Message(st), HasSubstr("column"));
}

TEST(OverrideErrors, QuoteInsideUnquotedValue) {
  absl::Status st = ParseError("x=it's");
  EXPECT_THAT(Message(st), HasSubstr("x=it's"));
  EXPECT_THAT(Message(st), HasSubstr("column 5"));
}

TEST(OverrideErrors, UnescapedEquals) {
  absl::Status st = ParseError("x=a=b");
  EXPECT_THAT(Message(st), HasSubstr("column 4"));
}

TEST(OverrideErrors, UnknownFunction) {
  absl::Status st = ParseError("x=foo(1)");
  EXPECT_THAT(Message(st), HasSubstr("foo"));
  EXPECT_THAT(Message(st), HasSubstr("column"));
}

TEST(OverrideErrors, UnterminatedInterpolation) {
  absl::Status st = ParseError("x=${a.b");
  EXPECT_THAT(Message(st), HasSubstr("x=${a.b"));
  EXPECT_THAT(Message(st), HasSubstr("column"));
}

TEST(OverrideErrors, TrailingCommaInSweep) {
  absl::Status st = ParseError("x=a,");
  EXPECT_THAT(Message(st), HasSubstr("column"));
}

// Hydra's override lexer refuses non-ASCII outside quotes (LexerNoViableAltException); the
// column counts characters, as Hydra's caret does.
TEST(OverrideErrors, UnquotedNonAsciiNamesTheCharacterAndColumn) {
  absl::Status st = ParseError("name=héllo");
  EXPECT_EQ(
      Message(st),
      "invalid override 'name=héllo': unquoted non-ASCII character 'é'; Hydra's override grammar "
      "takes only ASCII outside quotes, so quote the string ('...' or \"...\") (column 7 near "
      "'éllo')");
  EXPECT_THAT(Message(ParseError("+x='日本',日本")), HasSubstr("character '日'; "));
  EXPECT_THAT(Message(ParseError("+x='日本',日本")), HasSubstr("(column 9 near '日本')"));
  EXPECT_THAT(Message(ParseError("x=[a,{b:ü}]")), HasSubstr("character 'ü'"));
  EXPECT_THAT(Message(ParseError("x={ü:1}")), HasSubstr("character 'ü'"));
  EXPECT_THAT(Message(ParseError("x=choice(a,😀)")), HasSubstr("character '😀'"));
}

TEST(OverrideValues, NonAsciiInQuotesAndInterpolationsIsKept) {
  ExpectString("'héllo'", "héllo");
  ExpectString("\"日本 語\"", "日本 語");
  ExpectString("${é}", "${é}");
  ExpectString("a${oc.env:X,é}b", "a${oc.env:X,é}b");
}

// The text shown near an error ends on a whole character, never inside one.
TEST(OverrideErrors, NearTextKeepsWholeCharacters) {
  absl::Status st = ParseError("x=a)ééééééééééé");
  EXPECT_THAT(Message(st), HasSubstr("near ')ééééééééééé')"));
}

TEST(OverrideErrors, DictWithoutColon) {
  absl::Status st = ParseError("x={a}");
  EXPECT_THAT(Message(st), HasSubstr("column"));
}

// --- Printing values back ---

void ExpectRoundTrip(const NodePtr& node) {
  std::string text = NodeToOverrideString(*node);
  auto parsed = ParseOverride("x=" + text);
  ASSERT_TRUE(parsed.ok()) << "printed as " << text << ": " << parsed.status();
  ASSERT_FALSE(parsed->is_sweep()) << "printed as " << text;
  EXPECT_TRUE(DeepEqual(*parsed->value.node, *node))
      << "printed as " << text << ", read back as " << NodeToOverrideString(*parsed->value.node);
}

TEST(NodeToOverrideString, PlainValues) {
  EXPECT_EQ(NodeToOverrideString(*Node::Int(5)), "5");
  EXPECT_EQ(NodeToOverrideString(*Node::Float(0.5)), "0.5");
  EXPECT_EQ(NodeToOverrideString(*Node::Float(1000.0)), "1000.0");
  EXPECT_EQ(NodeToOverrideString(*Node::Bool(true)), "True");
  EXPECT_EQ(NodeToOverrideString(*Node::Null()), "null");
  EXPECT_EQ(NodeToOverrideString(*Node::String("abc")), "abc");
}

TEST(NodeToOverrideString, NumberLikeStringsAreQuoted) {
  EXPECT_EQ(NodeToOverrideString(*Node::String("007")), "007");  // reads back as a string
  EXPECT_EQ(NodeToOverrideString(*Node::String("1.5")), "'1.5'");
  EXPECT_EQ(NodeToOverrideString(*Node::String("true")), "'true'");
  EXPECT_EQ(NodeToOverrideString(*Node::String("null")), "'null'");
  EXPECT_EQ(NodeToOverrideString(*Node::String("")), "''");
}

TEST(NodeToOverrideString, SpecialCharactersAreEscaped) {
  EXPECT_EQ(NodeToOverrideString(*Node::String("a,b")), "a\\,b");
  EXPECT_EQ(NodeToOverrideString(*Node::String("a b")), "a\\ b");
}

TEST(NodeToOverrideString, Containers) {
  NodePtr list = Node::List();
  list->Append(Node::Int(1));
  list->Append(Node::String("a b"));
  NodePtr map = Node::Map();
  map->Set("k", list);
  EXPECT_EQ(NodeToOverrideString(*map), "{k:[1,a\\ b]}");
}

TEST(NodeToOverrideString, NumberLikeStringsRoundTrip) {
  for (const char* s : {"007", "1", "-1", "1.5", "1e3", "1_000", "inf", "-inf", "nan", "true",
                        "False", "null", "NULL", ".5", "5."}) {
    SCOPED_TRACE(s);
    ExpectRoundTrip(Node::String(s));
  }
}

TEST(NodeToOverrideString, StringsWithSpecialCharactersRoundTrip) {
  for (const char* s : {"",       " ",           "a,b",        "a b",        " lead",
                        "trail ", "a  b",        "it's",       "say \"hi\"", "both ' and \"",
                        "a=b",    "(x)",         "[x]",        "{x}",        "x:y",
                        "a\\,b",  "back\\slash", "trailing\\", "tab\there",  "line\nbreak",
                        "${a.b}", "pre_${a}",    "\\${x}",     "héllo",      "#hash",
                        "a;b",    "'",           "\"",         "\\"}) {
    SCOPED_TRACE(s);
    ExpectRoundTrip(Node::String(s));
  }
}

TEST(NodeToOverrideString, QuotedStringEndingInBackslashRoundTrips) {
  for (const char* s : {"it's C:\\", "say \"x\\", "'\\", "a'b\\\\"}) {
    SCOPED_TRACE(s);
    ExpectRoundTrip(Node::String(s));
  }
}

TEST(NodeToOverrideString, NumbersRoundTrip) {
  for (double d :
       {0.0, 0.1, -2.5, 1e-7, 1e16, 1e300, 123456.789, 1.0 / 3,
        std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
        std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(d);
    ExpectRoundTrip(Node::Float(d));
  }
  for (int64_t i : {int64_t{0}, int64_t{-1}, int64_t{1234567890123}}) {
    SCOPED_TRACE(i);
    ExpectRoundTrip(Node::Int(i));
  }
  ExpectRoundTrip(Node::Bool(false));
  ExpectRoundTrip(Node::Null());
}

TEST(NodeToOverrideString, Int64ExtremesRoundTrip) {
  ExpectRoundTrip(Node::Int(std::numeric_limits<int64_t>::max()));
  ExpectRoundTrip(Node::Int(std::numeric_limits<int64_t>::min()));
}

TEST(NodeToOverrideString, ContainersRoundTrip) {
  NodePtr inner = Node::Map();
  inner->Set("a b", Node::String("x,y"));
  inner->Set("k:v", Node::String("1.5"));
  inner->Set("n", Node::Null());
  NodePtr list = Node::List();
  list->Append(Node::Int(1));
  list->Append(Node::String("007"));
  list->Append(Node::String("it's"));
  list->Append(inner);
  list->Append(Node::List());
  list->Append(Node::Map());
  ExpectRoundTrip(list);
}

TEST(OverrideValueToString, UnquotedValuesArePrintedCanonically) {
  Override o = MustParse("x=a\\,b");
  EXPECT_EQ(OverrideValueToString(o.value), "a\\,b");
  Override f = MustParse("x=1e3");
  EXPECT_EQ(OverrideValueToString(f.value), "1000.0");
}

TEST(ParseOverrideValue, SingleElements) {
  auto list = ParseOverrideValue("[1,2]");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(NodeToOverrideString(*list->node), "[1,2]");
  auto number = ParseOverrideValue("123");
  ASSERT_TRUE(number.ok());
  EXPECT_EQ(number->node->as_int(), 123);
  auto word = ParseOverrideValue("abc");
  ASSERT_TRUE(word.ok());
  EXPECT_EQ(word->node->as_string(), "abc");
}

TEST(ParseOverrideValue, SweepIsNotAValue) {
  EXPECT_FALSE(ParseOverrideValue("a,b").ok());
  EXPECT_FALSE(ParseOverrideValue("choice(1,2)").ok());
}

}  // namespace override_test
}  // namespace kiln::config
