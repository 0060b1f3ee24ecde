#include "dense/metrics.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace dlrm::dense {
namespace {

// P(score_pos > score_neg) + 0.5 P(equal), by counting every pair.
double BruteForceAuc(const std::vector<float>& s, const std::vector<float>& y) {
  double wins = 0.0, pairs = 0.0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (y[i] < 0.5f) continue;
    for (size_t j = 0; j < s.size(); ++j) {
      if (y[j] >= 0.5f) continue;
      pairs += 1.0;
      wins += s[i] > s[j] ? 1.0 : (s[i] == s[j] ? 0.5 : 0.0);
    }
  }
  return wins / pairs;
}

TEST(MetricsTest, AucMatchesPairwiseCountWithTies) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 50 + trial * 37;
    std::uniform_int_distribution<int> level(0, trial % 2 == 0 ? 9 : 1000);  // few levels: ties
    std::bernoulli_distribution coin(0.3);
    std::vector<float> s(n), y(n);
    for (int i = 0; i < n; ++i) {
      y[i] = coin(rng) ? 1.0f : 0.0f;
      s[i] = static_cast<float>(level(rng)) / 10.0f + (y[i] > 0 ? 0.3f : 0.0f);
    }
    EXPECT_NEAR(Auc(s, y), BruteForceAuc(s, y), 1e-12) << "trial " << trial;
  }
}

TEST(MetricsTest, AucKnownValuesAndUndefinedCases) {
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{0.1f, 0.2f, 0.8f, 0.9f}, std::vector<float>{0, 0, 1, 1}),
                   1.0);
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{0.9f, 0.8f, 0.2f, 0.1f}, std::vector<float>{0, 0, 1, 1}),
                   0.0);
  EXPECT_DOUBLE_EQ(Auc(std::vector<float>{0.5f, 0.5f, 0.5f}, std::vector<float>{0, 1, 0}), 0.5);
  EXPECT_TRUE(std::isnan(Auc(std::vector<float>{0.1f, 0.7f}, std::vector<float>{1, 1})));
  EXPECT_TRUE(std::isnan(Auc(std::vector<float>{}, std::vector<float>{})));
}

TEST(MetricsTest, AucOfAMillionSamplesIsFast) {
  const int n = 2'000'000;
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> s(n), y(n);
  for (int i = 0; i < n; ++i) {
    y[i] = u(rng) < 0.25f ? 1.0f : 0.0f;
    s[i] = 0.5f * u(rng) + (y[i] > 0 ? 0.25f : 0.0f);  // separable-ish: AUC = 1 - 0.5 * 0.5^2
  }
  EXPECT_NEAR(Auc(s, y), 0.875, 0.003);
}

TEST(MetricsTest, LogLossAndAccuracy) {
  const std::vector<float> s = {0.9f, 0.2f, 0.6f, 0.5f, 0.0f};
  const std::vector<float> y = {1, 0, 0, 1, 1};
  const double expected =
      -(std::log(0.9) + std::log(0.8) + std::log(0.4) + std::log(0.5) + std::log(1e-7)) / 5.0;
  EXPECT_NEAR(LogLoss(s, y), expected, 1e-6);
  EXPECT_DOUBLE_EQ(Accuracy(s, y),
                   3.0 / 5.0);  // 0.9 right, 0.2 right, 0.6 wrong, 0.5 right, 0 wrong
  EXPECT_TRUE(std::isnan(Accuracy(std::vector<float>{}, std::vector<float>{})));
}

}  // namespace
}  // namespace dlrm::dense
