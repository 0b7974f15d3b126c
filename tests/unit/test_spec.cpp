#include <gtest/gtest.h>
#include "commscope/spec/scenario.h"
TEST(Spec, Placeholder) { EXPECT_TRUE(true); }
