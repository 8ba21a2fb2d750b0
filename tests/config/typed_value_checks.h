// Checks that a text reads as a value of one kind with given content. The YAML and override tests
// share them, each with its own parser.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "lib/config/node.h"

namespace kiln::config {

template <NodePtr (*Parse)(const std::string&)>
struct TypedValueChecks {
  static void Int(const std::string& text, int64_t expected) {
    NodePtr v = Parse(text);
    ASSERT_EQ(v->kind(), NodeKind::kInt) << text << " read as " << KindName(v->kind());
    EXPECT_EQ(v->as_int(), expected) << text;
  }
  // An int beyond int64, by its decimal text.
  static void BigInt(const std::string& text, const std::string& expected) {
    NodePtr v = Parse(text);
    ASSERT_EQ(v->kind(), NodeKind::kInt) << text << " read as " << KindName(v->kind());
    EXPECT_TRUE(v->is_big_int()) << text;
    EXPECT_EQ(v->int_text(), expected) << text;
    EXPECT_EQ(PythonStr(*v), expected) << text;
  }
  static void Float(const std::string& text, double expected) {
    NodePtr v = Parse(text);
    ASSERT_EQ(v->kind(), NodeKind::kFloat) << text << " read as " << KindName(v->kind());
    EXPECT_DOUBLE_EQ(v->as_float(), expected) << text;
  }
  static void Bool(const std::string& text, bool expected) {
    NodePtr v = Parse(text);
    ASSERT_EQ(v->kind(), NodeKind::kBool) << text << " read as " << KindName(v->kind());
    EXPECT_EQ(v->as_bool(), expected) << text;
  }
  static void String(const std::string& text, const std::string& expected) {
    NodePtr v = Parse(text);
    ASSERT_EQ(v->kind(), NodeKind::kString) << text << " read as " << KindName(v->kind());
    EXPECT_EQ(v->as_string(), expected) << text;
  }
  static void Null(const std::string& text) {
    NodePtr v = Parse(text);
    EXPECT_EQ(v->kind(), NodeKind::kNull) << text << " read as " << KindName(v->kind());
  }
};

}  // namespace kiln::config
