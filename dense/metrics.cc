#include "dense/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "common/logging.h"

namespace dlrm::dense {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void CheckSizes(absl::Span<const float> scores, absl::Span<const float> labels) {
  DLRM_CHECK(scores.size() == labels.size())
      << scores.size() << " scores but " << labels.size() << " labels";
}

}  // namespace

double Auc(absl::Span<const float> scores, absl::Span<const float> labels) {
  CheckSizes(scores, labels);
  const size_t n = scores.size();
  // (score, is_positive) sorted by score; ties form runs that share their average rank.
  std::vector<std::pair<float, bool>> items(n);
  uint64_t positives = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool positive = labels[i] >= 0.5f;
    items[i] = {scores[i], positive};
    positives += positive ? 1 : 0;
  }
  const uint64_t negatives = n - positives;
  if (positives == 0 || negatives == 0) return kNaN;
  std::sort(items.begin(), items.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // Sum of the (1-based, tie-averaged) ranks of the positives, doubled to stay integral.
  uint64_t twice_rank_sum = 0;
  size_t i = 0;
  while (i < n) {
    size_t j = i + 1;
    while (j < n && items[j].first == items[i].first) ++j;
    uint64_t run_positives = 0;
    for (size_t k = i; k < j; ++k) run_positives += items[k].second ? 1 : 0;
    // ranks i+1 .. j average to (i + 1 + j) / 2
    twice_rank_sum += run_positives * static_cast<uint64_t>(i + 1 + j);
    i = j;
  }
  const double rank_sum = static_cast<double>(twice_rank_sum) / 2.0;
  const double p = static_cast<double>(positives);
  const double u = rank_sum - p * (p + 1.0) / 2.0;
  return u / (p * static_cast<double>(negatives));
}

double LogLoss(absl::Span<const float> scores, absl::Span<const float> labels) {
  CheckSizes(scores, labels);
  if (scores.empty()) return kNaN;
  constexpr double kEps = 1e-7;
  double total = 0.0;
  for (size_t i = 0; i < scores.size(); ++i) {
    const double p = std::clamp(static_cast<double>(scores[i]), kEps, 1.0 - kEps);
    total -= labels[i] >= 0.5f ? std::log(p) : std::log1p(-p);
  }
  return total / static_cast<double>(scores.size());
}

double Accuracy(absl::Span<const float> scores, absl::Span<const float> labels) {
  CheckSizes(scores, labels);
  if (scores.empty()) return kNaN;
  size_t correct = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    correct += (scores[i] >= 0.5f) == (labels[i] >= 0.5f) ? 1 : 0;
  }
  return static_cast<double>(correct) / static_cast<double>(scores.size());
}

}  // namespace dlrm::dense
