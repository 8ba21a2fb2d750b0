#include "lib/config/node.h"

#include <gtest/gtest.h>

namespace kiln::config {
namespace {

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

}  // namespace
}  // namespace kiln::config
