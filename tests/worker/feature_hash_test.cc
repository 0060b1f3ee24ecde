#include "worker/input/feature_hash.h"

#include <vector>

#include "gtest/gtest.h"

namespace dlrm::worker {
namespace {

TEST(HashCategorical, MissingUsesReservedRowZero) {
  for (int t = 0; t < 26; ++t) EXPECT_EQ(HashCategorical(0x05db9164u, true, t, 1000), 0);
  EXPECT_EQ(HashCategorical(123, false, 0, 1), 0);
}

TEST(HashCategorical, PresentTokensLandInOneToRowsAndSpreadEvenly) {
  constexpr int64_t kRows = 101;
  std::vector<int> counts(kRows, 0);
  constexpr int kTokens = 200000;
  for (uint32_t token = 0; token < kTokens; ++token) {
    const int64_t row = HashCategorical(token, false, 3, kRows);
    ASSERT_GE(row, 1);
    ASSERT_LT(row, kRows);
    ++counts[row];
  }
  EXPECT_EQ(counts[0], 0);
  const double expected = static_cast<double>(kTokens) / (kRows - 1);  // 2000 per row
  for (int64_t r = 1; r < kRows; ++r) {
    EXPECT_NEAR(counts[r], expected, 0.1 * expected) << "row " << r;  // ~4.5 sigma
  }
}

TEST(HashCategorical, DeterministicAndTableDependent) {
  EXPECT_EQ(HashCategorical(0xdeadbeef, false, 2, 10131227),
            HashCategorical(0xdeadbeef, false, 2, 10131227));
  int same = 0;
  for (uint32_t token = 0; token < 1000; ++token) {
    same += HashCategorical(token, false, 0, 1 << 20) == HashCategorical(token, false, 1, 1 << 20);
  }
  EXPECT_LT(same, 5);
}

}  // namespace
}  // namespace dlrm::worker
