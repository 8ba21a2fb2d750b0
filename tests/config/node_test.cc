#include "lib/config/node.h"

#include <gtest/gtest.h>

namespace kiln::config {
namespace node_test {

TEST(PythonFloatRepr, MatchesPython) {
  EXPECT_EQ(PythonFloatRepr(0.1), "0.1");
  EXPECT_EQ(PythonFloatRepr(1000.0), "1000.0");
  EXPECT_EQ(PythonFloatRepr(1e-5), "1e-05");
  EXPECT_EQ(PythonFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PythonFloatRepr(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(PythonFloatRepr(-2.5), "-2.5");
  EXPECT_EQ(PythonFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PythonFloatRepr(0.30000000000000004), "0.30000000000000004");
}

TEST(TypedKey, KeepsTheValueAndNeverMatchesAStringKey) {
  for (const NodePtr& value :
       {Node::Bool(true), Node::Int(-7), Node::Float(0.1), Node::Float(-1e300)}) {
    std::string key = TypedKey(*value);
    EXPECT_TRUE(IsTypedKey(key));
    EXPECT_TRUE(DeepEqual(*KeyValue(key), *value)) << KeyText(key);
    EXPECT_FALSE(KeysMatch(key, KeyText(key))) << KeyText(key);
    EXPECT_EQ(key.find('.'), std::string::npos) << "a '.' would split a path";
  }
  EXPECT_EQ(KeyText(TypedKey(*Node::Bool(true))), "True");
  EXPECT_EQ(KeyText(TypedKey(*Node::Float(1000.0))), "1000.0");
  EXPECT_EQ(KeyText("plain"), "plain");
  EXPECT_FALSE(IsTypedKey("plain"));
  EXPECT_TRUE(DeepEqual(*KeyValue("plain"), *Node::String("plain")));
}

// Python dict keys: 1 == 1.0 == True, 0 == False; a typed key never equals a string.
TEST(TypedKey, EqualNumbersMatch) {
  std::string one = TypedKey(*Node::Int(1));
  EXPECT_TRUE(KeysMatch(one, TypedKey(*Node::Bool(true))));
  EXPECT_TRUE(KeysMatch(one, TypedKey(*Node::Float(1.0))));
  EXPECT_TRUE(KeysMatch(TypedKey(*Node::Int(0)), TypedKey(*Node::Bool(false))));
  EXPECT_FALSE(KeysMatch(one, TypedKey(*Node::Int(2))));
  EXPECT_FALSE(KeysMatch(one, TypedKey(*Node::Float(1.5))));
  EXPECT_FALSE(KeysMatch(one, "1"));
}

TEST(TypedKey, MapsFindSetAndEraseByNumber) {
  NodePtr map = Node::Map();
  map->Set(TypedKey(*Node::Bool(true)), Node::String("a"));
  map->Set("1", Node::String("string"));
  map->Set(TypedKey(*Node::Int(1)), Node::String("b"));
  ASSERT_EQ(map->size(), 2u);
  EXPECT_EQ(map->entries()[0].first, TypedKey(*Node::Bool(true)));  // the first spelling stays
  EXPECT_EQ(map->Find(TypedKey(*Node::Float(1.0)))->as_string(), "b");
  EXPECT_EQ(PythonStr(*map), "{True: 'b', '1': 'string'}");
  EXPECT_TRUE(map->Erase(TypedKey(*Node::Int(1))));
  EXPECT_EQ(map->size(), 1u);
}

// DeepEqual compares keys as written: `1:` and `true:` print differently.
TEST(TypedKey, DeepEqualComparesKeysAsWritten) {
  NodePtr a = Node::Map();
  a->Set(TypedKey(*Node::Int(1)), Node::String("x"));
  NodePtr b = Node::Map();
  b->Set(TypedKey(*Node::Bool(true)), Node::String("x"));
  NodePtr c = Node::Map();
  c->Set("1", Node::String("x"));
  EXPECT_TRUE(DeepEqual(*a, *a->Clone()));
  EXPECT_FALSE(DeepEqual(*a, *b));
  EXPECT_FALSE(DeepEqual(*a, *c));
}

// Integers of any size, as Python's: within int64 an ordinary int, beyond it a big int that
// compares, prints and keys by its exact value.
TEST(BigInt, FitsInInt64OrKeepsItsDigits) {
  EXPECT_FALSE(Node::Integer("9223372036854775807")->is_big_int());
  EXPECT_EQ(Node::Integer("-9223372036854775808")->as_int(), INT64_MIN);
  EXPECT_EQ(Node::Integer("-000")->as_int(), 0);
  NodePtr big = Node::Integer("+00018446744073709551616");
  EXPECT_TRUE(big->is_big_int());
  EXPECT_EQ(big->int_text(), "18446744073709551616");
  EXPECT_EQ(big->as_int(), INT64_MAX);  // saturated: int64 readers must refuse it
  EXPECT_EQ(Node::Integer("-9223372036854775809")->int_text(), "-9223372036854775809");
  EXPECT_EQ(PythonStr(*Node::Integer("-9223372036854775809")), "-9223372036854775809");
  EXPECT_DOUBLE_EQ(NumberValue(*big), 18446744073709551616.0);
  EXPECT_TRUE(DeepEqual(*big, *big->Clone()));
  EXPECT_FALSE(DeepEqual(*big, *Node::Int(INT64_MAX)));
  EXPECT_FALSE(DeepEqual(*big, *Node::String("18446744073709551616")));
}

// Python: 2**64 == 2.0**64, but 2**64 + 1 != 2.0**64 and 2**53 + 1 != 2.0**53.
TEST(BigInt, TypedKeysMatchEqualNumbersExactly) {
  std::string key = TypedKey(*Node::Integer("18446744073709551616"));
  EXPECT_TRUE(IsTypedKey(key));
  EXPECT_EQ(KeyText(key), "18446744073709551616");
  EXPECT_TRUE(DeepEqual(*KeyValue(key), *Node::Integer("18446744073709551616")));
  EXPECT_TRUE(KeysMatch(key, TypedKey(*Node::Float(18446744073709551616.0))));
  EXPECT_FALSE(KeysMatch(TypedKey(*Node::Integer("18446744073709551617")),
                         TypedKey(*Node::Float(18446744073709551616.0))));
  EXPECT_FALSE(KeysMatch(TypedKey(*Node::Int(9007199254740993)),
                         TypedKey(*Node::Float(9007199254740992.0))));
  EXPECT_TRUE(KeysMatch(TypedKey(*Node::Int(-3)), TypedKey(*Node::Float(-3.0))));
  EXPECT_FALSE(KeysMatch(key, "18446744073709551616"));
}

}  // namespace node_test
}  // namespace kiln::config
