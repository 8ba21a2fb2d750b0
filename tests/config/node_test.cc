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

}  // namespace
}  // namespace kiln::config
